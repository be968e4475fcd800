"""The hook catalog: hook names and their facts per SGLang release, and which hooks refuse PP."""

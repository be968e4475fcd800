"""What a run reports: unified diffs, summaries and the scan listing, the CodeTF report, schemas."""

"""The caller codemods (guard, fallback), their metadata and registry, and what they share."""

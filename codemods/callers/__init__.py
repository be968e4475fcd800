"""The caller pipeline: records, one module's analysis, the codemods, transform and engine."""

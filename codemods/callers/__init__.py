"""The caller pipeline: records, analysis of one parsed module, the codemods, transform and engine."""

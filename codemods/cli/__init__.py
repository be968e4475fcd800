"""Command line: one click group with its commands, the command line echoed in reports, progress and colour."""

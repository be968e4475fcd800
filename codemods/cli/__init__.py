"""Command line: the click commands, the command line echoed in reports, progress, colour."""

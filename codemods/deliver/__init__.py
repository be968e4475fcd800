"""Where results go: the migrate sinks, the --branch flows, git, commit and PR texts, re-checks."""

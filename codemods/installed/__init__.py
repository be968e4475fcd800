"""Patch the SGLang an interpreter imports, reversibly: locate it (``locate.py``), compare it
with its release (``pristine.py``), journal every change before making it (``journal.py``),
apply, roll back and revert all or nothing (``transaction.py``), and the three actions behind
``auxcap sglang status|apply|revert`` (``actions.py``).  No click here: the CLI owns output
and exit codes."""

"""auxcap: migrate code around SGLang aux-hidden-state capture hooks."""

__version__ = "0.1.0"

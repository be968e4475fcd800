"""Stand-in for ``IPython``: SGLang's ``sglang.utils`` imports ``IPython.display`` at module
level for notebook helpers that the model code never calls."""

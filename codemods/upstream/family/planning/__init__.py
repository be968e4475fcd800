"""What the family planner (``family/plan.py``) reads and records besides its decisions per
hook file: the parsed model files and the lookups across them (``corpus``), the decision
record of one file (``decision``), and the decisions for causal-LM classes that inherit a
patched class's hooks but build their own decoder stack (``subclass``)."""

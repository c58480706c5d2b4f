"""The evaluator: one entry + methods -> an EvalReport (evaluate.py), its JSON and table (report.py), plots and MIB score files."""

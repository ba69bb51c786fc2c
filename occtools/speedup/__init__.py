"""The emulated-cluster speedup benchmark: cli.py the `speedup` command, variants.py the variants
(shared with validate-planner and diloco-speedup), report.py its tables and plot."""

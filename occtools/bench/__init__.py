"""The CPU benchmarks: core.py (optimus-cc's step against PyTorch eager, core_report.py its
tables) and layouts.py (one model's iteration in four 4-rank layouts)."""

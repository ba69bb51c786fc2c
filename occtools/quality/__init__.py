"""The Optimus-CC quality ablation (cli.py, report.py) and the quality model it shares with the
compressor sweep and the DiLoCo experiment (model.py)."""

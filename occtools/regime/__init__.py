"""The paper-regime quality experiment (issue 30): cli.py the `regime` command (run, merge,
report, pending), train.py one training run, ledger.py the committed append-only ledger
(docs/results/regime.json), report.py the report built from all of it."""

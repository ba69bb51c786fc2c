#!/usr/bin/env bash
# labels: unit tooling
# The tooling's own tests (tests/tooling/*.py, python3 -m unittest): the occtools package's
# shape (no import circle, no module over 400 lines, stdlib-only imports, --help lists every
# command, bash only for the thin entry points), the statistics against hand-worked cases, the
# ledgers' merge (idempotent, append-only), the reports' reading of metrics and their rebuilding
# of today's committed docs/results tables from their committed inputs, and gpu-check's budget
# planner's worst case. No engine run: seconds.
# shellcheck source=fixture/lib.sh
source "$(dirname "$0")/fixture/lib.sh"
cd "$SRC" || exit 1
for t in tests/tooling/test_*.py; do
  if out=$(PYTHONPATH=$SRC PYTHONDONTWRITEBYTECODE=1 "$PY" -m unittest "$t" 2>&1); then
    pass "$t: $(tail -n 3 <<< "$out" | paste -sd' ')"
  else
    echo "$out"
    failed "$t"
  fi
done
finish

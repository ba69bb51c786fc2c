#!/usr/bin/env bash
# labels: ops;checkpoint;multirank
# python3 -m occtools chaos --quick: a 4-rank run with every Optimus-CC technique under `optimus-cc
# launch` alone (no restart by this script), through 3 SIGKILLs of random ranks, a SIGSTOPped
# rank (a hang the supervisor detects from the heartbeats) and the newest checkpoint corrupted
# on disk (passed over for the newest that verifies): every logged loss and gradient norm and
# the final checkpoint (weights, Adam moments, compressor state) equal the uninterrupted run's
# bit for bit.
source "$(dirname "$0")/fixture/lib.sh"
if (cd "$SRC" && PYTHONDONTWRITEBYTECODE=1 $PY -m occtools chaos --quick --seed 7 --bin "$BIN" --data "$DATA/kjv" --out "$WORK/chaos") > "$WORK/chaos.log" 2>&1; then
  pass "$(tail -1 "$WORK/chaos.log")"
else
  cat "$WORK/chaos.log"
  tail -30 "$WORK/chaos/launch.log" 2> /dev/null
  failed "chaos --quick: $(tail -1 "$WORK/chaos.log")"
fi
finish

#!/usr/bin/env bash
# labels: ops;checkpoint;multirank
# scripts/chaos.sh --quick: a 4-rank run with every Optimus-CC technique, SIGKILLed (a random
# rank) and SIGUSR1-stopped at random iterations, often inside a save, and restarted with
# --load each time: every logged loss and gradient norm and the final checkpoint (weights,
# Adam moments, compressor state) equal the uninterrupted run's bit for bit.
source "$(dirname "$0")/fixture/lib.sh"
if bash "$SRC/scripts/chaos.sh" --quick --seed 7 --bin "$BIN" --data "$DATA/kjv" --out "$WORK/chaos" > "$WORK/chaos.log" 2>&1; then
  pass "$(tail -1 "$WORK/chaos.log")"
else
  cat "$WORK/chaos.log"
  failed "chaos --quick: $(tail -1 "$WORK/chaos.log")"
fi
finish

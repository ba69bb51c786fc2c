#!/usr/bin/env bash
# labels: smoke
# Host memory (core/host_allocator.h): a run without huge pages (OCC_HUGE_PAGES=off,
# the allocator's fallback, as on a kernel without them) trains bit for bit what the
# default run trains; a bad OCC_HUGE_PAGES is
# refused in one line naming the choices. About 5 s.
source "$(dirname "$0")/fixture/lib.sh"
RUN=("${TINY[@]}" --train-iters 3 --hidden-dropout 0.1 --seed 5)

for mode in on off; do
  if ! OCC_HUGE_PAGES=$mode "$BIN" train "${RUN[@]}" --metrics "$WORK/$mode.jsonl" > "$WORK/$mode.log" 2>&1; then
    tail -n 20 "$WORK/$mode.log"
    failed "OCC_HUGE_PAGES=$mode: training run failed"
  fi
done
compare_losses on off 0

OCC_HUGE_PAGES=maybe "$BIN" train "${RUN[@]}" > "$WORK/bad.log" 2>&1
rc=$?
if [[ $rc -ne 0 && $(wc -l < "$WORK/bad.log") -eq 1 ]] &&
   grep -q "^error: OCC_HUGE_PAGES=maybe is not a setting; use OCC_HUGE_PAGES=on (the default) or OCC_HUGE_PAGES=off$" "$WORK/bad.log"; then
  pass "OCC_HUGE_PAGES=maybe refused (exit $rc): $(cat "$WORK/bad.log")"
else
  failed "OCC_HUGE_PAGES=maybe: exit $rc, output: $(head -c 400 "$WORK/bad.log")"
fi
finish

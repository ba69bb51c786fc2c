#!/usr/bin/env bash
# labels: ops;checkpoint;multirank
# `optimus-cc launch`, the supervisor (the chaos test drives it through kills, a hang and a
# corrupted checkpoint; this covers its decisions one by one, on 2 ranks):
#  (a) a bad train flag: one line, exit 2, nothing started;
#  (b) a start-up error of the job (a refused checkpoint): one verdict line, no restart;
#  (c) the same failure at the same iteration twice (a NaN at iteration 5): not restarted a
#      second time; (d) --max-restarts 0 exhausted: the last failure's message, non-zero exit;
#  (e) SIGTERM to the supervisor: the job's graceful stop, its checkpoint, exit 0; started
#      again, the supervisor resumes there and the run ends equal to an uninterrupted one;
#  (f) the newest checkpoint corrupted on disk: a plain --load fails loudly, the supervisor
#      resumes from the newest that verifies (--keep-last 2 kept one), saying which and why.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
MPI=(mpirun --oversubscribe -np 2)
RUN=("${TINY[@]}" --eval-interval 1000 --log-interval 1000 --pipeline-model-parallel-size 2)
LAUNCH=("$BIN" launch --restart-backoff 0)
attempts() { grep -c '^launch: attempt [0-9]*: ' "$1"; }
verdicts() { grep -c '^error: launch' "$1"; }

# (a) A bad flag: the supervisor parses the train command as train does, before starting anything.
"${LAUNCH[@]}" -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --save "$WORK/a" --train-iters 4 --no-such-flag > "$WORK/a.log" 2>&1
rc=$?
if [[ $rc == 2 && $(wc -l < "$WORK/a.log") == 1 ]] && grep -q "^error: launch: the train command: .*--no-such-flag" "$WORK/a.log" &&
    [[ ! -e $WORK/a ]]; then
  pass "(a) bad flag: exit 2, one line, nothing started: $(cut -c1-120 "$WORK/a.log")"
else
  cat "$WORK/a.log"
  failed "(a) bad flag: status $rc"
fi

# (b) A refused checkpoint: saved with 2 layers, resumed with 3.
"${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 2 --save "$WORK/b" > "$WORK/b0.log" 2>&1 || failed "(b) the first run"
"${LAUNCH[@]}" --max-restarts 5 -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 4 --num-layers 4 --save "$WORK/b" \
  > "$WORK/b.log" 2>&1
rc=$?
if [[ $rc != 0 && $(attempts "$WORK/b.log") == 1 && $(verdicts "$WORK/b.log") == 1 ]] &&
    grep -q "^error: launch: not restarting: the job failed at start-up, and a restart would fail the same way: checkpoint .* was saved with num_layers = 2 but this run has 4" "$WORK/b.log"; then
  pass "(b) refused checkpoint: exit $rc after one attempt: $(grep '^error: launch' "$WORK/b.log" | cut -c1-150)"
else
  cat "$WORK/b.log"
  failed "(b) refused checkpoint: status $rc, $(attempts "$WORK/b.log") attempts"
fi

# (c) A NaN gradient at iteration 5 (the guard stops the job): restarted once from
# checkpoint 4, fails again at iteration 4, and is not restarted again.
"${LAUNCH[@]}" --max-restarts 5 -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 8 --debug-inject-nan 5 \
  --save "$WORK/c" --save-interval 2 > "$WORK/c.log" 2>&1
rc=$?
if [[ $rc != 0 && $(attempts "$WORK/c.log") == 2 && $(verdicts "$WORK/c.log") == 1 ]] &&
    grep -q "^error: launch: not restarting: the same failure at iteration 4 twice: iteration 5: the gradient norm is not finite" "$WORK/c.log"; then
  pass "(c) the same failure twice: exit $rc after 2 attempts: $(grep '^error: launch' "$WORK/c.log" | cut -c1-150)"
else
  cat "$WORK/c.log"
  failed "(c) the same failure twice: status $rc, $(attempts "$WORK/c.log") attempts"
fi

# (d) --max-restarts 0: the first failure ends it, with its message.
"${LAUNCH[@]}" --max-restarts 0 -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 8 --debug-inject-nan 5 \
  --save "$WORK/d" --save-interval 2 > "$WORK/d.log" 2>&1
rc=$?
if [[ $rc != 0 && $(attempts "$WORK/d.log") == 1 && $(verdicts "$WORK/d.log") == 1 ]] &&
    grep -q "^error: launch: giving up after 0 restarts (--max-restarts 0); the last failure, at iteration 4: iteration 5: the gradient norm is not finite" "$WORK/d.log"; then
  pass "(d) --max-restarts exhausted: exit $rc: $(grep '^error: launch' "$WORK/d.log" | cut -c1-150)"
else
  cat "$WORK/d.log"
  failed "(d) --max-restarts exhausted: status $rc"
fi

# (e) SIGTERM to the supervisor, mid-run; then the same command again.
ITERS=400
"${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters $ITERS --save "$WORK/e_ref" --metrics "$WORK/e_ref.jsonl" > "$WORK/e_ref.log" 2>&1 ||
  failed "(e) the uninterrupted run"
E=("${LAUNCH[@]}" -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters $ITERS --save "$WORK/e" --save-interval 50
   --metrics "$WORK/e.jsonl")
"${E[@]}" > "$WORK/e1.log" 2>&1 &
sup=$!
for _ in $(seq 600); do [[ -f $WORK/e.jsonl && $(wc -l < "$WORK/e.jsonl") -ge 3 ]] && break; sleep 0.05; done
kill -TERM $sup
wait $sup
rc=$?
stopped=$(sed -n 's/^exiting after iteration \([0-9]*\) of .*signal 10.*/\1/p' "$WORK/e1.log")
if [[ $rc == 0 && -n $stopped && $(cat "$WORK/e/latest_checkpointed_iteration.txt") == "$stopped" ]] && ((stopped < ITERS)) &&
    grep -q "^launch: stopped by signal 15 (Terminated): the job saved checkpoint .*iter_$(printf %07d "$stopped") and exited 0" "$WORK/e1.log"; then
  pass "(e) SIGTERM: the job stopped after iteration $stopped with its checkpoint; exit 0"
else
  cat "$WORK/e1.log"
  failed "(e) SIGTERM: status $rc, stopped at '$stopped'"
fi
"${E[@]}" > "$WORK/e2.log" 2>&1
rc=$?
final=$(printf 'iter_%07d' $ITERS)
if [[ $rc == 0 ]] && grep -q "^launch: attempt 1: resuming from .*iter_$(printf %07d "$stopped")" "$WORK/e2.log" &&
    compare_losses e_ref e 0 && cmp -s "$WORK/e_ref/$final/mp_rank_00_001/model_optim_rng.bin" "$WORK/e/$final/mp_rank_00_001/model_optim_rng.bin"; then
  pass "(e) started again: resumed at iteration $stopped; losses and the final checkpoint equal the uninterrupted run's"
else
  tail -5 "$WORK/e2.log"
  failed "(e) started again: status $rc"
fi

# (f) The newest checkpoint damaged on disk (a flipped byte in one shard's data).
"${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 6 --save "$WORK/f" --save-interval 2 --keep-last 2 > "$WORK/f0.log" 2>&1 ||
  failed "(f) the first run"
"$PY" - "$WORK/f/iter_0000006/mp_rank_00_001/model_optim_rng.bin" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-100, 2); b = f.read(1); f.seek(-100, 2); f.write(bytes([b[0] ^ 1]))
EOF
"${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 8 --load "$WORK/f" --save "$WORK/f" > "$WORK/f1.log" 2>&1
rc1=$?
"${LAUNCH[@]}" -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 8 --save "$WORK/f" --save-interval 2 --keep-last 2 \
  > "$WORK/f2.log" 2>&1
rc2=$?
if [[ $rc1 != 0 && $rc2 == 0 ]] && grep -q "^error: checkpoint file .*iter_0000006/mp_rank_00_001/model_optim_rng.bin is corrupted" "$WORK/f1.log" &&
    grep -q "^launch: checkpoint .*iter_0000006 fails verification: .*checksum mismatch" "$WORK/f2.log" &&
    grep -q "^launch: resuming from .*iter_0000004, the newest checkpoint that verifies" "$WORK/f2.log" &&
    grep -q "^loaded checkpoint .* at iteration 4" "$WORK/f2.log" && [[ $(cat "$WORK/f/latest_checkpointed_iteration.txt") == 8 ]] &&
    [[ $(ls -d "$WORK"/f/iter_* | wc -l) == 2 ]]; then
  pass "(f) damaged newest checkpoint: --load fails (exit $rc1); launch resumed from iteration 4 and finished; --keep-last 2 kept 2"
else
  cat "$WORK/f1.log" "$WORK/f2.log" | grep -v '^iter'
  failed "(f) damaged newest checkpoint: --load exit $rc1, launch exit $rc2"
fi
finish

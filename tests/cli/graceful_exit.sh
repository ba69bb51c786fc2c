#!/usr/bin/env bash
# labels: ops;checkpoint
# Operations (issue 13, items 1-2): --exit-signal-handler (SIGUSR1 to mpirun, SIGTERM to a
# process), --exit-interval, --exit-duration-in-mins and the non-finite guard. A stopped run
# saves a checkpoint, exits 0 with one line, and the same command with --load continues
# bit-exactly; a second signal exits at once; a NaN gradient stops the run (every rank,
# non-zero) before its update, with the iteration, stage, rank and tensor named, and no
# checkpoint written from that state; --skip-nonfinite N skips and counts instead.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ITERS=100
RUN=("${TINY[@]}" --train-iters $ITERS --eval-interval 1000 --hidden-dropout 0.1 --seed 5)
P2=(--pipeline-model-parallel-size 2)
MPI=(mpirun --oversubscribe -np 2)

losses() { "$PY" -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l); print(j['iter'], repr(j['loss']), repr(j['grad_norm']))" "$1"; }
rows() { [[ -f $1 ]] && wc -l < "$1" || echo 0; }

# The uninterrupted run (2 ranks, pipeline 2).
"${MPI[@]}" "$BIN" train "${RUN[@]}" "${P2[@]}" --metrics "$WORK/straight.jsonl" > "$WORK/straight.log" 2>&1 \
  || { cat "$WORK/straight.log"; failed "uninterrupted run"; finish; exit; }

# 1. SIGUSR1 to mpirun (it forwards it to every rank) part-way through.
"${MPI[@]}" "$BIN" train "${RUN[@]}" "${P2[@]}" --exit-signal-handler --save "$WORK/sig" --save-interval 1000 \
  --metrics "$WORK/sig.jsonl" > "$WORK/sig.log" 2>&1 &
pid=$!
for _ in $(seq 600); do (($(rows "$WORK/sig.jsonl") >= 3)) && break; sleep 0.05; done
kill -USR1 $pid
wait $pid
rc=$?
stopped=$(sed -n 's/^exiting after iteration \([0-9]*\) of .*signal 10.*/\1/p' "$WORK/sig.log")
if [[ $rc == 0 && -n $stopped ]] && ((stopped < ITERS)) && [[ -f $WORK/sig/latest_checkpointed_iteration.txt ]] &&
    [[ $(cat "$WORK/sig/latest_checkpointed_iteration.txt") == "$stopped" ]]; then
  pass "SIGUSR1 to mpirun: exit 0 after iteration $stopped with its checkpoint: $(grep '^exiting' "$WORK/sig.log")"
else
  cat "$WORK/sig.log"
  failed "SIGUSR1 to mpirun: status $rc, stopped at '${stopped}'"
fi
# The same command again, with --load: continues to the end, bit-exactly.
"${MPI[@]}" "$BIN" train "${RUN[@]}" "${P2[@]}" --exit-signal-handler --save "$WORK/sig" --save-interval 1000 \
  --load "$WORK/sig" --metrics "$WORK/sig2.jsonl" > "$WORK/sig2.log" 2>&1 || { cat "$WORK/sig2.log"; failed "restart after the signal"; }
if diff <(losses "$WORK/straight.jsonl") <(cat <(losses "$WORK/sig.jsonl") <(losses "$WORK/sig2.jsonl")) > "$WORK/diff" 2>&1; then
  pass "stopped + restarted = uninterrupted: $ITERS losses and gradient norms bit-identical"
else
  head "$WORK/diff"
  failed "the restarted run differs from the uninterrupted one"
fi

# 2. A second SIGTERM while the first is being honoured: exit at once (128 + 15). A larger
# model, so that an iteration (~0.1 s or more) outlasts the gap between the two signals.
SLOW=("${RUN[@]}" --num-layers 4 --hidden-size 256 --seq-length 128 --max-position-embeddings 128
      --micro-batch-size 4 --global-batch-size 16 --train-iters 100000)
"$BIN" train "${SLOW[@]}" --exit-signal-handler --save "$WORK/twice" --save-interval 100000 \
  --metrics "$WORK/twice.jsonl" > "$WORK/twice.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do (($(rows "$WORK/twice.jsonl") >= 1)) && break; sleep 0.05; done
kill -TERM $pid
sleep 0.02
kill -TERM $pid
wait $pid
rc=$?
if [[ $rc == 143 ]] && grep -q "second signal" "$WORK/twice.log" && [[ ! -e $WORK/twice/latest_checkpointed_iteration.txt ]]; then
  pass "second SIGTERM: exit 143 at once, no checkpoint: $(grep 'second signal' "$WORK/twice.log")"
else
  cat "$WORK/twice.log"
  failed "second SIGTERM: status $rc (want 143 and no checkpoint)"
fi

# 3. --exit-interval and --exit-duration-in-mins.
"$BIN" train "${RUN[@]}" --exit-interval 7 --save "$WORK/ival" --metrics "$WORK/ival.jsonl" > "$WORK/ival.log" 2>&1
rc=$?
if [[ $rc == 0 && $(rows "$WORK/ival.jsonl") == 7 && $(cat "$WORK/ival/latest_checkpointed_iteration.txt" 2> /dev/null) == 7 ]] &&
    grep -q '^exiting after iteration 7 of [0-9]*: --exit-interval 7 reached' "$WORK/ival.log"; then
  pass "--exit-interval 7: 7 iterations, checkpoint 7, exit 0"
else
  cat "$WORK/ival.log"
  failed "--exit-interval 7: status $rc, $(rows "$WORK/ival.jsonl") rows"
fi
"${MPI[@]}" "$BIN" train "${RUN[@]}" "${P2[@]}" --exit-duration-in-mins 0.0001 --metrics "$WORK/dur.jsonl" > "$WORK/dur.log" 2>&1
rc=$?
k=$(sed -n 's/^exiting after iteration \([0-9]*\) of [0-9]*: --exit-duration-in-mins 0.0001 reached.*no --save.*/\1/p' "$WORK/dur.log")
if [[ $rc == 0 && -n $k && $(rows "$WORK/dur.jsonl") == "$k" ]] && ((k < ITERS)); then
  pass "--exit-duration-in-mins 0.0001 on 2 ranks: agreed stop after iteration $k (6 ms), exit 0"
else
  cat "$WORK/dur.log"
  failed "--exit-duration-in-mins: status $rc, $(rows "$WORK/dur.jsonl") rows"
fi

# 4. The non-finite guard: a NaN gradient at iteration 3 on the last stage.
"${MPI[@]}" "$BIN" train "${RUN[@]}" "${P2[@]}" --debug-inject-nan 3 --save "$WORK/nan" --save-interval 1 \
  --metrics "$WORK/nan.jsonl" > "$WORK/nan.out" 2> "$WORK/nan.err"
rc=$?
if [[ $rc != 0 && $(grep -c '^error:' "$WORK/nan.err") == 1 ]] &&
    grep -q "^error: iteration 3: the gradient norm is not finite.*first non-finite gradient: layers.1.input_layernorm.weight on pipeline stage 1 (rank 1" "$WORK/nan.err" &&
    [[ $(cat "$WORK/nan/latest_checkpointed_iteration.txt") == 2 && ! -e $WORK/nan/iter_0000003 ]]; then
  pass "NaN at iteration 3 (2 ranks): exit $rc, one line, checkpoint 2 kept, none of 3: $(cat "$WORK/nan.err")"
else
  cat "$WORK/nan.out" "$WORK/nan.err"
  failed "NaN at iteration 3: status $rc"
fi
"$BIN" train "${RUN[@]}" --train-iters 6 --debug-inject-nan 3 --skip-nonfinite 1 --metrics "$WORK/skip.jsonl" > "$WORK/skip.log" 2>&1
rc=$?
skipped=$("$PY" -c "
import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
print(r[2].get('skipped_nonfinite'), r[-1].get('skipped_nonfinite'), 'skipped_nonfinite' in r[1], len(r))" "$WORK/skip.jsonl")
if [[ $rc == 0 && $skipped == "1 1 False 6" ]]; then
  pass "--skip-nonfinite 1: iteration 3 skipped and counted (skipped_nonfinite from row 3 on), run finished"
else
  cat "$WORK/skip.log"
  failed "--skip-nonfinite 1: status $rc, rows: $skipped"
fi
finish

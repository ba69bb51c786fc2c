#!/usr/bin/env bash
# labels: ops;checkpoint;multirank
# `optimus-cc launch`'s reading of the job's command (issue 48), on 2 ranks:
#  (a) a relative --save under `mpirun -wdir DIR`: the supervisor finds the checkpoints where
#      the ranks write them (DIR/SAVE), passes absolute --load and --heartbeat-dir, and after a
#      rank is killed mid-run resumes from the newest checkpoint there; the losses equal an
#      uninterrupted run's;
#  (b) the program as a symlink to optimus-cc, inside `sh -c "cd DIR && VAR=1 mpirun ..."`: recognised,
#      its flags added inside the string, the shell replaced by the launcher (exec), so that a
#      SIGTERM to the supervisor is the job's graceful stop (a checkpoint, exit 0);
#  (c) a job that fails at start-up under the supervisor leaves nothing behind (no SAVE/heartbeat).
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
RUN=("${TINY[@]}" --eval-interval 1000 --log-interval 1000)
ITERS=3000

# (a) The uninterrupted run, then the same under the supervisor from another directory with -wdir.
mkdir -p "$WORK/ref" "$WORK/job" "$WORK/elsewhere"
(cd "$WORK/ref" && mpirun --oversubscribe -np 2 "$BIN" train "${RUN[@]}" --train-iters $ITERS --save ck \
  --metrics ref.jsonl > ref.log 2>&1) || failed "(a) the uninterrupted run"
cp "$WORK/ref/ref.jsonl" "$WORK/a_ref.jsonl"
cd "$WORK/elsewhere" || exit 1
"$BIN" launch --restart-backoff 0 -- mpirun --oversubscribe -np 2 -wdir ../job "$BIN" train "${RUN[@]}" \
  --train-iters $ITERS --save ck --save-interval 500 --metrics a.jsonl > "$WORK/a.log" 2>&1 &
sup=$!
for _ in $(seq 4800); do [[ -d $WORK/job/ck/iter_0001000 ]] && break; sleep 0.05; done
mpirun_pid=$(pgrep -P $sup | head -1)
rank=$(pgrep -P "$mpirun_pid" | tail -1)
[[ -n $rank ]] && kill -KILL "$rank"
wait $sup
rc=$?
cd "$WORK" || exit 1
cp "$WORK/job/a.jsonl" "$WORK/a.jsonl" 2> /dev/null
if [[ $rc == 0 && -n $rank ]] && grep -q "^launch: attempt 2: resuming from $WORK/job/ck/iter_00[0-9]*: .* --load $WORK/job/ck .*--heartbeat-dir $WORK/job/ck/heartbeat" "$WORK/a.log" &&
    grep -q "^launch: the job finished at iteration $ITERS of $ITERS (checkpoint $WORK/job/ck/iter_000$ITERS) after 1 restart" "$WORK/a.log" &&
    [[ ! -e $WORK/elsewhere/ck ]] && compare_losses a_ref a 0; then
  pass "(a) relative --save under mpirun -wdir: a rank killed, $(grep -o 'resuming from [^:]*' "$WORK/a.log" | tail -1 | sed "s|$WORK/||")"
else
  grep '^launch\|^error' "$WORK/a.log"
  failed "(a) relative --save under mpirun -wdir: status $rc, killed rank '$rank'"
fi

# (b) A symlink to the binary, inside sh -c with a cd; SIGTERM to the supervisor mid-run.
ln -s "$BIN" "$WORK/occ"
mkdir -p "$WORK/b"
"$BIN" launch --restart-backoff 0 -- sh -c "cd '$WORK/b' && OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 ../occ train ${RUN[*]} \
  --train-iters 100000 --save ck --save-interval 100000 --metrics b.jsonl > job.log 2>&1" > "$WORK/b.log" 2>&1 &
sup=$!
for _ in $(seq 1200); do [[ -f $WORK/b/b.jsonl && $(wc -l < "$WORK/b/b.jsonl") -ge 50 ]] && break; sleep 0.05; done
kill -TERM $sup
wait $sup
rc=$?
stopped=$(cat "$WORK/b/ck/latest_checkpointed_iteration.txt" 2> /dev/null)
if [[ $rc == 0 && -n $stopped ]] && grep -q "^launch: attempt 1: from the beginning: sh -c .*cd .* && OMP_NUM_THREADS=1 exec mpirun .* --heartbeat-dir $WORK/b/ck/heartbeat --run-lock-token [^ ]* > job.log 2>&1'" "$WORK/b.log" &&
    grep -q "^launch: stopped by signal 15 (Terminated): the job saved checkpoint $WORK/b/ck/iter_$(printf %07d "$stopped") and exited 0" "$WORK/b.log"; then
  pass "(b) a symlink in sh -c \"cd DIR && mpirun ...\": recognised; SIGTERM stopped it with checkpoint $stopped, exit 0"
else
  cat "$WORK/b.log"
  failed "(b) a symlink in sh -c: status $rc, checkpoint '$stopped'"
fi

# (c) A start-up failure of the job (a data path that does not exist): nothing left behind.
"$BIN" launch -- mpirun --oversubscribe -np 2 "$BIN" train "${RUN[@]}" --train-iters 4 --data-path "$WORK/nope" \
  --save "$WORK/c/ck" > "$WORK/c.log" 2>&1
rc=$?
if [[ $rc != 0 && ! -e $WORK/c ]] && grep -q "^error: launch: not restarting: the job failed at start-up" "$WORK/c.log"; then
  pass "(c) a start-up failure: exit $rc, nothing left behind"
else
  tail -3 "$WORK/c.log"
  ls -R "$WORK/c" 2> /dev/null | head
  failed "(c) a start-up failure: status $rc"
fi
finish

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
#      resumes from the newest that verifies (--keep-last 2 kept one), saying which and why;
#  (g) the newest checkpoint's header damaged: resumed from the one before (named by
#      --ckpt-step, which every start-up check honours), ending equal to an uninterrupted run;
#  (h) a user's --load other --ckpt-step N, then a failure in a later iteration: the restart
#      resumes the run's own newest save (its --load and --ckpt-step, not the user's), and says
#      in which iteration it failed and from where it restarts; a user's --load alone: the
#      restart names it and its iteration, not "the beginning";
#  (i) one supervisor per --save: a second one (and a plain train) is refused naming the holder;
#      SIGHUP (a closed ssh session) to the first: its job's graceful stop, a checkpoint, exit 0,
#      no rank left running; (j) a job that never trained is not a success; (k) SIGTERM when
#      the ranks' heartbeats are not visible from the supervisor's host: still passed on;
#  (l) Megatron's resume habit under the supervisor: --save L --load L on a first start trains
#      from scratch (a notice), a rank killed mid-run, the restart resumes L's newest save, and
#      the run ends equal to an uninterrupted one; (m) saves slower than --comm-timeout 1 (and
#      than the hang timeout, 3/4 of it) at DP 2, where one rank waits for the other's write:
#      they commit, no hang is declared, one attempt.
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
    grep -q "^error: launch: not restarting: the same failure in iteration 5 twice: iteration 5: the gradient norm is not finite" "$WORK/c.log"; then
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
    grep -q "^error: launch: giving up after 0 restarts (--max-restarts 0); the last failure, in iteration 5: iteration 5: the gradient norm is not finite" "$WORK/d.log"; then
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

# (g) The newest checkpoint's header damaged (7 bytes at offset 4096 of one shard): the
# supervisor resumes from the one before and the run ends as an uninterrupted one.
"${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 10 --metrics "$WORK/g_ref.jsonl" > "$WORK/g_ref.log" 2>&1 ||
  failed "(g) the uninterrupted run"
G=("${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 10 --save "$WORK/g" --save-interval 2 --metrics "$WORK/g.jsonl")
"${G[@]}" --exit-interval 6 > "$WORK/g0.log" 2>&1 || failed "(g) the first run"
"$PY" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(4096); f.write(b"\xde\xad\xbe\xef\x00\x11\x22")' \
  "$WORK/g/iter_0000006/mp_rank_00_001/model_optim_rng.bin"
"${LAUNCH[@]}" -- "${G[@]}" > "$WORK/g.log" 2>&1
rc=$?
if [[ $rc == 0 && $(attempts "$WORK/g.log") == 1 ]] &&
    grep -q "^launch: checkpoint .*iter_0000006 fails verification" "$WORK/g.log" &&
    grep -q "^launch: attempt 1: resuming from .*iter_0000004: .* --ckpt-step 4 " "$WORK/g.log" &&
    grep -q "^loaded checkpoint .* at iteration 4" "$WORK/g.log" && compare_losses g_ref g 0; then
  pass "(g) damaged header of the newest checkpoint: resumed from iteration 4, losses equal the uninterrupted run's"
else
  grep -v '^iter' "$WORK/g.log"
  failed "(g) damaged header of the newest checkpoint: launch exit $rc"
fi

# (h) A user's --load of another run at an older iteration; a NaN in iteration 7 (after the run's
# own save at 6) on every attempt.
"${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 4 --save "$WORK/h_other" --save-interval 2 > "$WORK/h0.log" 2>&1 ||
  failed "(h) the other run"
"${LAUNCH[@]}" -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --load "$WORK/h_other" --ckpt-step 2 --save "$WORK/h" \
  --save-interval 2 --train-iters 10 --debug-inject-nan 7 > "$WORK/h.log" 2>&1
rc=$?
second=$(grep '^launch: attempt 2: ' "$WORK/h.log")
if [[ $rc != 0 && $(attempts "$WORK/h.log") == 2 ]] && grep -q "^loaded checkpoint .*h_other at iteration 2" "$WORK/h.log" &&
    grep -q "^launch: attempt 1 failed in iteration 7: iteration 7: the gradient norm is not finite" "$WORK/h.log" &&
    grep -q "^launch: restart 1 of 3 in 0 s from .*/h/iter_0000006: 0 iterations lost" "$WORK/h.log" &&
    [[ $second == *"resuming from $WORK/h/iter_0000006: "*"--load $WORK/h --ckpt-step 6 "* && $second != *h_other* &&
       $second != *"--ckpt-step 2"* ]] &&
    grep -q "^loaded checkpoint .*/h at iteration 6" "$WORK/h.log" &&
    grep -q "^error: launch: not restarting: the same failure in iteration 7 twice" "$WORK/h.log"; then
  pass "(h) the user's --ckpt-step 2: the restart resumed the run's own iteration 6"
else
  grep -v '^iter' "$WORK/h.log" | cut -c1-400
  failed "(h) the user's --ckpt-step: exit $rc"
fi
"${LAUNCH[@]}" --max-restarts 1 -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --load "$WORK/h_other" --save "$WORK/h2" \
  --save-interval 2 --train-iters 10 --debug-inject-nan 5 > "$WORK/h2.log" 2>&1
rc=$?
if [[ $rc != 0 ]] && grep -q "^launch: attempt 1 failed in iteration 5: iteration 5: " "$WORK/h2.log" &&
    grep -q "^launch: restart 1 of 1 in 0 s from --load .*h_other (iteration 4): 0 iterations lost" "$WORK/h2.log"; then
  pass "(h) the user's --load: the restart names it and its iteration 4"
else
  grep -v '^iter' "$WORK/h2.log" | cut -c1-400
  failed "(h) the user's --load: exit $rc"
fi

# (i) A second supervisor on the same --save, and a plain train; then SIGHUP to the first.
I=(-- "${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters 100000 --save "$WORK/i" --save-interval 50000)
"${LAUNCH[@]}" "${I[@]}" > "$WORK/i1.log" 2>&1 &
sup=$!
for _ in $(seq 600); do grep -q '^placement' "$WORK/i1.log" && break; sleep 0.05; done
ls -A "$WORK/i" > "$WORK/i_before.txt"
timeout 60 "${LAUNCH[@]}" "${I[@]}" > "$WORK/i2.log" 2>&1  # (timeout: not refused, it would train alongside)
rc2=$?
timeout 60 "$BIN" train "${RUN[@]}" --pipeline-model-parallel-size 1 --train-iters 2 --save "$WORK/i" > "$WORK/i3.log" 2>&1
rc3=$?
ls -A "$WORK/i" > "$WORK/i_after.txt"
holder="is in use by optimus-cc launch (pid $sup on $(hostname)"
if [[ $rc2 == 1 && $rc3 == 1 && $(wc -l < "$WORK/i2.log") == 1 ]] && grep -qF "error: launch: --save $WORK/i $holder" "$WORK/i2.log" &&
    grep -qF "error: --save $WORK/i $holder" "$WORK/i3.log" && cmp -s "$WORK/i_before.txt" "$WORK/i_after.txt"; then
  pass "(i) a second supervisor and a plain train on the same --save: refused, naming the holder: $(cut -c1-150 "$WORK/i2.log")"
else
  cat "$WORK/i2.log" "$WORK/i3.log"
  failed "(i) a second supervisor: exit $rc2, train exit $rc3"
fi
kill -HUP $sup
wait $sup
rc=$?
sleep 1
left=$(for p in /proc/[0-9]*; do tr '\0' ' ' < "$p/cmdline" 2> /dev/null; echo; done | grep -c -- "[t]rain .*--save $WORK/i ")  # ([t]: not this grep's own command line)
stopped=$(sed -n 's/^exiting after iteration \([0-9]*\) of .*signal 10.*/\1/p' "$WORK/i1.log")
if [[ $rc == 0 && -n $stopped && $left == 0 && $(cat "$WORK/i/latest_checkpointed_iteration.txt") == "$stopped" ]] &&
    grep -q "^launch: stopped by signal 1 (Hangup): the job saved checkpoint" "$WORK/i1.log" && [[ ! -e $WORK/i/.optimus-cc.lock ]]; then
  pass "(i) SIGHUP: the job stopped after iteration $stopped with its checkpoint; exit 0; no rank left; the lock removed"
else
  grep -v '^iter' "$WORK/i1.log"
  failed "(i) SIGHUP: exit $rc, stopped at '$stopped', $left processes left"
fi

# (j) A command that never trains (it only echoes a train command line) exits 0: not a success.
"${LAUNCH[@]}" -- /bin/echo optimus-cc train --save "$WORK/j" > "$WORK/j.log" 2>&1
rc=$?
if [[ $rc == 1 ]] && grep -q "^error: launch: the job exited 0 without training" "$WORK/j.log" && [[ $(grep -c '^error' "$WORK/j.log") == 1 ]]; then
  pass "(j) a job that never trained: exit 1: $(grep '^error' "$WORK/j.log" | cut -c1-120)"
else
  cat "$WORK/j.log"
  failed "(j) a job that never trained: exit $rc"
fi

# (k) Heartbeats the supervisor cannot see (a --heartbeat-dir not shared with its host, made
# here by a wrapper that points the ranks elsewhere): SIGTERM (a scheduler's preemption) is
# still passed on, after a short grace, and the job stops with its checkpoint.
mkdir -p "$WORK/k_bin"
printf '#!/usr/bin/env bash\nexec "%s" "$@" --heartbeat-dir "%s"\n' "$BIN" "$WORK/k_elsewhere" > "$WORK/k_bin/optimus-cc"
chmod +x "$WORK/k_bin/optimus-cc"
"${LAUNCH[@]}" -- "${MPI[@]}" "$WORK/k_bin/optimus-cc" train "${RUN[@]}" --train-iters 20000 --save "$WORK/k" \
  --save-interval 100000 > "$WORK/k.log" 2>&1 &
sup=$!
sleep 0.5
kill -TERM $sup
for _ in $(seq 600); do kill -0 $sup 2> /dev/null || break; sleep 0.1; done
kill -KILL $sup 2> /dev/null  # (today's supervisor never passes it on: not after 60 s)
wait $sup
rc=$?
stopped=$(sed -n 's/^exiting after iteration \([0-9]*\) of .*signal 10.*/\1/p' "$WORK/k.log")
if [[ $rc == 0 && -n $stopped && $(cat "$WORK/k/latest_checkpointed_iteration.txt" 2> /dev/null) == "$stopped" ]] &&
    ((stopped < 20000)) && grep -q "^launch: stopped by signal 15 (Terminated): the job saved checkpoint" "$WORK/k.log"; then
  pass "(k) SIGTERM with no heartbeat in sight: passed on after the grace; the job stopped after iteration $stopped, exit 0"
else
  grep -v '^iter' "$WORK/k.log"
  failed "(k) SIGTERM with no heartbeat in sight: exit $rc, stopped at '$stopped'"
fi
# (l) --save L --load L on the first start (L does not exist), a rank killed after a few saves.
L=("${LAUNCH[@]}" -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --train-iters $ITERS --save "$WORK/l" --load "$WORK/l"
   --save-interval 50 --metrics "$WORK/l.jsonl")
"${L[@]}" > "$WORK/l.log" 2>&1 &
sup=$!
for _ in $(seq 4800); do [[ -d $WORK/l/iter_0000100 ]] && break; sleep 0.05; done
rank=$(pgrep -P "$(pgrep -P $sup | head -1)" | tail -1)
[[ -n $rank ]] && kill -KILL "$rank"
wait $sup
rc=$?
if [[ $rc == 0 && -n $rank && $(attempts "$WORK/l.log") == 2 ]] &&
    grep -q "^notice: --load $WORK/l holds no checkpoint yet; training from scratch" "$WORK/l.log" &&
    grep -q "^launch: attempt 1: from the beginning: " "$WORK/l.log" &&
    grep -q "^launch: attempt 2: resuming from $WORK/l/iter_0*[1-9][0-9]*: .*--load $WORK/l --ckpt-step [1-9]" "$WORK/l.log" &&
    [[ $(cat "$WORK/l/latest_checkpointed_iteration.txt") == "$ITERS" ]] && compare_losses e_ref l 0; then
  pass "(l) --save L --load L on a first start: trained from scratch, a rank killed, $(grep -o 'resuming from [^:]*' "$WORK/l.log" | sed "s|$WORK/||")"
else
  grep -v '^iter' "$WORK/l.log" | cut -c1-300
  failed "(l) --save L --load L on a first start: exit $rc, rank '$rank'"
fi

# (m) Every save 2.5 s (a slow file system) under --comm-timeout 1 at DP 2 (PP 1): the writer is
# busy, the other rank waits for it without the timeout, the supervisor sees no hang.
"${LAUNCH[@]}" -- "${MPI[@]}" "$BIN" train "${RUN[@]}" --pipeline-model-parallel-size 1 --train-iters 4 \
  --save "$WORK/m" --save-interval 2 --comm-timeout 1 --debug-save-delay 2.5 > "$WORK/m.log" 2>&1
rc=$?
if [[ $rc == 0 && $(attempts "$WORK/m.log") == 1 && $(cat "$WORK/m/latest_checkpointed_iteration.txt") == 4 ]] &&
    grep -q "^saved checkpoint $WORK/m/iter_0000002" "$WORK/m.log" && ! grep -q "hung" "$WORK/m.log"; then
  pass "(m) saves of 2.5 s under --comm-timeout 1 (hang timeout 0.75 s) at DP 2: committed, one attempt"
else
  grep -v '^iter' "$WORK/m.log" | cut -c1-300
  failed "(m) slow saves under the supervisor: exit $rc"
fi
finish

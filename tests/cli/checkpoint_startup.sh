#!/usr/bin/env bash
# labels: ops;checkpoint;multirank
# The checkpoint a run starts from, and the save path around it (issue 48):
#  (a) --ckpt-step N with the newest save damaged (7 bytes at offset 4096 of one shard):
#      every start-up read takes iteration N; the run resumes and ends equal to an
#      uninterrupted one;
#  (b) Megatron's resume pattern, --save X --load X on a first start: a notice, training from
#      scratch; the same command again resumes, and together they equal the uninterrupted run;
#  (c) a checkpoint write longer than --comm-timeout (1 s) at DP 2 completes, synchronously
#      and with --async-save (and with the writer stopped for 3 s mid-write): the ranks without
#      a shard wait for the writer without the timeout;
#  (d) a rank killed while the others wait for a save: the job ends (no hang);
#  (e) --debug-inject-nan at DP 2: the guard's one error line, at once;
#  (f) two SIGTERMs during a save: exit at once, no iter_*.tmp left, the previous checkpoint
#      stays the latest;
#  (g) --keep-last 1 after a --ckpt-step branch removes the abandoned branch's later saves;
#  (h) a --comm-timeout of 0.2 s is said as 0.2 s.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
MODEL=("${TINY[@]}" --eval-interval 1000 --log-interval 1000)
P2=(--pipeline-model-parallel-size 2)
tmp_left() { find "$1" -name '*.tmp' 2> /dev/null | head -3; }
marker() { cat "$1/latest_checkpointed_iteration.txt" 2> /dev/null; }

# The uninterrupted run: 2 ranks, pipeline 2, 8 iterations.
train_run ref 2 "${P2[@]}" --train-iters 8 || { finish; exit; }

# (a) Saves 2, 4, 6; the header of a shard of 6 damaged; --ckpt-step 4 resumes from 4.
train_run a0 2 "${P2[@]}" --train-iters 8 --exit-interval 6 --save "$WORK/a" --save-interval 2
printf 'XXXXXXX' | dd of="$WORK/a/iter_0000006/mp_rank_00_001/model_optim_rng.bin" bs=1 seek=4096 conv=notrunc status=none
if train_run a1 2 "${P2[@]}" --train-iters 8 --load "$WORK/a" --ckpt-step 4 --save "$WORK/a" --save-interval 2 &&
    grep -q "^loaded checkpoint .* at iteration 4" "$WORK/a1.log" && [[ $(marker "$WORK/a") == 8 ]]; then
  pass "(a) --ckpt-step 4 with iteration 6 damaged: resumed from 4, saved 6 again and 8"
  compare_losses ref a1 1e-5 5
else
  failed "(a) --ckpt-step 4 with iteration 6 damaged: $(grep '^error' "$WORK/a1.log" | head -1)"
fi

# (b) The resume pattern: the first start trains from scratch (stopped after 4 by
# --exit-interval), the same command resumes there and finishes.
B=("${P2[@]}" --train-iters 8 --save "$WORK/b" --load "$WORK/b" --save-interval 2 --exit-interval 4)
if train_run b1 2 "${B[@]}" && train_run b2 2 "${B[@]}" &&
    [[ $(grep -c "^notice: --load .*/b holds no checkpoint yet; training from scratch" "$WORK/b1.log") == 1 ]] &&
    grep -q "^loaded checkpoint .* at iteration 4" "$WORK/b2.log" && [[ $(marker "$WORK/b") == 8 ]]; then
  pass "(b) --save X --load X: the first start trained from scratch with the notice, the second resumed at 4"
  cat "$WORK/b1.jsonl" "$WORK/b2.jsonl" > "$WORK/b.jsonl"
  compare_losses ref b
else
  failed "(b) the resume pattern: $(grep -h '^error' "$WORK/b1.log" "$WORK/b2.log" 2> /dev/null | head -1)"
fi

# (c) DP 2, every write 2.5 s, --comm-timeout 1: the data-parallel rank 1 has nothing to write.
for mode in sync async; do
  extra=()
  [[ $mode == async ]] && extra=(--async-save)
  if train_run "c_$mode" 2 --train-iters 4 --save "$WORK/c_$mode" --save-interval 2 --comm-timeout 1 \
      --debug-save-delay 2.5 "${extra[@]}" && [[ $(marker "$WORK/c_$mode") == 4 ]] &&
      [[ $(grep -c '^saved checkpoint' "$WORK/c_$mode.log") == 2 && -z $(tmp_left "$WORK/c_$mode") ]]; then
    pass "(c) $mode saves of 2.5 s under --comm-timeout 1 at DP 2: both committed"
  else
    failed "(c) $mode saves slower than --comm-timeout: $(grep '^error' "$WORK/c_$mode.log" | head -1)"
  fi
done

# ... and a writer held up by the system (SIGSTOP for 3 s while it writes checkpoint 2): the
# other rank waits for the save's agreement without the timeout.
MARK="$WORK/c-stop-$$.jsonl"
timeout -s KILL 90 mpirun -np 2 "$BIN" train "${MODEL[@]}" --train-iters 4 --save "$WORK/c_stop" --save-interval 2 \
  --comm-timeout 1 --debug-save-delay 1 --metrics "$MARK" > "$WORK/c_stop.log" 2>&1 &
mpirun_pid=$!
for _ in $(seq 600); do [[ -d $WORK/c_stop/iter_0000002.tmp ]] && break; sleep 0.02; done
writer=$(pgrep -f -- "^$BIN train .*$MARK" | head -1)
kill -STOP $writer 2> /dev/null
sleep 3
kill -CONT $writer 2> /dev/null
wait $mpirun_pid
rc=$?
if [[ $rc == 0 && $(marker "$WORK/c_stop") == 4 && -z $(tmp_left "$WORK/c_stop") ]]; then
  pass "(c) a writer stopped for 3 s during a save under --comm-timeout 1: the save committed, the run finished"
else
  grep '^error' "$WORK/c_stop.log" | head -2
  failed "(c) a writer stopped during a save: exit $rc, marker $(marker "$WORK/c_stop")"
fi

# (d) A rank killed during a 30 s write (rank 0 writes, rank 1 waits for it): the job ends.
MARK="$WORK/d-$$.jsonl"
timeout -s KILL 90 mpirun -np 2 "$BIN" train "${MODEL[@]}" --train-iters 4 --save "$WORK/d" --save-interval 2 \
  --debug-save-delay 30 --metrics "$MARK" > "$WORK/d.log" 2>&1 &
mpirun_pid=$!
for _ in $(seq 600); do [[ -d $WORK/d/iter_0000002.tmp ]] && break; sleep 0.05; done
sleep 1
start=$SECONDS
kill -9 $(pgrep -f -- "^$BIN train .*$MARK" | head -1) 2> /dev/null
wait $mpirun_pid
rc=$?
if [[ $rc != 0 ]] && ((SECONDS - start < 30)) && [[ -z $(marker "$WORK/d") ]]; then
  pass "(d) a rank killed during a save: the job ended (exit $rc) in $((SECONDS - start)) s, nothing committed"
else
  tail -5 "$WORK/d.log"
  failed "(d) a rank killed during a save: exit $rc after $((SECONDS - start)) s"
fi

# (e) A NaN injected into a gradient at DP 2: every rank's guard sees it; one line, exit 1.
start=$SECONDS
timeout 40 mpirun -np 2 "$BIN" train "${MODEL[@]}" --train-iters 6 --debug-inject-nan 3 > "$WORK/e.out" 2> "$WORK/e.err"
rc=$?
if [[ $rc == 1 ]] && ((SECONDS - start < 30)) && [[ $(grep -c '^error:' "$WORK/e.out" "$WORK/e.err" | awk -F: '{s+=$2} END {print s}') == 1 ]] &&
    grep -q "^error: iteration 3: the gradient norm is not finite.*first non-finite gradient: .* (rank 0," "$WORK/e.err"; then
  pass "(e) --debug-inject-nan 3 at DP 2: exit 1 in $((SECONDS - start)) s: $(grep "^error:" "$WORK/e.err" | cut -c1-120)"
else
  cat "$WORK/e.err" | head -5
  failed "(e) --debug-inject-nan at DP 2: exit $rc after $((SECONDS - start)) s"
fi

# (f) Two SIGTERMs while checkpoint 4 is written (each write takes 3 s).
"$BIN" train "${MODEL[@]}" --train-iters 100 --exit-signal-handler --save "$WORK/f" --save-interval 2 \
  --debug-save-delay 3 > "$WORK/f.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [[ $(marker "$WORK/f") == 2 && -d $WORK/f/iter_0000004.tmp ]] && break; sleep 0.05; done
in_flight=no
[[ $(marker "$WORK/f") == 2 && -d $WORK/f/iter_0000004.tmp ]] && in_flight=yes
kill -TERM $pid
sleep 0.2
kill -TERM $pid
wait $pid
rc=$?
if [[ $in_flight == yes && $rc == 143 && -z $(tmp_left "$WORK/f") && $(marker "$WORK/f") == 2 ]] && grep -q "second signal" "$WORK/f.log"; then
  pass "(f) two SIGTERMs during a save: exit 143, no staging directory left, checkpoint 2 the latest"
else
  tail -3 "$WORK/f.log"
  failed "(f) two SIGTERMs during a save: in flight $in_flight, exit $rc, left: $(tmp_left "$WORK/f"), marker $(marker "$WORK/f")"
fi

# (g) Saves 2, 4, 5; resumed from 2 (--ckpt-step) and saved 3 with --keep-last 1: 4 and 5
# belong to the abandoned branch (beyond the marker, never resumed) and go too.
"$BIN" train "${MODEL[@]}" --train-iters 5 --save "$WORK/g" --save-interval 2 > "$WORK/g0.log" 2>&1
"$BIN" train "${MODEL[@]}" --train-iters 5 --load "$WORK/g" --ckpt-step 2 --save "$WORK/g" --save-interval 1 \
  --keep-last 1 --exit-interval 3 > "$WORK/g1.log" 2>&1
rc=$?
left=$(cd "$WORK/g" 2> /dev/null && ls -d iter_* | tr '\n' ' ')
if [[ $rc == 0 && $left == "iter_0000003 " && $(marker "$WORK/g") == 3 ]]; then
  pass "(g) --keep-last 1 after a --ckpt-step branch: only iter_0000003 left"
else
  failed "(g) --keep-last 1 after a branch: exit $rc, left: $left"
fi

# (h) A peer stopped under --comm-timeout 0.2: the message says 0.2 s. The one stopped is world
# rank 0: the log-time gather of the ranks' metrics to rank 0 is plain MPI (instrumentation,
# untimed), so rank 0 stopped there is met by rank 1's next timed collective, while rank 1
# stopped there would hold rank 0 in the gather until it continues.
MARK="$WORK/h-$$.jsonl"
rank0() {  # the rank that holds the metrics file open: world rank 0, the logger
  local p
  for p in $(pgrep -f -- "^$BIN train .*$MARK"); do
    find "/proc/$p/fd" -lname "$MARK" 2> /dev/null | grep -q . && { echo "$p"; return; }
  done
}
timeout -s KILL 150 mpirun -np 2 "$BIN" train "${MODEL[@]}" --train-iters 100000000 --comm-timeout 0.2 --metrics "$MARK" \
  > "$WORK/h.log" 2>&1 &
mpirun_pid=$!
victim=
for _ in $(seq 1800); do  # (up to 90 s: a loaded machine reaches the first log late)
  [[ -s $MARK ]] && victim=$(rank0)
  [[ -n $victim ]] && break
  sleep 0.05
done
# Up to 3 stops of 10 s: a stop is not always met by the timeout (seen on a loaded machine: the
# other rank kept running, no message; not yet explained, docs/training.md). This checks the
# message's number, which needs one timeout.
for _ in 1 2 3; do
  [[ -n $victim ]] || break
  kill -STOP $victim
  for _ in $(seq 200); do grep -q '^error: rank' "$WORK/h.log" && break; sleep 0.05; done
  kill -CONT $victim
  grep -q '^error: rank' "$WORK/h.log" && break
  sleep 1
done
wait $mpirun_pid
said=$(grep -m1 '^error: rank' "$WORK/h.log")
if [[ $said == "error: rank "[01]" waited more than 0.2 s for "* ]]; then
  pass "(h) --comm-timeout 0.2: ${said:0:100}"
else
  grep -m2 '^error' "$WORK/h.log"
  failed "(h) --comm-timeout 0.2: the timeout message (victim '$victim')"
fi
finish

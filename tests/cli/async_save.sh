#!/usr/bin/env bash
# labels: ops;checkpoint;multirank
# --async-save (Megatron's flag): a save's tensors are copied to host memory at the iteration
# boundary and written by a thread while training goes on.
#  (a) every file of every checkpoint equals the synchronous save's, bit for bit (4 ranks,
#      P2 D2 with CB + LEP + EC and DP PowerSGD: compressor state too; and 2 ranks with the
#      distributed optimizer, whose moments are gathered for the save), losses too;
#  (b) one save at a time: saving after every iteration with a slow writer, each save waits
#      for the one before; all commit, in order, and still equal;
#  (c) a rank SIGKILLed while a save is being written in the background: the previous
#      checkpoint stays the latest, loads, and the resumed run ends equal to an uninterrupted one;
#  (d) --async-save without --save: one error line.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1  # (train_run: 4 ranks on fewer cores)
MODEL=("${TINY[@]}" --eval-interval 1000 --log-interval 1000)
OCC=(--pipeline-model-parallel-size 2 --inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback --grad-comp
     --grad-comp-rank 4 --hidden-dropout 0.1)

# same_checkpoints A B: every file under WORK/A and WORK/B (all iterations) is the same.
same_checkpoints() {
  local a=$WORK/$1 b=$WORK/$2 f n=0
  [[ "$(cd "$a" && find . -type f | sort)" == "$(cd "$b" && find . -type f | sort)" ]] || { echo "different files"; return 1; }
  while IFS= read -r f; do cmp -s "$a/$f" "$b/$f" || { echo "$f differs"; return 1; }; n=$((n + 1)); done < <(cd "$a" && find . -type f)
  echo "$n files"
}

# (a)
train_run sync4 4 "${OCC[@]}" --train-iters 6 --save "$WORK/sync4" --save-interval 2
train_run async4 4 "${OCC[@]}" --train-iters 6 --save "$WORK/async4" --save-interval 2 --async-save
if out=$(same_checkpoints sync4 async4) && [[ $(ls -d "$WORK"/async4/iter_* | wc -l) == 3 ]] &&
    [[ $(grep -c '^saved checkpoint .*written in the background' "$WORK/async4.log") == 3 ]]; then
  pass "(a) 4 ranks with compressor state: 3 checkpoints, $out bit-identical to synchronous saves"
else
  failed "(a) 4 ranks: $out"
fi
compare_losses sync4 async4 0
train_run syncd 2 --use-distributed-optimizer --train-iters 4 --save "$WORK/syncd" --save-interval 2
train_run asyncd 2 --use-distributed-optimizer --train-iters 4 --save "$WORK/asyncd" --save-interval 2 --async-save
if out=$(same_checkpoints syncd asyncd); then
  pass "(a) distributed optimizer (D2): $out bit-identical"
else
  failed "(a) distributed optimizer: $out"
fi

# (b) A save after every iteration, each write 0.3 s: the next save waits for the one before.
train_run one 4 "${OCC[@]}" --train-iters 6 --save "$WORK/one" --save-interval 1 --async-save --debug-save-delay 0.3
saved=$(sed -n 's/^saved checkpoint .*iter_0*\([0-9]*\) (written in the background in \([0-9]*\) ms.*/\1:\2/p' "$WORK/one.log" | tr '\n' ' ')
slow=$(echo "$saved" | tr ' ' '\n' | awk -F: '$2 >= 300' | wc -l)
same=yes
for it in 2 4 6; do
  d=$(printf 'iter_%07d' $it)
  mkdir -p "$WORK/one_$it" "$WORK/sync_$it" && cp -r "$WORK/one/$d" "$WORK/one_$it/" && cp -r "$WORK/sync4/$d" "$WORK/sync_$it/"
  same_checkpoints "one_$it" "sync_$it" > /dev/null || same=no
done
if [[ $saved == "1:"*" 2:"*" 3:"*" 4:"*" 5:"*" 6:"* && $slow == 6 && $same == yes ]]; then
  pass "(b) one save at a time: 6 saves committed in order, each written in >= 300 ms ($saved); 2, 4, 6 equal the synchronous ones"
else
  grep -v '^iter' "$WORK/one.log"
  failed "(b) one save at a time: '$saved', equal: $same"
fi

# (c) SIGKILL while checkpoint 4 is written in the background (each write takes 1 s).
train_run ref 2 --pipeline-model-parallel-size 2 --train-iters 8 --save "$WORK/ref" --async-save
MARK="$WORK/kill-during-save-$$.jsonl"
mpirun --oversubscribe -np 2 "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 --train-iters 8 --save "$WORK/k" \
  --save-interval 2 --async-save --debug-save-delay 1 --metrics "$MARK" > "$WORK/k.log" 2>&1 &
mpirun_pid=$!
for _ in $(seq 400); do
  [[ $(cat "$WORK/k/latest_checkpointed_iteration.txt" 2> /dev/null) == 2 && -d $WORK/k/iter_0000004.tmp ]] && break
  sleep 0.025
done
in_flight=no
[[ $(cat "$WORK/k/latest_checkpointed_iteration.txt" 2> /dev/null) == 2 && -d $WORK/k/iter_0000004.tmp ]] && in_flight=yes
kill -9 $(pgrep -f -- "^$BIN train .*$MARK" | head -1) 2> /dev/null
wait $mpirun_pid
rc=$?
mpirun --oversubscribe -np 2 "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 --train-iters 8 --save "$WORK/k" \
  --load "$WORK/k" --async-save > "$WORK/k2.log" 2>&1
rc2=$?
if [[ $in_flight == yes && $rc != 0 && $rc2 == 0 && ! -d $WORK/k/iter_0000004 ]] && grep -q "^loaded checkpoint .* at iteration 2" "$WORK/k2.log" &&
    cmp -s "$WORK/ref/iter_0000008/mp_rank_00_001/model_optim_rng.bin" "$WORK/k/iter_0000008/mp_rank_00_001/model_optim_rng.bin" &&
    cmp -s "$WORK/ref/iter_0000008/mp_rank_00_000/model_optim_rng.bin" "$WORK/k/iter_0000008/mp_rank_00_000/model_optim_rng.bin"; then
  pass "(c) SIGKILL during the background write of checkpoint 4: checkpoint 2 stayed the latest, loaded, and the run ended bit-identical"
else
  grep -v '^iter' "$WORK/k.log" "$WORK/k2.log" | tail -20
  failed "(c) SIGKILL during a background save: in flight $in_flight, exit $rc, resumed $rc2"
fi

# (d)
"$BIN" train "${MODEL[@]}" --train-iters 2 --async-save > "$WORK/d.log" 2>&1
rc=$?
if [[ $rc != 0 && $(grep -c '^error:' "$WORK/d.log") == 1 ]] && grep -q '^error: --async-save needs --save DIR' "$WORK/d.log"; then
  pass "(d) --async-save without --save: exit $rc, one line"
else
  cat "$WORK/d.log"
  failed "(d) --async-save without --save: status $rc"
fi
finish

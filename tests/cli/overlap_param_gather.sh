#!/usr/bin/env bash
# labels: parallel
# --overlap-param-gather (the distributed optimizer's parameter all-gather beside
# the next forward, region by region): losses and grad norms bit-identical to the
# blocking all-gather, and the exported final weights too, on P1 D2, P2 D2 (bf16
# through the host staging a GPU uses: the 16-bit weight copy is refreshed region
# by region) and interleaved P2 D2 V2, with dropout, a validation every other
# iteration and small buckets (many regions); the data-parallel bytes of every
# iteration equal the blocking run's; the gather thread's regions are in the
# trace; a run resumed from a checkpoint continues bit-exactly; the flag without
# --use-distributed-optimizer is one error line; a rank that stalls mid-run ends
# the job (--comm-timeout) instead of hanging it.
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
COMPARE="$SRC/tests/cli/fixture/safetensors_compare.py"
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 32
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 8 --eval-iters 1 --eval-interval 2 --log-interval 1 --seed 7 --lr 3e-3
       --dp-bucket-size 3000 --train-iters 5)
ZERO=(--use-distributed-optimizer)
OVERLAP=(--use-distributed-optimizer --overlap-param-gather)

# dp bytes per iteration, summed over ranks, one line per iteration.
dp_bytes() { "$PY" -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r['iter'], sum(k['bytes'].get('dp', 0) for k in r['ranks']))" "$1"; }

# same NAME RANKS FLAGS...: the blocking and the overlapped run, compared bit for bit.
same() {
  local name=$1 np=$2
  shift 2
  train_run "$name" "$np" "$@" "${ZERO[@]}" --save "$WORK/$name.ckpt" || return
  train_run "${name}_overlap" "$np" "$@" "${OVERLAP[@]}" --save "$WORK/${name}_overlap.ckpt" || return
  compare_losses "$name" "${name}_overlap" 0
  if [[ $(dp_bytes "$WORK/$name.jsonl") == "$(dp_bytes "$WORK/${name}_overlap.jsonl")" ]]; then
    pass "${name}_overlap: data-parallel bytes of every iteration equal the blocking run's"
  else
    failed "${name}_overlap: data-parallel bytes differ: $(dp_bytes "$WORK/${name}_overlap.jsonl" | tr '\n' ' ') vs $(dp_bytes "$WORK/$name.jsonl" | tr '\n' ' ')"
  fi
  for n in "$name" "${name}_overlap"; do
    "$BIN" export --load "$WORK/$n.ckpt" --out "$WORK/$n.safetensors" > /dev/null 2>&1 || failed "$n: export"
  done
  if out=$("$PY" "$COMPARE" "$WORK/$name.safetensors" "$WORK/${name}_overlap.safetensors" --rel 0 2>&1); then
    pass "${name}_overlap: final weights bit-identical ($out)"
  else
    failed "${name}_overlap: final weights differ: $out"
  fi
}

same p1d2 2
same p2d2_bf16_staged 4 --pipeline-model-parallel-size 2 --bf16 --debug-host-staging
same p2d2_interleaved 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --grad-comp --grad-comp-rank 4 --grad-comp-warm-up 0.2 --emb-comm-opt

# The gather thread in the trace (thread 2), and the exposed wait as a timer.
if train_run traced 2 "${OVERLAP[@]}" --trace "$WORK/traced.json"; then
  if out=$("$PY" - "$WORK/traced.json" "$WORK/traced.jsonl" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
regions = [e for e in events if e.get("tid") == 2 and e["name"].startswith("dp_allgather parameters region")]
rows = [json.loads(l) for l in open(sys.argv[2])]
timed = all("dp_allgather" in r["timers"] for r in rows)
print(f"{len(regions)} gathered regions on thread 2 of the trace; dp_allgather timed on every row: {timed}")
sys.exit(0 if regions and timed else 1)
PY
  ); then pass "trace: $out"; else failed "trace: $out"; fi
fi

# Resume: 6 iterations straight vs 3 + resume + 3, bit-exact.
R=(--train-iters 6 "${OVERLAP[@]}")
if train_run straight 2 "${R[@]}" && train_run half 2 "${R[@]}" --save "$WORK/ckh" --exit-interval 3 \
   && train_run resumed 2 "${R[@]}" --load "$WORK/ckh"; then
  compare_losses straight resumed 0 4
fi

# Without the distributed optimizer: one error line, non-zero exit.
log="$WORK/refused.log"
if "$BIN" train "${MODEL[@]}" --overlap-param-gather > "$log" 2>&1; then
  failed "refusal: --overlap-param-gather without --use-distributed-optimizer was accepted"
elif [[ $(grep -c '^error:' "$log") -eq 1 ]] && grep -q '^error: --overlap-param-gather.*--use-distributed-optimizer' "$log"; then
  pass "refusal: $(grep '^error:' "$log")"
else
  failed "refusal: $(cat "$log" | head -5)"
fi

# A rank that stops answering mid-run: the others give up after --comm-timeout and end the job.
start=$SECONDS
timeout 120 mpirun -np 2 "$BIN" train "${MODEL[@]}" "${OVERLAP[@]}" --train-iters 100000 --eval-interval 0 \
  --comm-timeout 3 > "$WORK/stall.log" 2>&1 &
job=$!
for _ in $(seq 100); do grep -q "iter *3/" "$WORK/stall.log" 2>/dev/null && break; sleep 0.2; done
victim=$(pgrep -f "^$BIN train .*--train-iters 100000" | tail -1)  # a rank (not mpirun)
[[ -n $victim ]] && kill -STOP "$victim"
wait $job
rc=$?
took=$((SECONDS - start))
if [[ -z $victim ]]; then
  failed "stall: no rank to stop"
elif [[ $rc -ne 0 && $rc -ne 124 ]] && grep -q "waited more than" "$WORK/stall.log"; then
  pass "stall: a stopped rank ended the job (exit $rc after ${took} s): $(grep -m1 -o 'waited more than.*for [^(]*' "$WORK/stall.log")"
else
  failed "stall: exit $rc after ${took} s: $(tail -3 "$WORK/stall.log")"
fi
[[ -n $victim ]] && kill -KILL "$victim" 2> /dev/null
finish

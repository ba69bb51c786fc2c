#!/usr/bin/env bash
# labels: plan
# `optimus-cc plan` on cases computable by hand, its calibration on a synthetic
# metrics file, --auto's output, and one-line errors on bad input.
source "$(dirname "$0")/fixture/lib.sh"

# 2 layers, hidden 64, seq 16, vocab 128, micro-batch 1, 1 GFLOP/s: per micro-batch
# a layer's forward is 24*16*64^2 + 4*16*16*64 = 1,638,400 FLOP (1.6384 ms), the LM
# head 2*16*64*128 = 262,144 FLOP; backward = 2 x forward.
M=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --vocab-size 128
   --micro-batch-size 1 --device-tflops 0.001 --efficiency 1 --memory-bandwidth 1e12
   --devices-per-node 1 --tensor-model-parallel-size 1)

expect_ms() {  # NAME EXPECTED_MS -- COMMAND...
  local name=$1 want=$2
  shift 3
  local got
  got=$("$@" 2> "$WORK/err" | sed -n 's/^predicted iteration: \([0-9.]*\) ms.*/\1/p')
  if [[ $got == "$want" ]]; then pass "$name: $got ms"; else failed "$name: got '$got' ms, want $want ($(cat "$WORK/err"))"; fi
}

# One stage, free communication: 4 micro-batches x 3 x 3,538,944 FLOP = 42.467 ms.
expect_ms "P1 no-comm" 42.467 -- "$BIN" plan "${M[@]}" --nodes 1 --pipeline-model-parallel-size 1 \
  --global-batch-size 4 --no-comm
# Two stages, free communication, M = 4: the heavier last stage never waits, so
# t = tf0 + M (tf1 + tb1) + tb0 = 3 * 1.6384 + 4 * 3 * 1.900544 = 27.722 ms.
expect_ms "P2 no-comm" 27.722 -- "$BIN" plan "${M[@]}" --nodes 2 --pipeline-model-parallel-size 2 \
  --global-batch-size 4 --no-comm
# Two stages, one micro-batch, 1 ms latency and unbounded bandwidth: compute
# 3 * 3.538944 ms, + 2 ms for the two transfers, + 2 ms each for the 2-rank ring
# all-reduces of the embedding, the grad norm and the loss = 18.617 ms.
expect_ms "P2 latency" 18.617 -- "$BIN" plan "${M[@]}" --nodes 2 --pipeline-model-parallel-size 2 \
  --global-batch-size 1 --inter-node-bandwidth 1e9 --inter-node-latency 1000

# Calibration: forward 10 ms and backward 20 ms per iteration of 4 micro-batches,
# optimizer 1 ms (the first row is warm-up and ignored) -> 4 x (2.5 + 5) + 1 = 31 ms.
row() {
  echo "{\"iter\": $1, \"ms\": $2, \"ranks\": [{\"rank\": 0, \"tp\": 0, \"pp\": 0, \"dp\": 0, \"timers\": {\"forward\": $3, \"backward\": $4, \"optimizer\": 1.0, \"data\": 0.0}, \"bytes\": {}}]}"
}
{ row 1 99 50 90; row 2 31 10 20; row 3 31 10 20; } > "$WORK/m.jsonl"
expect_ms "calibrated P1" 31.000 -- "$BIN" plan "${M[@]}" --pipeline-model-parallel-size 1 \
  --global-batch-size 4 --calibrate "$WORK/m.jsonl"
if "$BIN" plan "${M[@]}" --pipeline-model-parallel-size 1 --global-batch-size 4 --calibrate "$WORK/m.jsonl" \
  | grep -q "stage 0: forward 2.500 ms, backward 5.000 ms per micro-batch"; then
  pass "calibration reports the per-micro-batch stage times"
else
  failed "calibration report"
fi

# --auto on the paper's GPT-2.5B setting: prints the flags to use and the reason.
out=$("$BIN" plan --auto --bytes-per-value 2 --checkpoint-activations 2>&1)
if grep -q "^train flags: " <<< "$out" && grep -q "^why (critical path" <<< "$out"; then
  pass "--auto prints train flags and why: $(grep '^train flags' <<< "$out")"
else
  failed "--auto output: $out"
fi

# expect_error NAME PATTERN -- COMMAND...
expect_error() {
  local name=$1 pattern=$2
  shift 3
  "$@" > /dev/null 2> "$WORK/err"
  local rc=$?
  if [[ $rc -ne 0 && $rc -lt 128 && $(grep -c . "$WORK/err") -eq 1 ]] && grep -q '^error: ' "$WORK/err" &&
     grep -qiE -- "$pattern" "$WORK/err"; then
    pass "$name: $(cat "$WORK/err")"
  else
    failed "$name: rc $rc, stderr: $(cat "$WORK/err")"
  fi
}
expect_error "layers not divisible by P" "--pipeline-model-parallel-size" -- "$BIN" plan "${M[@]}" --nodes 2 \
  --num-layers 3 --pipeline-model-parallel-size 2 --global-batch-size 4
expect_error "ranks not divisible by T x P" "not divisible by tensor" -- "$BIN" plan "${M[@]}" --nodes 3 \
  --pipeline-model-parallel-size 2 --global-batch-size 4
expect_error "bad SC way" "selective-grad-comp-way" -- "$BIN" plan "${M[@]}" --nodes 2 \
  --pipeline-model-parallel-size 2 --global-batch-size 4 --grad-comp --selective-grad-comp-way 5
expect_error "missing metrics file" "cannot open --calibrate" -- "$BIN" plan "${M[@]}" --calibrate "$WORK/nope.jsonl"
echo '{"iter": 1}' > "$WORK/bad.jsonl"
expect_error "metrics without ranks" "no per-rank metrics" -- "$BIN" plan "${M[@]}" --calibrate "$WORK/bad.jsonl"
expect_error "unknown flag" "--bogus" -- "$BIN" plan --bogus 1
expect_error "bad efficiency" "efficiency" -- "$BIN" plan --efficiency 2
finish

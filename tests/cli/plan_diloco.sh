#!/usr/bin/env bash
# labels: plan
# The planner under DiLoCo (plan/diloco_cost.h), on P2 D2 over 4 nodes joined by a
# 300 Mbit/s link (the speedup benchmark's cluster):
#   * bytes: each sync moves each stage's parameters once (an fp32 ring all-reduce at D2:
#     4 bytes per parameter per rank), counted from the model's shapes by hand here;
#     the mean iteration is the inner one plus the round's syncs over H;
#   * quality-aware --auto with DiLoCo's measured costs (a hand-made diloco-quality.json,
#     tests/cli/fixture/, beside the compressors fixture of cli.plan_quality): DiLoCo H 8 (0.30 %)
#     with int8 pipeline links, measured together at 0.35 %, is chosen within 0.5 %; within
#     0.25 % no DiLoCo setting fits; its printed train flags train;
#   * one-line errors: a missing --diloco-json, DiLoCo with FE.
source "$(dirname "$0")/fixture/lib.sh"
cd "$WORK"  # no docs/results/diloco-quality.json here: only what the test names is read
COSTS="$SRC/tests/cli/fixture/compressors.json" DCOSTS="$SRC/tests/cli/fixture/diloco-quality.json"
M=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128
   --vocab-size 1024 --micro-batch-size 4 --global-batch-size 32 --devices-per-node 1 --nodes 4
   --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --inter-node-bandwidth 0.0375 --inter-node-latency 50)

# Stage 0: word + position embeddings (1024 + 128) x 256 and 2 layers of 12 C^2 + 13 C;
# stage 1: 2 layers, the final LayerNorm (2 C) and the LM head's copy of the embedding.
if "$BIN" plan "${M[@]}" --diloco-inner-steps 8 --json "$WORK/h8.json" > "$WORK/h8.txt" 2>&1; then
  if out=$("$PY" - "$WORK/h8.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
C, V, S = 256, 1024, 128
layer = 12 * C * C + 13 * C
want = [4 * ((V + S) * C + 2 * layer), 4 * (2 * layer + 2 * C + V * C)]
got = [sum(f["bytes"] for f in stage) for stage in j["diloco_sync_per_rank"]]
assert got == want, (got, want)
mean = j["inner_iteration_ms"] + j["diloco_round_ms"] / 8
assert abs(j["iteration_ms"] - mean) < 1e-9 and j["diloco_round_ms"] > 0, j
print(f"bytes per sync and rank {got} = 4 x the stages' parameters; mean {j['iteration_ms']:.3f} ms = inner "
      f"{j['inner_iteration_ms']:.3f} + round {j['diloco_round_ms']:.3f} / 8")
PY
  ); then pass "DiLoCo H 8: $out"; else failed "DiLoCo H 8: $out"; fi
else
  failed "plan --diloco-inner-steps 8: $(cat "$WORK/h8.txt")"
fi

auto() {  # BUDGET: the chosen plan's train flags and cost lines
  "$BIN" plan "${M[@]}" --auto --max-loss-increase "$1" --compressors-json "$COSTS" --diloco-json "$DCOSTS" 2>&1
}
out=$(auto 0.5)
flags=$(sed -n 's/^train flags: //p' <<< "$out")
if [[ $flags == *"--diloco-inner-steps 8"* && $flags == *"--activation-comp-method int8"* ]] &&
    grep -q "measured as variant diloco_h8_pp_int8" <<< "$out" && grep -q "DiLoCo outer syncs" <<< "$out"; then
  pass "budget 0.5: $flags ($(grep '^expected' <<< "$out" | cut -c1-60))"
else
  failed "budget 0.5: expected DiLoCo H 8 with int8 pipeline links, measured together: $out"
fi
# shellcheck disable=SC2086
if timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${TINY[@]}" --pipeline-model-parallel-size 2 \
    --global-batch-size 8 --train-iters 2 $flags > "$WORK/train.log" 2>&1; then
  pass "the budget-0.5 plan's flags train"
else
  failed "the budget-0.5 plan's flags do not train: $(tail -2 "$WORK/train.log")"
fi
out=$(auto 0.25)
flags=$(sed -n 's/^train flags: //p' <<< "$out")
[[ -n $flags && $flags != *"--diloco"* ]] && pass "budget 0.25: no DiLoCo setting fits ($flags)" \
  || failed "budget 0.25: $out"

one_error "missing --diloco-json" "cannot open --diloco-json" -- "$BIN" plan "${M[@]}" --auto --max-loss-increase 0.5 \
  --compressors-json "$COSTS" --diloco-json "$WORK/none.json"
one_error "DiLoCo with FE" "--emb-comm-opt \(FE\)" -- "$BIN" plan "${M[@]}" --diloco-inner-steps 8 --emb-comm-opt
finish

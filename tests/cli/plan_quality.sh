#!/usr/bin/env bash
# labels: plan compression
# `plan --auto --max-loss-increase X`: the quality-aware plan over the compressor sweep's
# measured loss costs (here a hand-made compressors.json, tests/cli/fixture/, whose numbers
# are chosen so that the right answers are known):
#   pp_fwd int8 0.10 %, topk 25 % 0.80 %; pp_bwd int8 0.20 %, sign 0.60 %, PowerSGD r16 2.0 %;
#   dp int8 + EF 0.15 %, PowerSGD r16 + EF 0.30 %, sign (incomplete: never measured);
#   the combination pp_fwd int8 + pp_bwd int8 measured at 0.25 % (the sum would be 0.30 %).
# P2 D2 on 4 one-device nodes joined by a slow link, so compressing pays.
#   * budget 0: only lossless FE (or nothing);
#   * P2 D1, budget 0.25: int8 on both pipeline links, costed by the measured combination;
#   * budget 0.5: an expected cost <= 0.5 %; budget 10: no slower than budget 0.5's plan;
#   * a never-measured method is never chosen; the printed train flags train;
#   * P1 D4 (DP only), budget 0.2: DP int8 + EF with the measured warm-up;
#   * a method measured only in a combination (pp mxfp4 + LEP) is a candidate;
#   * issue 50's settings (rotation, adaptive's F, topk2's density, rANS) are matched and printed;
#   * one-line errors: --max-loss-increase without --auto, a missing or malformed JSON, < 0.
source "$(dirname "$0")/fixture/lib.sh"
COSTS="$SRC/tests/cli/fixture/compressors.json"
M=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --vocab-size 1024
   --micro-batch-size 4 --global-batch-size 32 --devices-per-node 1 --nodes 4 --tensor-model-parallel-size 1
   --pipeline-model-parallel-size 2 --inter-node-bandwidth 0.0375 --inter-node-latency 50)

declare -A FLAGS COST MS
for budget in 0 0.25 0.5 10; do
  out=$("$BIN" plan "${M[@]}" --auto --max-loss-increase $budget --compressors-json "$COSTS" 2>&1) \
    || { failed "budget $budget: plan failed: $out"; continue; }
  FLAGS[$budget]=$(sed -n 's/^train flags: //p' <<< "$out")
  COST[$budget]=$(sed -n 's/^expected loss cost: +\([0-9.]*\) %.*/\1/p' <<< "$out")
  MS[$budget]=$(sed -n 's/^chosen: \([0-9.]*\) ms.*/\1/p' <<< "$out")
  echo "$out" > "$WORK/plan_$budget.txt"
  if [[ -z ${COST[$budget]} || -z ${MS[$budget]} ]]; then failed "budget $budget: no cost or time in: $out"; continue; fi
  if awk -v c="${COST[$budget]}" -v b=$budget 'BEGIN { exit !(c <= b + 1e-9) }'; then
    pass "budget $budget %: expected loss ${COST[$budget]} %, ${MS[$budget]} ms: ${FLAGS[$budget]}"
  else
    failed "budget $budget %: chose a plan of expected loss ${COST[$budget]} %"
  fi
  grep -q -- "--grad-comp-method sign" <<< "${FLAGS[$budget]}" && failed "budget $budget: chose dp sign, never measured"
done
[[ ${FLAGS[0]} == "--emb-comm-opt" || ${FLAGS[0]} == "(none)" ]] && pass "budget 0: lossless only (${FLAGS[0]})" \
  || failed "budget 0: chose lossy compression: ${FLAGS[0]}"
# P2 D1 (2 nodes), budget 0.25: int8 on both pipeline links fits only as the measured
# combination (0.25 %; the sum of its links would be 0.30 %).
out=$("$BIN" plan "${M[@]}" --nodes 2 --auto --max-loss-increase 0.25 --compressors-json "$COSTS" 2>&1)
flags=$(sed -n 's/^train flags: //p' <<< "$out")
if [[ $flags == *"--activation-comp-method int8"* && $flags == *"--inter-grad-comp-method int8"* ]] \
    && grep -q "measured as variant pp_int8" <<< "$out"; then
  pass "P2 D1, budget 0.25: int8 on both pipeline links, costed by the measured combination"
else
  failed "P2 D1, budget 0.25: expected int8 on both pipeline links as measured variant pp_int8: $out"
fi
# P2 D2, budget 0.5: the sum of per-link costs decides (0.10 + 0.20 + 0.15 = 0.45 % with DP int8).
grep -q "sum of per-link measurements" "$WORK/plan_0.5.txt" && pass "budget 0.5: $(grep '^expected' "$WORK/plan_0.5.txt")" \
  || failed "budget 0.5: no per-link sum: $(cat "$WORK/plan_0.5.txt")"
awk -v a="${MS[10]}" -v b="${MS[0.5]}" 'BEGIN { exit !(a <= b) }' \
  && pass "a larger budget is no slower (${MS[10]} <= ${MS[0.5]} ms)" || failed "budget 10 slower than 0.5: ${MS[10]} > ${MS[0.5]}"

# DP only (P1 D4: no pipeline links): with budget 0.2 only dp int8 + EF (0.15 %) fits, and its
# measurement has the sweep's warm-up 0.1, which the plan must carry (--grad-comp-warm-up 0.1).
out=$("$BIN" plan "${M[@]}" --pipeline-model-parallel-size 1 --auto --max-loss-increase 0.2 \
  --compressors-json "$COSTS" 2>&1)
flags=$(sed -n 's/^train flags: //p' <<< "$out")
if [[ $flags == *"--grad-comp --grad-comp-method int8 --grad-comp-error-feedback --grad-comp-warm-up 0.1"* ]] \
    && grep -q "measured as variant dp_int8" <<< "$out"; then
  pass "P1 D4, budget 0.2: DP int8 + error feedback with the measured warm-up ($flags)"
else
  failed "P1 D4, budget 0.2: expected DP int8 + EF + warm-up 0.1: $out"
fi

# A method measured only in a combination (the block codecs' sweep runs mxfp4 on both pipeline
# links, never on one alone) is a candidate, costed by its combination: P2 D1, budget 0.3, with
# pp mxfp4 + LEP measured at 0.28 % (4.25 bits per value against int8's 8) is chosen over pp int8.
/usr/bin/python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
j["variants"].append({"name": "pp_mxfp4_lep", "kind": "combo", "complete": True, "mean_pct": 0.25, "max_pct": 0.28,
                      "links": {"pp_fwd": {"method": "mxfp4"}, "pp_bwd": {"method": "mxfp4", "lep": True}, "dp": None}})
json.dump(j, open(sys.argv[2], "w"))' "$COSTS" "$WORK/block.json"
out=$("$BIN" plan "${M[@]}" --nodes 2 --auto --max-loss-increase 0.3 --compressors-json "$WORK/block.json" 2>&1)
flags=$(sed -n 's/^train flags: //p' <<< "$out")
if [[ $flags == *"--activation-comp-method mxfp4"* && $flags == *"--inter-grad-comp-method mxfp4 --use-error-feedback"* ]] \
    && grep -q "measured as variant pp_mxfp4_lep" <<< "$out"; then
  pass "P2 D1, budget 0.3: mxfp4 on both pipeline links, measured only as a combination ($flags)"
else
  failed "P2 D1, budget 0.3: expected mxfp4 + LEP on both pipeline links as measured variant pp_mxfp4_lep: $out"
fi

# Issue 50's settings as `occtools lowbit` writes them: a rotated 2-bit code with the lossless
# stage on both pipeline links (0.30 %, 2.06 bits per value), the adaptive codec at F 0.0625
# (0.45 %), DP topk2 at density 0.05 + EF (0.10 %). P2 D2, budget 0.45: the rotated lloydmax2 pair
# is the cheapest pipeline wire within it, with its rotation and rANS in the flags, and DP topk2
# with its own density; at budget 0.2 the pair no longer fits, and a rotated setting is never
# taken for the same codec without rotation (nor the reverse).
/usr/bin/python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
rot = {"method": "lloydmax2", "rotation": "hadamard", "lossless": "rans"}
ada = {"method": "adaptive", "high_fraction": 0.0625, "rotation": "hadamard:64", "lossless": "rans"}
j["variants"] += [
  {"name": "pp_lm2_rot_rans", "kind": "combo", "complete": True, "mean_pct": 0.2, "max_pct": 0.3,
   "links": {"pp_fwd": rot, "pp_bwd": rot, "dp": None}},
  {"name": "pp_adaptive_rot_rans", "kind": "combo", "complete": True, "mean_pct": 0.4, "max_pct": 0.45,
   "links": {"pp_fwd": ada, "pp_bwd": ada, "dp": None}},
  {"name": "pp_lm2", "kind": "combo", "complete": True, "mean_pct": 3.0, "max_pct": 4.0,
   "links": {"pp_fwd": {"method": "lloydmax2"}, "pp_bwd": {"method": "lloydmax2"}, "dp": None}}]
j["link_costs"]["dp"].append({"setting": {"method": "topk2", "density": 0.05, "error_feedback": True, "warmup": 0.1},
  "variant": "dp_topk2", "mean_pct": 0.05, "max_pct": 0.1, "min_pct": 0.0, "seeds": 6})
json.dump(j, open(sys.argv[2], "w"))' "$COSTS" "$WORK/lowbit.json"
out=$("$BIN" plan "${M[@]}" --auto --max-loss-increase 0.45 --compressors-json "$WORK/lowbit.json" 2>&1)
LOWBIT_FLAGS=$(sed -n 's/^train flags: //p' <<< "$out")
want_fwd="--activation-comp-method lloydmax2 --activation-comp-rotation hadamard --activation-comp-lossless rans"
want_bwd="--inter-grad-comp-method lloydmax2 --inter-grad-comp-rotation hadamard --inter-grad-comp-lossless rans"
if [[ $LOWBIT_FLAGS == *"$want_fwd"* && $LOWBIT_FLAGS == *"$want_bwd"* ]]; then
  pass "budget 0.45: rotated lloydmax2 + rANS on both pipeline links ($LOWBIT_FLAGS)"
else
  failed "budget 0.45: expected the rotated lloydmax2 pair with rANS: $out"
fi
[[ $LOWBIT_FLAGS == *"--grad-comp-method topk2 --grad-comp-topk-density 0.05 --grad-comp-error-feedback"* ]] \
  && pass "budget 0.45: DP topk2 at its measured density 0.05 with EF" \
  || failed "budget 0.45: expected DP topk2 at density 0.05 + EF: $LOWBIT_FLAGS"
out=$("$BIN" plan "${M[@]}" --auto --max-loss-increase 0.2 --compressors-json "$WORK/lowbit.json" 2>&1)
flags=$(sed -n 's/^train flags: //p' <<< "$out")
if [[ $flags != *lloydmax2* && $flags != *adaptive* ]]; then
  pass "budget 0.2: neither the rotated pair (0.30 %) nor unrotated lloydmax2 (4.0 %) nor adaptive ($flags)"
else
  failed "budget 0.2: chose a 2-bit pipeline code over its measured cost: $out"
fi
# The adaptive pair's flags carry its F and its rotation's block when it is chosen: with the
# rotated lloydmax2 pair gone, budget 0.6 (adaptive 0.45 % + DP topk2 0.10 %) leaves adaptive
# the smallest pipeline wire within it.
/usr/bin/python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
j["variants"] = [v for v in j["variants"] if v["name"] != "pp_lm2_rot_rans"]
json.dump(j, open(sys.argv[2], "w"))' "$WORK/lowbit.json" "$WORK/adaptive.json"
out=$("$BIN" plan "${M[@]}" --auto --max-loss-increase 0.6 --compressors-json "$WORK/adaptive.json" 2>&1)
flags=$(sed -n 's/^train flags: //p' <<< "$out")
if [[ $flags == *"--activation-comp-method adaptive --activation-comp-adaptive-high-fraction 0.0625 --activation-comp-rotation hadamard:64"* ]] \
    && grep -q "variant pp_adaptive_rot_rans +0.45 % + dp +0.10 % (dp_topk2)" <<< "$out"; then
  pass "budget 0.6 without the lloydmax2 pair: adaptive F 0.0625 behind hadamard:64 ($flags)"
else
  failed "budget 0.6 without the lloydmax2 pair: expected adaptive F 0.0625, hadamard:64: $out"
fi

# The printed flags are the engine's: they train (P2 D2, 2 iterations).
# shellcheck disable=SC2086
if timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${TINY[@]}" --pipeline-model-parallel-size 2 \
    --global-batch-size 8 --train-iters 2 ${FLAGS[0.5]} > "$WORK/train.log" 2>&1; then
  pass "the budget-0.5 plan's flags train"
else
  failed "the budget-0.5 plan's flags do not train: $(tail -2 "$WORK/train.log")"
fi
# shellcheck disable=SC2086
if timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${TINY[@]}" --pipeline-model-parallel-size 2 \
    --global-batch-size 8 --train-iters 2 $LOWBIT_FLAGS > "$WORK/train-lowbit.log" 2>&1; then
  pass "the rotated 2-bit plan's flags train"
else
  failed "the rotated 2-bit plan's flags do not train: $(tail -2 "$WORK/train-lowbit.log")"
fi

one_error "budget without --auto" "needs --auto" -- "$BIN" plan "${M[@]}" --max-loss-increase 0.5 --compressors-json "$COSTS"
one_error "missing JSON" "cannot open --compressors-json" -- "$BIN" plan "${M[@]}" --auto --max-loss-increase 0.5 \
  --compressors-json "$WORK/none.json"
echo '{"variants": []}' > "$WORK/bad.json"
one_error "malformed JSON" "is not a compressors.json" -- "$BIN" plan "${M[@]}" --auto --max-loss-increase 0.5 \
  --compressors-json "$WORK/bad.json"
one_error "negative budget" "must be >= 0" -- "$BIN" plan "${M[@]}" --auto --max-loss-increase -1 --compressors-json "$COSTS"
finish

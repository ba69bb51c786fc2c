#!/usr/bin/env bash
# labels: compression
# Issue 50's plans as found: configs/pipeline-2bit.json, pipeline-3bit.json and dp-32x.json are flag files
# for --config that hold only compression flags, so `train --config FILE <any model and layout
# flags>` uses them (docs/results/lowbit.md measured them):
#   * each file's keys are compression flags only (no model, layout, data or schedule);
#   * pipeline-2bit on a P2 --bf16 model: both pipeline links send <= 2.3 bits per value
#     (about 7x fewer bytes than the same run's bf16 wire, on messages too small for rANS to
#     reach the sweep's bits), and the rest of the run is the model's; pipeline-3bit <= 3.3;
#   * dp-32x on a D2 model: DP bytes fall after its warm-up (its methods' count is
#     cli.compression_counts'), and a flag on the command line still wins over the file's.
source "$(dirname "$0")/fixture/lib.sh"
MODEL=("${TINY[@]}" --hidden-size 128 --train-iters 4 --eval-interval 4)  # rows of whole 64-value blocks
PIPE="$SRC/configs/pipeline-2bit.json" PIPE3="$SRC/configs/pipeline-3bit.json" DPC="$SRC/configs/dp-32x.json"
for f in "$PIPE" "$PIPE3" "$DPC"; do
  if bad=$("$PY" - "$f" <<'PY'
import json, re, sys
keys = json.load(open(sys.argv[1]))
allowed = re.compile(r"^(activation-comp-|inter-grad-comp|use-error-feedback|grad-comp|selective-grad-comp-way)")
print(" ".join(k for k in keys if not allowed.match(k)))
sys.exit(1 if any(not allowed.match(k) for k in keys) or not keys else 0)
PY
  ); then pass "$(basename "$f"): compression flags only"; else failed "$(basename "$f"): not a compression flag: $bad"; fi
done

bytes() {  # NAME CLASS: the class's bytes at the last training iteration (all ranks)
  "$PY" - "$WORK/$1.jsonl" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print([r for r in rows if "val_loss" not in r and "bytes" in r][-1]["bytes"].get(sys.argv[2], 0))
PY
}
train_run pp_base 2 --pipeline-model-parallel-size 2 --bf16 \
  && train_run pp_2bit 2 --config "$PIPE" --pipeline-model-parallel-size 2 --bf16 && {
  for k in pp_fwd pp_bwd; do
    base=$(bytes pp_base $k) got=$(bytes pp_2bit $k)
    if awk -v b="$base" -v g="$got" 'BEGIN { exit !(g > 0 && 16 * g / b <= 2.3) }'; then
      pass "pipeline-2bit: $k $got bytes against the bf16 wire's $base ($(awk -v b="$base" -v g="$got" 'BEGIN { printf "%.2f", 16 * g / b }') bits per value)"
    else
      failed "pipeline-2bit: $k $got bytes against the bf16 wire's $base: over 2.3 bits per value"
    fi
  done
}
train_run pp_3bit 2 --config "$PIPE3" --pipeline-model-parallel-size 2 --bf16 && [[ -f $WORK/pp_base.jsonl ]] && {
  for k in pp_fwd pp_bwd; do
    base=$(bytes pp_base $k) got=$(bytes pp_3bit $k)
    awk -v b="$base" -v g="$got" 'BEGIN { exit !(g > 0 && 16 * g / b <= 3.3) }' \
      && pass "pipeline-3bit: $k at $(awk -v b="$base" -v g="$got" 'BEGIN { printf "%.2f", 16 * g / b }') bits per value" \
      || failed "pipeline-3bit: $k $got bytes against the bf16 wire's $base: over 3.3 bits per value"
  done
}
train_run dp_base 2 && train_run dp_32x 2 --config "$DPC" && {
  base=$(bytes dp_base dp) got=$(bytes dp_32x dp)
  if awk -v b="$base" -v g="$got" 'BEGIN { exit !(g > 0 && g < b / 2) }'; then
    pass "dp-32x: DP sends $got bytes at the last iteration against $base uncompressed"
  else
    failed "dp-32x: DP sends $got bytes at the last iteration against $base uncompressed"
  fi
}
# The command line wins over the file (Megatron's order for a YAML config and flags): no warm-up.
train_run dp_override 2 --config "$DPC" --grad-comp-warm-up 0 && {
  first=$("$PY" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print([r for r in rows if "val_loss" not in r and "bytes" in r][0]["bytes"].get("dp", 0))' "$WORK/dp_override.jsonl")
  base=$(bytes dp_base dp)
  awk -v b="$base" -v g="$first" 'BEGIN { exit !(g < b / 2) }' \
    && pass "dp-32x with --grad-comp-warm-up 0 on the command line: compressed from the first iteration ($first bytes)" \
    || failed "dp-32x: --grad-comp-warm-up 0 on the command line did not win over the file ($first bytes at iteration 1)"
}
finish

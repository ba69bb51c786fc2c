#!/usr/bin/env bash
# labels: compression errors
# The block-scaled codecs (mxfp4, nvfp4, int4, int3; compress/block_compressor.h) end to end:
#   1. A NaN gradient that reaches a block codec on the DP link (injected into data-parallel
#      rank 0's first compressed gradient before its encoder runs) decodes to NaN on every DP
#      rank, so the non-finite guard stops the run with its own message at that iteration
#      (one line, non-zero exit, the last good checkpoint kept) instead of the NaN being
#      dropped on the wire. mxfp4 + error feedback, int3 + stochastic rounding, and rotated
#      lloydmax2 + error feedback, topk2 + error feedback, P2 D2.
#   2. The lossless stage (--activation-comp-lossless / --inter-grad-comp-lossless rans,
#      compress/entropy_coder.h) in --bf16 at P2 D2: losses and grad norms bit-identical to the
#      run without it (mxfp4 forward, int3 + LEP backward; also through --debug-host-staging),
#      fewer pipeline bytes sent, and what is counted as saved is the 16-bit wire's bytes
#      minus what was sent, message by message.
#   3. The rounding and lossless flags: refused on a method they do not apply to, without
#      their link's compression, and with an unknown value (one line naming the fix).
# (Byte counts: compression_counts.sh; resume with error feedback: compression_resume.sh;
# the formats against a reference: the unit tests BlockCompressor.*.)
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1  # 4 ranks (train_run) on fewer cores
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 2 --hidden-size 64
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 8 --train-iters 4 --eval-iters 0 --log-interval 1 --seed 5
       --pipeline-model-parallel-size 2)

# 1. A NaN through the DP codec.
nan_through() {
  local name=$1
  shift
  timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" --grad-comp "$@" --debug-inject-nan-dp 2 \
    --save "$WORK/$name" --save-interval 1 > "$WORK/$name.out" 2> "$WORK/$name.err"
  local rc=$?
  if [[ $rc != 0 && $rc != 124 && $(grep -c '^error:' "$WORK/$name.err") == 1 ]] &&
      grep -q "^error: iteration 2: the gradient norm is not finite.*first non-finite gradient: .* on pipeline stage" \
        "$WORK/$name.err" &&
      [[ $(cat "$WORK/$name/latest_checkpointed_iteration.txt") == 1 && ! -e $WORK/$name/iter_0000002 ]]; then
    pass "$name: NaN into the DP codec at iteration 2: exit $rc, checkpoint 1 kept: $(cat "$WORK/$name.err")"
  else
    cat "$WORK/$name.out" "$WORK/$name.err"
    failed "$name: NaN into the DP codec: status $rc"
  fi
}
nan_through mxfp4_ef --grad-comp-method mxfp4 --grad-comp-error-feedback
nan_through int3_stochastic --grad-comp-method int3 --grad-comp-rounding stochastic
# Issue 50: behind a Hadamard rotation the NaN spreads over its piece, which decodes to NaN.
nan_through lloydmax2_rotated --grad-comp-method lloydmax2 --grad-comp-rotation hadamard --grad-comp-error-feedback
# topk2: a NaN sorts above every finite value, so it is sent, and its chunk's two magnitudes go as NaN.
nan_through topk2_ef --grad-comp-method topk2 --grad-comp-topk-density 0.02 --grad-comp-error-feedback

# 2. The lossless stage.
LOSSY=(--bf16 --activation-comp-method mxfp4 --inter-grad-comp --inter-grad-comp-method int3 --use-error-feedback)
RANS=(--activation-comp-lossless rans --inter-grad-comp-lossless rans)
if train_run plain 4 "${LOSSY[@]}" && train_run rans 4 "${LOSSY[@]}" "${RANS[@]}" &&
    train_run rans_staged 4 "${LOSSY[@]}" "${RANS[@]}" --debug-host-staging; then
  compare_losses plain rans 0
  compare_losses plain rans_staged 0
  if out=$("$PY" - "$WORK/plain.jsonl" "$WORK/rans.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
bad = []
for ra, rb in zip(a, b):
    for k in ("pp_fwd", "pp_bwd"):
        sa, sb = ra["bytes"][k], rb["bytes"][k]
        # Saved: the 16-bit wire's bytes less what was sent, in both runs alike.
        wire_a = sa + ra.get("bytes_saved", {}).get(k, 0)
        wire_b = sb + rb.get("bytes_saved", {}).get(k, 0)
        if not (0 < sb < sa and wire_a == wire_b):
            bad.append(f"iter {ra['iter']} {k}: sent {sb} vs {sa}, uncompressed {wire_b} vs {wire_a}")
last = b[-1]["bytes"]
print("; ".join(bad[:3]) if bad else
      f"{len(a)} iterations: pp_fwd {last['pp_fwd']} B (without rans {a[-1]['bytes']['pp_fwd']}), pp_bwd "
      f"{last['pp_bwd']} B (without rans {a[-1]['bytes']['pp_bwd']}); saved = the 16-bit wire - sent")
sys.exit(1 if bad else 0)
PY
  ); then pass "rans: $out"; else failed "rans: $out"; fi
fi

# 3. The rounding and lossless flags.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local rc
  timeout 60 "$BIN" train "${TINY[@]}" --train-iters 1 "$@" > "$WORK/out" 2> "$WORK/err"
  rc=$?
  if [[ $rc != 0 && $rc -lt 124 && $(grep -c . "$WORK/err") == 1 ]] && grep -q "^error: .*$pattern" "$WORK/err"; then
    pass "$name: $(cat "$WORK/err")"
  else
    failed "$name: status $rc: $(cat "$WORK/err")"
  fi
}
expect_error "rounding on int8" "--inter-grad-comp-rounding applies only to the block methods" \
  --inter-grad-comp --inter-grad-comp-method int8 --inter-grad-comp-rounding stochastic
expect_error "rounding without its link" "--grad-comp-rounding has no effect without --grad-comp" \
  --grad-comp-rounding stochastic
expect_error "unknown rounding" "--activation-comp-rounding 'up' is not a rounding; use nearest|stochastic" \
  --activation-comp-method mxfp4 --activation-comp-rounding up
expect_error "lossless on int8" "--inter-grad-comp-lossless codes the block methods' wires" \
  --inter-grad-comp --inter-grad-comp-method int8 --inter-grad-comp-lossless rans
expect_error "unknown lossless" "--activation-comp-lossless 'zstd' is not a lossless coding; use none|rans" \
  --activation-comp-method mxfp4 --activation-comp-lossless zstd
expect_error "DiLoCo rounding on int8" "--diloco-outer-comp-rounding applies only to" \
  --diloco-inner-steps 2 --diloco-outer-comp-method int8 --diloco-outer-comp-rounding stochastic
finish

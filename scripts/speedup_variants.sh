# The variants of the speedup benchmark, defined once for scripts/bench-speedup.sh
# (emulated cluster) and scripts/validate-planner.sh --generate (local runs).
# Source this file, then `speedup_variants P` (P = pipeline stages) sets
#   VARIANTS  the names, in the benchmark's order
#   FLAGS     name -> the train flags it adds to the model's
# nocomm is the baseline's flags; the benchmark runs it on unshaped links.
speedup_variants() {
  local P=$1
  local cb="--inter-grad-comp --inter-grad-comp-rank 16 --use-error-feedback --inter-grad-comp-epilogue-only"
  local dpc="--grad-comp --grad-comp-rank 16 --use-error-feedback --grad-comp-warm-up 0.1"
  VARIANTS=(baseline dp_powersgd cb_lep_ec fe full nocomm)
  # SC: DP compression on every stage but the last, whose all-reduce can hide behind
  # the earlier stages' cool-down (the prototype's k = 3 for P = 4).
  declare -gA FLAGS=(
    [baseline]=""
    [dp_powersgd]="$dpc"
    [cb_lep_ec]="$cb"
    [fe]="$cb --emb-comm-opt"
    [full]="$cb --emb-comm-opt $dpc --selective-grad-comp-way $((P > 1 ? P - 1 : 1))"
    [nocomm]=""
    # Not in the default list (OCC_VARIANTS="baseline dp_powersgd_distopt dp_powersgd_overlap"): DP-only
    # PowerSGD with the distributed optimizer, its parameter all-gather after the update or beside the
    # next forward (--overlap-param-gather).
    [dp_powersgd_distopt]="$dpc --use-distributed-optimizer"
    [dp_powersgd_overlap]="$dpc --use-distributed-optimizer --overlap-param-gather"
    # DiLoCo (issue 34; not in the default list: OCC_VARIANTS="baseline diloco_h8 ..."), the
    # settings of scripts/experiment-diloco.sh.
    [pp_int8]="--activation-comp-method int8 --inter-grad-comp --inter-grad-comp-method int8"
    # The block-scaled codecs on both pipeline links (issue 40; not in the default list), with LEP on
    # the backward one, and the same rANS-coded on the host (lossless: the same training).
    [pp_mxfp4_lep]="--activation-comp-method mxfp4 --inter-grad-comp --inter-grad-comp-method mxfp4 --use-error-feedback"
    [pp_mxfp4_lep_rans]="--activation-comp-method mxfp4 --inter-grad-comp --inter-grad-comp-method mxfp4 --use-error-feedback --activation-comp-lossless rans --inter-grad-comp-lossless rans"
    [pp_int3_lep]="--activation-comp-method int3 --inter-grad-comp --inter-grad-comp-method int3 --use-error-feedback"
    [diloco_h8]="--diloco-inner-steps 8"
    [diloco_h32]="--diloco-inner-steps 32"
    [streaming_int8]="--diloco-inner-steps 8 --diloco-fragments 3 --diloco-overlap-steps 2 --diloco-mixing 0.5 --diloco-outer-comp-method int8"
    [diloco_h8_pp_int8]="--diloco-inner-steps 8 --activation-comp-method int8 --inter-grad-comp --inter-grad-comp-method int8"
  )
}

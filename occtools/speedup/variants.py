"""The variants of the speedup benchmark, defined once for `speedup` (emulated cluster),
`diloco-speedup` and `validate-planner --generate` (local runs): the train flags each adds to
the model's. nocomm is the baseline's flags; the benchmark runs it on unshaped links."""

DEFAULT = ["baseline", "dp_powersgd", "cb_lep_ec", "fe", "full", "nocomm"]
CB = "--inter-grad-comp --inter-grad-comp-rank 16 --use-error-feedback --inter-grad-comp-epilogue-only"
DPC = "--grad-comp --grad-comp-rank 16 --use-error-feedback --grad-comp-warm-up 0.1"
PP_INT8 = "--activation-comp-method int8 --inter-grad-comp --inter-grad-comp-method int8"
PP_MXFP4 = "--activation-comp-method mxfp4 --inter-grad-comp --inter-grad-comp-method mxfp4"
RANS = "--activation-comp-lossless rans --inter-grad-comp-lossless rans"


def flags(pipeline):
    """{variant: its train flags (a string)} for a pipeline of PIPELINE stages."""
    return {
        "baseline": "",
        "dp_powersgd": DPC,
        "cb_lep_ec": CB,
        "fe": f"{CB} --emb-comm-opt",
        # SC: DP compression on every stage but the last, whose all-reduce can hide behind the
        # earlier stages' cool-down (the prototype's k = 3 for P = 4).
        "full": f"{CB} --emb-comm-opt {DPC} --selective-grad-comp-way {pipeline - 1 if pipeline > 1 else 1}",
        "nocomm": "",
        # Not in the default list: DP-only PowerSGD with the distributed optimizer, its parameter
        # all-gather after the update or beside the next forward (--overlap-param-gather).
        "dp_powersgd_distopt": f"{DPC} --use-distributed-optimizer",
        "dp_powersgd_overlap": f"{DPC} --use-distributed-optimizer --overlap-param-gather",
        # DiLoCo (issue 34; not in the default list): the settings of `diloco-quality`.
        "pp_int8": PP_INT8,
        # The block-scaled codecs on both pipeline links (issue 40; not in the default list), with LEP
        # on the backward one, and the same rANS-coded on the host (lossless: the same training).
        "pp_mxfp4_lep": f"{PP_MXFP4} --use-error-feedback",
        "pp_mxfp4_lep_rans": f"{PP_MXFP4} --use-error-feedback {RANS}",
        "pp_int3_lep": "--activation-comp-method int3 --inter-grad-comp --inter-grad-comp-method int3 --use-error-feedback",
        "diloco_h8": "--diloco-inner-steps 8",
        "diloco_h32": "--diloco-inner-steps 32",
        "streaming_int8": "--diloco-inner-steps 8 --diloco-fragments 3 --diloco-overlap-steps 2 --diloco-mixing 0.5 "
                          "--diloco-outer-comp-method int8",
        "diloco_h8_pp_int8": f"--diloco-inner-steps 8 {PP_INT8}",
    }

"""The compressor sweep's variants, defined once: name, label, kind, the setting of each link class
and the train flags.

A link setting is "-" (uncompressed) or METHOD[:PARAM][+lep][+decayB][+ec][+ef][+sr][+rans][+scK][+wuF]
(PARAM: PowerSGD rank, topk fraction, topk2 density or adaptive's high fraction; rot: the Hadamard
rotation in front of a block codec; B: LEP's decay; sr: stochastic rounding; rans: the lossless stage
--*-comp-lossless rans, the same training with fewer bytes; F: DP warm-up fraction); kind is
baseline, single (one link class), combo or paper. DP compression always runs with error feedback
and a 10 % uncompressed warm-up unless the variant says "no EF"; CB and activation methods plain
(no LEP) unless it says LEP (the paper's configurations: --use-error-feedback, LEP and DP error
feedback at once); the block methods round to nearest unless it says SR."""

CB = "--inter-grad-comp"
DPC = "--grad-comp --grad-comp-error-feedback --grad-comp-warm-up 0.1"
DPN = "--grad-comp --grad-comp-warm-up 0.1"  # without error feedback
LEP = "--use-error-feedback"
RANS = "--activation-comp-lossless rans --inter-grad-comp-lossless rans"

# name | label | kind | pp_fwd | pp_bwd | dp | flags
TABLE = [
    f"baseline|baseline|baseline|-|-|-|",
    f"fwd_int8|pp_fwd int8|single|int8|-|-|--activation-comp-method int8",
    f"bwd_int8|pp_bwd int8|single|-|int8|-|{CB} --inter-grad-comp-method int8",
    f"dp_int8|dp int8 + EF|single|-|-|int8+ef+wu0.1|{DPC} --grad-comp-method int8",
    f"pp_int8|pp_fwd int8 + pp_bwd int8|combo|int8|int8|-|--activation-comp-method int8 {CB} --inter-grad-comp-method int8",
    f"bwd_powersgd16|pp_bwd PowerSGD r16 (CB)|single|-|powersgd:16|-|{CB} --inter-grad-comp-rank 16",
    f"dp_powersgd16|dp PowerSGD r16 + EF|single|-|-|powersgd:16+ef+wu0.1|{DPC} --grad-comp-rank 16",
    f"bwd_sign_lep|pp_bwd sign + LEP|single|-|sign+lep|-|{CB} --inter-grad-comp-method sign --use-error-feedback",
    f"dp_sign|dp sign + EF|single|-|-|sign+ef+wu0.1|{DPC} --grad-comp-method sign",
    f"dp_topk1|dp topk 1% + EF|single|-|-|topk:0.01+ef+wu0.1|{DPC} --grad-comp-method topk --grad-comp-topk-fraction 0.01",
    f"paper_full|Optimus-CC (CB r16+LEP+EC, FE, DP r16+SC)|paper|-|powersgd:16+lep+ec|powersgd:16+ef+sc1+wu0.1|"
    f"{CB} --inter-grad-comp-rank 16 --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt {DPC} "
    f"--grad-comp-rank 16 --selective-grad-comp-way 1",
    f"fwd_topk25|pp_fwd topk 25%|single|topk:0.25|-|-|--activation-comp-method topk --activation-comp-topk-fraction 0.25",
    f"bwd_topk10_lep|pp_bwd topk 10% + LEP|single|-|topk:0.1+lep|-|{CB} --inter-grad-comp-method topk "
    f"--inter-grad-comp-topk-fraction 0.1 --use-error-feedback",
    f"bwd_fp8e5m2|pp_bwd fp8-e5m2|single|-|fp8-e5m2|-|{CB} --inter-grad-comp-method fp8-e5m2",
    f"fwd_fp8e4m3|pp_fwd fp8-e4m3|single|fp8-e4m3|-|-|--activation-comp-method fp8-e4m3",
    f"dp_fp8e5m2|dp fp8-e5m2 + EF|single|-|-|fp8-e5m2+ef+wu0.1|{DPC} --grad-comp-method fp8-e5m2",
    f"pp_int8_sign_lep|pp_fwd int8 + pp_bwd sign + LEP|combo|int8|sign+lep|-|--activation-comp-method int8 {CB} "
    f"--inter-grad-comp-method sign --use-error-feedback",
    f"bwd_sign|pp_bwd sign|single|-|sign|-|{CB} --inter-grad-comp-method sign",
    f"pp_int8_psgd|pp_fwd int8 + pp_bwd PowerSGD r16|combo|int8|powersgd:16|-|--activation-comp-method int8 {CB} "
    f"--inter-grad-comp-rank 16",
    f"bwd_topk10|pp_bwd topk 10%|single|-|topk:0.1|-|{CB} --inter-grad-comp-method topk --inter-grad-comp-topk-fraction 0.1",
    f"pp_fp8|pp_fwd fp8-e4m3 + pp_bwd fp8-e5m2|combo|fp8-e4m3|fp8-e5m2|-|--activation-comp-method fp8-e4m3 {CB} "
    f"--inter-grad-comp-method fp8-e5m2",
    f"pp_int8_sign|pp_fwd int8 + pp_bwd sign|combo|int8|sign|-|--activation-comp-method int8 {CB} --inter-grad-comp-method sign",
    f"bwd_fp8e4m3|pp_bwd fp8-e4m3|single|-|fp8-e4m3|-|{CB} --inter-grad-comp-method fp8-e4m3",
    f"dp_fp8e4m3|dp fp8-e4m3 + EF|single|-|-|fp8-e4m3+ef+wu0.1|{DPC} --grad-comp-method fp8-e4m3",
    f"all_int8|int8 on every link (EF on dp)|combo|int8|int8|int8+ef+wu0.1|--activation-comp-method int8 {CB} "
    f"--inter-grad-comp-method int8 {DPC} --grad-comp-method int8",
    f"paper_cb_lep|CB r16 + LEP|paper|-|powersgd:16+lep|-|{CB} --inter-grad-comp-rank 16 --use-error-feedback",
]
# The block-scaled codecs (issue 40): each on both pipeline links (with and without LEP on
# pp_bwd), on each link class alone, and on DP with and without error feedback.
for m in ("int3", "mxfp4", "nvfp4", "int4"):
    TABLE += [
        f"pp_{m}_lep|pp_fwd {m} + pp_bwd {m} + LEP|combo|{m}|{m}+lep|-|--activation-comp-method {m} {CB} "
        f"--inter-grad-comp-method {m} {LEP}",
        f"pp_{m}|pp_fwd {m} + pp_bwd {m}|combo|{m}|{m}|-|--activation-comp-method {m} {CB} --inter-grad-comp-method {m}",
        f"fwd_{m}|pp_fwd {m}|single|{m}|-|-|--activation-comp-method {m}",
        f"bwd_{m}_lep|pp_bwd {m} + LEP|single|-|{m}+lep|-|{CB} --inter-grad-comp-method {m} {LEP}",
        f"bwd_{m}|pp_bwd {m}|single|-|{m}|-|{CB} --inter-grad-comp-method {m}",
        f"dp_{m}|dp {m} + EF|single|-|-|{m}+ef+wu0.1|{DPC} --grad-comp-method {m}",
        f"dp_{m}_noef|dp {m} (no EF)|single|-|-|{m}+wu0.1|{DPN} --grad-comp-method {m}",
    ]
TABLE += [
    f"pp_mxfp4_int3_lep|pp_fwd mxfp4 + pp_bwd int3 + LEP|combo|mxfp4|int3+lep|-|--activation-comp-method mxfp4 {CB} "
    f"--inter-grad-comp-method int3 {LEP}",
    f"bwd_int3_sr|pp_bwd int3 SR|single|-|int3+sr|-|{CB} --inter-grad-comp-method int3 --inter-grad-comp-rounding stochastic",
    f"dp_mxfp4_sr_noef|dp mxfp4 SR (no EF)|single|-|-|mxfp4+sr+wu0.1|{DPN} --grad-comp-method mxfp4 "
    f"--grad-comp-rounding stochastic",
]
# Below 4 bits without another rounding: the block codes entropy-coded on the host (rANS).
for m in ("mxfp4", "int4", "int3"):
    TABLE.append(f"pp_{m}_lep_rans|pp_fwd {m} + pp_bwd {m} + LEP, rANS-coded|combo|{m}+rans|{m}+lep+rans|-|"
                 f"--activation-comp-method {m} {CB} --inter-grad-comp-method {m} {LEP} {RANS}")
TABLE.append(f"pp_mxfp4_int3_lep_rans|pp_fwd mxfp4 + pp_bwd int3 + LEP, rANS-coded|combo|mxfp4+rans|int3+lep+rans|-|"
             f"--activation-comp-method mxfp4 {CB} --inter-grad-comp-method int3 {LEP} {RANS}")

# Issue 50: 2- and 3-bit codes behind a randomized Hadamard rotation (rANS on the pipeline links),
# the adaptive codec, and DP at >= 32x of the fp32 wire (low-rank PowerSGD, topk2, rotated int2).
ROTF = "--activation-comp-rotation hadamard"
ROTB = "--inter-grad-comp-rotation hadamard"
RANSF, RANSB = "--activation-comp-lossless rans", "--inter-grad-comp-lossless rans"
CHECK = "--check-lep"  # LEP's premises per iteration in the metrics (lep_error_ratio, lep_delta_ratio, lep_cosine)
for short, m in (("lm2", "lloydmax2"), ("int2", "int2"), ("lm3", "lloydmax3")):
    TABLE += [
        f"pp_{short}_rot_rans|pp_fwd {m} + pp_bwd {m}, rotated, rANS|combo|{m}+rot+rans|{m}+rot+rans|-|"
        f"--activation-comp-method {m} {ROTF} {CB} --inter-grad-comp-method {m} {ROTB} {RANS}",
        f"fwd_{short}_rot_rans|pp_fwd {m}, rotated, rANS|single|{m}+rot+rans|-|-|"
        f"--activation-comp-method {m} {ROTF} {RANSF}",
        f"bwd_{short}_rot_rans|pp_bwd {m}, rotated, rANS|single|-|{m}+rot+rans|-|"
        f"{CB} --inter-grad-comp-method {m} {ROTB} {RANSB}",
        f"bwd_{short}_rot_lep_rans|pp_bwd {m} + LEP, rotated, rANS|single|-|{m}+rot+lep+rans|-|"
        f"{CB} --inter-grad-comp-method {m} {ROTB} {LEP} {RANSB} {CHECK}",
    ]
# Item 4: LEP with a decay (the residual halved before it joins the next micro-batch's gradient).
TABLE.append(f"bwd_lm2_rot_lepdecay_rans|pp_bwd lloydmax2 + LEP decay 0.5, rotated, rANS|single|-|"
             f"lloydmax2+rot+lep+decay0.5+rans|-|{CB} --inter-grad-comp-method lloydmax2 {ROTB} {LEP} "
             f"--inter-grad-comp-lep-decay 0.5 {RANSB} {CHECK}")
# Item 4: why LEP hurts with block codecs, measured by --check-lep beside the loss (it only observes).
TABLE.append(f"bwd_mxfp4_lep_check|pp_bwd mxfp4 + LEP (--check-lep)|single|-|mxfp4+lep|-|"
             f"{CB} --inter-grad-comp-method mxfp4 {LEP} {CHECK}")
TABLE += [
    f"pp_lm2_int2_rot_rans|pp_fwd lloydmax2 + pp_bwd int2, rotated, rANS|combo|lloydmax2+rot+rans|int2+rot+rans|-|"
    f"--activation-comp-method lloydmax2 {ROTF} {CB} --inter-grad-comp-method int2 {ROTB} {RANS}",
    f"pp_lm3_int2_rot_rans|pp_fwd lloydmax3 + pp_bwd int2, rotated, rANS|combo|lloydmax3+rot+rans|int2+rot+rans|-|"
    f"--activation-comp-method lloydmax3 {ROTF} {CB} --inter-grad-comp-method int2 {ROTB} {RANS}",
    f"pp_adaptive_rot_rans|pp_fwd + pp_bwd adaptive (F 0.0625), rotated, rANS|combo|adaptive:0.0625+rot+rans|"
    f"adaptive:0.0625+rot+rans|-|--activation-comp-method adaptive --activation-comp-adaptive-high-fraction 0.0625 "
    f"{ROTF} {CB} --inter-grad-comp-method adaptive --inter-grad-comp-adaptive-high-fraction 0.0625 {ROTB} {RANS}",
    f"dp_powersgd4|dp PowerSGD r4 + EF|single|-|-|powersgd:4+ef+wu0.1|{DPC} --grad-comp-rank 4",
    f"dp_powersgd2|dp PowerSGD r2 + EF|single|-|-|powersgd:2+ef+wu0.1|{DPC} --grad-comp-rank 2",
    f"dp_powersgd8|dp PowerSGD r8 + EF|single|-|-|powersgd:8+ef+wu0.1|{DPC} --grad-comp-rank 8",
    f"dp_topk2|dp topk2 2% + EF|single|-|-|topk2:0.02+ef+wu0.1|{DPC} --grad-comp-method topk2 "
    f"--grad-comp-topk-density 0.02",
    f"dp_int2_rot|dp int2 rotated + EF|single|-|-|int2+rot+ef+wu0.1|{DPC} --grad-comp-method int2 "
    f"--grad-comp-rotation hadamard",
    f"dp_lm2_rot|dp lloydmax2 rotated + EF|single|-|-|lloydmax2+rot+ef+wu0.1|{DPC} --grad-comp-method lloydmax2 "
    f"--grad-comp-rotation hadamard",
]


def setting(text):
    """A link setting's text -> its JSON form (None: uncompressed), as compressors.json records it."""
    if text == "-":
        return None
    head, *extras = text.split("+")
    method, _, param = head.partition(":")
    s = {"method": method}
    if param:
        key = {"powersgd": "rank", "topk2": "density", "adaptive": "high_fraction"}.get(method, "fraction")
        s[key] = int(param) if method == "powersgd" else float(param)
    for e in extras:
        if e.startswith("sc"):
            s["sc"] = int(e[2:])
        elif e.startswith("decay"):
            s["lep_decay"] = float(e[5:])
        elif e.startswith("wu"):
            s["warmup"] = float(e[2:])
        else:
            s[{"ef": "error_feedback", "sr": "stochastic", "rot": "rotation"}.get(e, e)] = True
    if s.pop("rans", False):
        s["lossless"] = "rans"
    if s.pop("rotation", False):
        s["rotation"] = "hadamard"
    return s


def all_variants():
    """Every variant, in the sweep's default order: {name, label, kind, paper, flags, links}."""
    out = []
    for line in TABLE:
        name, label, kind, fwd, bwd, dp, flags = line.split("|")
        out.append({"name": name, "label": label, "kind": kind, "paper": kind == "paper", "flags": flags.strip(),
                    "links": {"pp_fwd": setting(fwd), "pp_bwd": setting(bwd), "dp": setting(dp)}})
    return out


def manifest(iters, seeds, precision, command, corpus="kjv"):
    """OUT/variants.json: what the report reads besides the runs."""
    return {"description": f"compressor sweep on the quality model: 5.8 M-parameter GPT (6 layers, hidden 256, "
                           f"seq 128), P2 D2 on 4 ranks, global batch 32, {iters} iterations, {precision}, the same "
                           f"tokens for every variant" + ("" if corpus == "kjv" else f", corpus {corpus}"),
            "precision": precision, "corpus": corpus,
            "command": command, "iters": iters, "seeds": [int(s) for s in seeds], "variants": all_variants()}

"""The benchmark matrix's verdicts (issue 29): one run's numbers (tokens/s, MFU from the
model shape, peak memory), the op profile, the largest micro-batch that fits, and the
speed targets against PyTorch in the same call. Standard library only.
"""

import json
import os

from occtools.gpu_check.verdicts import FAIL, NOTHING, PASS, Verdict, verdict

PEAK_TFLOPS = 989.0  # H100/H200 SXM dense bf16 (datasheet), the MFU denominator
MIB = 2**20
# The fixed part of a step's memory per parameter that both engines hold at least: fp32
# weights, fp32 gradients and AdamW's two fp32 moments. A lower bound (ours adds 16-bit
# copies, PyTorch its allocator's slack), so the per-sample part derived from it is an upper
# bound and the micro-batch chosen errs towards fitting.
FIXED_BYTES_PER_PARAM = 16

MFU_FORMULA = ("MFU = (6*N*tokens + 12*L*B*T^2*C) FLOP per step / step time / 989 TFLOP/s; N = 12*L*C^2 + V*C "
               "(the layers' matrix weights + the tied LM head over the padded vocabulary V), tokens = B*T; "
               "12*L*B*T^2*C: attention's QK^T and PV over the full T x T, forward + backward")


def model_flops(m):
    """FLOPs of one training step from the model shape (MFU_FORMULA), N and the tokens."""
    L, C, T, B = (int(m[k]) for k in ("num_layers", "hidden_size", "seq_length", "micro_batch_size"))
    V = int(m.get("padded_vocab_size") or m["vocab_size"])
    n = 12 * L * C * C + V * C
    return 6.0 * n * B * T + 12.0 * L * B * T * T * C, n, B * T


def bench_numbers(j, peak_tflops=PEAK_TFLOPS):
    """(summary, numbers) of an `optimus-cc bench --json` or bench/torch_step.py --json result."""
    best = float(j["best_ms"])
    med = float(j.get("median_ms") or best)
    flops, n, tokens = model_flops(j["model"])
    pk = j.get("peak_device_mib", j.get("peak_gpu_mib"))
    out = {"best_ms": best, "median_ms": med, "tokens_per_step": tokens,
           "tokens_per_s": tokens / (best * 1e-3), "tokens_per_s_median": tokens / (med * 1e-3),
           "flops_per_step": flops, "n_matrix_params": n, "flops_per_step_reported": j.get("flops_per_step"),
           "tflops": flops / (best * 1e-3) * 1e-12, "mfu": flops / (best * 1e-3) / (peak_tflops * 1e12),
           "mfu_median": flops / (med * 1e-3) / (peak_tflops * 1e12), "mfu_formula": MFU_FORMULA,
           "peak_tflops": peak_tflops, "parameters": j.get("model", {}).get("parameters"),
           "model": j.get("model"), "peak_device_mib": pk, "precision": j.get("precision", j.get("dtype")),
           "recompute": j.get("recompute"), "compile_s": j.get("compile_s"), "device": j.get("device"),
           "gpu": j.get("gpu")}
    rate = f"{out['tflops']:.1f} TFLOP/s" if out["tflops"] >= 1 else f"{out['tflops'] * 1e3:.2f} GFLOP/s"
    s = (f"{out['tokens_per_s']:.0f} tokens/s best, {out['tokens_per_s_median']:.0f} median; {best:.1f} ms/step; "
         f"{rate}; MFU {out['mfu']:.2%} (median {out['mfu_median']:.2%}) of {peak_tflops:g} TFLOP/s")
    s += f"; peak {float(pk):.0f} MiB in device tensors" if pk is not None else "; peak memory not reported"
    if out["compile_s"]:
        s += f"; warm-up incl. compile {float(out['compile_s']):.0f} s"
    if out["precision"]:
        s += f"; {out['precision']}" + (f", recompute {out['recompute']}" if out["recompute"] else "")
    return s, out


def bench(result_json, expect_device=None, expect_precision=None, peak_tflops=PEAK_TFLOPS):
    """A benchmark run: a valid timing, its own FLOP count equal to the model shape's, and (ours)
    the device and precision asked for."""
    import math
    with open(result_json) as f:
        j = json.load(f)
    s, nums = bench_numbers(j, peak_tflops)
    problems = []
    if not (math.isfinite(nums["tokens_per_s"]) and nums["tokens_per_s"] > 0):
        problems.append("no valid timing")
    rep = nums["flops_per_step_reported"]
    if rep is not None and abs(float(rep) - nums["flops_per_step"]) > 1e-6 * nums["flops_per_step"]:
        problems.append(f"the run's flops_per_step {float(rep):.6g} != the model shape's {nums['flops_per_step']:.6g}")
    dev = str(nums.get("device") or "")
    if expect_device and not dev.lower().startswith(expect_device):
        problems.append(f"ran on '{dev}', not {expect_device}")
    if expect_precision and nums["precision"] != expect_precision:
        problems.append(f"precision '{nums['precision']}', not {expect_precision}")
    return verdict(s, nums, True, problems)


# ---------------------------------------------------------------------------- op profile

# Backend ops by family, for the profile's breakdown (first match wins).
OP_FAMILIES = [
    ("matmul (linear layers)", ("linear_",)),
    ("attention", ("attention_",)),
    ("cross-entropy", ("cross_entropy", "row_max", "row_sum_exp", "target_logit")),
    ("layernorm", ("layernorm_",)),
    ("GeLU / bias / dropout / residual", ("gelu_", "dropout", "bias_dropout_add")),
    ("rounding to bf16/fp16", ("round_to_precision",)),
    ("optimizer, norm, clipping", ("adamw", "sum_squares", "scale")),
    ("embeddings", ("embedding_", "position_")),
]


def op_breakdown(j):
    """bench --op-profile's JSON -> (ms per step in backend calls, [(ms, family)] largest first,
    every op {op, calls_per_step, ms_per_step, share, tflops} largest first)."""
    ops = j.get("op_profile") or []
    total = sum(o["ms_per_step"] for o in ops)
    fam = {}
    for o in ops:
        family = next((f for f, keys in OP_FAMILIES if any(k in o["op"] for k in keys)), "other")
        fam[family] = fam.get(family, 0.0) + o["ms_per_step"]
    shares = sorted(((ms, f) for f, ms in fam.items()), reverse=True)
    every = sorted((dict(o, share=o["ms_per_step"] / total if total > 0 else 0.0) for o in ops),
                   key=lambda o: -o["ms_per_step"])
    return total, shares, every


def op_line(o):
    """`name 12.3 ms (20%) at 150 TFLOP/s`."""
    return f"{o['op']} {o['ms_per_step']:.1f} ms ({o['share']:.0%})" + (f" at {o['tflops']:.3g} TFLOP/s" if o.get("tflops") else "")


def op_profile(result_json):
    """The share of the step per op family and every op's share (the report's table lists them)."""
    with open(result_json) as f:
        j = json.load(f)
    total, shares, every = op_breakdown(j)
    if not every:
        return Verdict(FAIL, "the bench JSON has no op_profile", {})
    nums = {"ms_per_step_in_ops": total, "families_ms": {f: round(ms, 3) for ms, f in shares},
            "families_share": {f: ms / total for ms, f in shares}, "top": every[:8], "ops": every,
            "step_ms_unprofiled": j.get("best_ms"), "micro_batch_size": (j.get("model") or {}).get("micro_batch_size")}
    s = (f"{total:.1f} ms/step in backend calls (unprofiled step {j.get('best_ms', 0):.1f} ms): "
         + ", ".join(f"{f} {100 * ms / total:.0f}%" for ms, f in shares[:6]) + "; top: "
         + "; ".join(op_line(o) for o in every[:5]) + f"; {len(every)} ops in the report's table")
    return Verdict(PASS, s, nums)


# ---------------------------------------------------------------------------- fit-micro-batch

def device_total_mib(j, gpu_mib=None, override=None):
    """The device's total memory (MiB) and where it came from."""
    if override:
        return float(override), "--total-mib"
    if j.get("device_total_mib"):
        return float(j["device_total_mib"]), "the run's device_total_mib"
    if str(j.get("device") or "").lower().startswith("cuda"):
        if gpu_mib:
            return float(gpu_mib), "torch.cuda.get_device_properties(0).total_memory"
        raise ValueError("the GPU's total memory is unknown: the run's JSON has no device_total_mib and the probe no gpu_mib")
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024.0, "host memory (/proc/meminfo MemTotal)"
    raise ValueError("no MemTotal in /proc/meminfo")


def run_peak_mib(j):
    """The run's peak (MiB) and what it counts: the engine's device tensors or, where larger, what
    PyTorch's allocator reserved; the CPU stand-in's PyTorch reports its process's peak RSS."""
    cands = [(float(j[k]), k) for k in ("peak_device_mib", "peak_reserved_mib") if j.get(k)]
    if cands:
        return max(cands)
    if j.get("peak_host_rss_mib"):
        return float(j["peak_host_rss_mib"]), "peak_host_rss_mib"
    raise ValueError("the run's JSON reports no peak memory (peak_device_mib)")


def round_micro_batch(k):
    """A multiple of 8 from 8 on, a power of two below."""
    if k >= 8:
        return k // 8 * 8
    return 1 << (k.bit_length() - 1) if k >= 1 else 0


def fit_micro_batch(result_json, cap=64, headroom=0.1, gpu_mib=None, total_mib=None):
    """The largest micro-batch predicted to fit, from one run at micro-batch `base`: peak = fixed
    + base * per_sample, fixed >= 16 B per parameter; the device's memory less `headroom`; a
    multiple of 8, at most `cap`. numbers['micro_batch'] is what to run (the base where nothing
    larger fits: code NOTHING)."""
    with open(result_json) as f:
        j = json.load(f)
    m = j.get("model") or {}
    base, params = int(m["micro_batch_size"]), int(m["parameters"])
    peak_mib, peak_what = run_peak_mib(j)
    total, total_what = device_total_mib(j, gpu_mib, total_mib)
    fixed = min(FIXED_BYTES_PER_PARAM * params / MIB, peak_mib)
    per = (peak_mib - fixed) / base
    if per <= 0:  # the whole peak is the fixed part's bound: count it all per sample
        fixed, per = 0.0, peak_mib / base
    usable = total * (1.0 - headroom)
    fit = int((usable - fixed) // per) if per > 0 else cap
    k = round_micro_batch(min(cap, fit))
    nums = {"micro_batch": max(k, base), "fit_unrounded": fit, "cap": cap, "base_micro_batch": base,
            "peak_mib": peak_mib, "fixed_mib_lower_bound": fixed, "per_sample_mib": per, "usable_mib": usable,
            "total_mib": total, "headroom": headroom, "predicted_peak_mib": fixed + k * per,
            "peak_from": peak_what, "total_from": total_what, "parameters": params}
    how = (f"from the micro-batch-{base} run: peak {peak_mib:.0f} MiB ({peak_what}) = fixed >= {fixed:.0f} MiB "
           f"({FIXED_BYTES_PER_PARAM} B x {params} parameters: fp32 weights, gradients, AdamW moments) + "
           f"{per:.1f} MiB per sample; {usable:.0f} MiB usable ({total:.0f} MiB, {total_what}, less {headroom:.0%}) "
           f"fits {fit}")
    if k <= base:
        return Verdict(NOTHING, f"micro-batch {base} is already the largest that fits ({how})", nums)
    return Verdict(PASS, f"largest micro-batch that fits: {k} (capped at {cap}, a multiple of 8 or a power of two; "
                         f"predicted peak {nums['predicted_peak_mib']:.0f} MiB; {how})", nums)


# ---------------------------------------------------------------------------- speed targets

SHAPE_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "padded_vocab_size")
TARGETS = {"min_ratio": 1.0, "goal_ratio": 1.1, "min_mfu": 0.35, "goal_mfu": 0.40, "mfu_size": "medium",
           "max_mem_ratio": 1.1}


def fmt_tps(x):
    return f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def speed_targets(statuses, work, size, suffix="", report_only=False, targets=None, peak_tflops=PEAK_TFLOPS):
    """Our bench vs bench/torch_step.py at one size (issue 29): tokens/s >= 1.0x torch.compile's
    (goal 1.1x; eager reported), MFU >= 35 % at medium (goal 40 %), peak device memory <= 1.1x at
    the same micro-batch; with suffix _mbmax each engine at its own largest micro-batch.
    statuses: {result name: (status, summary)} of the call; work: the folder of the runs' NAME.json.
    A missed target names what holds the step back (profile_occ_SIZE). NOTHING when a run it needs
    was skipped; report_only (the CPU stand-in): the numbers, no verdict on them."""
    t = dict(TARGETS, **(targets or {}))
    names = {"ours": f"bench_occ_{size}{suffix}", "compile": f"bench_torch_{size}_compile{suffix}",
             "eager": f"bench_torch_{size}{suffix}"}
    runs, absent = {}, {}
    for role, name in names.items():
        st = statuses.get(name)
        path = os.path.join(work, name + ".json")
        if st and st[0] == "PASS" and os.path.exists(path):
            with open(path) as f:
                runs[role] = bench_numbers(json.load(f), peak_tflops)[1]
        else:
            absent[role] = (st[0] if st else "NOT-RUN", f"{name} " + (f"{st[0]}: {st[1][:160]}" if st else "did not run"))
    ref, notes = "compile", []
    if "compile" not in runs and report_only and "eager" in runs:
        ref = "eager"
        notes.append(f"no torch.compile run ({absent['compile'][1]}): eager stands in")
    missing = [r for r in ("ours", ref) if r not in runs]
    if missing:
        why = "; ".join(absent[r][1] for r in missing)
        if any(absent[r][0] == "FAIL" for r in missing):
            return Verdict(FAIL, f"no comparison: {why}", {"absent": absent})
        return Verdict(NOTHING, f"not compared: {why}", {"absent": absent})

    o, r = runs["ours"], runs[ref]
    problems, missed, verdicts = [], [], {}
    shapes = {role: tuple((x.get("model") or {}).get(k) for k in SHAPE_KEYS) for role, x in runs.items()}
    for role in runs:
        if shapes[role] != shapes["ours"]:
            problems.append(f"{names[role]} ran another model {shapes[role]} than ours {shapes['ours']} ({', '.join(SHAPE_KEYS)})")
    mb = {role: int((x.get("model") or {}).get("micro_batch_size", 0)) for role, x in runs.items()}
    if not suffix and mb["ours"] != mb[ref]:
        problems.append(f"micro-batches differ: ours {mb['ours']}, {ref} {mb[ref]}")
    label = {"compile": "torch.compile", "eager": "PyTorch eager"}
    ratio = o["tokens_per_s"] / r["tokens_per_s"]
    verdicts["tokens_per_s"] = ratio >= t["min_ratio"]
    mbs = f"{mb['ours']}" if mb["ours"] == mb[ref] else f"{mb['ours']} (ours) / {mb[ref]} ({ref})"
    s = (f"{size}, micro-batch {mbs}: tokens/s {fmt_tps(o['tokens_per_s'])} vs {label[ref]} {fmt_tps(r['tokens_per_s'])}"
         f" = {ratio:.2f}x (target >= {t['min_ratio']:.1f}x, goal {t['goal_ratio']:.1f}x: "
         f"{'met' if ratio >= t['goal_ratio'] else 'not met'})")
    if not verdicts["tokens_per_s"]:
        missed.append(f"tokens/s {ratio:.2f}x of {label[ref]}'s < {t['min_ratio']:.1f}x: the step must take <= "
                      f"{o['best_ms'] * ratio / t['min_ratio']:.1f} ms (now {o['best_ms']:.1f} ms)")
    nums = {"size": size, "suffix": suffix, "reference": ref, "micro_batch": mb, "ratio_vs_reference": ratio,
            "tokens_per_s": {k: x["tokens_per_s"] for k, x in runs.items()}, "mfu": {k: x["mfu"] for k, x in runs.items()},
            "best_ms": {k: x["best_ms"] for k, x in runs.items()},
            "peak_device_mib": {k: x.get("peak_device_mib") for k, x in runs.items()},
            "targets": t, "report_only": report_only, "absent": absent}
    if "eager" in runs and ref != "eager":
        nums["ratio_vs_eager"] = o["tokens_per_s"] / runs["eager"]["tokens_per_s"]
        s += f", vs eager {fmt_tps(runs['eager']['tokens_per_s'])} = {nums['ratio_vs_eager']:.2f}x"
    s += f"; MFU {o['mfu']:.1%} ({label[ref]} {r['mfu']:.1%})"
    if size == t["mfu_size"]:
        verdicts["mfu"] = o["mfu"] >= t["min_mfu"]
        s += f" (target >= {t['min_mfu']:.0%}, goal {t['goal_mfu']:.0%}: {'met' if o['mfu'] >= t['goal_mfu'] else 'not met'})"
        if not verdicts["mfu"]:
            missed.append(f"MFU {o['mfu']:.1%} < {t['min_mfu']:.0%}")
    po, pr = o.get("peak_device_mib"), r.get("peak_device_mib")
    if po is None or pr is None:
        s += "; peak memory: " + ("ours" if po is None else label[ref]) + " reports none"
        if not report_only:
            problems.append("a run reports no peak device memory")
    elif mb["ours"] != mb[ref]:
        s += f"; peak {float(po):.0f} MiB vs {float(pr):.0f} MiB (other micro-batches: not compared)"
    else:
        mem = float(po) / float(pr)
        nums["mem_ratio"] = mem
        verdicts["memory"] = mem <= t["max_mem_ratio"]
        s += f"; peak {float(po):.0f} vs {float(pr):.0f} MiB = {mem:.2f}x (target <= {t['max_mem_ratio']:.1f}x)"
        if not verdicts["memory"]:
            missed.append(f"peak memory {mem:.2f}x of {label[ref]}'s > {t['max_mem_ratio']:.1f}x")
    nums.update(verdict=verdicts, missed=missed)
    prof = profile_note(size, statuses, work)
    if missed and prof:
        nums["profile"] = prof[1]
        s += "; " + prof[0]
    if notes:
        s += "; " + "; ".join(notes)
    if report_only:
        s = "CPU stand-in, targets reported, not asserted (they are the H200's): " + s
        if missed:
            s += "; off target: " + "; ".join(missed)
        return verdict(s, nums, True, problems)
    if missed:
        s = "MISSED: " + "; ".join(missed) + " -- " + s
    return verdict(s, nums, not missed, problems)


def profile_note(size, statuses, work):
    """What holds the step back, from profile_occ_SIZE: the op families' shares and the top ops
    with their shares and TFLOP/s. (text, numbers) or None."""
    name = f"profile_occ_{size}"
    path = os.path.join(work, name + ".json")
    if statuses.get(name, ("",))[0] != "PASS" or not os.path.exists(path):
        return None
    with open(path) as f:
        j = json.load(f)
    total, shares, every = op_breakdown(j)
    if not every:
        return None
    mb = (j.get("model") or {}).get("micro_batch_size")
    text = (f"holds the step back ({name}, micro-batch {mb}, {total:.1f} ms in backend calls): "
            + ", ".join(f"{f} {ms / total:.0%}" for ms, f in shares[:4])
            + "; top ops: " + "; ".join(op_line(o) for o in every[:5]))
    return text, {"families_share": {f: ms / total for ms, f in shares}, "top": every[:8], "ms_in_ops": total}

"""The benchmark matrix of scripts/gpu-check.sh (issue 29): how large a micro-batch each engine
can take, and the speed targets against PyTorch in the same run. Subcommands of
gpu_check_report.py (which imports this file; the bundle carries both):

    gpu_check_report.py fit-micro-batch RESULT.json [--cap C] [--headroom H] [--probe PROBE.json]
                           [--total-mib M]
    gpu_check_report.py speed-targets --checks CHECKS.tsv --work DIR --size small|medium
                           [--suffix _mbmax] [--report-only] [--min-ratio 1.0] [--goal-ratio 1.1]
                           [--min-mfu 0.35] [--goal-mfu 0.40] [--mfu-size medium]
                           [--max-mem-ratio 1.1] [--peak-tflops P]

Like the other helpers: human-readable lines, then `SUMMARY <one line>` and `NUMBERS <json>`;
exit 0 pass, 1 fail, 2 unreadable input, and 3 for "nothing to do": fit-micro-batch when the
run's micro-batch is already the largest that fits, speed-targets when a run it needs was
skipped (the caller reports SKIP with the summary's reason).
"""

import json
import math
import os

import gpu_check_report as gcr

MIB = 2**20
# The fixed part of a training step's memory, per parameter, that both engines hold at
# least: fp32 weights, fp32 gradients and AdamW's two fp32 moments. A lower bound (ours
# adds 16-bit weight copies, PyTorch its allocator's slack), so the per-sample part derived
# from it is an upper bound and the micro-batch chosen errs towards fitting.
FIXED_BYTES_PER_PARAM = 16


# --------------------------------------------------------------------------- fit-micro-batch

def device_total_mib(j, probe_path, override):
    """The device's total memory (MiB) and where it came from."""
    if override:
        return float(override), "--total-mib"
    if j.get("device_total_mib"):
        return float(j["device_total_mib"]), "the run's device_total_mib"
    if str(j.get("device") or "").lower().startswith("cuda"):
        if probe_path and os.path.exists(probe_path):
            with open(probe_path) as f:
                gpu_mib = json.load(f).get("gpu_mib")
            if gpu_mib:
                return float(gpu_mib), "torch.cuda.get_device_properties(0).total_memory"
        raise ValueError("the GPU's total memory is unknown: the run's JSON has no device_total_mib and --probe "
                         "no gpu_mib")
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024.0, "host memory (/proc/meminfo MemTotal)"
    raise ValueError("no MemTotal in /proc/meminfo")


def run_peak_mib(j):
    """The run's peak memory (MiB) and what it counts: the engine's device tensors
    (peak_device_mib) or, where larger, what PyTorch's caching allocator reserved; the CPU
    stand-in's PyTorch has no device counter, so its process's peak RSS stands in."""
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


def fit_micro_batch(peak_mib, params, base, total_mib, headroom, cap):
    """The largest micro-batch predicted to fit, from one run at micro-batch `base`:
    peak = fixed + base * per_sample, with fixed >= FIXED_BYTES_PER_PARAM * params."""
    fixed = min(FIXED_BYTES_PER_PARAM * params / MIB, peak_mib)
    per = (peak_mib - fixed) / base
    if per <= 0:  # the whole peak is the fixed part's bound: count it all per sample
        fixed, per = 0.0, peak_mib / base
    usable = total_mib * (1.0 - headroom)
    fit = int((usable - fixed) // per) if per > 0 else cap
    k = round_micro_batch(min(cap, fit))
    return {"micro_batch": k, "fit_unrounded": fit, "cap": cap, "base_micro_batch": base, "peak_mib": peak_mib,
            "fixed_mib_lower_bound": fixed, "per_sample_mib": per, "usable_mib": usable, "total_mib": total_mib,
            "headroom": headroom, "predicted_peak_mib": fixed + k * per}


def cmd_fit_micro_batch(a):
    with open(a.result) as f:
        j = json.load(f)
    m = j.get("model") or {}
    base, params = int(m["micro_batch_size"]), int(m["parameters"])
    peak_mib, peak_what = run_peak_mib(j)
    total, total_what = device_total_mib(j, a.probe, a.total_mib)
    nums = fit_micro_batch(peak_mib, params, base, total, a.headroom, a.cap)
    nums.update(peak_from=peak_what, total_from=total_what, parameters=params)
    k = nums["micro_batch"]
    how = (f"from the micro-batch-{base} run: peak {peak_mib:.0f} MiB ({peak_what}) = fixed >= "
           f"{nums['fixed_mib_lower_bound']:.0f} MiB ({FIXED_BYTES_PER_PARAM} B x {params} parameters: fp32 weights, "
           f"gradients, AdamW moments) + "
           f"{nums['per_sample_mib']:.1f} MiB per sample; {nums['usable_mib']:.0f} MiB usable ({total:.0f} MiB, "
           f"{total_what}, less {a.headroom:.0%}) fits {nums['fit_unrounded']}")
    print(f"MICRO_BATCH {max(k, base)}")
    if k <= base:
        return emit3(f"micro-batch {base} is already the largest that fits ({how})", nums)
    return gcr.emit(f"largest micro-batch that fits: {k} (capped at {a.cap}, a multiple of 8 or a power of two; "
                    f"predicted peak {nums['predicted_peak_mib']:.0f} MiB; {how})", nums, True)


def emit3(summary, numbers):
    """SUMMARY and NUMBERS with exit status 3: nothing to run / nothing to compare."""
    gcr.emit(summary, numbers, True)
    return 3


# --------------------------------------------------------------------------- speed-targets

def read_checks(path):
    """gpu-check.sh's checks.tsv: {name: (status, summary)}."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4:
                out[parts[0]] = (parts[1], parts[3])
    return out


SHAPE_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "padded_vocab_size")


def fmt_tps(x):
    return f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def cmd_speed_targets(a):
    """Our bench vs torch_step.py (torch.compile, and eager for scale) at one model size:
    tokens/s ratio, MFU (at --mfu-size), peak device memory at the same micro-batch. With
    --suffix _mbmax each engine at its own largest micro-batch. --report-only (the CPU
    stand-in): the numbers, no verdict on them."""
    sfx = a.suffix or ""
    names = {"ours": f"bench_occ_{a.size}{sfx}", "compile": f"bench_torch_{a.size}_compile{sfx}",
             "eager": f"bench_torch_{a.size}{sfx}"}
    checks = read_checks(a.checks)
    runs, absent = {}, {}
    for role, name in names.items():
        st = checks.get(name)
        path = os.path.join(a.work, name + ".json")
        if st and st[0] == "PASS" and os.path.exists(path):
            with open(path) as f:
                runs[role] = gcr.bench_numbers(json.load(f), a.peak_tflops)[1]
        else:
            why = f"{st[0]}: {st[1][:160]}" if st else "did not run"
            absent[role] = (st[0] if st else "NOT-RUN", f"{name} {why}")
    ref, notes = "compile", []
    if "compile" not in runs and a.report_only and "eager" in runs:
        ref = "eager"
        notes.append(f"no torch.compile run ({absent['compile'][1]}): eager stands in")
    missing = [r for r in ("ours", ref) if r not in runs]
    if missing:
        why = "; ".join(absent[r][1] for r in missing)
        if any(absent[r][0] == "FAIL" for r in missing):
            return gcr.emit(f"no comparison: {why}", {"absent": absent}, False)
        return emit3(f"not compared: {why}", {"absent": absent})

    o, r = runs["ours"], runs[ref]
    problems, missed, verdict = [], [], {}
    shapes = {role: tuple((x.get("model") or {}).get(k) for k in SHAPE_KEYS) for role, x in runs.items()}
    for role in runs:
        if shapes[role] != shapes["ours"]:
            problems.append(f"{names[role]} ran another model {shapes[role]} than ours {shapes['ours']} "
                            f"({', '.join(SHAPE_KEYS)})")
    mb = {role: int((x.get("model") or {}).get("micro_batch_size", 0)) for role, x in runs.items()}
    if not sfx and mb["ours"] != mb[ref]:
        problems.append(f"micro-batches differ: ours {mb['ours']}, {ref} {mb[ref]}")
    label = {"compile": "torch.compile", "eager": "PyTorch eager"}
    ratio = o["tokens_per_s"] / r["tokens_per_s"]
    verdict["tokens_per_s"] = ratio >= a.min_ratio
    mbs = f"{mb['ours']}" if mb["ours"] == mb[ref] else f"{mb['ours']} (ours) / {mb[ref]} ({ref})"
    s = (f"{a.size}, micro-batch {mbs}: tokens/s {fmt_tps(o['tokens_per_s'])} vs {label[ref]} "
         f"{fmt_tps(r['tokens_per_s'])} = {ratio:.2f}x "
         f"(target >= {a.min_ratio:.1f}x, goal {a.goal_ratio:.1f}x: {'met' if ratio >= a.goal_ratio else 'not met'})")
    if not verdict["tokens_per_s"]:
        missed.append(f"tokens/s {ratio:.2f}x of {label[ref]}'s < {a.min_ratio:.1f}x: the step must take <= "
                      f"{o['best_ms'] * ratio / a.min_ratio:.1f} ms (now {o['best_ms']:.1f} ms)")
    nums = {"size": a.size, "suffix": sfx, "reference": ref, "micro_batch": mb, "ratio_vs_reference": ratio,
            "tokens_per_s": {k: x["tokens_per_s"] for k, x in runs.items()},
            "mfu": {k: x["mfu"] for k, x in runs.items()}, "best_ms": {k: x["best_ms"] for k, x in runs.items()},
            "peak_device_mib": {k: x.get("peak_device_mib") for k, x in runs.items()},
            "targets": {"min_ratio": a.min_ratio, "goal_ratio": a.goal_ratio, "min_mfu": a.min_mfu,
                        "goal_mfu": a.goal_mfu, "mfu_size": a.mfu_size, "max_mem_ratio": a.max_mem_ratio},
            "report_only": a.report_only, "absent": absent}
    if "eager" in runs and ref != "eager":
        nums["ratio_vs_eager"] = o["tokens_per_s"] / runs["eager"]["tokens_per_s"]
        s += f", vs eager {fmt_tps(runs['eager']['tokens_per_s'])} = {nums['ratio_vs_eager']:.2f}x"
    s += f"; MFU {o['mfu']:.1%} ({label[ref]} {r['mfu']:.1%})"
    if a.size == a.mfu_size:
        verdict["mfu"] = o["mfu"] >= a.min_mfu
        s += f" (target >= {a.min_mfu:.0%}, goal {a.goal_mfu:.0%}: {'met' if o['mfu'] >= a.goal_mfu else 'not met'})"
        if not verdict["mfu"]:
            missed.append(f"MFU {o['mfu']:.1%} < {a.min_mfu:.0%}")
    po, pr = o.get("peak_device_mib"), r.get("peak_device_mib")
    if po is None or pr is None:
        s += "; peak memory: " + ("ours" if po is None else label[ref]) + " reports none"
        if not a.report_only:
            problems.append("a run reports no peak device memory")
    elif mb["ours"] != mb[ref]:
        s += f"; peak {float(po):.0f} MiB vs {float(pr):.0f} MiB (other micro-batches: not compared)"
    else:
        mem = float(po) / float(pr)
        nums["mem_ratio"] = mem
        verdict["memory"] = mem <= a.max_mem_ratio
        s += f"; peak {float(po):.0f} vs {float(pr):.0f} MiB = {mem:.2f}x (target <= {a.max_mem_ratio:.1f}x)"
        if not verdict["memory"]:
            missed.append(f"peak memory {mem:.2f}x of {label[ref]}'s > {a.max_mem_ratio:.1f}x")
    nums["verdict"] = verdict
    nums["missed"] = missed
    prof = profile_note(a, checks)
    if missed and prof:
        nums["profile"] = prof[1]
        s += "; " + prof[0]
    if notes:
        s += "; " + "; ".join(notes)
    if a.report_only:
        s = "CPU stand-in, targets reported, not asserted (they are the H200's): " + s
        if missed:
            s += "; off target: " + "; ".join(missed)
        return gcr.emit(("; ".join(problems) + " -- " + s) if problems else s, nums, not problems)
    if missed:
        s = "MISSED: " + "; ".join(missed) + " -- " + s
    if problems:
        s = "; ".join(problems) + " -- " + s
    return gcr.emit(s, nums, not problems and not missed)


def profile_note(a, checks):
    """What holds the step back, from profile_occ_SIZE (micro-batch 8): the op families'
    shares, and the top ops with their shares and TFLOP/s. (text, numbers) or None."""
    name = f"profile_occ_{a.size}"
    path = os.path.join(a.work, name + ".json")
    if checks.get(name, ("",))[0] != "PASS" or not os.path.exists(path):
        return None
    with open(path) as f:
        j = json.load(f)
    total, shares, every = gcr.op_breakdown(j)
    if not every:
        return None
    mb = (j.get("model") or {}).get("micro_batch_size")
    text = (f"holds the step back ({name}, micro-batch {mb}, {total:.1f} ms in backend calls): "
            + ", ".join(f"{f} {ms / total:.0%}" for ms, f in shares[:4])
            + "; top ops: " + "; ".join(gcr.op_line(o) for o in every[:5]))
    return text, {"families_share": {f: ms / total for ms, f in shares}, "top": every[:8], "ms_in_ops": total}


# --------------------------------------------------------------------------- parsers

def add_parsers(sub):
    p = sub.add_parser("fit-micro-batch", help="the largest micro-batch predicted to fit")
    p.add_argument("result", help="a bench JSON (optimus-cc bench --json or torch_step.py --json)")
    p.add_argument("--cap", type=int, default=64)
    p.add_argument("--headroom", type=float, default=0.1, help="fraction of the device memory left free")
    p.add_argument("--probe", default=None, help="gpu_check_report.py probe's JSON (gpu_mib)")
    p.add_argument("--total-mib", type=float, default=None, help="the device's memory, instead of asking")
    p = sub.add_parser("speed-targets", help="our bench vs torch.compile: tokens/s, MFU, peak memory")
    p.add_argument("--checks", required=True, help="gpu-check.sh's checks.tsv (which runs passed)")
    p.add_argument("--work", required=True, help="the folder with the runs' NAME.json")
    p.add_argument("--size", required=True)
    p.add_argument("--suffix", default="", help="_mbmax: the runs at each engine's largest micro-batch")
    p.add_argument("--report-only", action="store_true", help="the CPU stand-in: no verdict on the numbers")
    p.add_argument("--min-ratio", type=float, default=1.0)
    p.add_argument("--goal-ratio", type=float, default=1.1)
    p.add_argument("--min-mfu", type=float, default=0.35)
    p.add_argument("--goal-mfu", type=float, default=0.40)
    p.add_argument("--mfu-size", default="medium", help="the model size the MFU target applies to")
    p.add_argument("--max-mem-ratio", type=float, default=1.1)
    p.add_argument("--peak-tflops", type=float, default=gcr.PEAK_TFLOPS)
    return {"fit-micro-batch": cmd_fit_micro_batch, "speed-targets": cmd_speed_targets}

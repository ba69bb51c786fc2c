#!/usr/bin/env python3
"""Helpers of scripts/gpu-check.sh: comparisons of the checks and the final report.

Runs under the GPU machine's python3 (torch 2.x, numpy 2.x, transformers 5.x) and under
Debian's /usr/bin/python3 (torch 1.13, numpy 1.24, no transformers) alike. Safetensors
files are read with numpy (no safetensors package needed). Each comparison prints
human-readable lines, then `SUMMARY <one line>` and `NUMBERS <json>`, and exits 0 when
the check passes, 1 when it fails, 2 on bad usage or unreadable input.

    gpu_check_report.py probe
    gpu_check_report.py gtest RESULT.json
    gpu_check_report.py ref-cases torch_reference.sh OUTDIR
    gpu_check_report.py losses A.jsonl B.jsonl --rel R [--after N] [--expect K]
    gpu_check_report.py weights A.safetensors B.safetensors --spread C.safetensors [--factor F]
                           [--floor R]
    gpu_check_report.py val A.jsonl B.jsonl --rel R [--expect-iters N]
    gpu_check_report.py recompute NONE.jsonl SELECTIVE.jsonl FULL.jsonl [--peak-key K]
    gpu_check_report.py precision FP32.jsonl REDUCED.jsonl --rel R --kind bf16|fp16
                           [--expect-iters N]
    gpu_check_report.py hf --hf-dir DIR --ours OURS.safetensors --dump DUMP.safetensors
                           --checker check_against_torch.py [--rel R] [--from-checkpoint]
    gpu_check_report.py bench-engine RESULT.json [--peak-tflops P] [--expect-device D]
                           [--expect-precision P]
    gpu_check_report.py bench-torch RESULT.json [--peak-tflops P]
    gpu_check_report.py tensorboard DIR METRICS.jsonl [--killed DIR2 METRICS2.jsonl]
    gpu_check_report.py report --checks CHECKS.tsv --info INFO.json --out DIR
    gpu_check_report.py fit-micro-batch ... | speed-targets ...   (gpu_check_speed.py)

Exit status 3 (speed-targets, fit-micro-batch) means "nothing to compare / nothing to run":
the caller reports SKIP, or uses the run it has.
"""

import argparse
import importlib.util
import json
import math
import os
import struct
import sys
import time

PEAK_TFLOPS = 989.0  # H100/H200 SXM dense bf16 (datasheet), the MFU denominator


def emit(summary, numbers, ok):
    print("SUMMARY " + " ".join(str(summary).split()))
    print("NUMBERS " + json.dumps(numbers, sort_keys=True, default=float))
    return 0 if ok else 1


# --------------------------------------------------------------------------- files

def read_safetensors(path):
    import numpy as np
    dtypes = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"),
              "I64": np.dtype("<i8"), "F16": np.dtype("<f2"), "U16": np.dtype("<u2"),
              "BF16": None}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    body = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = dtypes.get(info["dtype"], "?")
        if dt == "?":
            raise ValueError(f"{path}: {name}: dtype {info['dtype']} not handled")
        if dt is None:  # bf16 -> f32 by widening the bits
            raw = np.frombuffer(body[b:e], dtype="<u2").astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(info["shape"]).copy()
        else:
            out[name] = np.frombuffer(body[b:e], dtype=dt).reshape(info["shape"]).copy()
    return out, meta


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def by_iter(rows, key):
    return {int(r["iter"]): float(r[key]) for r in rows if key in r and r.get(key) is not None}


# --------------------------------------------------------------------------- probe

def cmd_probe(a):
    info = {"python": sys.version.split()[0], "executable": sys.executable}
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except Exception as e:  # noqa: BLE001 - a probe reports, never fails
        info["numpy_error"] = str(e)
    try:
        import torch
        info["torch"] = torch.__version__
        info["torch_cuda"] = getattr(torch.version, "cuda", None)
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            p = torch.cuda.get_device_properties(0)
            info["gpu"] = p.name
            info["gpu_mib"] = int(p.total_memory // 2**20)
            info["gpu_sm"] = f"{p.major}.{p.minor}"
            info["gpu_multiprocessors"] = p.multi_processor_count
        info["sdpa"] = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        info["compile"] = hasattr(torch, "compile")
    except Exception as e:  # noqa: BLE001
        info["torch_error"] = str(e)
    for mod in ("transformers", "safetensors"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            info[mod + "_error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    print(json.dumps(info, sort_keys=True))
    return 0


# --------------------------------------------------------------------------- gtest

def cmd_gtest(a):
    with open(a.result) as f:
        j = json.load(f)
    failed, skipped = [], []
    for suite in j.get("testsuites", []):
        for t in suite.get("testsuite", []):
            if t.get("failures"):
                failed.append(f"{suite.get('name')}.{t.get('name')}")
            elif t.get("result") == "SKIPPED":  # GTEST_SKIP: the CUDA tests skip without a GPU
                skipped.append(f"{suite.get('name')}.{t.get('name')}")
    n = int(j.get("tests", 0))
    nums = {"tests": n, "failures": int(j.get("failures", 0)), "errors": int(j.get("errors", 0)),
            "disabled": int(j.get("disabled", 0)), "skipped": len(skipped), "seconds": j.get("time"),
            "failed": failed[:20], "skipped_tests": skipped[:20]}
    # Tests that skipped did not check anything: on the GPU machine every one must run.
    ok = n > 0 and nums["failures"] == 0 and nums["errors"] == 0 and not skipped
    s = f"{n} tests, {nums['failures']} failed, {len(skipped)} skipped, {nums['disabled']} disabled"
    if failed:
        s += ": " + ", ".join(failed[:5]) + (" ..." if len(failed) > 5 else "")
    if skipped:
        s += "; skipped: " + ", ".join(skipped[:3]) + (" ..." if len(skipped) > 3 else "")
    if n == 0:
        s += " (no test ran)"
    return emit(s, nums, ok)


# --------------------------------------------------------------------------- reference cases

def cmd_ref_cases(a):
    """The run_case calls of tests/cli/torch_reference.sh: NAME.checkopts and NAME.args in
    OUTDIR (one word a line), so that the GPU check runs exactly the CI's configurations."""
    import shlex
    with open(a.script) as f:
        text = f.read().replace("\\\n", " ")
    os.makedirs(a.outdir, exist_ok=True)
    names = []
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("run_case ") or s.startswith("run_case()"):
            continue
        words = shlex.split(s, comments=True)
        if len(words) < 4:
            continue
        name, checkopts, args = words[1], words[2], words[3:]
        with open(os.path.join(a.outdir, name + ".checkopts"), "w") as f:
            f.write("\n".join(checkopts.split()) + "\n")
        with open(os.path.join(a.outdir, name + ".args"), "w") as f:
            f.write("\n".join(args) + "\n")
        names.append(name)
    print(" ".join(names))
    return 0 if names else 1


# --------------------------------------------------------------------------- comparisons

def rel(x, ref):
    return abs(x - ref) / abs(ref) if ref != 0 else abs(x)


def cmd_losses(a):
    A, B = read_jsonl(a.a), read_jsonl(a.b)
    la, lb = by_iter(A, "loss"), by_iter(B, "loss")
    its = sorted(i for i in set(la) & set(lb) if i > a.after)
    nums = {"iters_a": len(la), "iters_b": len(lb), "compared": len(its), "tolerance_rel": a.rel}
    problems = []
    if a.expect is not None and len(its) != a.expect:
        problems.append(f"compared {len(its)} iterations, expected {a.expect}")
    worst, worst_it = 0.0, None
    per = []
    for i in its:
        r = rel(lb[i], la[i])
        per.append([i, la[i], lb[i], r])
        if r > worst or worst_it is None:
            worst, worst_it = r, i
        print(f"  iter {i:4d}  {la[i]:.8f}  {lb[i]:.8f}  rel {r:.2e}{'  > tol' if r > a.rel else ''}")
    nums.update(max_rel=worst, worst_iter=worst_it, per_iter=per)
    for k in ("val_loss",):
        va, vb = by_iter(A, k), by_iter(B, k)
        common = sorted(i for i in set(va) & set(vb) if i > a.after)
        if common:
            nums["val_max_rel"] = max(rel(vb[i], va[i]) for i in common)
    if not its:
        problems.append("no iteration in common")
    elif worst > a.rel:
        problems.append(f"iteration {worst_it}: relative difference {worst:.2e} > {a.rel:g}")
    s = (f"{len(its)} iterations, max relative loss difference {worst:.2e} (iter {worst_it}, "
         f"tolerance {a.rel:g})")
    if "val_max_rel" in nums:
        s += f", validation {nums['val_max_rel']:.2e}"
    pb = peak(B, "peak_gpu_mib")
    if pb:
        nums["peak_gpu_mib_b"] = pb
        s += f"; B peak {pb:.1f} MiB on the GPU"
    if problems:
        s = "; ".join(problems) + " -- " + s
    return emit(s, nums, not problems)


def cmd_bytes(a):
    """Bytes per traffic class (summed over ranks) of every iteration: equal in A and B."""
    A, B = read_jsonl(a.a), read_jsonl(a.b)
    ba = {r["iter"]: r.get("bytes") for r in A if "iter" in r}
    bb = {r["iter"]: r.get("bytes") for r in B if "iter" in r}
    its = sorted(set(ba) & set(bb))
    diff = [i for i in its if ba[i] != bb[i]]
    nums = {"compared": len(its), "differing": diff[:10], "last_a": ba[its[-1]] if its else None,
            "last_b": bb[its[-1]] if its else None}
    if not its:
        return emit("no iteration in common", nums, False)
    if diff or len(its) != len(ba) or len(its) != len(bb):
        i = diff[0] if diff else its[-1]
        return emit(f"iteration {i}: bytes {bb[i]} vs {ba[i]} ({len(diff)} of {len(its)} iterations differ)", nums, False)
    last = ", ".join(f"{k} {v}" for k, v in sorted(ba[its[-1]].items()) if v)
    return emit(f"{len(its)} iterations, every class equal ({last} per iteration)", nums, True)


def cmd_weights(a):
    """Final weights of run B (the GPU's) vs run A (the CPU's), per tensor, against what
    summation order alone does: C is the CPU run in another layout (tensor parallel 2 vs 1),
    which reorders sums and nothing else. Each tensor must satisfy
        max|B - A| <= max(factor * max|C - A|, floor * max|A|).
    The floor is for tensors whose two CPU layouts happen to agree exactly (or nearly): a
    GPU cannot be asked to reproduce the CPU's rounding bit for bit."""
    import numpy as np
    A, _ = read_safetensors(a.a)
    B, _ = read_safetensors(a.b)
    C, _ = read_safetensors(a.spread)
    problems = []
    for label, other in (("B", B), ("C (the other CPU layout)", C)):
        if set(A) != set(other):
            problems.append(f"tensor names differ between A and {label}: only in A {sorted(set(A) - set(other))[:3]}, "
                            f"only in {label.split()[0]} {sorted(set(other) - set(A))[:3]}")
    per, bad, on_floor = [], [], 0
    worst = None
    for n in sorted(set(A) & set(B) & set(C)):
        x, y, z = (T[n].astype(np.float64) for T in (A, B, C))
        if x.shape != y.shape or x.shape != z.shape:
            problems.append(f"{n}: shapes {x.shape} / {y.shape} / {z.shape}")
            continue
        if x.size == 0:
            continue
        d_ab = float(np.max(np.abs(y - x)))
        d_ac = float(np.max(np.abs(z - x)))
        scale = float(np.max(np.abs(x)))
        bound = max(a.factor * d_ac, a.floor * scale)
        r = d_ab / bound if bound > 0 else (0.0 if d_ab == 0 else math.inf)
        floor_used = a.floor * scale > a.factor * d_ac
        on_floor += floor_used
        row = {"tensor": n, "size": int(x.size), "max_abs_diff": d_ab, "layouts_max_abs_diff": d_ac,
               "max_abs": scale, "bound": bound, "ratio_to_bound": r, "floor_used": floor_used}
        per.append(row)
        if worst is None or r > worst["ratio_to_bound"]:
            worst = row
        if not d_ab <= bound:
            bad.append(row)
    if not per:
        problems.append("no tensor in common")
    if bad:
        problems.append(f"{len(bad)} tensors beyond their bound: " + ", ".join(
            f"{b['tensor']} ({b['max_abs_diff']:.2e} > {b['bound']:.2e}, {b['ratio_to_bound']:.2f}x)" for b in bad[:4]))
    for p in sorted(per, key=lambda p: -p["ratio_to_bound"])[:12]:
        print(f"  {p['tensor']:48s} B-A {p['max_abs_diff']:.2e}  C-A {p['layouts_max_abs_diff']:.2e}  "
              f"max|A| {p['max_abs']:.2e}  {p['ratio_to_bound']:.2f} of the bound"
              + (" (floor)" if p["floor_used"] else ""))
    rel_ab = max((p["max_abs_diff"] / p["max_abs"] for p in per if p["max_abs"] > 0), default=0.0)
    rel_ac = max((p["layouts_max_abs_diff"] / p["max_abs"] for p in per if p["max_abs"] > 0), default=0.0)
    nums = {"tensors": len(per), "factor": a.factor, "floor_rel": a.floor, "worst": worst,
            "worst_ratio_to_bound": worst["ratio_to_bound"] if worst else None, "tensors_on_floor": on_floor,
            "max_rel_b_vs_a": rel_ab, "max_rel_c_vs_a": rel_ac, "beyond": [b["tensor"] for b in bad],
            "per_tensor": sorted(per, key=lambda p: -p["ratio_to_bound"])[:20]}
    s = f"{len(per)} tensors, per tensor max|B-A| <= max({a.factor:g} x max|C-A|, {a.floor:g} x max|A|)"
    if worst:
        s += (f": worst {worst['tensor']} at {worst['ratio_to_bound']:.2f} of its bound "
              f"(B-A {worst['max_abs_diff']:.2e}, C-A {worst['layouts_max_abs_diff']:.2e}, "
              f"max|A| {worst['max_abs']:.2e}"
              f"{', the floor' if worst['floor_used'] else ''})")
    s += (f"; {on_floor} tensors bounded by the floor; largest max|diff|/max|A|: B-A {rel_ab:.2e}, "
          f"C-A {rel_ac:.2e}")
    if problems:
        s = "; ".join(problems) + " -- " + s
    return emit(s, nums, not problems)


def timing(rows):
    ms = [float(r["ms"]) for r in rows if "ms" in r]
    steady = ms[2:] if len(ms) > 4 else ms
    out = {"iters": len(rows)}
    if steady:
        out["ms_per_iter"] = sorted(steady)[len(steady) // 2]
    tps = [float(r["tokens_per_s"]) for r in rows if "tokens_per_s" in r]
    if tps:
        out["tokens_per_s"] = sorted(tps)[len(tps) // 2]
    for key in ("peak_gpu_mib", "peak_tensor_mib"):
        p = peak(rows, key)
        if p is not None:
            out[key] = p
    return out


def peak(rows, key):
    """Max over the rows of timers.KEY (the metrics rows' peaks: max over ranks already)."""
    vals = [float(r.get("timers", {}).get(key, r.get(key))) for r in rows
            if r.get("timers", {}).get(key, r.get(key)) is not None]
    return max(vals) if vals else None


def mem_note(rows, gpu_only=False):
    """`peak N MiB on the GPU` (timers.peak_gpu_mib) or, where no GPU tensor was made (the
    CPU stand-in), `peak N MiB in tensors` (timers.peak_tensor_mib)."""
    g = peak(rows, "peak_gpu_mib")
    if g:
        return f"peak {g:.1f} MiB on the GPU"
    if gpu_only:
        return ""
    t = peak(rows, "peak_tensor_mib")
    return f"peak {t:.1f} MiB in tensors (no GPU tensor)" if t is not None else ""


def val_compare(A, B, rel_tol, expect_iters):
    """Validation losses of runs A and B at the same iterations: (summary, numbers, problems)."""
    va, vb = by_iter(A, "val_loss"), by_iter(B, "val_loss")
    its = sorted(set(va) & set(vb))
    per = [[i, va[i], vb[i], rel(vb[i], va[i])] for i in its]
    worst = max((p[3] for p in per), default=0.0)
    for i, x, y, r in per:
        print(f"  iter {i:4d}  val {x:.5f} (A)  {y:.5f} (B)  rel {r:.2e}{'  > tol' if r > rel_tol else ''}")
    problems = []
    if not its:
        problems.append("no validation in common")
    if set(va) != set(vb):
        problems.append(f"evaluations differ: A at {sorted(va)}, B at {sorted(vb)}")
    ia, ib = max(by_iter(A, "loss"), default=0), max(by_iter(B, "loss"), default=0)
    if expect_iters is not None and (ia != expect_iters or ib != expect_iters):
        problems.append(f"runs reached iterations {ia} (A) and {ib} (B), not {expect_iters}")
    if not worst <= rel_tol:
        problems.append(f"validation loss differs by {worst:.2%} > {rel_tol:.0%}")
    nums = {"evaluations": len(its), "max_rel": worst, "per_eval": per, "tolerance_rel": rel_tol,
            "a": timing(A), "b": timing(B), "iters_a": ia, "iters_b": ib}
    s = (f"{len(its)} evaluations, max relative validation-loss difference {worst:.3%} "
         f"(tolerance {rel_tol:.0%})")
    if its:
        s += f"; final val loss {va[its[-1]]:.4f} (A) vs {vb[its[-1]]:.4f} (B)"
    for k, lab in (("a", "A"), ("b", "B")):
        t = nums[k]
        if "ms_per_iter" in t:
            s += f"; {lab} {t['ms_per_iter']:.1f} ms/iter"
        if t.get("peak_gpu_mib"):
            s += f" peak {t['peak_gpu_mib']:.0f} MiB on the GPU"
        elif "peak_tensor_mib" in t:
            s += f" peak {t['peak_tensor_mib']:.1f} MiB in tensors"
    return s, nums, problems


def cmd_val(a):
    A, B = read_jsonl(a.a), read_jsonl(a.b)
    s, nums, problems = val_compare(A, B, a.rel, a.expect_iters)
    if problems:
        s = "; ".join(problems) + " -- " + s
    return emit(s, nums, not problems)


def cmd_precision(a):
    """fp32 run A vs a --bf16/--fp16 run B of the same configuration: validation losses
    within --rel, and the training losses must NOT be bit-identical (the reduced format's
    rounding happened: every backend rounds, the CPU by bit-exact emulation); fp16 rows
    must carry loss_scale and skipped_iters, and not every iteration may be skipped."""
    A, B = read_jsonl(a.a), read_jsonl(a.b)
    s, nums, problems = val_compare(A, B, a.rel, a.expect_iters)
    la, lb = by_iter(A, "loss"), by_iter(B, "loss")
    common = sorted(set(la) & set(lb))
    differ = [i for i in common if la[i] != lb[i]]
    nums["kind"] = a.kind
    nums["loss_iters_compared"] = len(common)
    nums["loss_iters_differing"] = len(differ)
    if common:
        nums["loss_max_rel"] = max(rel(lb[i], la[i]) for i in common)
    if not common:
        problems.append("no training iteration in common")
    elif not differ:
        problems.append(f"--{a.kind} changed nothing: all {len(common)} training losses are bit-identical "
                        "to the fp32 run's (no rounding happened)")
    s += (f"; training losses differ from fp32 at {len(differ)}/{len(common)} iterations"
          + (f" (max rel {nums['loss_max_rel']:.2e})" if common else ""))
    if a.kind == "fp16":
        scaled = [r for r in B if "loss" in r]
        have = [r for r in scaled if "loss_scale" in r and "skipped_iters" in r]
        if not scaled or len(have) != len(scaled):
            problems.append(f"{len(scaled) - len(have)} of {len(scaled)} fp16 metrics rows lack loss_scale/skipped_iters")
        if have:
            last = have[-1]
            nums["final_loss_scale"] = float(last["loss_scale"])
            nums["skipped_iters"] = int(last["skipped_iters"])
            nums["loss_scales"] = sorted({float(r["loss_scale"]) for r in have})
            s += f"; fp16: final loss scale {last['loss_scale']:g}, {last['skipped_iters']} iterations skipped"
            if int(last["skipped_iters"]) >= len(have):
                problems.append(f"every fp16 iteration was skipped ({last['skipped_iters']})")
            if not (math.isfinite(float(last["loss_scale"])) and float(last["loss_scale"]) > 0):
                problems.append(f"final loss scale {last['loss_scale']}")
    bad = [i for i in lb if not math.isfinite(lb[i])]
    if bad:
        problems.append(f"non-finite {a.kind} training loss at iterations {bad[:5]}")
    if problems:
        s = "; ".join(problems) + " -- " + s
    return emit(s, nums, not problems)


def cmd_recompute(a):
    """Three runs of one configuration (no recompute, selective, full): the losses, gradient
    norms and validation losses bit-identical, and the peak tensor memory strictly falling."""
    runs = [("none", read_jsonl(a.none)), ("selective", read_jsonl(a.selective)), ("full", read_jsonl(a.full))]
    problems = []

    def key(rows):
        return [(int(r["iter"]), repr(r.get("loss")), repr(r.get("grad_norm")), repr(r.get("val_loss")))
                for r in rows if "iter" in r]

    base = key(runs[0][1])
    nums = {"iterations": len(base), "peak_key": a.peak_key}
    if a.expect is not None and len(base) != a.expect:
        problems.append(f"{len(base)} iterations in the base run, expected {a.expect}")
    for name, rows in runs[1:]:
        k = key(rows)
        if k != base:
            first = next((x for x, y in zip(base, k) if x != y), None)
            problems.append(f"{name}: losses differ from no recompute ({len(k)} vs {len(base)} rows; first: "
                            f"{first})")
        nums[name + "_identical"] = k == base
    peaks = {name: peak(rows, a.peak_key) for name, rows in runs}
    nums["peak_mib"] = peaks
    if any(v is None for v in peaks.values()):
        problems.append(f"timers.{a.peak_key} missing from some run's metrics: {peaks}")
    elif not (peaks["none"] > peaks["selective"] > peaks["full"]):
        problems.append(f"{a.peak_key} does not fall none > selective > full: "
                        f"{peaks['none']:.2f} / {peaks['selective']:.2f} / {peaks['full']:.2f} MiB")
    s = (f"{len(base)} iterations: losses, grad norms and val losses bit-identical for none/selective/full: "
         f"{'yes' if all(nums.get(n + '_identical') for n in ('selective', 'full')) else 'NO'}")
    if all(v is not None for v in peaks.values()):
        s += (f"; {a.peak_key} none {peaks['none']:.2f} > selective {peaks['selective']:.2f} > full "
              f"{peaks['full']:.2f} MiB")
    if problems:
        s = "; ".join(problems) + " -- " + s
    return emit(s, nums, not problems)


# --------------------------------------------------------------------------- Hugging Face

def load_checker(path):
    spec = importlib.util.spec_from_file_location("check_against_torch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def to_hf(ours, L, C, H):
    """Our single-process tensors -> Hugging Face GPT-2 names and layouts (as export.cpp)."""
    import numpy as np
    D = C // H
    o = np.arange(3 * C)
    j, h, d = o // C, (o % C) // D, o % D
    rows = h * 3 * D + j * D + d  # c_attn column o takes our fused-QKV row rows[o]
    hf = {"wte.weight": ours["embedding.word_embeddings.weight"],
          "wpe.weight": ours["embedding.position_embeddings.weight"],
          "ln_f.weight": ours["final_layernorm.weight"], "ln_f.bias": ours["final_layernorm.bias"]}
    for l in range(L):
        p, q = f"layers.{l}.", f"h.{l}."
        hf[q + "ln_1.weight"] = ours[p + "input_layernorm.weight"]
        hf[q + "ln_1.bias"] = ours[p + "input_layernorm.bias"]
        hf[q + "attn.c_attn.weight"] = np.ascontiguousarray(ours[p + "attention.query_key_value.weight"][rows].T)
        hf[q + "attn.c_attn.bias"] = ours[p + "attention.query_key_value.bias"][rows]
        hf[q + "attn.c_proj.weight"] = np.ascontiguousarray(ours[p + "attention.dense.weight"].T)
        hf[q + "attn.c_proj.bias"] = ours[p + "attention.dense.bias"]
        hf[q + "ln_2.weight"] = ours[p + "post_attention_layernorm.weight"]
        hf[q + "ln_2.bias"] = ours[p + "post_attention_layernorm.bias"]
        hf[q + "mlp.c_fc.weight"] = np.ascontiguousarray(ours[p + "mlp.dense_h_to_4h.weight"].T)
        hf[q + "mlp.c_fc.bias"] = ours[p + "mlp.dense_h_to_4h.bias"]
        hf[q + "mlp.c_proj.weight"] = np.ascontiguousarray(ours[p + "mlp.dense_4h_to_h.weight"].T)
        hf[q + "mlp.c_proj.bias"] = ours[p + "mlp.dense_4h_to_h.bias"]
    return hf


def gpt2_plain(sd, ids, n_head, eps):
    """GPT-2 as Hugging Face defines it (Conv1D y = x W + b, c_attn columns [q|k|v],
    gelu_new, tied head), in float64 plain PyTorch: stands in for transformers when that
    package is missing."""
    import torch
    t = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in sd.items()}
    B, T = ids.shape
    C = t["wte.weight"].shape[1]
    D = C // n_head
    L = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("h."))

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (C,), t[p + ".weight"], t[p + ".bias"], eps)

    x = t["wte.weight"][ids] + t["wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for l in range(L):
        p = f"h.{l}."
        qkv = ln(x, p + "ln_1") @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        q, k, v = (z.view(B, T, n_head, D).transpose(1, 2) for z in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        a = ln(x, p + "ln_2") @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"]
        a = 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a ** 3)))
        x = x + a @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ t["wte.weight"].t()


def hf_model(config_dict, hf_dir=None, state=None):
    """A transformers GPT2LMHeadModel in fp32 (eager attention): from_pretrained(hf_dir),
    or built from config_dict with the `state` tensors loaded."""
    import torch
    import transformers
    if hf_dir is not None:
        kw = dict(attn_implementation="eager")
        try:
            m = transformers.GPT2LMHeadModel.from_pretrained(hf_dir, dtype=torch.float32, **kw)
        except TypeError:  # transformers < 4.56 names it torch_dtype
            m = transformers.GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32, **kw)
        return m.float().eval()
    cfg = transformers.GPT2Config(**config_dict)
    try:
        cfg._attn_implementation = "eager"
    except Exception:  # noqa: BLE001
        pass
    m = transformers.GPT2LMHeadModel(cfg).float().eval()
    sd = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in state.items()}
    missing, unexpected = m.transformer.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith(("attn.bias", "attn.masked_bias"))]
    if missing or unexpected:
        raise RuntimeError(f"load_state_dict: missing {missing[:4]}, unexpected {unexpected[:4]}")
    m.tie_weights()
    return m


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(ids, dtype=torch.long)).logits.double().numpy()


def ratio(x, ref):
    import numpy as np
    d = float(np.max(np.abs(x.astype(np.float64) - ref)))
    s = float(np.max(np.abs(ref)))
    return d / s if s > 0 else (0.0 if d == 0 else math.inf), d, s


def cmd_hf(a):
    import numpy as np
    import torch
    checker = load_checker(a.checker)
    problems, nums, notes = [], {"tolerance_ratio": a.rel}, []
    try:
        import transformers  # noqa: F401
        have_tf = True
        nums["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001
        have_tf = False
        notes.append(f"transformers not importable ({str(e).splitlines()[0] if str(e) else e}): "
                     "GPT-2 evaluated by a plain-PyTorch reimplementation of its definition")
    nums["used_transformers"] = have_tf

    # (1) export --hf-gpt2 wrote the same tensors as the mapping applied to export --out.
    with open(os.path.join(a.hf_dir, "config.json")) as f:
        hcfg = json.load(f)
    ours, _ = read_safetensors(a.ours)
    exported, _ = read_safetensors(os.path.join(a.hf_dir, "model.safetensors"))
    L, C, H = hcfg["n_layer"], hcfg["n_embd"], hcfg["n_head"]
    mapped = to_hf(ours, L, C, H)
    if set(mapped) != set(exported):
        problems.append(f"HF tensor names: missing {sorted(set(mapped) - set(exported))[:3]}, "
                        f"extra {sorted(set(exported) - set(mapped))[:3]}")
    mapdiff = max((float(np.max(np.abs(mapped[k] - exported[k]))) for k in set(mapped) & set(exported)
                   if mapped[k].shape == exported[k].shape), default=math.inf)
    shape_bad = [k for k in set(mapped) & set(exported) if mapped[k].shape != exported[k].shape]
    if shape_bad:
        problems.append(f"HF tensor shapes differ: {shape_bad[:3]}")
    nums["export_vs_mapping_max_abs_diff"] = mapdiff
    if mapdiff != 0.0:
        problems.append(f"export's HF tensors differ from the reference mapping by {mapdiff:.3e}")

    # (2) the exported directory through GPT2LMHeadModel vs our model's definition (float64,
    # tests/reference/check_against_torch.py's forward) on the trained weights.
    vocab = int(hcfg.get("optimus_cc", {}).get("tokenizer_vocab_size", hcfg["vocab_size"]))
    T = min(int(hcfg["n_positions"]), 64)
    rng = np.random.default_rng(1234)
    ids = rng.integers(0, vocab, size=(4, T + 1)).astype(np.int64)
    cfg = {"num_layers": L, "hidden_size": C, "num_attention_heads": H,
           "layernorm_epsilon": float(hcfg["layer_norm_epsilon"])}
    torch.set_default_dtype(torch.float64)
    p = {k: torch.as_tensor(v.astype(np.float64)) for k, v in ours.items()}
    with torch.no_grad():
        ref, _ = checker.forward(p, torch.as_tensor(ids), cfg)
    ref = ref.numpy()
    torch.set_default_dtype(torch.float32)
    if have_tf:
        pretrained = hf_model(None, hf_dir=a.hf_dir)
        got = hf_logits(pretrained, ids[:, :-1])
    else:
        got = gpt2_plain(exported, torch.as_tensor(ids[:, :-1]), H, cfg["layernorm_epsilon"]).numpy()
    r, d, s = ratio(got, ref)
    nums["trained"] = {"ratio": r, "max_abs_diff": d, "max_abs": s, "shape": list(got.shape)}
    if not r <= a.rel:
        problems.append(f"trained checkpoint: GPT-2 logits vs our model's differ by {r:.2e} x max")

    dump, meta = read_safetensors(a.dump)
    names = [k for k in dump if not k.startswith(("grad.", "batch.")) and k not in ("logits", "loss", "losses")]
    engine = dump["logits"].astype(np.float64)
    if a.from_checkpoint:
        # (3) the engine's logits of the trained checkpoint (reference-dump --load, on the
        # device it ran on, dropout off) vs GPT2LMHeadModel.from_pretrained(the exported
        # folder) on the same tokens: batch.0's rows, their first T tokens.
        if set(names) != set(ours):
            problems.append(f"dump tensors are not the checkpoint's: only in the dump {sorted(set(names) - set(ours))[:3]}, "
                            f"only in the export {sorted(set(ours) - set(names))[:3]}")
        wdiff = max((float(np.max(np.abs(dump[k] - ours[k]))) for k in set(names) & set(ours)
                     if dump[k].shape == ours[k].shape), default=math.inf)
        nums["dump_weights_vs_checkpoint_max_abs_diff"] = wdiff
        if wdiff != 0.0:
            problems.append(f"reference-dump --load's weights differ from the checkpoint's by {wdiff:.3e}")
        T = int(meta["seq_length"])
        dids = dump["batch.0"][:, :T].astype(np.int64)
        if have_tf:
            got = hf_logits(pretrained, dids)
        else:
            got = gpt2_plain(exported, torch.as_tensor(dids), H, cfg["layernorm_epsilon"]).numpy()
        what = "engine logits of the checkpoint vs " + ("GPT2LMHeadModel.from_pretrained" if have_tf else "plain GPT-2")
        engine = engine[..., :vocab]
        got = got[..., :vocab]
    else:
        # (3, older binaries: no reference-dump --load) the engine's logits of its initial
        # weights vs GPT-2 built from the same weights by the same mapping.
        dL, dC, dH = int(meta["num_layers"]), int(meta["hidden_size"]), int(meta["num_attention_heads"])
        dcfg = {"vocab_size": int(meta["padded_vocab_size"]), "n_positions": int(meta["max_position_embeddings"]),
                "n_embd": dC, "n_layer": dL, "n_head": dH, "n_inner": 4 * dC,
                "activation_function": "gelu_new",
                "layer_norm_epsilon": float(meta.get("norm_epsilon", meta.get("layernorm_epsilon", cfg["layernorm_epsilon"]))),
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "tie_word_embeddings": True,
                "scale_attn_weights": True}
        dhf = to_hf({k: dump[k] for k in names}, dL, dC, dH)
        dids = dump["batch.0"][:, :-1].astype(np.int64)
        if have_tf:
            got = hf_logits(hf_model(dcfg, state=dhf), dids)
        else:
            got = gpt2_plain(dhf, torch.as_tensor(dids), dH, dcfg["layer_norm_epsilon"]).numpy()
        what = "engine logits of its initial weights vs GPT-2 of the same weights"
    if engine.shape != got.shape:
        problems.append(f"logits shapes differ: engine {engine.shape}, GPT-2 {got.shape}")
        r3, d3, s3 = math.inf, math.inf, 0.0
    else:
        r3, d3, s3 = ratio(engine, got.astype(np.float64))
    nums["engine"] = {"ratio": r3, "max_abs_diff": d3, "max_abs": s3, "shape": list(engine.shape),
                      "from_checkpoint": bool(a.from_checkpoint), "compared_vocab": int(engine.shape[-1])}
    if not r3 <= a.rel:
        problems.append(f"{what} differ by {r3:.2e} x max")
    nums["notes"] = notes
    s = (f"export = mapping (max diff {mapdiff:g}); trained: {'GPT2LMHeadModel' if have_tf else 'plain GPT-2'} "
         f"vs our definition (float64) {r:.2e} x max; {what}: {r3:.2e} x max over "
         f"{'x'.join(map(str, engine.shape))} logits (tolerance {a.rel:g})")
    if a.from_checkpoint:
        s += f"; dump weights = checkpoint's (max diff {nums['dump_weights_vs_checkpoint_max_abs_diff']:g})"
    if notes:
        s += "; " + "; ".join(notes)
    if problems:
        s = "; ".join(problems) + " -- " + s
    return emit(s, nums, not problems)


# --------------------------------------------------------------------------- benchmarks

MFU_FORMULA = ("MFU = (6*N*tokens + 12*L*B*T^2*C) FLOP per step / step time / 989 TFLOP/s; N = 12*L*C^2 + V*C "
               "(the layers' matrix weights + the tied LM head over the padded vocabulary V), tokens = B*T; "
               "12*L*B*T^2*C: attention's QK^T and PV over the full T x T, forward + backward")


def model_flops(m):
    """FLOPs of one training step from the model shape (MFU_FORMULA), and N."""
    L, C, T, B = (int(m[k]) for k in ("num_layers", "hidden_size", "seq_length", "micro_batch_size"))
    V = int(m.get("padded_vocab_size") or m["vocab_size"])
    n = 12 * L * C * C + V * C
    return 6.0 * n * B * T + 12.0 * L * B * T * T * C, n, B * T


def bench_numbers(j, peak_tflops):
    best = float(j["best_ms"])
    med = float(j.get("median_ms") or best)
    flops, n, tokens = model_flops(j["model"])
    reported = j.get("flops_per_step")
    pk = j.get("peak_device_mib", j.get("peak_gpu_mib"))
    out = {"best_ms": best, "median_ms": med, "tokens_per_step": tokens,
           "tokens_per_s": tokens / (best * 1e-3), "tokens_per_s_median": tokens / (med * 1e-3),
           "flops_per_step": flops, "n_matrix_params": n, "flops_per_step_reported": reported,
           "tflops": flops / (best * 1e-3) * 1e-12, "mfu": flops / (best * 1e-3) / (peak_tflops * 1e12),
           "mfu_median": flops / (med * 1e-3) / (peak_tflops * 1e12), "mfu_formula": MFU_FORMULA,
           "peak_tflops": peak_tflops, "parameters": j.get("model", {}).get("parameters"),
           "model": j.get("model"), "peak_device_mib": pk,
           "precision": j.get("precision", j.get("dtype")), "recompute": j.get("recompute"),
           "compile_s": j.get("compile_s"), "device": j.get("device"), "gpu": j.get("gpu")}
    rate = f"{out['tflops']:.1f} TFLOP/s" if out["tflops"] >= 1 else f"{out['tflops'] * 1e3:.2f} GFLOP/s"
    s = (f"{out['tokens_per_s']:.0f} tokens/s best, {out['tokens_per_s_median']:.0f} median; {best:.1f} ms/step; "
         f"{rate}; MFU {out['mfu']:.2%} (median {out['mfu_median']:.2%}) of {peak_tflops:g} TFLOP/s")
    if pk is not None:
        s += f"; peak {float(pk):.0f} MiB in device tensors"
    else:
        s += "; peak memory not reported"
    if out["compile_s"]:
        s += f"; warm-up incl. compile {float(out['compile_s']):.0f} s"
    if out["precision"]:
        s += f"; {out['precision']}" + (f", recompute {out['recompute']}" if out["recompute"] else "")
    return s, out


def cmd_bench(a):
    with open(a.result) as f:
        j = json.load(f)
    s, nums = bench_numbers(j, a.peak_tflops)
    problems = []
    if not (math.isfinite(nums["tokens_per_s"]) and nums["tokens_per_s"] > 0):
        problems.append("no valid timing")
    rep = nums["flops_per_step_reported"]
    if rep is not None and abs(float(rep) - nums["flops_per_step"]) > 1e-6 * nums["flops_per_step"]:
        problems.append(f"the run's flops_per_step {float(rep):.6g} != the model shape's {nums['flops_per_step']:.6g}")
    dev = str(nums.get("device") or "")
    if getattr(a, "expect_device", None) and not dev.lower().startswith(a.expect_device):
        problems.append(f"ran on '{dev}', not {a.expect_device}")
    if getattr(a, "expect_precision", None) and nums["precision"] != a.expect_precision:
        problems.append(f"precision '{nums['precision']}', not {a.expect_precision}")
    if problems:
        s = "; ".join(problems) + " -- " + s
    return emit(s, nums, not problems)


# --------------------------------------------------------------------------- report

def cmd_report(a):
    with open(a.info) as f:
        info = json.load(f)
    checks = []
    with open(a.checks) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            name, status, secs, summary = parts[:4]
            c = {"name": name, "status": status, "seconds": float(secs or 0), "summary": summary}
            for key, path in (("numbers", parts[4] if len(parts) > 4 else ""),
                              ("log_tail", parts[5] if len(parts) > 5 else "")):
                if path and os.path.exists(path):
                    try:
                        with open(path) as g:
                            c[key] = json.load(g) if key == "numbers" else g.read().splitlines()[-30:]
                    except (OSError, ValueError) as e:
                        c[key + "_error"] = str(e)
            checks.append(c)
    counts = {s: sum(c["status"] == s for c in checks) for s in ("PASS", "FAIL", "SKIP")}
    result = "FAIL" if counts["FAIL"] else ("PASS" if counts["PASS"] else "NOTHING-CHECKED")
    doc = dict(info, checks=checks, counts=counts, result=result,
               written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gpu-check.json"), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False, default=float)
        f.write("\n")
    md = ["# optimus-cc GPU check", ""]
    for k in ("gpu_line", "torch_line", "bundle_line", "features_line", "budget_line"):
        if info.get(k):
            md.append(f"- {info[k]}")
    md += ["", f"**{result}**: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped", "",
           "| check | status | s | result |", "|---|---|---:|---|"]
    for c in checks:
        md.append(f"| {c['name']} | {c['status']} | {c['seconds']:.0f} | {c['summary'].replace('|', '/')} |")
    bench = [c for c in checks if c["name"].startswith("bench_") and c["status"] == "PASS" and "numbers" in c]
    if bench:
        md += ["", "## Benchmarks (training step, bf16)", "",
               "| run | micro-batch | tokens/s (best) | tokens/s (median) | ms/step | TFLOP/s | MFU | peak MiB |",
               "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for c in bench:
            n = c["numbers"]
            pk = n.get("peak_device_mib", n.get("peak_gpu_mib"))
            mb = (n.get("model") or {}).get("micro_batch_size", "")
            md.append(f"| {c['name']} | {mb} | {n['tokens_per_s']:.0f} | {n.get('tokens_per_s_median', 0):.0f} | "
                      f"{n['best_ms']:.1f} | {n['tflops']:.2f} | {n['mfu']:.2%} | "
                      f"{'' if pk is None else f'{float(pk):.0f}'} |")
        md += ["", MFU_FORMULA + " (computed here from the model shape; the same count as optimus-cc bench's "
                   "and bench/torch_step.py's flops_per_step). Peak: the engine's own device tensors "
                   "(bench's peak_device_mib) or torch.cuda.max_memory_allocated."]
    for c in checks:
        ops = (c.get("numbers") or {}).get("ops") if c["name"].startswith("profile_") else None
        if ops:
            md += ["", f"## Op profile: {c['name']} (each op's share of the step's backend calls)", "",
                   "| op | calls/step | ms/step | share | TFLOP/s |", "|---|---:|---:|---:|---:|"]
            md += [f"| {o['op']} | {o.get('calls_per_step', 0):.1f} | {o['ms_per_step']:.3f} | {o['share']:.1%} | "
                   f"{o['tflops']:.1f} |" if o.get("tflops") else
                   f"| {o['op']} | {o.get('calls_per_step', 0):.1f} | {o['ms_per_step']:.3f} | {o['share']:.1%} | |"
                   for o in ops]
    fails = [c for c in checks if c["status"] == "FAIL" and c.get("log_tail")]
    if fails:
        md += ["", "## Failures (last lines of output)"]
        for c in fails:
            md += ["", f"### {c['name']}", "", "```"] + c["log_tail"][-15:] + ["```"]
    with open(os.path.join(a.out, "gpu-check.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"report: {os.path.join(a.out, 'gpu-check.json')}, {os.path.join(a.out, 'gpu-check.md')}: "
          f"{result} ({counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped)")
    return 0


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
    """optimus-cc bench --op-profile's JSON -> (ms per step in backend calls, [(ms, family)] largest
    first, every op {op, calls_per_step, ms_per_step, share, tflops} largest first)."""
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
    """`name 12.3 ms (20%) at 150 TFLOP/s`: one op of op_breakdown."""
    return (f"{o['op']} {o['ms_per_step']:.1f} ms ({o['share']:.0%})"
            + (f" at {o['tflops']:.3g} TFLOP/s" if o.get("tflops") else ""))


def cmd_op_profile(a):
    """optimus-cc bench --op-profile's JSON: share of the step per op family, and every op's
    share (the report's table lists them all; the summary the top ones)."""
    with open(a.result) as f:
        j = json.load(f)
    total, shares, every = op_breakdown(j)
    if not every:
        return emit("the bench JSON has no op_profile", {}, False)
    nums = {"ms_per_step_in_ops": total, "families_ms": {f: round(ms, 3) for ms, f in shares},
            "families_share": {f: ms / total for ms, f in shares}, "top": every[:8], "ops": every,
            "step_ms_unprofiled": j.get("best_ms"),
            "micro_batch_size": (j.get("model") or {}).get("micro_batch_size")}
    s = (f"{total:.1f} ms/step in backend calls (unprofiled step {j.get('best_ms', 0):.1f} ms): " +
         ", ".join(f"{f} {100 * ms / total:.0f}%" for ms, f in shares[:6]) + "; top: " +
         "; ".join(op_line(o) for o in every[:5]) + f"; {len(every)} ops in the report's table")
    return emit(s, nums, True)


# --------------------------------------------------------------------------- tensorboard

TB_MEGATRON_TIMERS = {"forward": "forward-compute", "backward": "backward-compute", "optimizer": "optimizer",
                      "data": "batch-generator", "dp_allreduce": "all-grads-sync",
                      "emb_allreduce": "embedding-grads-all-reduce"}


def tb_expected(rows, timers=True, ppl=True):
    """The scalars README.md documents for --tensorboard-dir (interval 1), from the metrics rows
    (the last row of an iteration wins), as float32: {tag: {step: value}}."""
    last = {int(r["iter"]): r for r in rows}
    want = {}
    for it, r in last.items():
        s = {"lm loss": r["loss"], "learning-rate": r["lr"], "grad-norm": r["grad_norm"],
             "tokens-per-sec": r["tokens_per_s"]}
        if "loss_scale" in r:
            s["loss-scale"] = r["loss_scale"]
        s.update({"bytes/" + k: v for k, v in r.get("bytes", {}).items()})
        s.update({"bytes-saved/" + k: v for k, v in r.get("bytes_saved", {}).items()})
        s.update({"lep/" + k: v for k, v in r.get("lep_check", {}).items()})
        if timers:
            s["iteration-time"] = r["ms"] / 1e3
            for k, v in r.get("timers", {}).items():
                if not k.startswith("peak_") and k != "iteration":
                    s[TB_MEGATRON_TIMERS.get(k, k.replace("_", "-")) + "-time"] = v / 1e3
        for key, tag in (("val_loss", "lm loss validation"), ("test_loss", "lm loss test")):
            if key in r:
                s[tag] = r[key]
                if ppl:
                    s[tag + " ppl"] = math.exp(r[key])
        for tag, v in s.items():
            want.setdefault(tag, {})[it] = struct.unpack("<f", struct.pack("<f", float(v)))[0]
    return want


def tb_load(path):
    """TensorBoard's own reader (EventAccumulator, every scalar kept) over a folder of event files."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: {int(e.step): float(e.value) for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def tb_diff(want, got):
    bad = []
    for tag in sorted(set(want) | set(got)):
        w, g = want.get(tag, {}), got.get(tag, {})
        if w != g:
            steps = [i for i in sorted(set(w) | set(g)) if w.get(i) != g.get(i)]
            bad.append(f"{tag}: steps {steps[:3]}: {[w.get(i) for i in steps[:2]]} vs {[g.get(i) for i in steps[:2]]}")
    return bad


def cmd_tensorboard(a):
    import tensorboard
    got = tb_load(a.dir)
    want = tb_expected(read_jsonl(a.metrics))
    bad = tb_diff(want, got)
    points = sum(len(p) for p in got.values())
    nums = {"tensorboard": tensorboard.__version__, "tags": len(got), "points": points, "mismatches": bad[:5]}
    summary = (f"TensorBoard {tensorboard.__version__}'s EventAccumulator loads {len(got)} tags, {points} points, "
               f"equal to the metrics JSONL" if not bad else f"EventAccumulator vs metrics: {'; '.join(bad[:3])}")
    if a.killed:
        kdir, kmetrics = a.killed
        rows = read_jsonl(kmetrics)
        kgot = tb_load(kdir)
        last = max(kgot.get("lm loss", {0: 0}))
        kwant = {t: {i: v for i, v in p.items() if i <= last} for t, p in tb_expected(rows).items()}
        kbad = tb_diff({t: p for t, p in kwant.items() if p}, kgot)
        if last < max(int(r["iter"]) for r in rows) - 1:
            kbad.insert(0, f"the killed run's file ends at step {last}, its metrics at {max(int(r['iter']) for r in rows)}")
        nums.update({"killed_metrics_rows": len(rows), "killed_last_step": last, "killed_mismatches": kbad[:5]})
        summary += (f"; a run killed (SIGKILL) after {len(rows)} iterations loads up to step {last}, equal to its metrics"
                    if not kbad else f"; killed run: {'; '.join(kbad[:3])}")
        bad += kbad
    return emit(summary, nums, not bad)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("probe")
    p = sub.add_parser("gtest")
    p.add_argument("result")
    p = sub.add_parser("ref-cases")
    p.add_argument("script")
    p.add_argument("outdir")
    p = sub.add_parser("losses")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rel", type=float, required=True)
    p.add_argument("--after", type=int, default=0)
    p.add_argument("--expect", type=int, default=None)
    p = sub.add_parser("bytes")
    p.add_argument("a")
    p.add_argument("b")
    p = sub.add_parser("weights")
    p.add_argument("a", help="the reference run's weights (the CPU's)")
    p.add_argument("b", help="the run under test (the GPU's)")
    p.add_argument("--spread", required=True, help="the reference run in another layout (only sums reordered)")
    p.add_argument("--factor", type=float, default=4.0)
    p.add_argument("--floor", type=float, default=1e-5, help="relative to max|A|, per tensor")
    p = sub.add_parser("val")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rel", type=float, required=True)
    p.add_argument("--expect-iters", type=int, default=None)
    p = sub.add_parser("hf")
    p.add_argument("--hf-dir", required=True)
    p.add_argument("--ours", required=True)
    p.add_argument("--dump", required=True)
    p.add_argument("--checker", required=True)
    p.add_argument("--rel", type=float, default=1e-4)
    p.add_argument("--from-checkpoint", action="store_true",
                   help="the dump is reference-dump --load of the exported checkpoint")
    for name in ("bench-engine", "bench-torch"):
        p = sub.add_parser(name)
        p.add_argument("result")
        p.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS)
        p.add_argument("--expect-device", default=None, help="the JSON's device must start with this")
        p.add_argument("--expect-precision", default=None)
    p = sub.add_parser("precision")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rel", type=float, required=True)
    p.add_argument("--kind", choices=["bf16", "fp16"], required=True)
    p.add_argument("--expect-iters", type=int, default=None)
    p = sub.add_parser("recompute")
    p.add_argument("none")
    p.add_argument("selective")
    p.add_argument("full")
    p.add_argument("--peak-key", default="peak_gpu_mib")
    p.add_argument("--expect", type=int, default=None)
    p = sub.add_parser("op-profile")
    p.add_argument("result")
    p = sub.add_parser("tensorboard")
    p.add_argument("dir")
    p.add_argument("metrics")
    p.add_argument("--killed", nargs=2, metavar=("DIR", "METRICS"))
    p = sub.add_parser("report")
    p.add_argument("--checks", required=True)
    p.add_argument("--info", required=True)
    p.add_argument("--out", required=True)
    # The benchmark matrix's helpers (fit-micro-batch, speed-targets) live next door; no
    # __pycache__ written into the bundle.
    sys.dont_write_bytecode = True
    import gpu_check_speed
    fns = gpu_check_speed.add_parsers(sub)
    import gpu_check_llama
    fns.update(gpu_check_llama.add_parsers(sub))
    a = ap.parse_args(argv)
    fns.update({"probe": cmd_probe, "gtest": cmd_gtest, "ref-cases": cmd_ref_cases, "losses": cmd_losses,
                "bytes": cmd_bytes, "weights": cmd_weights, "val": cmd_val, "precision": cmd_precision,
                "recompute": cmd_recompute, "hf": cmd_hf, "op-profile": cmd_op_profile,
                "tensorboard": cmd_tensorboard, "bench-engine": cmd_bench,
                "bench-torch": cmd_bench, "report": cmd_report})
    fn = fns[a.cmd]
    try:
        return fn(a)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {a.cmd}: {type(e).__name__}: {e}", file=sys.stderr)
        print(f"SUMMARY {a.cmd}: cannot read the inputs: {type(e).__name__}: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The comparisons behind gpu-check's correctness steps: each reads what the runs wrote
and returns a Verdict (pass/fail with a one-line summary and the numbers), printing
its details (per iteration, per tensor) for the step's log.

Standard library only, except `weights` (numpy). `python3 -m occtools gpu-verdict`
runs any of them on files, e.g. from a call's logs archive.
"""

import json
import math
import shlex
from typing import NamedTuple

from occtools.common.files import by_iter, read_jsonl, read_safetensors, timer_peak

PASS, FAIL, UNREADABLE, NOTHING = 0, 1, 2, 3  # Verdict.code; NOTHING: nothing to compare (the step says SKIP)


class Verdict(NamedTuple):
    code: int
    summary: str
    numbers: dict

    @property
    def ok(self):
        return self.code == PASS

    @property
    def status(self):
        return {PASS: "PASS", NOTHING: "SKIP"}.get(self.code, "FAIL")


def verdict(summary, numbers, ok, problems=()):
    """PASS or FAIL; the problems, when any, lead the summary."""
    problems = list(problems)
    if problems:
        summary = "; ".join(problems) + " -- " + summary
    return Verdict(PASS if ok and not problems else FAIL, " ".join(str(summary).split()), numbers)


def rel(x, ref):
    return abs(x - ref) / abs(ref) if ref != 0 else abs(x)


# ---------------------------------------------------------------------------- gtest

def gtest(result_json):
    """occ_cuda_tests' --gtest_output JSON: at least one test, none failed, none skipped (a
    CUDA test skips only where it sees no GPU, so on the GPU machine every one must run)."""
    with open(result_json) as f:
        j = json.load(f)
    failed, skipped = [], []
    for suite in j.get("testsuites", []):
        for t in suite.get("testsuite", []):
            if t.get("failures"):
                failed.append(f"{suite.get('name')}.{t.get('name')}")
            elif t.get("result") == "SKIPPED":
                skipped.append(f"{suite.get('name')}.{t.get('name')}")
    n = int(j.get("tests", 0))
    nums = {"tests": n, "failures": int(j.get("failures", 0)), "errors": int(j.get("errors", 0)),
            "disabled": int(j.get("disabled", 0)), "skipped": len(skipped), "seconds": j.get("time"),
            "failed": failed[:20], "skipped_tests": skipped[:20]}
    ok = n > 0 and nums["failures"] == 0 and nums["errors"] == 0 and not skipped
    s = f"{n} tests, {nums['failures']} failed, {len(skipped)} skipped, {nums['disabled']} disabled"
    if failed:
        s += ": " + ", ".join(failed[:5]) + (" ..." if len(failed) > 5 else "")
    if skipped:
        s += "; skipped: " + ", ".join(skipped[:3]) + (" ..." if len(skipped) > 3 else "")
    if n == 0:
        s += " (no test ran)"
    return Verdict(PASS if ok else FAIL, s, nums)


def reference_cases(script):
    """The run_case calls of tests/cli/torch_reference.sh as {name: (check options, engine args)}:
    the GPU step runs exactly the CI's configurations."""
    with open(script) as f:
        text = f.read().replace("\\\n", " ")
    cases = {}
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("run_case ") or s.startswith("run_case()"):
            continue
        words = shlex.split(s, comments=True)
        if len(words) >= 4:
            cases[words[1]] = (words[2].split(), words[3:])
    return cases


# ---------------------------------------------------------------------------- losses and bytes

def losses(a_path, b_path, tol, after=0, expect=None):
    """Training losses of run B against run A, iteration by iteration (after `after`): within
    `tol` relative (0: bit-identical), and `expect` iterations compared."""
    A, B = read_jsonl(a_path), read_jsonl(b_path)
    la, lb = by_iter(A, "loss"), by_iter(B, "loss")
    its = sorted(i for i in set(la) & set(lb) if i > after)
    nums = {"iters_a": len(la), "iters_b": len(lb), "compared": len(its), "tolerance_rel": tol}
    problems = []
    if expect is not None and len(its) != expect:
        problems.append(f"compared {len(its)} iterations, expected {expect}")
    worst, worst_it, per = 0.0, None, []
    for i in its:
        r = rel(lb[i], la[i])
        per.append([i, la[i], lb[i], r])
        if r > worst or worst_it is None:
            worst, worst_it = r, i
        print(f"  iter {i:4d}  {la[i]:.8f}  {lb[i]:.8f}  rel {r:.2e}{'  > tol' if r > tol else ''}")
    nums.update(max_rel=worst, worst_iter=worst_it, per_iter=per)
    va, vb = by_iter(A, "val_loss"), by_iter(B, "val_loss")
    common = sorted(i for i in set(va) & set(vb) if i > after)
    if common:
        nums["val_max_rel"] = max(rel(vb[i], va[i]) for i in common)
    if not its:
        problems.append("no iteration in common")
    elif worst > tol:
        problems.append(f"iteration {worst_it}: relative difference {worst:.2e} > {tol:g}")
    s = f"{len(its)} iterations, max relative loss difference {worst:.2e} (iter {worst_it}, tolerance {tol:g})"
    if "val_max_rel" in nums:
        s += f", validation {nums['val_max_rel']:.2e}"
    pb = timer_peak(B, "peak_gpu_mib")
    if pb:
        nums["peak_gpu_mib_b"] = pb
        s += f"; B peak {pb:.1f} MiB on the GPU"
    return verdict(s, nums, True, problems)


def traffic_bytes(a_path, b_path):
    """Bytes per traffic class (summed over ranks) of every iteration: equal in A and B."""
    A, B = read_jsonl(a_path), read_jsonl(b_path)
    ba = {r["iter"]: r.get("bytes") for r in A if "iter" in r}
    bb = {r["iter"]: r.get("bytes") for r in B if "iter" in r}
    its = sorted(set(ba) & set(bb))
    diff = [i for i in its if ba[i] != bb[i]]
    nums = {"compared": len(its), "differing": diff[:10], "last_a": ba[its[-1]] if its else None,
            "last_b": bb[its[-1]] if its else None}
    if not its:
        return verdict("no iteration in common", nums, False)
    if diff or len(its) != len(ba) or len(its) != len(bb):
        i = diff[0] if diff else its[-1]
        return verdict(f"iteration {i}: bytes {bb[i]} vs {ba[i]} ({len(diff)} of {len(its)} iterations differ)",
                       nums, False)
    last = ", ".join(f"{k} {v}" for k, v in sorted(ba[its[-1]].items()) if v)
    return verdict(f"{len(its)} iterations, every class equal ({last} per iteration)", nums, True)


# ---------------------------------------------------------------------------- weights

def weights(a_path, b_path, spread_path, factor=4.0, floor=1e-5):
    """Final weights of run B (the GPU's) vs run A (the CPU's), per tensor, against what summation
    order alone does: C is the CPU run in another layout (tensor parallel 2 vs 1), which reorders
    sums and nothing else. Each tensor: max|B - A| <= max(factor * max|C - A|, floor * max|A|).
    The floor is for tensors whose two CPU layouts happen to agree: a GPU cannot be asked to
    reproduce the CPU's rounding bit for bit."""
    import numpy as np
    A, _ = read_safetensors(a_path)
    B, _ = read_safetensors(b_path)
    C, _ = read_safetensors(spread_path)
    problems = []
    for label, other in (("B", B), ("C (the other CPU layout)", C)):
        if set(A) != set(other):
            problems.append(f"tensor names differ between A and {label}: only in A {sorted(set(A) - set(other))[:3]}, "
                            f"only in {label.split()[0]} {sorted(set(other) - set(A))[:3]}")
    per, bad, on_floor, worst = [], [], 0, None
    for n in sorted(set(A) & set(B) & set(C)):
        x, y, z = (T[n].astype(np.float64) for T in (A, B, C))
        if x.shape != y.shape or x.shape != z.shape:
            problems.append(f"{n}: shapes {x.shape} / {y.shape} / {z.shape}")
            continue
        if x.size == 0:
            continue
        d_ab, d_ac, scale = float(np.max(np.abs(y - x))), float(np.max(np.abs(z - x))), float(np.max(np.abs(x)))
        bound = max(factor * d_ac, floor * scale)
        r = d_ab / bound if bound > 0 else (0.0 if d_ab == 0 else math.inf)
        floor_used = floor * scale > factor * d_ac
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
    ranked = sorted(per, key=lambda p: -p["ratio_to_bound"])
    for p in ranked[:12]:
        print(f"  {p['tensor']:48s} B-A {p['max_abs_diff']:.2e}  C-A {p['layouts_max_abs_diff']:.2e}  "
              f"max|A| {p['max_abs']:.2e}  {p['ratio_to_bound']:.2f} of the bound" + (" (floor)" if p["floor_used"] else ""))
    rel_ab = max((p["max_abs_diff"] / p["max_abs"] for p in per if p["max_abs"] > 0), default=0.0)
    rel_ac = max((p["layouts_max_abs_diff"] / p["max_abs"] for p in per if p["max_abs"] > 0), default=0.0)
    nums = {"tensors": len(per), "factor": factor, "floor_rel": floor, "worst": worst,
            "worst_ratio_to_bound": worst["ratio_to_bound"] if worst else None, "tensors_on_floor": on_floor,
            "max_rel_b_vs_a": rel_ab, "max_rel_c_vs_a": rel_ac, "beyond": [b["tensor"] for b in bad],
            "per_tensor": ranked[:20]}
    s = f"{len(per)} tensors, per tensor max|B-A| <= max({factor:g} x max|C-A|, {floor:g} x max|A|)"
    if worst:
        s += (f": worst {worst['tensor']} at {worst['ratio_to_bound']:.2f} of its bound "
              f"(B-A {worst['max_abs_diff']:.2e}, C-A {worst['layouts_max_abs_diff']:.2e}, max|A| {worst['max_abs']:.2e}"
              f"{', the floor' if worst['floor_used'] else ''})")
    s += (f"; {on_floor} tensors bounded by the floor; largest max|diff|/max|A|: B-A {rel_ab:.2e}, "
          f"C-A {rel_ac:.2e}")
    return verdict(s, nums, True, problems)


# ---------------------------------------------------------------------------- validation, precision, recompute

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
        p = timer_peak(rows, key)
        if p is not None:
            out[key] = p
    return out


def _val_compare(A, B, tol, expect_iters):
    va, vb = by_iter(A, "val_loss"), by_iter(B, "val_loss")
    its = sorted(set(va) & set(vb))
    per = [[i, va[i], vb[i], rel(vb[i], va[i])] for i in its]
    worst = max((p[3] for p in per), default=0.0)
    for i, x, y, r in per:
        print(f"  iter {i:4d}  val {x:.5f} (A)  {y:.5f} (B)  rel {r:.2e}{'  > tol' if r > tol else ''}")
    problems = []
    if not its:
        problems.append("no validation in common")
    if set(va) != set(vb):
        problems.append(f"evaluations differ: A at {sorted(va)}, B at {sorted(vb)}")
    ia, ib = max(by_iter(A, "loss"), default=0), max(by_iter(B, "loss"), default=0)
    if expect_iters is not None and (ia != expect_iters or ib != expect_iters):
        problems.append(f"runs reached iterations {ia} (A) and {ib} (B), not {expect_iters}")
    if not worst <= tol:
        problems.append(f"validation loss differs by {worst:.2%} > {tol:.0%}")
    nums = {"evaluations": len(its), "max_rel": worst, "per_eval": per, "tolerance_rel": tol,
            "a": timing(A), "b": timing(B), "iters_a": ia, "iters_b": ib}
    s = f"{len(its)} evaluations, max relative validation-loss difference {worst:.3%} (tolerance {tol:.0%})"
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


def validation(a_path, b_path, tol, expect_iters=None):
    """Validation losses of runs A and B at the same iterations, within `tol` relative."""
    s, nums, problems = _val_compare(read_jsonl(a_path), read_jsonl(b_path), tol, expect_iters)
    return verdict(s, nums, True, problems)


def precision(fp32_path, reduced_path, tol, kind, expect_iters=None):
    """An fp32 run A vs a --bf16/--fp16 run B of the same configuration: validation within `tol`,
    and the training losses NOT bit-identical (the format's rounding happened: every backend
    rounds, the CPU by bit-exact emulation); fp16 rows carry loss_scale and skipped_iters, and
    not every iteration is skipped."""
    A, B = read_jsonl(fp32_path), read_jsonl(reduced_path)
    s, nums, problems = _val_compare(A, B, tol, expect_iters)
    la, lb = by_iter(A, "loss"), by_iter(B, "loss")
    common = sorted(set(la) & set(lb))
    differ = [i for i in common if la[i] != lb[i]]
    nums.update(kind=kind, loss_iters_compared=len(common), loss_iters_differing=len(differ))
    if common:
        nums["loss_max_rel"] = max(rel(lb[i], la[i]) for i in common)
    if not common:
        problems.append("no training iteration in common")
    elif not differ:
        problems.append(f"--{kind} changed nothing: all {len(common)} training losses are bit-identical "
                        "to the fp32 run's (no rounding happened)")
    s += (f"; training losses differ from fp32 at {len(differ)}/{len(common)} iterations"
          + (f" (max rel {nums['loss_max_rel']:.2e})" if common else ""))
    if kind == "fp16":
        scaled = [r for r in B if "loss" in r]
        have = [r for r in scaled if "loss_scale" in r and "skipped_iters" in r]
        if not scaled or len(have) != len(scaled):
            problems.append(f"{len(scaled) - len(have)} of {len(scaled)} fp16 metrics rows lack loss_scale/skipped_iters")
        if have:
            last = have[-1]
            nums.update(final_loss_scale=float(last["loss_scale"]), skipped_iters=int(last["skipped_iters"]),
                        loss_scales=sorted({float(r["loss_scale"]) for r in have}))
            s += f"; fp16: final loss scale {last['loss_scale']:g}, {last['skipped_iters']} iterations skipped"
            if int(last["skipped_iters"]) >= len(have):
                problems.append(f"every fp16 iteration was skipped ({last['skipped_iters']})")
            if not (math.isfinite(float(last["loss_scale"])) and float(last["loss_scale"]) > 0):
                problems.append(f"final loss scale {last['loss_scale']}")
    bad = [i for i in lb if not math.isfinite(lb[i])]
    if bad:
        problems.append(f"non-finite {kind} training loss at iterations {bad[:5]}")
    return verdict(s, nums, True, problems)


def recompute(none_path, selective_path, full_path, peak_key="peak_gpu_mib", expect=None):
    """Three runs of one configuration (no recomputation, selective, full): losses, gradient norms
    and validation losses bit-identical, and the peak tensor memory strictly falling."""
    runs = [("none", read_jsonl(none_path)), ("selective", read_jsonl(selective_path)), ("full", read_jsonl(full_path))]

    def key(rows):
        return [(int(r["iter"]), repr(r.get("loss")), repr(r.get("grad_norm")), repr(r.get("val_loss")))
                for r in rows if "iter" in r]

    base = key(runs[0][1])
    nums, problems = {"iterations": len(base), "peak_key": peak_key}, []
    if expect is not None and len(base) != expect:
        problems.append(f"{len(base)} iterations in the base run, expected {expect}")
    for name, rows in runs[1:]:
        k = key(rows)
        if k != base:
            first = next((x for x, y in zip(base, k) if x != y), None)
            problems.append(f"{name}: losses differ from no recompute ({len(k)} vs {len(base)} rows; first: {first})")
        nums[name + "_identical"] = k == base
    peaks = {name: timer_peak(rows, peak_key) for name, rows in runs}
    nums["peak_mib"] = peaks
    if any(v is None for v in peaks.values()):
        problems.append(f"timers.{peak_key} missing from some run's metrics: {peaks}")
    elif not peaks["none"] > peaks["selective"] > peaks["full"]:
        problems.append(f"{peak_key} does not fall none > selective > full: "
                        f"{peaks['none']:.2f} / {peaks['selective']:.2f} / {peaks['full']:.2f} MiB")
    same = all(nums.get(n + "_identical") for n in ("selective", "full"))
    s = f"{len(base)} iterations: losses, grad norms and val losses bit-identical for none/selective/full: {'yes' if same else 'NO'}"
    if all(v is not None for v in peaks.values()):
        s += f"; {peak_key} none {peaks['none']:.2f} > selective {peaks['selective']:.2f} > full {peaks['full']:.2f} MiB"
    return verdict(s, nums, True, problems)


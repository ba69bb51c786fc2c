"""The benchmark matrix (issue 29): `optimus-cc bench` and bench/torch_step.py (PyTorch eager
+ SDPA, and torch.compile) on GPT-2 small (12 x 768) and medium (24 x 1024), seq 1024,
vocabulary 50304, bf16, at micro-batch 8 and at the largest micro-batch that fits each
engine; the op profile of our step at both sizes; the speed targets against torch.compile.
The quick stand-in: 2 x 64, seq 64, micro-batch 2 and at most 4.
"""

import os
import shutil
import time

from occtools.gpu_check import bench_verdicts as bv
from occtools.gpu_check.steps import ENGINES, Step, bench_step_name, register
from occtools.gpu_check.verdicts import NOTHING, Verdict

SHAPES = {"small": ("12", "768", "12"), "medium": ("24", "1024", "16")}


def settings(ctx):
    """(micro-batch, the cap on the largest, PyTorch's steps at micro-batch 8, at the largest)."""
    if ctx.quick:
        steps = ["--steps", 2, "--warmup", 1, "--repeats", 2]
        return 2, 4, steps, steps
    return 8, 64, ["--steps", 10, "--warmup", 3, "--repeats", 3], ["--steps", 5, "--warmup", 2, "--repeats", 2]


def shape_flags(ctx, size, occ, mb):
    L, C, H = SHAPES[size]
    s = ["--num-layers", L, "--hidden-size", C, "--num-attention-heads", H, "--seq-length", 1024, "--vocab-size", 50304]
    t = 1024
    if ctx.quick:
        t, s = 64, ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4, "--seq-length", 64,
                    "--vocab-size", 4096]
    return s + (["--max-position-embeddings", t] if occ else []) + ["--micro-batch-size", mb]


def run_bench(ctx, name, engine, size, mb, cap, extra):
    """One benchmark run into W/NAME.json, its output in LOGS/NAME.log."""
    log, out = ctx.log(name), ctx.w(name + ".json")
    if engine == "occ":
        return ctx.eng(log, cap, "bench", *ctx.devflags("bench", ctx.gdev), "--bf16", *shape_flags(ctx, size, True, mb),
                       *extra, "--json", out)
    sdpa = ["--sdpa"] if ctx.machine.probe.get("sdpa") else []
    compile_ = ["--compile"] if engine == "torch_compile" else []
    return ctx.py(log, cap, os.path.join(ctx.bundle, "bench", "torch_step.py"), "--device", ctx.gdev, "--dtype", "bf16",
                  *sdpa, *compile_, *extra, *shape_flags(ctx, size, False, mb), "--json", out)


def bench_verdict(ctx, name, engine, t0, f, cap, note="", log=None):
    """Records a benchmark run: its numbers, checked (ours: the device and bf16 in its JSON)."""
    log = log or ctx.log(name)
    if f is not None and f.timed_out and f.timeout < cap:
        return ctx.record(name, "SKIP", t0, f"time budget spent: stopped after the {f.timeout:.0f} s left of it "
                                            f"(the run may take {cap:.0f} s)", log=log)
    if f is not None and not f.ok:
        return ctx.record(name, "FAIL", t0, f"{f.why()}{f' ({note})' if note else ''}: {ctx.tail(log)}", log=log)
    if engine == "occ":
        v = ctx.judge(name, bv.bench, ctx.w(name + ".json"), "cuda" if ctx.gdev == "cuda" else None, "bf16")
        what = (f"optimus-cc bench; {ctx.grep(log, '^bench: device')}; {ctx.grep(log, '^bench: attention')[:70]}")
    else:
        v = ctx.judge(name, bv.bench, ctx.w(name + ".json"))
        what = ("PyTorch bf16 autocast, " + ("torch.compile" if engine == "torch_compile" else "eager")
                + (", SDPA" if ctx.machine.probe.get("sdpa") else ""))
    ctx.record_verdict(name, t0, Verdict(v.code, f"{v.summary} ({what}{'; ' + note if note else ''})", v.numbers),
                       log=log)


def bench_mb8(ctx, step, engine, size):
    t0 = time.monotonic()
    if engine == "occ":
        if ctx.devflags("bench", ctx.gdev) is None or not ctx.has_flag("bench", "--bf16"):
            return ctx.record(step.name, "SKIP", t0, "optimus-cc bench has no --device / --bf16")
        extra = ["--steps", 5, "--warmup", 2, "--repeats", 3, "--no-peak"]
    else:
        if engine == "torch_compile" and not ctx.machine.probe.get("compile"):
            return ctx.record(step.name, "SKIP", t0, "this torch has no torch.compile")
        extra = settings(ctx)[2]
    mb = settings(ctx)[0]
    f = run_bench(ctx, step.name, engine, size, mb, step.caps[0], extra)
    bench_verdict(ctx, step.name, engine, t0, f, step.caps[0])


def bench_mbmax(ctx, step, engine, size):
    """The engine at the largest micro-batch predicted to fit it (bench_verdicts.fit_micro_batch),
    halved once where it runs out of memory; where micro-batch 8 is already the largest, its run stands."""
    t0 = time.monotonic()
    base = bench_step_name(engine, size)
    mb8, cap_mb, _, torch_steps = settings(ctx)
    st = ctx.statuses().get(base, ("not run", ""))[0]
    if st != "PASS":
        return ctx.record(step.name, "SKIP", t0, f"needs {base} (micro-batch {mb8}) to pass first: {st}")
    fit = ctx.judge(step.name, bv.fit_micro_batch, ctx.w(base + ".json"), cap_mb, 0.1, ctx.machine.probe.get("gpu_mib"))
    note = fit.summary
    if fit.code == NOTHING:
        shutil.copy(ctx.w(base + ".json"), ctx.w(step.name + ".json"))
        return bench_verdict(ctx, step.name, engine, t0, None, 0, note, ctx.log(base))
    if not fit.ok:
        return ctx.record(step.name, "FAIL", t0, f"fit-micro-batch: {note}")
    mb = int(fit.numbers["micro_batch"])
    extra = ["--steps", 3, "--warmup", 1, "--repeats", 2, "--no-peak"] if engine == "occ" else torch_steps
    f = run_bench(ctx, step.name, engine, size, mb, step.caps[0], extra)
    if not f.ok and ctx.grep(ctx.log(step.name), r"(?i)out of (gpu )?memory|OutOfMemoryError"):
        half = mb // 2
        half = half // 8 * 8 if half >= 8 else half
        if half <= mb8:
            shutil.copy(ctx.w(base + ".json"), ctx.w(step.name + ".json"))
            f, note = None, f"out of memory at micro-batch {mb}, the micro-batch-{mb8} run stands; {note}"
        else:
            note = f"out of memory at micro-batch {mb}, halved to {half}; {note}"
            f = run_bench(ctx, step.name, engine, size, half, step.caps[1], extra)
    bench_verdict(ctx, step.name, engine, t0, f, step.caps[0], note)


def profile(ctx, step, size):
    """bench --op-profile 3: every backend call timed alone; the share of the step per op family."""
    t0, log = time.monotonic(), ctx.log(step.name)
    df = ctx.devflags("bench", ctx.gdev)
    if df is None or not ctx.has_flag("bench", "--op-profile"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc bench has no --device / --op-profile")
    f = ctx.eng(log, step.caps[0], "bench", *df, "--bf16", *shape_flags(ctx, size, True, settings(ctx)[0]), "--steps", 3,
                "--warmup", 1, "--repeats", 1, "--no-peak", "--op-profile", 3, "--json", ctx.w(step.name + ".json"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"optimus-cc bench --op-profile: {f.why()}: {ctx.tail(log)}", log=log)
    ctx.record_verdict(step.name, t0, ctx.judge(step.name, bv.op_profile, ctx.w(step.name + ".json")), log=log)


def speed_targets(ctx, step, size, suffix):
    """Issue 29's targets from this call's runs; SKIP when a run they need was skipped; the CPU
    stand-in reports the numbers without a verdict (they are the H200's)."""
    t0 = time.monotonic()
    v = ctx.judge(step.name, bv.speed_targets, ctx.statuses(), ctx.work, size, suffix, ctx.gdev == "cpu")
    ctx.record_verdict(step.name, t0, v, log=os.path.join(ctx.logs, step.name + ".verdict.log"))


# ---- registration: predicted seconds on an H200 (docs/results/gpu-check-h200-c770686.md: PyTorch
# eager 15 / 17 s, torch.compile 39 / 70 s, ours 5 / 13 s at small / medium), caps per command ----
MB8 = {"occ": (150, 1, {"small": 8, "medium": 14}), "torch": (150, 2, {"small": 15, "medium": 18}),
       "torch_compile": (200, 1, {"small": 40, "medium": 70})}
# At the largest micro-batch the targets compare ours with torch.compile; eager is for scale only,
# so it is what the budget drops first.
MBMAX = {"occ": (3, {"small": 12, "medium": 22}), "torch": (4, {"small": 20, "medium": 30}),
         "torch_compile": (3, {"small": 45, "medium": 75})}
for _size in ("small", "medium"):
    for _engine in ENGINES:
        _cap, _prio, _pred = MB8[_engine]
        _needs = ("gpu",) if _engine == "occ" else ("gpu", "torch-cuda")
        _who = {"occ": "optimus-cc bench", "torch": "PyTorch eager", "torch_compile": "torch.compile"}[_engine]
        register(Step(bench_step_name(_engine, _size), lambda c, s, e=_engine, z=_size: bench_mb8(c, s, e, z),
                      f"{_who} at GPT-2 {_size}, micro-batch 8: tokens/s, MFU, peak memory", priority=_prio,
                      predicted_s=_pred[_size], caps=(_cap,), needs=_needs, quick_s=8))
        _prio, _pred = MBMAX[_engine]
        register(Step(bench_step_name(_engine, _size, True), lambda c, s, e=_engine, z=_size: bench_mbmax(c, s, e, z),
                      f"{_who} at GPT-2 {_size}, the largest micro-batch that fits", priority=_prio,
                      predicted_s=_pred[_size], caps=(_cap, _cap), needs=_needs, quick_s=8))
    register(Step(f"profile_occ_{_size}", lambda c, s, z=_size: profile(c, s, z), f"bench --op-profile at GPT-2 {_size}: "
                  "each op's share of the step", priority=1, predicted_s={"small": 12, "medium": 25}[_size], caps=(120,),
                  quick_s=6))
    for _sfx, _prio in (("", 1), ("_mbmax", 3)):
        register(Step(f"speed_targets_{_size}{_sfx}", lambda c, s, z=_size, x=_sfx: speed_targets(c, s, z, x),
                      f"ours vs torch.compile at GPT-2 {_size}{' (largest micro-batches)' if _sfx else ''}: tokens/s >= "
                      "1.0x, MFU >= 35 % at medium, peak memory <= 1.1x", priority=_prio, predicted_s=1, caps=(),
                      needs=("gpu",), quick_s=1))

"""The second call's single-rank checks: the PyTorch reference on the GPU engine, fp32
GPU vs CPU (the final weights bounded by two CPU layouts), checkpoints across backends,
the bundle's mpirun, recomputation, and fp16 against fp32. (docs/gpu.md, section 3.)
"""

import os
import re
import time

from occtools.gpu_check import verdicts
from occtools.gpu_check.context import copy_checkpoint
from occtools.gpu_check.steps import Step, register


def _checker_numbers(log):
    """check_against_torch.py's worst tensor ratio and worst loss difference, from its table lines."""
    ratio = loss = 0.0
    try:
        with open(log, errors="replace") as f:
            for line in f:
                w = line.split()
                if len(w) == 5 and w[4] in ("ok", "FAIL") and re.fullmatch(r"[0-9.]+(e[-+][0-9]+)?", w[3]):
                    ratio = max(ratio, float(w[3]))
                if len(w) == 8 and w[7] in ("ok", "FAIL") and w[0].isdigit():
                    loss = max(loss, float(w[6]))
    except (OSError, ValueError):
        pass
    return ratio, loss


def torch_reference(ctx, step):
    """tests/cli/torch_reference.sh's run_case configurations, reference-dump on the GPU side,
    against check_against_torch.py (float64 PyTorch): within 1e-4 x max per tensor."""
    t0 = time.monotonic()
    df = ctx.devflags("reference-dump", ctx.gdev)
    if df is None:
        return ctx.record(step.name, "SKIP", t0, "optimus-cc reference-dump has no --device")
    try:
        cases = verdicts.reference_cases(os.path.join(ctx.bundle, "tests", "cli", "torch_reference.sh"))
    except OSError as e:
        cases, err = {}, str(e)
    else:
        err = "no run_case found"
    if not cases:
        return ctx.record(step.name, "FAIL", t0, f"tests/cli/torch_reference.sh: {err}")
    checker = os.path.join(ctx.bundle, "tests", "reference", "check_against_torch.py")
    for cname, (checkopts, args) in cases.items():
        t1, name, log, dump = time.monotonic(), f"{step.name}_{cname}", ctx.log(f"{step.name}_{cname}"), ctx.w(f"ref_{cname}.safetensors")
        f = ctx.eng(log, step.caps[0], "reference-dump", *df, "--out", dump, *args)
        if not f.ok:
            ctx.record(name, "FAIL", t1, f"reference-dump {' '.join(df)}: {f.why()}: {ctx.tail(log)}", log=log)
            continue
        f = ctx.py(log, step.caps[1], checker, dump, *checkopts, "--", *args)
        ratio, lrel = _checker_numbers(log)
        nums = {"max_tensor_ratio": ratio, "max_loss_rel": lrel, "tolerance": 1e-4, "device": ctx.gdev}
        if f.ok:
            ctx.record(name, "PASS", t1, f"logits/loss/gradients within {ratio:.2e} x max|torch|, losses within "
                                         f"{lrel:.2e} relative (tolerance 1e-4), --device {ctx.gdev}, {ctx.python}", nums)
        else:
            first = "; ".join(l.strip() for l in open(log, errors="replace") if l.startswith("  - "))[:300]
            ctx.record(name, "FAIL", t1, f"check_against_torch.py {f.why()}: {first}", nums, log)


def fp32_gpu_vs_cpu(ctx, step):
    """20 iterations with dropout, GPU vs CPU: losses within 1e-5; final weights per tensor within
    max(4 x the CPU TP1-vs-TP2 difference, 1e-5 x max|w|) (summation order's own effect)."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg, dc = ctx.devflags("train", ctx.gdev), ctx.devflags("train", "cpu")
    if dg is None or dc is None:
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device")
    for i, (dev, df) in enumerate((("gpu", dg), ("cpu", dc))):
        f = ctx.eng(log, step.caps[2 * i], "train", *df, *ctx.small(), "--train-iters", 20, "--eval-interval", 10, "--save",
                    ctx.w(f"c_{dev}"), "--save-interval", 20, "--metrics", ctx.w(f"c_{dev}.jsonl"))
        if not f.ok:
            return ctx.record(step.name, "FAIL", t0, f"{dev} run: {f.why()}: {ctx.tail(log)}", log=log)
        f = ctx.eng(log, step.caps[2 * i + 1], "export", "--load", ctx.w(f"c_{dev}"), "--out", ctx.w(f"c_{dev}.safetensors"))
        if not f.ok:
            return ctx.record(step.name, "FAIL", t0, f"export of the {dev} checkpoint failed: {ctx.tail(log)}", log=log)
    loss = ctx.judge(step.name, verdicts.losses, ctx.w("c_cpu.jsonl"), ctx.w("c_gpu.jsonl"), 1e-5, 0, 20)
    f = ctx.mpirun(log, step.caps[4], 2, *dc, *ctx.small(), "--train-iters", 20, "--eval-interval", 10,
                   "--tensor-model-parallel-size", 2, "--save", ctx.w("c_tp2"), "--save-interval", 20)
    if f.ok:
        f = ctx.eng(log, step.caps[5], "export", "--load", ctx.w("c_tp2"), "--out", ctx.w("c_tp2.safetensors"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"losses: {loss.summary}; final weights: not judged: the CPU TP2 run "
                                                 f"that bounds them failed: {ctx.tail(log)}", {"losses": loss.numbers}, log)
    w = ctx.judge(step.name, verdicts.weights, ctx.w("c_cpu.safetensors"), ctx.w("c_gpu.safetensors"),
                  ctx.w("c_tp2.safetensors"), 4.0, 1e-5)
    ok = loss.ok and w.ok
    ctx.record(step.name, "PASS" if ok else "FAIL", t0, f"losses: {loss.summary}; final weights (A CPU, B --device "
               f"{ctx.gdev}, C CPU TP2): {w.summary}", {"losses": loss.numbers, "weights": w.numbers},
               None if ok else os.path.join(ctx.logs, step.name + ".verdict.log"))


def resume(ctx, step):
    """The iteration-5 checkpoint of one backend resumed on the other: iterations 6-10 within 1e-5."""
    t0, log, n = time.monotonic(), ctx.log(step.name), 5
    dg, dc = ctx.devflags("train", ctx.gdev), ctx.devflags("train", "cpu")
    if dg is None or dc is None:
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device")
    flags = ctx.small() + ["--num-layers", 2, "--train-iters", 2 * n, "--eval-interval", n, "--eval-iters", 1,
                           "--save-interval", n]
    devs = {"gpu": dg, "cpu": dc}
    for dev, df in devs.items():
        f = ctx.eng(log, step.caps[0], "train", *df, *flags, "--save", ctx.w(f"f_{dev}"), "--metrics", ctx.w(f"f_{dev}.jsonl"))
        if not f.ok:
            return ctx.record(f"{step.name}_gpu_to_cpu", "FAIL", t0, f"straight {dev} run: {f.why()}: {ctx.tail(log)}",
                              log=log)
    for src, dst in (("gpu", "cpu"), ("cpu", "gpu")):
        t1, d = time.monotonic(), ctx.w(f"f_{src}_to_{dst}")
        copy_checkpoint(ctx.w(f"f_{src}"), n, d)
        f = ctx.eng(log, step.caps[1], "train", *devs[dst], *flags, "--load", d, "--save", d, "--metrics", d + ".jsonl")
        name = f"{step.name}_{src}_to_{dst}"
        if not f.ok:
            ctx.record(name, "FAIL", t1, f"resume on {dst}: {f.why()}: {ctx.tail(log)}", log=log)
            continue
        v = ctx.judge(name, verdicts.losses, ctx.w(f"f_{src}.jsonl"), d + ".jsonl", 1e-5, n, n)
        ctx.record_verdict(name, t1, v, f"iterations {n + 1}-{2 * n} resumed on {dst} from {src}'s iteration-{n} "
                                        f"checkpoint vs the uninterrupted {src} run: ", log)


def mpi_pipeline_2ranks(ctx, step):
    """The bundle's mpirun, orted and components on that machine: 2 ranks, pipeline 2, CPU backend."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dc = ctx.devflags("train", "cpu")
    if dc is None or ctx.devflags("train", ctx.gdev) is None:
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device")
    metrics = ctx.w("mpi.jsonl")
    f = ctx.mpirun(log, step.caps[0], 2, *dc, *ctx.small(), "--num-layers", 2, "--train-iters", 3, "--eval-interval", 3,
                   "--eval-iters", 1, "--pipeline-model-parallel-size", 2, "--metrics", metrics)
    rows = sum(1 for _ in open(metrics)) if os.path.exists(metrics) else 0
    if not f.ok or rows != 3:
        return ctx.record(step.name, "FAIL", t0, f"mpirun -np 2 ({' '.join(dc)}): {f.why()}, {rows} metrics rows: "
                                                 f"{ctx.tail(log)}", log=log)
    ctx.record(step.name, "PASS", t0, f"the bundle's mpirun ran 2 ranks on one machine ({' '.join(dc)}), 3 iterations: "
                                      f"{ctx.grep(log, '^iter 3/3')[:90]}")


def recompute(ctx, step):
    """10 iterations with no recomputation, selective and full: bit-identical losses, the peak of the
    engine's GPU tensors falling none > selective > full (peak_tensor_mib on the CPU stand-in)."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg = ctx.devflags("train", ctx.gdev)
    if dg is None or not ctx.has_flag("train", "--recompute-granularity"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device / --recompute-granularity")
    for g in ("none", "selective", "full"):
        rf = [] if g == "none" else ["--recompute-granularity", g]
        f = ctx.eng(log, step.caps[0], "train", *dg, *ctx.small(), "--train-iters", 10, "--eval-interval", 5,
                    "--eval-iters", 1, *rf, "--metrics", ctx.w(f"r_{g}.jsonl"))
        if not f.ok:
            return ctx.record(step.name, "FAIL", t0, f"{g} run: {f.why()}: {ctx.tail(log)}", log=log)
    key = "peak_gpu_mib" if ctx.gdev == "cuda" else "peak_tensor_mib"
    v = ctx.judge(step.name, verdicts.recompute, ctx.w("r_none.jsonl"), ctx.w("r_selective.jsonl"), ctx.w("r_full.jsonl"),
                  key, 10)
    ctx.record(step.name, v.status, t0, f"{v.summary} (4 x 64, dropout 0.1, --device {ctx.gdev})", v.numbers,
               None if v.ok else os.path.join(ctx.logs, step.name + ".verdict.log"))


def fp16_vs_fp32(ctx, step):
    """40 iterations, --fp16 (initial loss scale 2^16) vs fp32: validation within 1 %, losses not
    bit-identical, loss_scale and skipped_iters in every row, not every iteration skipped."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg = ctx.devflags("train", ctx.gdev)
    if dg is None or not ctx.has_flag("train", "--fp16"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device / --fp16")
    flags = ctx.small() + ["--train-iters", 40, "--eval-interval", 20, "--eval-iters", 2]
    # From 2^16, not Megatron's 2^32: its first ~10 iterations would overflow and be skipped.
    ls = ["--initial-loss-scale", 65536] if ctx.has_flag("train", "--initial-loss-scale") else []
    for i, (run, extra) in enumerate((("fp16", ["--fp16", *ls]), ("fp32", []))):
        f = ctx.eng(log, step.caps[i], "train", *dg, *flags, *extra, "--metrics", ctx.w(f"h_{run}.jsonl"))
        if not f.ok:
            return ctx.record(step.name, "FAIL", t0, f"{run} run: {f.why()}: {ctx.tail(log)}", log=log)
    v = ctx.judge(step.name, verdicts.precision, ctx.w("h_fp32.jsonl"), ctx.w("h_fp16.jsonl"), 0.01, "fp16", 40)
    ctx.record(step.name, v.status, t0, f"{v.summary} (A fp32, B fp16; 40 iterations of 4 x 64, --device {ctx.gdev})",
               v.numbers, None if v.ok else os.path.join(ctx.logs, step.name + ".verdict.log"))


# Predicted seconds on an H200: docs/results/gpu-check-h200-c770686.md (torch_reference 36, fp32 3,
# resume 3, mpi 1, recompute 2, fp16 3; the CPU TP2 run and exports added here).
register(Step("torch_reference", torch_reference, "tests/cli/torch_reference.sh's cases on the GPU engine vs float64 "
              "PyTorch: within 1e-4 x max", priority=2, predicted_s=40, caps=(120, 300) * 3, needs=("gpu", "torch")))
register(Step("fp32_gpu_vs_cpu", fp32_gpu_vs_cpu, "fp32, 20 iterations: losses within 1e-5, final weights within 4x the "
              "CPU layouts' spread", priority=2, predicted_s=15, caps=(150, 60, 150, 60, 60, 60), needs=("gpu", "numpy")))
register(Step("resume", resume, "a checkpoint of one backend resumed on the other: within 1e-5", priority=2,
              predicted_s=6, caps=(120, 120, 120, 120)))
register(Step("mpi_pipeline_2ranks", mpi_pipeline_2ranks, "the bundle's mpirun: 2 ranks, pipeline 2", priority=2,
              predicted_s=3, caps=(120,)))
register(Step("recompute", recompute, "recomputation none / selective / full: bit-identical, peak memory falling",
              priority=2, predicted_s=4, caps=(90, 90, 90)))
register(Step("fp16_vs_fp32", fp16_vs_fp32, "--fp16 vs fp32, 40 iterations: validation within 1 %", priority=2,
              predicted_s=4, caps=(90, 90)))

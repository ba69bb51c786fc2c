"""The first call's correctness steps: every CUDA kernel against its CPU twin, the
tensor-core flash attention against its fused fp32 twin in training, and bf16 against
fp32 at GPT-2-small shape. (docs/gpu.md, section 3, says what each asserts.)
"""

import os
import time

from occtools.gpu_check import verdicts
from occtools.gpu_check.context import copy_checkpoint
from occtools.gpu_check.steps import Step, register


def cuda_kernel_tests(ctx, step):
    """occ_cuda_tests: at least one test, none failed, none skipped (a test skips only without a GPU)."""
    t0, log, result = time.monotonic(), ctx.log(step.name), ctx.w("cuda_tests.json")
    f = ctx.run([os.path.join(ctx.bundle, "run.sh"), "occ_cuda_tests", f"--gtest_output=json:{result}"],
                step.caps[0], log, what="occ_cuda_tests")
    if not os.path.exists(result) or os.path.getsize(result) == 0:
        return ctx.record(step.name, "FAIL", t0, f"occ_cuda_tests {f.why()}, no result file: {ctx.tail(log)}", log=log)
    v = ctx.judge(step.name, verdicts.gtest, result)
    prefix = "" if f.ok else f"occ_cuda_tests {f.why()}: "
    status = "PASS" if f.ok and v.ok else "FAIL"
    ctx.record(step.name, status, t0, prefix + v.summary, v.numbers, None if status == "PASS" else log)


def attention_flash_vs_fused(ctx, step):
    """4 x 128 (head dim 64), bf16, dropout 0.1, 40 iterations: --attention-backend flash vs fused;
    training loss within 2 % every iteration, validation within 1 %, each run's start line, and
    flash resumed from iteration 20 bit-identical. The CPU stand-in runs auto vs auto."""
    t0 = time.monotonic()
    dg = ctx.devflags("train", ctx.gdev)
    if dg is None or not ctx.has_flag("train", "--bf16"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device / --bf16")
    flash, fused = ["--attention-backend", "flash"], ["--attention-backend", "fused"]
    want_flash, want_fused, what = "^attention: tensor-core flash", "^attention: fused flash-style", "flash vs fused"
    if ctx.gdev == "cpu":
        flash, fused, want_flash, want_fused = [], [], "^attention: ", "^attention: "
        what = "CPU stand-in: auto vs auto (the CPU has one attention)"
    elif not ctx.has_flag("train", "--attention-backend"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --attention-backend")
    n, k, layers = (12, 6, 2) if ctx.quick else (40, 20, 4)
    flags = ctx.data_flags() + ["--num-layers", layers, "--hidden-size", 128, "--num-attention-heads", 2,
                                "--seq-length", 64, "--max-position-embeddings", 64, "--micro-batch-size", 4,
                                "--global-batch-size", 8, "--hidden-dropout", 0.1, "--attention-dropout", 0.1,
                                "--seed", 1234, "--eval-iters", 2, "--eval-interval", k, "--log-interval", 10, "--bf16",
                                "--train-iters", n]
    ck = ctx.w("a_ck")
    runs = {"flash": flash + ["--save", ck, "--save-interval", k], "fused": fused, "resumed": flash + ["--load", ctx.w(f"a_ck{k}")]}
    for i, (run, extra) in enumerate(runs.items()):
        if run == "resumed":
            copy_checkpoint(ck, k, ctx.w(f"a_ck{k}"))
        log = ctx.log(f"{step.name}_{run}")
        f = ctx.eng(log, step.caps[i], "train", *dg, *flags, *extra, "--metrics", ctx.w(f"a_{run}.jsonl"))
        if not f.ok:
            return ctx.record(step.name, "FAIL", t0, f"{run} run: {f.why()}: {ctx.tail(log)}", log=log)
    problems = []
    lines = {}
    for run, want in (("flash", want_flash), ("fused", want_fused)):
        lines[run] = ctx.grep(ctx.log(f"{step.name}_{run}"), "^attention: ")[:90]
        if not ctx.grep(ctx.log(f"{step.name}_{run}"), want):
            problems.append(f"the {run} run's start line is '{lines[run] or 'none'}'")
    curve = ctx.judge(step.name, verdicts.losses, ctx.w("a_fused.jsonl"), ctx.w("a_flash.jsonl"), 0.02, 0, n)
    val = ctx.judge(step.name, verdicts.validation, ctx.w("a_fused.jsonl"), ctx.w("a_flash.jsonl"), 0.01, n)
    resume = ctx.judge(step.name, verdicts.losses, ctx.w("a_flash.jsonl"), ctx.w("a_resumed.jsonl"), 0.0, k, n - k)
    ok = curve.ok and val.ok and resume.ok and not problems
    summary = (("; ".join(problems) + "; ") if problems else "") + (
        f"{what} ({layers} x 128, 2 heads, bf16, dropout 0.1, {n} iterations; '{lines['flash']}'): training losses "
        f"(A fused, B flash): {curve.summary}; validation: {val.summary}; flash resumed from iteration {k} vs "
        f"uninterrupted: {resume.summary}")
    nums = {"curve": curve.numbers, "validation": val.numbers, "resume": resume.numbers}
    ctx.record(step.name, "PASS" if ok else "FAIL", t0, summary, nums, None if ok else ctx.log(f"{step.name}_flash"))


def bf16_vs_fp32(ctx, step):
    """GPT-2-small shape (12 x 768, seq 1024, batch 8), --bf16-iters iterations, --bf16 vs fp32:
    validation within 1 % at every evaluation, training losses not bit-identical."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg = ctx.devflags("train", ctx.gdev)
    if dg is None or not ctx.has_flag("train", "--bf16"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device / --bf16")
    iters, ev = ctx.bf16_iters, 50
    flags = ctx.data_flags() + ["--num-layers", 12, "--hidden-size", 768, "--num-attention-heads", 12, "--seq-length",
                                1024, "--max-position-embeddings", 1024, "--micro-batch-size", 8, "--global-batch-size", 8,
                                "--lr", "6e-4", "--min-lr", "6e-5", "--lr-warmup-iters", 30, "--eval-iters", 4,
                                "--log-interval", 50, "--seed", 1234]
    shape = "GPT-2-small shape (12 x 768, seq 1024), global batch 8"
    if ctx.quick:
        iters, ev, shape = 20, 5, "quick: 2 x 64, seq 64, global batch 8"
        flags = ctx.data_flags() + ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4, "--seq-length", 64,
                                    "--max-position-embeddings", 64, "--micro-batch-size", 4, "--global-batch-size", 8,
                                    "--eval-iters", 2, "--log-interval", 5, "--seed", 1234]
    flags += ["--train-iters", iters, "--eval-interval", ev]
    secs = {}
    for i, (run, extra) in enumerate((("bf16", ["--bf16"]), ("fp32", []))):
        t1 = time.monotonic()
        f = ctx.eng(log, step.caps[i], "train", *dg, *flags, *extra, "--metrics", ctx.w(f"d_{run}.jsonl"))
        secs[run] = time.monotonic() - t1
        if not f.ok:
            if run == "bf16":
                return ctx.record(step.name, "FAIL", t0, f"bf16 run: {f.why()} after {secs[run]:.0f} s: {ctx.tail(log)}",
                                  log=log)
            failed = f"fp32 run: {f.why()}; "
            break
    else:
        failed = ""
    v = ctx.judge(step.name, verdicts.precision, ctx.w("d_fp32.jsonl"), ctx.w("d_bf16.jsonl"), 0.01, "bf16", iters)
    runs = (f"bf16 run {secs['bf16']:.0f} s, fp32 run {secs.get('fp32', 0):.0f} s ({iters} iterations, {shape}, "
            f"evaluation every {ev})")
    ok = v.ok and not failed
    ctx.record(step.name, "PASS" if ok else "FAIL", t0, f"{failed}{v.summary} (A fp32, B bf16); {runs}", v.numbers,
               None if ok else log)


register(Step("cuda_kernel_tests", cuda_kernel_tests, "occ_cuda_tests: every CUDA kernel against its CPU twin, none "
              "skipped", priority=1, predicted_s=75, caps=(240,), needs=("cuda", "cuda-tests"), quick_s=0))
register(Step("attention_flash_vs_fused", attention_flash_vs_fused, "training with the tensor-core flash attention vs "
              "its fused fp32 twin: losses within 2 %, validation within 1 %, resume bit-identical", priority=2,
              predicted_s=20, caps=(90, 90, 90), quick_s=15))
register(Step("bf16_vs_fp32", bf16_vs_fp32, "GPT-2-small shape, 300 iterations: --bf16 vs fp32 validation within 1 %",
              priority=2, predicted_s=90, caps=(150, 240), quick_s=15))

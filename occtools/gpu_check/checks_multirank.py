"""The second call's multi-rank checks (issue 15): 4 ranks sharing the GPU in the 3-D
layouts (host-staged MPI), the paper's techniques at P2 D2 on the GPU, the byte methods'
kernels in training, and the NCCL communicator. (docs/gpu.md, section 3.)
"""

import os
import time

from occtools.gpu_check import verdicts
from occtools.gpu_check.context import copy_checkpoint
from occtools.gpu_check.steps import Step, register

LAYOUTS = {"t1p2d2": ["--pipeline-model-parallel-size", 2],
           "t2p2d1": ["--tensor-model-parallel-size", 2, "--pipeline-model-parallel-size", 2],
           "t2p1d2": ["--tensor-model-parallel-size", 2],
           "t2p2d1sp": ["--tensor-model-parallel-size", 2, "--pipeline-model-parallel-size", 2, "--sequence-parallel"]}
P2 = ["--pipeline-model-parallel-size", 2, "--hidden-dropout", 0, "--attention-dropout", 0]
OCC = ["--inter-grad-comp", "--use-error-feedback", "--inter-grad-comp-epilogue-only", "--grad-comp",
       "--grad-comp-warm-up", 0.34, "--emb-comm-opt", "--selective-grad-comp-way", 1]
BYTE = ["--inter-grad-comp", "--inter-grad-comp-method", "int8", "--use-error-feedback", "--activation-comp-method",
        "topk", "--grad-comp", "--grad-comp-method", "sign", "--grad-comp-error-feedback"]
CAP = 150  # one 4-rank job


def _all_ok(*vs):
    return all(v.ok for v in vs)


def gpu_3d_layouts(ctx, step):
    """4 ranks on the one GPU (MPI from page-locked host copies), fp32, 6 iterations: losses within
    1e-5 of single-GPU training and of the CPU's same layout, bytes of every class equal to the CPU's;
    the paper's techniques lossless at rank 64 and resumed bit-exactly at rank 4; the byte methods'
    kernels resumed bit-exactly with the CPU's bytes."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg, dc = ctx.devflags("train", ctx.gdev), ctx.devflags("train", "cpu")
    if dg is None or dc is None:
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device")
    if ctx.gdev == "cpu":  # the stand-in takes the same host-staged path
        dg = dg + ["--debug-host-staging"]
    flags = ctx.small() + ["--train-iters", 6, "--eval-iters", 0, "--adam-eps", "1e-3"]
    f = ctx.eng(log, 120, "train", *dg, *flags, "--metrics", ctx.w("g_single.jsonl"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"single-GPU run: {ctx.tail(log)}", log=log)
    for lay, lf in LAYOUTS.items():
        t1, name = time.monotonic(), f"{step.name}_{lay}"
        f = ctx.mpirun(log, CAP, 4, *dg, *flags, *lf, "--metrics", ctx.w(f"g_{lay}_gpu.jsonl"))
        if not f.ok:
            ctx.record(name, "FAIL", t1, f"4 ranks on the GPU: {f.why()}: {ctx.tail(log)}", log=log)
            continue
        comm = ctx.grep(log, "^comm: mpi \\(host-staged", first=False)
        if not comm:
            ctx.record(name, "FAIL", t1, "no 'comm: mpi (host-staged ...)' line", log=log)
            continue
        f = ctx.mpirun(log, CAP, 4, *dc, *flags, *lf, "--metrics", ctx.w(f"g_{lay}_cpu.jsonl"))
        if not f.ok:
            ctx.record(name, "FAIL", t1, f"the same layout on the CPU: {ctx.tail(log)}", log=log)
            continue
        single = ctx.judge(name, verdicts.losses, ctx.w("g_single.jsonl"), ctx.w(f"g_{lay}_gpu.jsonl"), 1e-5, 0, 6)
        cpu = ctx.judge(name, verdicts.losses, ctx.w(f"g_{lay}_cpu.jsonl"), ctx.w(f"g_{lay}_gpu.jsonl"), 1e-5, 0, 6)
        nbytes = ctx.judge(name, verdicts.traffic_bytes, ctx.w(f"g_{lay}_cpu.jsonl"), ctx.w(f"g_{lay}_gpu.jsonl"))
        ok = _all_ok(single, cpu, nbytes)
        ctx.record(name, "PASS" if ok else "FAIL", t1, f"{comm}; vs single GPU: {single.summary}; vs CPU {lay}: "
                   f"{cpu.summary}; bytes vs CPU: {nbytes.summary}", cpu.numbers, None if ok else log)
    # The paper's techniques at P2 D2: lossless ranks equal the baseline; lossy ranks resume exactly.
    t1, name = time.monotonic(), f"{step.name}_occ_lossless"
    f = ctx.mpirun(log, CAP, 4, *dg, *flags, *P2, "--metrics", ctx.w("g_occ_base.jsonl"))
    if f.ok:
        f = ctx.mpirun(log, CAP, 4, *dg, *flags, *P2, *OCC, "--inter-grad-comp-rank", 64, "--grad-comp-rank", 64,
                       "--metrics", ctx.w("g_occ_lossless.jsonl"))
    if not f.ok:
        ctx.record(name, "FAIL", t1, f"P2 D2 on the GPU: {f.why()}: {ctx.tail(log)}", log=log)
    else:
        v = ctx.judge(name, verdicts.losses, ctx.w("g_occ_base.jsonl"), ctx.w("g_occ_lossless.jsonl"), 1e-5, 0, 6)
        ctx.record_verdict(name, t1, v, "CB+LEP+EC, DP PowerSGD + EF, FE, SC at ranks 64 (lossless) vs the GPU baseline, "
                                        "P2 D2 on one GPU: ", log)
    t1, name = time.monotonic(), f"{step.name}_occ_resume"
    lossy = [*flags, *P2, *OCC, "--inter-grad-comp-rank", 4, "--grad-comp-rank", 4]
    f = ctx.mpirun(log, CAP, 4, *dg, *lossy, "--save", ctx.w("g_occ_ck"), "--save-interval", 3, "--metrics",
                   ctx.w("g_occ_lossy.jsonl"))
    if f.ok:  # resumed from the iteration-3 checkpoint (the run also saved iteration 6)
        copy_checkpoint(ctx.w("g_occ_ck"), 3, ctx.w("g_occ_ck3"))
        f = ctx.mpirun(log, CAP, 4, *dg, *lossy, "--load", ctx.w("g_occ_ck3"), "--metrics", ctx.w("g_occ_resumed.jsonl"))
    if not f.ok:
        ctx.record(name, "FAIL", t1, f"lossy P2 D2 run or its resume: {f.why()}: {ctx.tail(log)}", log=log)
    else:
        v = ctx.judge(name, verdicts.losses, ctx.w("g_occ_lossy.jsonl"), ctx.w("g_occ_resumed.jsonl"), 0.0, 3, 3)
        ctx.record_verdict(name, t1, v, "CB+LEP+EC, DP PowerSGD, FE, SC at rank 4, resumed from iteration 3 vs the "
                                        "uninterrupted run, on the GPU: ", log)
    # The byte methods' GPU kernels in training: fixed wire sizes, deterministic kernels.
    t1, name = time.monotonic(), f"{step.name}_byte_methods"
    byte = [*flags, *P2, *BYTE]
    f = ctx.mpirun(log, CAP, 4, *dg, *byte, "--save", ctx.w("g_byte_ck"), "--save-interval", 3, "--metrics",
                   ctx.w("g_byte_gpu.jsonl"))
    if f.ok:
        copy_checkpoint(ctx.w("g_byte_ck"), 3, ctx.w("g_byte_ck3"))
        f = ctx.mpirun(log, CAP, 4, *dg, *byte, "--load", ctx.w("g_byte_ck3"), "--metrics", ctx.w("g_byte_resumed.jsonl"))
    if f.ok:
        f = ctx.mpirun(log, CAP, 4, *dc, *byte, "--metrics", ctx.w("g_byte_cpu.jsonl"))
    if not f.ok:
        return ctx.record(name, "FAIL", t1, f"P2 D2 with the byte methods, or its resume, or its CPU run: {f.why()}: "
                                            f"{ctx.tail(log)}", log=log)
    res = ctx.judge(name, verdicts.losses, ctx.w("g_byte_gpu.jsonl"), ctx.w("g_byte_resumed.jsonl"), 0.0, 3, 3)
    nbytes = ctx.judge(name, verdicts.traffic_bytes, ctx.w("g_byte_cpu.jsonl"), ctx.w("g_byte_gpu.jsonl"))
    ok = _all_ok(res, nbytes)
    ctx.record(name, "PASS" if ok else "FAIL", t1, f"CB int8 + LEP, top-k activations, DP sign + EF at P2 D2 on the GPU: "
               f"resumed from iteration 3: {res.summary}; bytes vs CPU: {nbytes.summary}", nbytes.numbers,
               None if ok else log)


def _mpi_vs_nccl(ctx, log, tag, flags):
    """The same 4-iteration job on 2 ranks, --comm-backend mpi then nccl: (ok, info) or (None, why)."""
    f = ctx.mpirun(log, CAP, 2, "--device", "cuda", *flags, "--comm-backend", "mpi", "--metrics", ctx.w(f"{tag}_mpi.jsonl"))
    if f.ok:
        f = ctx.mpirun(log, CAP, 2, "--device", "cuda", *flags, "--comm-backend", "nccl", "--comm-timeout", 30,
                       "--metrics", ctx.w(f"{tag}_nccl.jsonl"))
    if not f.ok:
        return None, f"{f.why()}: {ctx.tail(log)}"
    tol = 0.0 if ctx.grep(log, "^comm: nccl unavailable") else 1e-5
    loss = ctx.judge(tag, verdicts.losses, ctx.w(f"{tag}_mpi.jsonl"), ctx.w(f"{tag}_nccl.jsonl"), tol, 0, 4)
    nbytes = ctx.judge(tag, verdicts.traffic_bytes, ctx.w(f"{tag}_mpi.jsonl"), ctx.w(f"{tag}_nccl.jsonl"))
    return _all_ok(loss, nbytes), f"vs --comm-backend mpi (tolerance {tol:g}): {loss.summary}; bytes: {nbytes.summary}"


def nccl_comm(ctx, step):
    """comm-check over NCCL with 1 rank (timed), 2 ranks (one GPU: both fall back to MPI, saying why),
    T2 training nccl vs mpi, and with 2+ GPUs interleaved P2 over the pipeline's NCCL links. The CPU
    stand-in runs the MPI comm-check."""
    t0 = time.monotonic()
    if "--count" not in ctx.machine.help.get("comm-check", ""):
        return ctx.record(step.name, "SKIP", t0, "this optimus-cc has no comm-check")
    run_sh = os.path.join(ctx.bundle, "run.sh")
    if ctx.gdev == "cpu":
        log = ctx.log(step.name)
        f = ctx.run([run_sh, "mpirun", "-np", 2, "--oversubscribe", "optimus-cc", "comm-check", "--device", "cpu",
                     "--debug-host-staging", "--count", 100003], 60, log)
        if f.ok and ctx.grep(log, "^comm-check: all-reduce"):
            return ctx.record(step.name, "PASS", t0, f"CPU stand-in: {ctx.grep(log, '^comm-check: 2 ranks')}")
        return ctx.record(step.name, "FAIL", t0, f"CPU stand-in comm-check: {f.why()}: {ctx.tail(log)}", log=log)
    gpus = ctx.machine.gpus
    log = ctx.log(step.name + "_1rank")
    f = ctx.run([run_sh, "mpirun", "-np", 1, "optimus-cc", "comm-check", "--device", "cuda", "--comm-backend", "nccl",
                 "--count", 67108864, "--bench-iters", 20], 90, log)
    if f.ok and ctx.grep(log, "^comm-check: 1 rank, comm: nccl \\(NCCL") and ctx.grep(log, "^comm-check: all-reduce \\(sum"):
        ctx.record(step.name + "_1rank", "PASS", t0, f"{ctx.grep(log, '^comm-check: 1 rank')}; {ctx.grep(log, 'median')}")
    else:
        ctx.record(step.name + "_1rank", "FAIL", t0, f"1-rank NCCL comm-check: {f.why()}: {ctx.tail(log, 4)}", log=log)
    t1, log = time.monotonic(), ctx.log(step.name + "_2ranks")
    f = ctx.run([run_sh, "mpirun", "-np", 2, "--oversubscribe", "optimus-cc", "comm-check", "--device", "cuda",
                 "--comm-backend", "nccl", "--count", 1000003, "--comm-timeout", 30], 90, log)
    want = "^comm-check: 2 ranks, comm: nccl \\(NCCL" if gpus >= 2 else "^comm-check: 2 ranks, comm: nccl unavailable .*falling back to mpi"
    links = gpus < 2 or ctx.grep(log, "^comm-check: pipeline links")
    if f.ok and ctx.grep(log, want) and ctx.grep(log, "^comm-check: all-reduce \\(sum") and links:
        ctx.record(step.name + "_2ranks", "PASS", t1, f"{gpus} GPU(s): {ctx.grep(log, '^comm-check: 2 ranks', first=False)}")
    else:
        ctx.record(step.name + "_2ranks", "FAIL", t1, f"2-rank comm-check with --comm-backend nccl on {gpus} GPU(s), "
                   f"expected '{want}'{'' if links else ', a pipeline-links line'}: {f.why()}: {ctx.tail(log, 4)}", log=log)
    t1, log = time.monotonic(), ctx.log(step.name + "_train_t2")
    ok, info = _mpi_vs_nccl(ctx, log, "n_t2", ctx.small() + ["--train-iters", 4, "--eval-iters", 0,
                                                             "--tensor-model-parallel-size", 2])
    comm = ctx.grep(log, "^comm:", first=False)[:160]
    ctx.record(step.name + "_train_t2", "PASS" if ok else "FAIL", t1,
               f"{comm}; {info}" if ok is not None else f"T2 training with --comm-backend mpi / nccl: {info}",
               log=None if ok else log)
    t1 = time.monotonic()
    if gpus < 2:
        return ctx.record(step.name + "_train_p2", "SKIP", t1, f"the pipeline over NCCL needs 2 GPUs; this machine has {gpus}")
    log = ctx.log(step.name + "_train_p2")
    ok, info = _mpi_vs_nccl(ctx, log, "n_p2", ctx.small() + [
        "--train-iters", 4, "--eval-iters", 1, "--eval-interval", 4, "--pipeline-model-parallel-size", 2,
        "--num-layers-per-virtual-pipeline-stage", 1, "--inter-grad-comp", "--inter-grad-comp-rank", 4])
    if ok is None:
        return ctx.record(step.name + "_train_p2", "FAIL", t1, f"P2 V2 training with --comm-backend mpi / nccl: {info}", log=log)
    # On NCCL the job says how CUDA loads its kernels (core/cuda_module_loading.h).
    modules = ctx.grep(log, "^(cuda modules: |warning: CUDA loads kernels lazily)")[:60]
    ok = ok and bool(modules) and bool(ctx.grep(log, "^comm: nccl \\(NCCL.*pipeline\\)"))
    ctx.record(step.name + "_train_p2", "PASS" if ok else "FAIL", t1, f"{ctx.grep(log, '^comm:', first=False)[:160]}; "
               f"{modules or 'no cuda modules: line'}; {info}", log=None if ok else log)


# Predicted seconds on an H200: not run there yet; the CPU engine's 4-rank jobs take most of it.
register(Step("gpu_3d_layouts", gpu_3d_layouts, "4 ranks sharing the GPU in T1P2D2, T2P2D1, T2P1D2, T2P2D1+SP: losses "
              "and bytes vs one GPU and the CPU; Optimus-CC lossless and resumed; the byte methods' kernels",
              priority=2, predicted_s=120, caps=(120,) + (CAP,) * 16))
register(Step("nccl_comm", nccl_comm, "the NCCL communicator: 1 rank, 2 ranks (fallback on one GPU), T2 training nccl vs "
              "mpi, P2 over NCCL links (2+ GPUs)", priority=2, predicted_s=40, caps=(90, 90, CAP, CAP)))

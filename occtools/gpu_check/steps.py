"""The registry of gpu-check's steps and the plans that order them.

A step is one check (or one benchmark run): its name, what it asserts, what it needs,
its priority in a plan, its predicted seconds on an H200 (from the reports in
docs/results/gpu-check-h200-*.md, where a step ran there) and the timeouts of its
commands, whose sum with a kill grace each is its worst case. The check modules
register their steps at import (register()); plans are lists of step names.
"""

from dataclasses import dataclass
from typing import Callable, Tuple

from occtools.common.proc import KILL_GRACE_S

# What a step may need: the GPU side (the engine with --device cuda, or the CPU standing in),
# a real CUDA GPU (the stand-in cannot serve), the bundle's occ_cuda_tests, and python packages
# of the machine's PyTorch python (torch-cuda: its torch on the GPU side's device).
NEEDS = ("gpu", "cuda", "cuda-tests", "torch", "torch-cuda", "numpy", "tensorboard")


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable  # run(ctx, step): records one result or more (ctx.record)
    what: str  # one line: what it runs and asserts
    priority: int  # 1 the most important; the budget keeps time for a plan's more important later steps
    predicted_s: float  # on an H200
    caps: Tuple[float, ...]  # the timeout of each command it runs, in order
    needs: Tuple[str, ...] = ("gpu",)
    opt_in: bool = False  # runs only when --only names it (or the plan says so)
    quick_s: float = 10.0  # predicted with --quick on the CPU stand-in (small models)

    @property
    def worst_s(self):
        """Every command to its timeout plus the kill grace."""
        return sum(c + KILL_GRACE_S for c in self.caps)


REGISTRY = {}


def register(step):
    if step.name in REGISTRY:
        raise ValueError(f"step {step.name} registered twice")
    for need in step.needs:
        if need not in NEEDS:
            raise ValueError(f"step {step.name}: unknown need {need}")
    REGISTRY[step.name] = step
    return step


# ---- the plans -----------------------------------------------------------------------------------
def bench_step_name(engine, size, mbmax=False):
    """bench_occ_small, bench_torch_small (eager), bench_torch_small_compile, ... (+ _mbmax)."""
    base = {"occ": f"bench_occ_{size}", "torch": f"bench_torch_{size}", "torch_compile": f"bench_torch_{size}_compile"}
    return base[engine] + ("_mbmax" if mbmax else "")


# The first call of a session lent a GPU (issue 39): the kernel twins, flash vs fused attention
# in training, bf16 vs fp32 at GPT-2-small shape, then the speed question: our bench and
# PyTorch (eager, torch.compile) at GPT-2 small and medium, micro-batch 8 and the largest that
# fits, the op profile of both sizes and the speed targets. Its worst case ends before 7 min 30 s
# (--budget 450); the priorities keep time for the profiles and the targets, so the runs at the
# largest micro-batch are the ones the budget drops first.
ENGINES = ("occ", "torch", "torch_compile")
BENCH_MB8 = [bench_step_name(e, s) for s in ("small", "medium") for e in ENGINES]
BENCH_MBMAX = [bench_step_name(e, s, True) for s in ("small", "medium") for e in ENGINES]
FIRST_CALL = (["cuda_kernel_tests", "attention_flash_vs_fused", "bf16_vs_fp32"] + BENCH_MB8 + BENCH_MBMAX
              + ["profile_occ_small", "profile_occ_medium", "speed_targets_small", "speed_targets_medium",
                 "speed_targets_small_mbmax", "speed_targets_medium_mbmax"])
# The second call: everything else, the paper-regime experiment last with the rest of the budget.
SECOND_CALL = ["torch_reference", "fp32_gpu_vs_cpu", "resume", "mpi_pipeline_2ranks", "recompute", "fp16_vs_fp32",
               "gpu_3d_layouts", "nccl_comm", "hf_export", "hf_llama", "hf_tokenizer", "tensorboard",
               "quality_regime"]
PLANS = {"first-call": FIRST_CALL, "second-call": SECOND_CALL, "all": FIRST_CALL + SECOND_CALL}


def plan_steps(plan, only=(), skip=()):
    """The registered steps of `plan` that --only / --skip (name prefixes) select, in order.
    An opt-in step is selected only when --only names it or the plan is second-call."""
    out = []
    for name in PLANS[plan]:
        step = REGISTRY[name]
        named = any(name.startswith(o) for o in only)
        if (only and not named) or any(name.startswith(s) for s in skip):
            continue
        if step.opt_in and plan != "second-call" and not named:
            continue
        out.append(step)
    return out

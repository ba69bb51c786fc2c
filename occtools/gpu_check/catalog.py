"""Every gpu-check step, registered by importing the modules that define them."""

from occtools.gpu_check import checks_bench, checks_core, checks_correctness, checks_interop, checks_multirank  # noqa: F401
from occtools.gpu_check.steps import PLANS, REGISTRY

missing = sorted({n for plan in PLANS.values() for n in plan} - set(REGISTRY))
if missing:  # a plan names a step no module registers: a bug of gpu-check
    raise ImportError(f"gpu-check plans name unregistered steps: {missing}")

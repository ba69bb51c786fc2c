"""python3 -m occtools gpu-check: the GPU acceptance checks and benchmarks, run on the GPU
machine from the bundle `python3 -m occtools gpu-bundle` packs (nothing is built there):

    cd dist/gpu-bundle && python3 -m occtools gpu-check --first-call --out $OUT

Writes OUT/gpu-check.json (every result with its numbers), OUT/gpu-check.md (the format of
docs/results/gpu-check-h200-*.md) and OUT/gpu-check-logs.tar.gz, rewritten after every step.
Prints the GPU, python, bundle, engine, budget and plan lines, then one line per result:
`PASS name: numbers`, `FAIL name: reason` or `SKIP name: reason`. A failing step does not
stop the others. Every command has a timeout inside the budget (--budget, the whole call's
wall time: its worst case, every command to its timeout plus its kill grace, ends by then).
Exit status: 0 every result that ran passed, 1 some failed, 2 nothing could be checked (no
GPU), 3 bad usage.

Plans: --first-call (a session's first call: the kernel twins, flash vs fused attention,
bf16 vs fp32, the benchmark matrix at micro-batch 8 and the largest that fits, the op
profiles, the speed targets), --second-call (everything else, the paper-regime experiment
last), or every step (the default; the regime experiment only with --only quality_regime).
--plan-only prints a plan's schedule, predicted on an H200 and in the worst case, and runs
nothing. docs/gpu.md says what each step asserts.
"""

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

from occtools.common import proc
from occtools.gpu_check import budget as budgets
from occtools.gpu_check import catalog, report  # noqa: F401 - catalog registers the steps
from occtools.gpu_check.context import PACKAGE_ROOT, Context
from occtools.gpu_check.machine import Machine, pick_python
from occtools.gpu_check.steps import REGISTRY, plan_steps

# The probes before the first step (machine.py): predicted, and worst (every probe to its timeout:
# nvidia-smi twice, the python probe, env.sh, optimus-cc --help and five commands' --help, ldd).
PREAMBLE = (15.0, 30 + 30 + 120 + 60 + 30 * 7 + 11 * proc.KILL_GRACE_S)


def add_parser(sub):
    p = sub.add_parser("gpu-check", help="the GPU checks and benchmarks, from the bundle (docs/gpu.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    plan = p.add_mutually_exclusive_group()
    plan.add_argument("--first-call", dest="plan", action="store_const", const="first-call",
                      help="the first call of a session lent a GPU: correctness in brief, then the speed question")
    plan.add_argument("--second-call", dest="plan", action="store_const", const="second-call",
                      help="the remaining checks, the paper-regime experiment last")
    p.add_argument("--plan-only", action="store_true", help="print the plan's schedule (predicted, worst case); run nothing")
    p.add_argument("--out", default="gpu-check-out", help="where the reports go (default gpu-check-out)")
    p.add_argument("--bundle", help="the bundle (default: the folder holding this occtools, or dist/gpu-bundle)")
    p.add_argument("--python", help="python3 with torch (default: the first of python3, /usr/bin/python3 that "
                                     "imports torch and numpy)")
    p.add_argument("--budget", type=float, default=budgets.DEFAULT_TOTAL_S,
                   help="seconds for the whole call, worst case included (default 440: ends before 7 min 30 s)")
    p.add_argument("--only", default="", help="run only these steps (comma-separated name prefixes)")
    p.add_argument("--skip", default="", help="skip these steps (name prefixes)")
    p.add_argument("--work", help="scratch folder, kept (default: a new one under TMPDIR, removed at the end)")
    p.add_argument("--bf16-iters", type=int, default=300, help="iterations of bf16_vs_fp32 (default 300)")
    p.add_argument("--gpu-device", choices=["cuda", "cpu"], default="cuda",
                   help="the engine's device for the GPU side (cpu: the CPU stands in, to test gpu-check itself)")
    p.add_argument("--quick", action="store_true", help="small models everywhere (with --gpu-device cpu: the self-test)")
    p.set_defaults(func=main, plan="all")


def schedule_lines(steps, total, quick=False):
    """The plan's table and its two simulations (budget.simulate): predicted and worst case."""
    import dataclasses
    if quick:
        steps = [dataclasses.replace(s, predicted_s=s.quick_s) for s in steps]
    out = [f"{'step':34s} {'prio':>4s} {'predicted':>9s} {'worst':>7s}  needs"]
    out += [f"{s.name:34s} {s.priority:4d} {s.predicted_s:8.0f}s {s.worst_s:6.0f}s  {','.join(s.needs) or '-'}"
            for s in steps]
    ends = {}
    for mode in ("predicted", "worst"):
        rows, end = budgets.simulate(steps, total, mode, PREAMBLE)
        ends[mode] = (end, [r[0] for r in rows if r[2] is None])
    out.append(f"predicted on {'the CPU stand-in' if quick else 'an H200'}: ends at {ends['predicted'][0]:.0f} s of "
               f"{total:.0f} s; the budget leaves out: {', '.join(ends['predicted'][1]) or 'nothing'}")
    out.append(f"worst case (every command, the probes' too, to its timeout + {proc.KILL_GRACE_S:.0f} s kill grace): "
               f"ends at {ends['worst'][0]:.0f} s of {total:.0f} s")
    return out, ends


def plan_line(plan, steps, total, quick):
    _, ends = schedule_lines(steps, total, quick)
    pe, pskip = ends["predicted"]
    we, _ = ends["worst"]
    return (f"plan: {plan}, {len(steps)} steps: {', '.join(s.name for s in steps)}; predicted "
            f"{'on the CPU stand-in' if quick else 'on an H200'} to end at {pe:.0f} s"
            + (f" (the budget leaves out {', '.join(pskip)})" if pskip else "")
            + f"; worst case (every command to its timeout + {proc.KILL_GRACE_S:.0f} s kill grace) ends at "
              f"{we:.0f} s <= {total:.0f} s")


def find_bundle(given):
    """--bundle, else the folder holding this occtools (run from the bundle), else the tree's dist/gpu-bundle."""
    for cand in ([given] if given else [PACKAGE_ROOT, os.path.join(PACKAGE_ROOT, "dist", "gpu-bundle")]):
        if cand and os.path.isfile(os.path.join(cand, "MANIFEST")):
            return os.path.abspath(cand)
    return None


def usage_error(msg):
    print(f"gpu-check: {msg}", file=sys.stderr)
    return 3


def main(a):
    only = [x for x in a.only.split(",") if x]
    skips = [x for x in a.skip.split(",") if x]
    unknown = [x for x in only + skips if not any(n.startswith(x) for n in REGISTRY)]
    if unknown:
        return usage_error(f"no step is named {', '.join(unknown)}* (steps: {', '.join(REGISTRY)})")
    steps = plan_steps(a.plan, only, skips)
    if a.plan_only:
        lines, _ = schedule_lines(steps, a.budget, a.quick)
        print(f"plan {a.plan}, budget {a.budget:.0f} s{' (quick: the CPU stand-in)' if a.quick else ''}")
        print("\n".join(lines))
        return 0
    bundle = find_bundle(a.bundle)
    if not bundle or not os.access(os.path.join(bundle, "run.sh"), os.X_OK):
        return usage_error(f"no bundle ({a.bundle or 'next to ' + PACKAGE_ROOT}: no MANIFEST / run.sh); pass --bundle "
                           "DIR (`python3 -m occtools gpu-bundle` makes one)")
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="gpu-check.")
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    try:
        return run_plan(a, steps, bundle, out, work)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


def run_plan(a, steps, bundle, out, work):
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "inductor"),
               TRITON_CACHE_DIR=os.path.join(work, "triton"))
    # The CPU stand-in runs small models, often on a busy machine, where OpenMP threads that
    # spin-wait for each other make every step many times slower: one thread unless told otherwise.
    if a.gpu_device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    budget = budgets.Budget(a.budget)

    def mrun(argv, cap, log=None, env_extra=None, capture=False):
        try:
            t = budget.timeout(cap, "a probe")
        except budgets.BudgetSpent as e:
            return proc.Finished(proc.TIMED_OUT, 0.0, 0.0, str(e))
        return proc.run(argv, t, log=log, env=dict(env, **(env_extra or {})), capture=capture)

    def machine_run(argv, cap, env=None, capture=False):
        return mrun(argv, cap, os.path.join(work, "logs", "probes.log"), env, capture)

    python = (shutil.which(a.python) or a.python) if a.python else pick_python(["python3", "/usr/bin/python3"], mrun)
    if a.python and not shutil.which(a.python):
        return usage_error(f"--python {a.python} not found")
    env["OCC_PYTHON"] = python
    machine = Machine(bundle, work, python, a.gpu_device, machine_run, PACKAGE_ROOT).read()
    env["OCC_CUDA_LIBDIRS"] = machine.cuda_libdirs
    ctx = Context(bundle=bundle, out=out, work=work, python=python, gdev=a.gpu_device, quick=a.quick, budget=budget,
                  bf16_iters=a.bf16_iters, machine=machine, env=env)
    machine.lines["budget_line"] = (f"budget: {a.budget:.0f} s for the whole call (worst case included); GPU side: "
                                    f"--device {a.gpu_device}{', quick (small models)' if a.quick else ''}"
                                    + (f"; OMP_NUM_THREADS={env['OMP_NUM_THREADS']}" if env.get("OMP_NUM_THREADS") else ""))
    machine.lines["plan_line"] = plan_line(a.plan, steps, a.budget, a.quick)
    for k in ("gpu_line", "torch_line", "bundle_line", "features_line", "budget_line", "plan_line"):
        print(machine.lines[k], flush=True)
    print(flush=True)
    info = dict(machine.lines, tool="python3 -m occtools gpu-check", plan=a.plan, budget_s=a.budget,
                gpu_device=a.gpu_device, quick=a.quick, python_probe=machine.probe,
                bundle_manifest_head=machine.manifest_head)

    import dataclasses
    sched_steps = [dataclasses.replace(s, predicted_s=s.quick_s) for s in steps] if a.quick else steps
    schedule = budgets.Schedule(sched_steps, budget)
    try:
        run_steps(ctx, steps, schedule, info)
    except (KeyboardInterrupt, SystemExit) as e:  # stopped from outside: the running command's group is stopped
        ctx.record("gpu-check", "FAIL", time.monotonic(), f"stopped from outside ({type(e).__name__} {e}) after "
                                                          f"{budget.elapsed():.0f} s; the steps after it did not run")
    info["seconds"] = round(budget.elapsed(), 1)
    doc = write_report(out, work, info, ctx.results)
    c = doc["counts"] if doc else {s: sum(r.status == s for r in ctx.results) for s in ("PASS", "FAIL", "SKIP")}
    print(f"\ngpu-check: {c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped in {budget.elapsed():.0f} s "
          f"(budget {a.budget:.0f} s) -> {out}/gpu-check.{{json,md}}", flush=True)
    return 1 if c["FAIL"] else (2 if not c["PASS"] else 0)


def write_report(out, work, info, results):
    """The reports, or a warning (a full disk must not stop the steps)."""
    try:
        return report.write(out, work, info, results)
    except OSError as e:
        print(f"gpu-check: cannot write the report into {out}: {e}", file=sys.stderr, flush=True)
        return None


def _terminate(signum, frame):
    raise SystemExit(f"signal {signum}")


def run_steps(ctx, steps, schedule, info):
    """Each step in the plan's order: its needs, the budget's admission, its run, the reports."""
    budget = ctx.budget
    signal.signal(signal.SIGTERM, _terminate)
    for i, step in enumerate(steps):
        t0, before = time.monotonic(), len(ctx.results)
        unmet = ctx.machine.unmet(step.needs)
        why = schedule.admit(i) if not unmet else None
        if unmet:
            ctx.record(step.name, unmet[0], t0, unmet[1])
        elif why:
            ctx.record(step.name, "SKIP", t0, why)
        else:
            try:
                step.run(ctx, step)
            except budgets.BudgetSpent as e:
                ctx.record(step.name, "SKIP", t0, str(e))
            except Exception as e:  # noqa: BLE001 - a bug in one step must not stop the others
                with open(ctx.log(step.name), "a") as f:
                    traceback.print_exc(file=f)
                ctx.record(step.name, "FAIL", t0, f"{type(e).__name__}: {e} (a bug of gpu-check; the trace is in its "
                                                  "log)", log=ctx.log(step.name))
            if len(ctx.results) == before:
                ctx.record(step.name, "FAIL", t0, "the step ended without a result: a bug of gpu-check")
        schedule.settle(step.name)
        if len(ctx.results) > before and budget.left() > budgets.STEP_REPORT_S:  # else the last report says it
            info["seconds"] = round(budget.elapsed(), 1)
            write_report(ctx.out, ctx.work, info, ctx.results)

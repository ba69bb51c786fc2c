"""python3 -m occtools bench-core: `optimus-cc bench` against bench/torch_step.py (PyTorch eager,
CPU, float32) on presets a and b, with 1 and 2 threads. The two engines' runs are interleaved
(alternating which goes first each round) so that noise from other jobs on the machine hits
both alike; each run is a fresh process doing a few repeats of a few steps after warm-up steps,
and the best and median over all of an engine's repeats are reported.

--quick takes about 2 minutes on an idle machine (fewer rounds and steps; noisier); the default
about 5 minutes idle, 8 on a busy one. Writes PREFIX.md (the tables) and PREFIX.json (every
number of every run); --out PREFIX, default bench-results/core. The binary is copied first, so a
concurrent rebuild cannot mix binaries in one run. Both engines call the same OpenBLAS 0.3.21
(ours the OpenMP build, torch the pthread one), so OPENBLAS_CORETYPE applies to both: on AMD
Zen 5 it detects Cooperlake (AVX-512) kernels; an inherited OPENBLAS_CORETYPE=Haswell (AVX2)
roughly halves the sgemm peak. OMP_NUM_THREADS / OPENBLAS_NUM_THREADS are set per run. Each run
records the load average at its start and end: the machine may be shared, so compare quiet
runs only.
"""

import argparse
import os
import tempfile
import time

from occtools.bench import core_report
from occtools.common import engine, proc
from occtools.common.errors import Failure, positive_int, words

# Per preset: steps per repeat, warm-up steps, repeats per run, rounds. Preset a: ~0.1-0.2 s/step
# ours, ~0.5-1 s torch; preset b: ~1.5-4 s/step both. The sgemm peak is measured in every
# round's optimus-cc run; the best is kept.
PLAN = {False: {"a": (4, 1, 2, 4), "b": (2, 1, 1, 3), "peak_reps": 3},
        True: {"a": (2, 1, 2, 2), "b": (1, 1, 1, 2), "peak_reps": 2}}
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch


def add_parser(sub):
    p = sub.add_parser("bench-core", help="optimus-cc's training step against PyTorch eager on the CPU",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="about 2 minutes idle (fewer rounds and steps)")
    p.add_argument("--rounds", type=positive_int, help="rounds per preset (default: 4 for a, 3 for b)")
    p.add_argument("--presets", type=words, default=["a", "b"], help='default "a b"')
    p.add_argument("--threads", type=words, default=["1", "2"], help='default "1 2"')
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc, built if missing)")
    p.add_argument("--out", default="bench-results/core", help="PREFIX of PREFIX.md and PREFIX.json")
    p.add_argument("--coretype", help="OPENBLAS_CORETYPE for both engines (auto: unset it, so that OpenBLAS picks "
                                      "its kernels from the CPU); default: as inherited")
    p.set_defaults(func=main)


def main(a):
    plan = PLAN[a.quick]
    for p in a.presets:
        if p not in ("a", "b"):
            raise Failure(f"unknown preset '{p}' (a or b)")
    exe = engine.binary(a.bin, build=not a.bin and not os.access(engine.DEFAULT_BIN, os.X_OK))
    if proc.run([PYTHON, "-c", "import torch"], 120).rc != 0:
        raise Failure(f"{PYTHON} cannot import torch (apt-get install python3-torch)", 1)
    base = dict(os.environ)
    if a.coretype == "auto":
        base.pop("OPENBLAS_CORETYPE", None)
    elif a.coretype:
        base["OPENBLAS_CORETYPE"] = a.coretype
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as raw:
        exe = engine.private_copy(exe, raw)
        for p in a.presets:
            steps, warmup, reps, rounds = plan[p]
            common = ["--preset", p, "--steps", steps, "--warmup", warmup, "--repeats", reps]
            for th in a.threads:
                env = dict(base, OMP_NUM_THREADS=th, OPENBLAS_NUM_THREADS=th)
                for r in range(a.rounds or rounds):
                    tag = f"{p}-{th}-{r}"
                    ours = [exe, "bench", *common, "--peak-reps", plan["peak_reps"], "--json", f"{raw}/ours-{tag}.json"]
                    torch = [PYTHON, os.path.join(engine.ROOT, "bench", "torch_step.py"), *common, "--threads", th,
                             "--json", f"{raw}/torch-{tag}.json"]
                    for name, argv in ((("ours", ours), ("torch", torch)) if r % 2 == 0 else
                                       (("torch", torch), ("ours", ours))):
                        log = f"{raw}/{name}-{tag}.log"
                        f = proc.run(argv, None, log=log, env=env)
                        if not f.ok:
                            raise Failure(f"{name} run failed ({f.why()}): {proc.tail(log, 5)}", 1)
                    print(f"bench-core: preset {p}, {th} thread(s), round {r + 1}/{a.rounds or rounds} done "
                          f"({time.monotonic() - start:.0f}s)", flush=True)
        text = core_report.write(raw, a.out, int(time.monotonic() - start), a.quick, base.get("OPENBLAS_CORETYPE"))
    print(text)
    print(f"bench-core: wrote {a.out}.md and {a.out}.json")
    return 0

"""python3 -m occtools bench-core: the training step of `optimus-cc bench` in fp32 and in --bf16,
in fp32 on OpenBLAS (OCC_CPU_GEMM=openblas: the step before oneDNN took the matrix products), of
bench/torch_step.py (PyTorch eager, CPU, float32) and, with --llmc DIR, of llm.c's train_gpt2.c
(built from that checkout; see occtools/bench/llmc.py), same model, batch and threads. The engines
run alternated: each round runs every engine once, the order rotated by one each round, so that
noise from other jobs on the machine hits all alike; each run is a fresh process doing a few
repeats of a few steps after warm-up steps, and the best, median and spread (min-max) over all of
an engine's repeats are reported, with the ratios to ours.

Presets: a, b (as `optimus-cc bench --preset`), gpt2 (GPT-2 small: 12 layers, 12 heads, hidden
768, vocab 50257 padded to 50304, micro-batch 4, seq 64: llm.c's B and T) and tiny (2 layers,
hidden 64, vocab 512, micro-batch 2, seq 32: the test's). --micro-batch-size / --seq-length
override every preset's, for every engine (llm.c's copy edited to match).

--quick takes about 2 minutes on an idle machine for a and b (fewer rounds and steps; noisier); the
default about 5 minutes idle, 8 on a busy one; gpt2 with llm.c 2-3 minutes a round idle (14-20
with the load average at 5-13). Writes PREFIX.md (the tables, the command, the machine's load)
and PREFIX.json (every number of every run); --out PREFIX, default bench-results/core; --from-json
PREFIX.json rebuilds PREFIX.md without a run. The binary is copied first, so a concurrent rebuild
cannot mix binaries in one run. Ours and torch call the same OpenBLAS 0.3.21 (ours the
OpenMP build, torch the pthread one), so OPENBLAS_CORETYPE applies to both: on AMD Zen 5 it
detects Cooperlake (AVX-512) kernels; an inherited OPENBLAS_CORETYPE=Haswell (AVX2) roughly
halves the sgemm peak. Ours runs its matrix products on oneDNN where it loads (OCC_CPU_GEMM; the
table says which path each of our columns ran). OMP_NUM_THREADS / OPENBLAS_NUM_THREADS are set
per run. Each run records the load average at its start and end: the machine may be shared, so
compare quiet runs only, or the ratios within one run.
"""

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

from occtools.bench import core_report, llmc
from occtools.common import engine, proc
from occtools.common.errors import Failure, positive_int, words

PRESETS = {
    "a": dict(num_layers=4, num_attention_heads=4, hidden_size=128, vocab_size=50304, micro_batch_size=4,
              seq_length=64),
    "b": dict(num_layers=4, num_attention_heads=12, hidden_size=768, vocab_size=1024, micro_batch_size=4,
              seq_length=256),
    "gpt2": dict(num_layers=12, num_attention_heads=12, hidden_size=768, vocab_size=50257, micro_batch_size=4,
                 seq_length=64),
    "tiny": dict(num_layers=2, num_attention_heads=2, hidden_size=64, vocab_size=512, micro_batch_size=2,
                 seq_length=32),
}
# Per preset: steps per repeat, warm-up steps, repeats per run, rounds. Preset a: ~0.1-0.2 s/step
# ours, ~0.5-1 s torch; preset b: ~1.5-4 s/step both; gpt2: ~1-4 s/step (llm.c the slowest). The
# sgemm peak is measured in every round's fp32 optimus-cc run; the best is kept.
PLAN = {False: {"a": (4, 1, 2, 4), "b": (2, 1, 1, 3), "gpt2": (1, 1, 3, 3), "tiny": (2, 1, 2, 2), "peak_reps": 3},
        True: {"a": (2, 1, 2, 2), "b": (1, 1, 1, 2), "gpt2": (1, 1, 2, 2), "tiny": (1, 1, 2, 1), "peak_reps": 2}}
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch and numpy
# File keys; core_report.NAMES has the display names. oursblas: ours in fp32 with OCC_CPU_GEMM=openblas,
# the step before issue 51 moved the CPU's matrix products to oneDNN.
ENGINES = ("ours", "oursbf16", "oursblas", "torch", "llmc")
ENGINE_ENV = {"oursblas": {"OCC_CPU_GEMM": "openblas"}}
SEED = 1234


def add_parser(sub):
    p = sub.add_parser("bench-core", help="optimus-cc's training step (fp32, bf16) against PyTorch eager and llm.c "
                                          "on the CPU", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="about 2 minutes idle (fewer rounds and steps)")
    p.add_argument("--rounds", type=positive_int, help="rounds per preset (default: 4 for a, 3 for b and gpt2)")
    p.add_argument("--presets", type=words, default=["a", "b"], help=f'{", ".join(PRESETS)}; default "a b"')
    p.add_argument("--threads", type=words, default=["1", "2"], help='default "1 2"')
    p.add_argument("--micro-batch-size", type=positive_int, help="B for every preset and engine")
    p.add_argument("--seq-length", type=positive_int, help="T for every preset and engine")
    p.add_argument("--llmc", metavar="DIR", help="a checkout of karpathy/llm.c: adds its train_gpt2.c (built here "
                                                  "from DIR, never copied into the repository); without it the "
                                                  "table leaves llm.c out and says so")
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc, built if missing)")
    p.add_argument("--out", default="bench-results/core", help="PREFIX of PREFIX.md and PREFIX.json")
    p.add_argument("--from-json", metavar="FILE", help="no run: rebuild PREFIX.md from a PREFIX.json this command wrote")
    p.add_argument("--coretype", help="OPENBLAS_CORETYPE for both engines (auto: unset it, so that OpenBLAS picks "
                                      "its kernels from the CPU); default: as inherited")
    p.set_defaults(func=main)


def model_of(preset, a):
    m = dict(PRESETS[preset])
    if a.micro_batch_size:
        m["micro_batch_size"] = a.micro_batch_size
    if a.seq_length:
        m["seq_length"] = a.seq_length
    return m


def model_flags(m):
    return [x for k, v in m.items() for x in ("--" + k.replace("_", "-"), v)]


def run_one(name, argv, env, log, cwd=None):
    load0, t0 = os.getloadavg()[0], time.monotonic()
    f = proc.run(argv, None, log=log, env=env, cwd=cwd)
    if not f.ok:
        raise Failure(f"{core_report.NAMES[name]} run failed ({f.why()}): {proc.tail(log, 5)}", 1)
    return {"load_before": load0, "load_after": os.getloadavg()[0], "wall_s": time.monotonic() - t0}


def main(a):
    if a.from_json:
        text = core_report.rebuild(a.from_json, a.out)
        print(text)
        print(f"bench-core: wrote {a.out}.md from {a.from_json}")
        return 0
    plan = PLAN[a.quick]
    for p in a.presets:
        if p not in PRESETS:
            raise Failure(f"unknown preset '{p}' ({', '.join(PRESETS)})")
    for th in a.threads:
        if not th.isdigit() or int(th) < 1:
            raise Failure(f"--threads: '{th}' is not a whole number >= 1")
    info = llmc.checkout(a.llmc) if a.llmc else None
    exe = engine.binary(a.bin, build=not a.bin and not os.access(engine.DEFAULT_BIN, os.X_OK))
    if proc.run([PYTHON, "-c", "import torch, numpy"], 120).rc != 0:
        raise Failure(f"{PYTHON} cannot import torch and numpy (apt-get install python3-torch python3-numpy)", 1)
    base = dict(os.environ)
    if a.coretype == "auto":
        base.pop("OPENBLAS_CORETYPE", None)
    elif a.coretype:
        base["OPENBLAS_CORETYPE"] = a.coretype
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    engines = [e for e in ENGINES if e != "llmc" or info]
    meta = {"command": "python3 -m occtools bench-core " + shlex.join(_argv_after("bench-core")),
            "engines": engines, "llmc": info, "runs": [], "inputs": {}}
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="occ-bench-core-") as work:
        raw = os.path.join(work, "raw")
        os.makedirs(raw)
        exe = engine.private_copy(exe, work)
        for p in a.presets:
            m = model_of(p, a)
            steps, warmup, reps, rounds = plan[p]
            rounds = a.rounds or rounds
            common = ["--steps", steps, "--warmup", warmup, "--repeats", reps]
            if info:
                last = warmup + steps * reps - 1
                folder, llmc_exe, seds, cc = llmc.build(info, work, m["micro_batch_size"], m["seq_length"], last,
                                                        f"{work}/llmc-build-{p}.log")
                ntok = m["micro_batch_size"] * m["seq_length"] * (last + 8) + 1
                n = llmc.write_inputs(PYTHON, folder, m, ntok, SEED, f"{work}/llmc-inputs-{p}.log")
                meta["inputs"][p] = {"edits": seds, "compile": cc, "parameters": n, "tokens_per_file": ntok}
            for th in a.threads:
                env = dict(base, OMP_NUM_THREADS=th, OPENBLAS_NUM_THREADS=th)
                for r in range(rounds):
                    tag = f"{p}-{th}-{r}"
                    argv = {
                        "ours": [exe, "bench", *model_flags(m), *common, "--peak-reps", plan["peak_reps"],
                                 "--json", f"{raw}/ours-{tag}.json"],
                        "oursbf16": [exe, "bench", *model_flags(m), *common, "--bf16", "--no-peak",
                                     "--json", f"{raw}/oursbf16-{tag}.json"],
                        "oursblas": [exe, "bench", *model_flags(m), *common, "--no-peak",
                                     "--json", f"{raw}/oursblas-{tag}.json"],
                        "torch": [PYTHON, os.path.join(engine.ROOT, "bench", "torch_step.py"), *model_flags(m),
                                  *common, "--threads", th, "--json", f"{raw}/torch-{tag}.json"],
                        "llmc": [llmc_exe] if info else None,
                    }
                    order = engines[r % len(engines):] + engines[:r % len(engines)]
                    for pos, name in enumerate(order):
                        log = f"{work}/{name}-{tag}.log"
                        rec = run_one(name, argv[name], dict(env, **ENGINE_ENV.get(name, {})), log,
                                      cwd=folder if name == "llmc" else None)
                        if name == "llmc":
                            res = llmc.parse(log, warmup, steps, reps)
                            with open(f"{raw}/llmc-{tag}.json", "w") as fh:
                                json.dump(dict(res, threads=int(th), model=m), fh)
                        meta["runs"].append(dict(rec, engine=name, preset=p, threads=int(th), round=r, position=pos))
                    print(f"bench-core: preset {p}, {th} thread(s), round {r + 1}/{rounds} done "
                          f"({time.monotonic() - start:.0f}s; order {' '.join(order)})", flush=True)
        text = core_report.write(raw, a.out, int(time.monotonic() - start), a.quick, base.get("OPENBLAS_CORETYPE"),
                                 meta)
    print(text)
    print(f"bench-core: wrote {a.out}.md and {a.out}.json")
    return 0


def _argv_after(word):
    args = sys.argv[1:]
    return args[args.index(word) + 1:] if word in args else args

"""python3 -m occtools bench-async-save: what a checkpoint save costs the training loop, with and without --async-save.

One rank trains a 25.5M-parameter GPT (8 layers, hidden 512; a checkpoint of 292 MB:
weights and both Adam moments in fp32) for --iters iterations, saving every
--save-interval, in three variants run interleaved (--repeats rounds of each, so the
machine's load falls on all alike):

  none   no save (the baseline iteration time);
  sync   --save: the save's files written and fsynced on the training thread;
  async  --save --async-save: copied to host memory at the iteration boundary, written by
         a thread while training goes on.

Per iteration the wall time is the metrics row's `ms` (the step) plus, after a saving
iteration, what the save took on the training thread (the `saved checkpoint` line: all of
it synchronous; the snapshot, and any wait for the previous save, asynchronous). Reported:
a saving iteration against a non-saving one, the iterations that overlap a background
write, and the whole save period, each as a ratio to the baseline's median iteration.
Also: both variants' final checkpoints compared byte for byte.

Writes a markdown report (stdout, and --report FILE; its Regenerate line names this command).
"""
import argparse
import filecmp
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from occtools.common.engine import ROOT
from occtools.common.errors import Failure
MODEL = ["--num-layers", "8", "--hidden-size", "512", "--num-attention-heads", "8", "--seq-length", "64",
         "--max-position-embeddings", "64", "--micro-batch-size", "1", "--global-batch-size", "2",
         "--eval-iters", "0", "--eval-interval", "100000", "--log-interval", "100000"]
SAVED = re.compile(r"^saved checkpoint .*iter_0*(\d+) \((?:written in the background in (\d+) ms; )?([\d.]+) ms")


def add_parser(sub):
    ap = sub.add_parser("bench-async-save", help="what a checkpoint save costs the training loop, with and without "
                        "--async-save", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=24)
    ap.add_argument("--save-interval", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "optimus-cc"))
    ap.add_argument("--data", default="", help="a preprocessed dataset prefix (default: data/kjv.txt.zst)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results", "async-save"))
    ap.add_argument("--report", default="")
    ap.set_defaults(func=main)


def main(a):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    data = a.data
    if not data:
        data = os.path.join(a.out, "kjv")
        subprocess.run([a.bin, "preprocess", "--input", os.path.join(ROOT, "data/kjv.txt.zst"), "--output-prefix", data,
                        "--vocab-size", "512"], check=True, capture_output=True, env=env)
    base = [a.bin, "train", "--data-path", data, "--tokenizer-model", data + ".model", "--train-iters", str(a.iters)] + MODEL
    variants = {"none": [], "sync": ["--save-interval", str(a.save_interval)],
                "async": ["--save-interval", str(a.save_interval), "--async-save"]}
    loads, runs = [], {v: [] for v in variants}
    for r in range(a.repeats):
        for name, flags in variants.items():
            tag = f"{name}{r}"
            ck = os.path.join(a.out, tag)
            save = ["--save", ck] if flags else []
            metrics = os.path.join(a.out, tag + ".jsonl")
            loads.append(os.getloadavg()[0])
            t0 = time.time()
            p = subprocess.run(base + flags + save + ["--metrics", metrics], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                raise Failure(f"bench: {tag} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}", 1)
            runs[name].append(parse(metrics, p.stdout, time.time() - t0))
            print(f"bench: {tag} done in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    final = f"iter_{a.iters:07d}"
    same = all(files_equal(os.path.join(a.out, f"sync{r}", final), os.path.join(a.out, f"async{r}", final))
               for r in range(a.repeats))
    report = render(a, runs, loads, same, " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x
                                                  for x in ["python3 -m occtools", *sys.argv[1:]]))
    print(report)
    if a.report:
        with open(a.report, "w") as f:
            f.write(report)
    for r in range(a.repeats):  # the checkpoints are large
        for name in variants:
            shutil.rmtree(os.path.join(a.out, f"{name}{r}"), ignore_errors=True)
    return 0


def parse(metrics, stdout, wall):
    ms = {j["iter"]: j["ms"] for j in map(json.loads, open(metrics))}
    main, background = {}, {}
    for line in stdout.splitlines():
        m = SAVED.match(line)
        if m:
            main[int(m.group(1))] = float(m.group(3))
            if m.group(2):
                background[int(m.group(1))] = float(m.group(2))
    return {"ms": ms, "main": main, "background": background, "wall": wall}


def files_equal(a, b):
    fa = sorted(os.path.relpath(os.path.join(d, f), a) for d, _, fs in os.walk(a) for f in fs)
    fb = sorted(os.path.relpath(os.path.join(d, f), b) for d, _, fs in os.walk(b) for f in fs)
    return fa == fb and bool(fa) and all(filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in fa)


def render(a, runs, loads, same, command):
    k, n = a.save_interval, a.iters
    saving = [i for i in range(k, n, k)]  # (the last iteration's save is waited for at the end: not counted)
    # Each round's ratios against the same round's baseline (the machine's load drifts between rounds).
    baseline = [statistics.median(r["ms"][i] for i in range(2, n + 1)) for r in runs["none"]]
    t = statistics.median(baseline)

    def stats(values):
        v = sorted(values)
        return f"{statistics.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f})"

    rows = []
    for name in ("sync", "async"):
        save_it, after, plain, period = [], [], [], []
        for r, base in zip(runs[name], baseline):
            wall = {i: (r["ms"][i] + r["main"].get(i, 0.0)) / base for i in r["ms"]}
            save_it += [wall[i] for i in saving]
            after += [wall[i + 1] for i in saving]
            plain += [wall[i] for i in range(2, n + 1) if i % k not in (0, 1)]
            period += [sum(wall[j] for j in range(i - k + 1, i + 1)) / k for i in saving[1:]]
        main_ms = [r["main"][i] for r in runs[name] for i in saving]
        bg = [r["background"][i] for r in runs[name] for i in saving if i in r["background"]]
        rows.append(f"| {name} | {stats(save_it)} | {stats(after)} | {stats(plain)} | {stats(period)} | "
                    f"{statistics.median(main_ms):.0f} | {f'{statistics.median(bg):.0f}' if bg else '-'} |")
    return "\n".join([
        "# What a checkpoint save costs the training loop: --async-save",
        "",
        f"Regenerate: `{command}`",
        "",
        f"One rank, a 25.5M-parameter GPT (8 layers, hidden 512, seq 64, 2 samples per iteration; each "
        f"checkpoint 292 MB), {n} iterations, a save every {k}; variants interleaved, {a.repeats} rounds. "
        f"Load average during the runs: {min(loads):.1f}-{max(loads):.1f} (2 vCPUs shared with other jobs).",
        "",
        f"Baseline (no save): median iteration {t:.0f} ms (rounds: "
        + ", ".join(f"{b:.0f}" for b in baseline) + ").",
        "",
        "Iteration wall time as a ratio to the same round's baseline median: median (min-max) over the saves of "
        "all rounds.",
        "A saving iteration's wall time includes what the save took on the training thread.",
        "",
        "| variant | saving iteration | the next one | others | mean over a save period | "
        "training thread per save (ms) | background write (ms) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Final checkpoints of the synchronous and asynchronous runs: "
        + ("byte-identical in every round." if same else "DIFFERENT (a bug)."),
        "",
    ])


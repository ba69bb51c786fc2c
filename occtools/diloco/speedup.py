"""python3 -m occtools diloco-speedup: DiLoCo against per-step data parallelism on the emulated
cluster (issue 34), at each bandwidth: `speedup --small` (the speedup model, 8 layers of hidden
256, P2 D2 on 4 nodes of one rank, every transfer over a shaped link) with the variants
  baseline | dp_powersgd (DP PowerSGD r16 + EF) | pp_int8 (int8 on both pipeline links)
  | diloco_h8 | diloco_h32 | streaming_int8 | diloco_h8_pp_int8 | auto (plan --auto
  --max-loss-increase 0.5 over compressors.json and diloco-quality.json, calibrated on this
  bandwidth's first baseline run)
interleaved over repetitions. DiLoCo's syncs make some iterations long, so a run's time is its
MEAN ms per iteration over its last 32 iterations (9-40 of 40), whole rounds of every H (4 syncs
of H 8, 1 of H 32, 4 of each streaming fragment; DP PowerSGD's 10 % warm-up is over by iteration
5); the report gives each variant's mean over the repetitions with a 95 % t-interval, and the
speedup per round (paired with that round's baseline). The machine's load is sampled every 30 s.

Writes OUT/BANDWIDTH/ (the speedup command's output: runs, speedup.md on medians), OUT/load.txt,
and OUT/diloco-speedup.{md,json}. --part NAME writes OUT/BANDWIDTH-NAME instead: further
interleaved rounds beside an earlier output (speedup starts its output afresh); the report pools
OUT/BANDWIDTH and every OUT/BANDWIDTH-* of the same cluster settings, their rounds counted apart.
--from-json FILE rebuilds FILE's .md from a committed diloco-speedup-*.json.
"""

import argparse
import glob
import json
import os
import threading
import time

from occtools.common.errors import words
from occtools.diloco import speedup_report
from occtools.speedup import cli as speedup

VARIANTS = ["baseline", "dp_powersgd", "pp_int8", "diloco_h8", "diloco_h32", "streaming_int8", "diloco_h8_pp_int8",
            "auto"]
WINDOW = 32


def add_parser(sub):
    p = sub.add_parser("diloco-speedup", help="DiLoCo against per-step DP on the emulated cluster "
                                              "(docs/results/diloco-speedup-*.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    speedup.add_options(p, out="bench-results/diloco-speedup", iters=40, reps=3, name="dlcbench")
    p.add_argument("--bandwidths", type=words, default=["300mbit", "30mbit"], help='default "300mbit 30mbit"')
    p.add_argument("--quality", default="docs/results/diloco-quality.json", help="the DiLoCo quality experiment's json")
    p.add_argument("--part", help="write OUT/BANDWIDTH-NAME: more rounds beside an earlier output")
    p.add_argument("--report-only", action="store_true", help="no new runs")
    p.add_argument("--from-json", help="rebuild this diloco-speedup json's .md (no runs)")
    p.set_defaults(func=main)


def sample_load(path, stop):
    with open(path, "a") as f:
        while True:
            f.write(f"{int(time.time())} {' '.join(open('/proc/loadavg').read().split()[:3])}\n")
            f.flush()
            if stop.wait(30):
                return


def main(a):
    if a.from_json:
        with open(a.from_json) as f:
            doc = json.load(f)
        os.makedirs(a.out, exist_ok=True)
        speedup_report.publish(doc, os.path.join(a.out, os.path.splitext(os.path.basename(a.from_json))[0]))
        return 0
    os.makedirs(a.out, exist_ok=True)
    root, load = a.out, os.path.join(a.out, "load.txt")
    if not a.report_only:
        if not os.path.isfile(a.quality):
            print(f"note: no {a.quality} (python3 -m occtools diloco-quality): the auto plan cannot consider DiLoCo")
        a.small, a.variants = True, a.variants or VARIANTS
        stop = threading.Event()
        threading.Thread(target=sample_load, args=(load, stop), daemon=True).start()
        try:
            for bw in a.bandwidths:
                print(f"== {bw}: {' '.join(a.variants)}, {a.reps} repetitions of {a.iters} iterations", flush=True)
                a.bandwidth, a.out = bw, os.path.join(root, bw + (f"-{a.part}" if a.part else ""))
                speedup.bench(a)
                speedup.report.write(a.out)
        finally:
            stop.set()
    dirs = [d for bw in a.bandwidths for d in [os.path.join(root, bw)] + sorted(glob.glob(os.path.join(root, bw + "-*")))
            if os.path.isfile(os.path.join(d, "runs", "settings"))]
    command = (f"python3 -m occtools diloco-speedup --bandwidths \"{' '.join(a.bandwidths)}\" --reps {a.reps} "
               f"--iters {a.iters}")
    doc = speedup_report.summarize(dirs, a.quality, load, command, WINDOW)
    speedup_report.write(os.path.join(root, "diloco-speedup"), doc)
    return 0

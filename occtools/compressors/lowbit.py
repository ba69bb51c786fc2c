"""python3 -m occtools lowbit: issue 50's measured answer. The compressor sweep's 2- and 3-bit
pipeline codes (behind a Hadamard rotation, rANS-coded), the adaptive codec and the DP methods
meant for >= 32x, on the quality model in --bf16, three seeds, on two corpora: the bundled KJV and
Debian's GCIDE dictionary (not used to choose any setting). Each run is compared with the
same-seed, same-corpus baseline.

The runs are `compressors` runs (WORK/kjv, WORK/gcide; a finished run is not run again, so a
stopped sweep continues where it stopped). Variants run in priority order, each on both corpora
before the next, so what a shorter budget finishes is the most needed. --report-only: no runs;
--from-json docs/results/lowbit.json --out DIR rebuilds the committed report without its runs.
Writes OUT/lowbit.md, OUT/lowbit.json and the Pareto plots OUT/pareto-lowbit-{pipeline,dp}.png
(loss change against bits per value, per link class).
"""

import argparse
import os

from occtools.common.errors import positive_int, words
from occtools.compressors import cli as compressors_cli
from occtools.compressors import lowbit_report
from occtools.quality import model

SEEDS = ["1234", "4321", "2718"]
ITERS = 100
# The order the runs are made in: the target's candidates first, then what explains them (each
# link alone, LEP on the backward link), then the rest of the Pareto front.
ORDER = ["baseline", "pp_lm2_rot_rans", "pp_int2_rot_rans", "dp_powersgd4", "dp_topk2", "pp_lm3_rot_rans",
         "pp_lm2_int2_rot_rans", "fwd_lm2_rot_rans", "bwd_lm2_rot_rans", "bwd_lm2_rot_lep_rans",
         "bwd_lm2_rot_lepdecay_rans", "pp_lm3_int2_rot_rans", "bwd_mxfp4_lep_check", "bwd_mxfp4", "dp_int2_rot", "dp_powersgd8",
         "pp_adaptive_rot_rans", "fwd_lm3_rot_rans", "bwd_lm3_rot_rans", "dp_lm2_rot", "dp_powersgd2",
         "fwd_int2_rot_rans", "bwd_int2_rot_rans", "bwd_int2_rot_lep_rans", "bwd_lm3_rot_lep_rans"]


def add_parser(sub):
    p = sub.add_parser("lowbit", help="issue 50's sweep: 2-bit pipeline codes and 32x DP on two corpora",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="bench-results/lowbit", help="the runs (default bench-results/lowbit)")
    p.add_argument("--out", default=None, help="the report's folder (default: WORK)")
    p.add_argument("--iters", type=positive_int, default=ITERS, help=f"default {ITERS}")
    p.add_argument("--seeds", type=words, default=SEEDS, help=f'default "{" ".join(SEEDS)}"')
    p.add_argument("--corpora", type=words, default=list(model.CORPORA), help="default \"kjv gcide\"")
    p.add_argument("--variants", type=words, default=ORDER, help="in this order (default: the priority order)")
    p.add_argument("--report-only", action="store_true", help="no new runs: the report of what WORK holds")
    p.add_argument("--from-json", help="rebuild OUT's lowbit.md and plots from this lowbit.json (no runs, no WORK)")
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc; give a copy so that rebuilding does not "
                                 "change a running sweep)")
    p.set_defaults(func=main)


def main(a):
    if a.from_json:
        for p in lowbit_report.write_from_json(a.from_json, a.out or a.work):
            print(f"wrote {p}")
        return 0
    failed = 0
    if not a.report_only:
        for v in a.variants:
            for corpus in a.corpora:
                args = argparse.Namespace(
                    iters=a.iters, seeds=a.seeds, out=os.path.join(a.work, corpus), precision="bf16",
                    corpus=corpus, variants=sorted({"baseline", v}, key=lambda n: n != "baseline"),
                    list=False, report_only=False, from_json=None, bin=a.bin)
                print(f"== {v} on {corpus}", flush=True)
                failed |= compressors_cli.main(args)
    for p in lowbit_report.write(a.work, a.corpora, a.out or a.work):
        print(f"wrote {p}")
    return 1 if failed else 0

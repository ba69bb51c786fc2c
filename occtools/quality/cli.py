"""python3 -m occtools quality: the Optimus-CC quality ablation on the bundled corpus.

The quality model (model.py: 6 layers, hidden 256, 8 heads, seq 128) on 4 ranks (pipeline 2 x
data 2), the same tokens for every variant:
  baseline | DP-only PowerSGD | CB without LEP | CB+LEP | CB+LEP+EC | +FE | +SC (full Optimus-CC)
Shapes chosen to sit closer to the paper's regime than a toy batch: micro-batch 4 x seq 128 =
n 512 token rows per CB message (n > m = hidden 256), global batch 32 = M 4 micro-batches per DP
rank per iteration (M = 2P), CB rank 16 (paper 12..16), DP rank 16 (~6 % of the columns, as 128
of 1920 in the paper). The first CB rank of --cb-ranks (16, the paper's) runs the whole
ablation; each further rank (default 64) repeats the variants whose quality depends on it (CB,
CB+LEP, CB+LEP+EC, full), so the table shows how the gaps move with the compression error.
--variants 8_cb_ec_no_lep runs the opt-in diagnostic EC without LEP.

Runs accumulate in OUT as NAME[_rCBRANK]_sSEED.jsonl (a finished run is not run again); the
report covers every run found there, each against the baseline of the same seed: OUT/quality.json,
OUT/quality.md (final validation loss, bytes per iteration per class, ms per iteration, LEP's
premises from --check-lep) and OUT/quality.png (the ablation's validation curves and the rank
sweep). --report-only: no new runs.
"""

import argparse
import os

from occtools.common import engine, sweep
from occtools.common.errors import Failure, positive_int, words
from occtools.quality import model, report

# name -> flags; @R: the CB rank of the run, @D: the DP rank
CB = "--inter-grad-comp --inter-grad-comp-rank @R"
DPC = "--grad-comp --grad-comp-rank @D --grad-comp-warm-up 0.1"
VARIANTS = {
    "1_baseline": "",
    "2_dp_powersgd": f"{DPC} --use-error-feedback",
    "3_cb": CB,
    "4_cb_lep": f"{CB} --use-error-feedback --check-lep",
    "5_cb_lep_ec": f"{CB} --use-error-feedback --inter-grad-comp-epilogue-only",
    "6_cb_lep_ec_fe": f"{CB} --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt",
    "7_optimus_cc": f"{CB} --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt {DPC} "
                    "--selective-grad-comp-way 1",
    # Diagnostic, run only when named in --variants: EC without LEP (is LEP what EC costs?).
    "8_cb_ec_no_lep": f"{CB} --inter-grad-comp-epilogue-only",
}
OPT_IN = {"8_cb_ec_no_lep"}
SWEPT = {"3_cb", "4_cb_lep", "5_cb_lep_ec", "7_optimus_cc"}  # repeated at every further CB rank


def add_parser(sub):
    p = sub.add_parser("quality", help="the Optimus-CC quality ablation (docs/results/quality.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=positive_int, default=160, help="iterations per run (default 160)")
    p.add_argument("--quick", action="store_true", help="40 iterations, CB rank 16 only")
    p.add_argument("--out", default="bench-results/quality", help="default bench-results/quality")
    p.add_argument("--seeds", type=words, default=["1234"], help='seeds, e.g. "1234 4321" (default 1234)')
    p.add_argument("--cb-ranks", type=words, default=["16", "64"], help='CB ranks (default "16 64")')
    p.add_argument("--dp-rank", type=positive_int, default=16, help="DP PowerSGD's rank (default 16)")
    p.add_argument("--variants", type=words, default=[], help=f"only these ({', '.join(VARIANTS)})")
    p.add_argument("--report-only", action="store_true", help="no new runs: the report of what OUT holds")
    p.add_argument("--bin", help="optimus-cc (default: build/optimus-cc, built first by scripts/setup.sh)")
    p.set_defaults(func=main)


def runs(a):
    """The runs to make, in order: every seed, every variant, its CB ranks."""
    unknown = [v for v in a.variants if v not in VARIANTS]
    if unknown:
        raise Failure(f"--variants: no variant {', '.join(unknown)} (have {', '.join(VARIANTS)})")
    out = []
    for seed in a.seeds:
        for name in sorted(VARIANTS):
            if (a.variants and name not in a.variants) or (not a.variants and name in OPT_IN):
                continue
            flags = VARIANTS[name].replace("@D", str(a.dp_rank))
            ranks = [""]
            if "@R" in flags:
                ranks = a.cb_ranks if (a.variants or name in SWEPT) else a.cb_ranks[:1]
            for r in ranks:
                out.append(sweep.Run(f"{name}{'_r' + r if r else ''}_s{seed}",
                                     ["--seed", seed] + flags.replace("@R", r).split()))
    return out


def main(a):
    eval_interval = 20
    if a.quick:
        a.iters, eval_interval, a.cb_ranks = 40, 10, ["16"]
    os.makedirs(a.out, exist_ok=True)
    failed = []
    if not a.report_only:
        exe = engine.binary(a.bin, build=not a.bin)
        data = model.prepare(a.out, exe)
        failed = sweep.run_all(runs(a), model.flags(data, a.iters, eval_interval), a.out, a.iters, exe, model.RANKS)
    report.write(a.out)
    return 1 if failed else 0

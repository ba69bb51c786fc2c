"""python3 -m occtools compressors: every compression method on every link class, the sensible
combinations and the paper's configurations, on the quality model (P2 D2 on 4 ranks), two seeds,
the same tokens for every variant, in --bf16 (the precision users train in; the uncompressed wire
is then bf16 on the pipeline links) unless --precision fp32. Each run is compared with the
baseline of the same seed and precision.
  link classes: pp_fwd (activations sent forward, --activation-comp-method),
                pp_bwd (activation gradients sent backward: CB, --inter-grad-comp-method),
                dp     (data-parallel gradients: --grad-comp-method)
Writes OUT/variants.json (what each variant is), OUT/NAME_sSEED.jsonl (its metrics), OUT/load.txt,
and from them OUT/compressors.json (bytes per iteration per class, final validation loss vs
baseline per seed, and per link class the measured loss cost of each method: what `optimus-cc
plan --auto --compressors-json` reads), OUT/compressors.md and OUT/pareto.png (pipeline bits per
value vs loss, the paper's configurations marked).

Variants run in the table's order (--list), or in --variants' order, both seeds each; a variant
whose runs are complete is not run again (delete them to rerun). --report-only: no new runs.
--from-json FILE rebuilds FILE's .md and its pareto plot from a committed summary (no runs:
compressors-bf16.json -> compressors-bf16.md, pareto-bf16.png). The variants' settings are in
occtools/compressors/variants.py.
"""

import argparse
import json
import os

from occtools.common import engine, sweep
from occtools.common.errors import Failure, positive_int, words
from occtools.compressors import report, summary, variants
from occtools.quality import model

EVAL = 20


def add_parser(sub):
    p = sub.add_parser("compressors", help="every compressor on every link class (docs/results/compressors*.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=positive_int, default=100, help=f"a multiple of {EVAL} (default 100)")
    p.add_argument("--seeds", type=words, default=["1234", "4321"], help='default "1234 4321"')
    p.add_argument("--out", default="bench-results/compressors", help="default bench-results/compressors")
    p.add_argument("--precision", choices=("bf16", "fp32"), default="bf16", help="default bf16")
    p.add_argument("--corpus", choices=model.CORPORA, default="kjv",
                   help="kjv (the bundled corpus, default) or gcide (Debian's dictionary, extracted and tokenized "
                        "into OUT/data on first use)")
    p.add_argument("--variants", type=words, default=[], help="only these, in this order (see --list)")
    p.add_argument("--list", action="store_true", help="the variants: name and label")
    p.add_argument("--report-only", action="store_true", help="no new runs: the report of what OUT holds")
    p.add_argument("--from-json", help="rebuild this compressors json's .md and pareto plot into OUT (no runs)")
    p.add_argument("--bin", help="optimus-cc (default: build/optimus-cc, built first by scripts/setup.sh; "
                                 "give a copy so that rebuilding does not change a running sweep)")
    p.set_defaults(func=main)


def order(wanted):
    table = variants.all_variants()
    if not wanted:
        return table
    by_name = {v["name"]: v for v in table}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        raise Failure(f"--variants: no variant {', '.join(unknown)} (see python3 -m occtools compressors --list)")
    return [by_name[w] for w in wanted]


def from_json(path, out):
    with open(path) as f:
        doc = json.load(f)
    stem = os.path.splitext(os.path.basename(path))[0]
    for p in report.write(doc, out, stem, "pareto" + stem.removeprefix("compressors")):
        print(f"wrote {p}")
    return 0


def main(a):
    if a.list:
        for v in variants.all_variants():
            print(f"{v['name']}\t{v['label']}")
        return 0
    if a.from_json:
        return from_json(a.from_json, a.out)
    model.check_iters(a.iters, EVAL)
    chosen = order(a.variants)
    os.makedirs(a.out, exist_ok=True)
    failed = []
    if not a.report_only:
        exe = engine.binary(a.bin, build=not a.bin)
        data = model.prepare(a.out, exe, a.corpus)
        command = (f"python3 -m occtools compressors --iters {a.iters} --seeds \"{' '.join(a.seeds)}\" "
                   f"--precision {a.precision}" + (f" --corpus {a.corpus}" if a.corpus != "kjv" else ""))
        with open(os.path.join(a.out, "variants.json"), "w") as f:
            json.dump(variants.manifest(a.iters, a.seeds, a.precision, command, a.corpus), f, indent=1)
        flags = model.flags(data, a.iters, EVAL) + (["--bf16"] if a.precision == "bf16" else [])
        runs = [sweep.Run(f"{v['name']}_s{s}", ["--seed", s] + v["flags"].split(), f"{v['name']:16s} seed {s}")
                for v in chosen for s in a.seeds]
        failed = sweep.run_all(runs, flags, a.out, a.iters, exe, model.RANKS,
                               load_file=os.path.join(a.out, "load.txt"))
    doc = summary.summarise(a.out)
    with open(os.path.join(a.out, "compressors.json"), "w") as f:
        json.dump(doc, f, indent=1)
    for p in report.write(doc, a.out):
        print(f"wrote {p}")
    return 1 if failed else 0

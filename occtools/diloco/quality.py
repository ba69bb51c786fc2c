"""python3 -m occtools diloco-quality: DiLoCo's quality against per-step data parallelism (issue 34)
on the quality model (6 layers, hidden 256, seq 128, micro-batch 4, global batch 32, the same
tokens for every variant) at two layouts on 4 ranks: P2 D2 (the compressor sweep's layout) and
P1 D4 (D4 with one process per replica: 8 ranks would not fit a 2-core machine; P1 has no
pipeline links, so the pipeline variants are P2 only).

Variants, two seeds each, every run against the baseline of its seed and layout: baseline | dp
PowerSGD r16 + EF (the sweep's setting) | int8 on both pipeline links (P2 only: pipeline
compression alone) | DiLoCo H 8 | DiLoCo H 32 | Streaming DiLoCo (H 8, 3 fragments, overlap 2,
mixing 0.5, int8 outer gradients) | DiLoCo H 8 + int8 on both pipeline links (P2 only).
Diagnostics (run only when named in --variants, on the seeds given; P2 D2): DiLoCo with outer lr
1 and momentum 0, i.e. the replicas' parameters averaged every H steps, at H 1, 8 and 32 (whether
the outer optimizer's defaults, not the rounds themselves, cost the loss).

Writes OUT/variants.json, OUT/NAME_LAYOUT_sSEED.jsonl (metrics; a run that reached the final
evaluation is not run again) and OUT/diloco-quality.{json,md,png}: the json's link_costs (DiLoCo
settings measured at P2 D2) is what `optimus-cc plan --auto --max-loss-increase` reads with
--diloco-json (docs/results/diloco-quality.json by default). --from-json FILE rebuilds the .md and
.png from a committed diloco-quality.json.
"""

import argparse
import json
import os

from occtools.common import engine, sweep
from occtools.common.errors import Failure, positive_int, words
from occtools.diloco import quality_report
from occtools.quality import model

EVAL = 32  # the evaluation interval: a multiple of every H
DPC = "--grad-comp --grad-comp-error-feedback --grad-comp-warm-up 0.1 --grad-comp-rank 16"
STREAM = ("--diloco-inner-steps 8 --diloco-fragments 3 --diloco-overlap-steps 2 --diloco-mixing 0.5 "
          "--diloco-outer-comp-method int8")
PPINT8 = "--activation-comp-method int8 --inter-grad-comp --inter-grad-comp-method int8"
AVG = "--diloco-outer-lr 1 --diloco-outer-momentum 0"
INT8 = {"method": "int8"}
BOTH, P2 = ["p2d2", "p1d4"], ["p2d2"]
# kind: baseline, reference (per-step DP with compression, as the compressor sweep measures it),
# single (DiLoCo alone: the planner's link_costs), combo, diagnostic (not a candidate; see above)
VARIANTS = [
    ("baseline", "baseline", "baseline", BOTH, None, None, None, ""),
    ("dp_powersgd16", "dp PowerSGD r16 + EF", "reference", BOTH, None, None,
     {"method": "powersgd", "rank": 16, "error_feedback": True, "warmup": 0.1}, DPC),
    ("pp_int8", "int8 on both pipeline links (per-step DP)", "reference", P2, INT8, INT8, None, PPINT8),
    ("diloco_h8", "DiLoCo H 8", "single", BOTH, None, None, {"method": "diloco", "inner_steps": 8},
     "--diloco-inner-steps 8"),
    ("diloco_h32", "DiLoCo H 32", "single", BOTH, None, None, {"method": "diloco", "inner_steps": 32},
     "--diloco-inner-steps 32"),
    ("streaming_int8", "Streaming DiLoCo H 8, F 3, overlap 2, int8", "single", BOTH, None, None,
     {"method": "diloco", "inner_steps": 8, "fragments": 3, "overlap": 2, "mixing": 0.5, "outer_comp": "int8"}, STREAM),
    ("diloco_h8_pp_int8", "DiLoCo H 8 + int8 pipeline links", "combo", P2, INT8, INT8,
     {"method": "diloco", "inner_steps": 8}, f"--diloco-inner-steps 8 {PPINT8}"),
    ("avg_h1", "parameters averaged every step (DiLoCo H 1, outer lr 1, momentum 0)", "diagnostic", P2, None, None,
     None, f"--diloco-inner-steps 1 {AVG}"),
    ("avg_h8", "parameters averaged every 8 steps (DiLoCo H 8, outer lr 1, momentum 0)", "diagnostic", P2, None, None,
     None, f"--diloco-inner-steps 8 {AVG}"),
    ("avg_h32", "parameters averaged every 32 steps (DiLoCo H 32, outer lr 1, momentum 0)", "diagnostic", P2, None,
     None, None, f"--diloco-inner-steps 32 {AVG}"),
]
PIPELINE = {"p2d2": 2, "p1d4": 1}


def add_parser(sub):
    p = sub.add_parser("diloco-quality", help="DiLoCo's loss against per-step DP (docs/results/diloco-quality.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=positive_int, default=128, help=f"a multiple of {EVAL} (default 128)")
    p.add_argument("--seeds", type=words, default=["1234", "4321"], help='default "1234 4321"')
    p.add_argument("--out", default="bench-results/diloco-quality", help="default bench-results/diloco-quality")
    p.add_argument("--layouts", type=words, default=["p2d2", "p1d4"], help='default "p2d2 p1d4"')
    p.add_argument("--variants", type=words, default=[], help="only these (diagnostics run only when named)")
    p.add_argument("--report-only", action="store_true", help="no new runs")
    p.add_argument("--from-json", help="rebuild OUT/diloco-quality.{md,png} from this diloco-quality.json (no runs)")
    p.add_argument("--bin", help="optimus-cc (default: build/optimus-cc, built first by scripts/setup.sh)")
    p.set_defaults(func=main)


def manifest(a):
    command = (f"python3 -m occtools diloco-quality --iters {a.iters} --seeds \"{' '.join(a.seeds)}\" --layouts "
               f"\"{' '.join(a.layouts)}\"")
    return {"description": f"DiLoCo vs per-step data parallelism on the quality model: 5.8 M-parameter GPT (6 layers, "
                           f"hidden 256, seq 128), global batch 32, {a.iters} iterations, the same tokens for every "
                           f"variant; P2 D2 and P1 D4 on 4 ranks", "command": command, "iters": a.iters,
            "seeds": [int(s) for s in a.seeds], "layouts": a.layouts,
            "variants": [{"name": n, "label": label, "kind": kind, "layouts": [x for x in where if x in a.layouts],
                          "flags": flags, "links": {"pp_fwd": fwd, "pp_bwd": bwd, "dp": dp}}
                         for n, label, kind, where, fwd, bwd, dp, flags in VARIANTS]}


def main(a):
    if a.from_json:
        with open(a.from_json) as f:
            summary = json.load(f)
        os.makedirs(a.out, exist_ok=True)
        quality_report.publish(summary, a.out)
        return 0
    model.check_iters(a.iters, EVAL)
    unknown = [v for v in a.variants if v not in {x[0] for x in VARIANTS}]
    bad_layouts = [x for x in a.layouts if x not in PIPELINE]
    if unknown or bad_layouts:
        raise Failure(f"unknown {'--variants ' + ', '.join(unknown) if unknown else '--layouts ' + ', '.join(bad_layouts)}"
                      f" (variants: {', '.join(x[0] for x in VARIANTS)}; layouts: p2d2, p1d4)")
    os.makedirs(a.out, exist_ok=True)
    failed = []
    if not a.report_only:
        exe = engine.binary(a.bin, build=not a.bin)
        data = model.prepare(a.out, exe)
        with open(os.path.join(a.out, "variants.json"), "w") as f:
            json.dump(manifest(a), f, indent=1)
        for layout in a.layouts:
            runs = [sweep.Run(f"{n}_{layout}_s{s}", ["--seed", s] + flags.split(), f"{n:18s} {layout} seed {s}")
                    for n, _, kind, where, _, _, _, flags in VARIANTS
                    if (not a.variants or n in a.variants) and (kind != "diagnostic" or n in a.variants)
                    and layout in where for s in a.seeds]
            failed += sweep.run_all(runs, model.flags(data, a.iters, EVAL, PIPELINE[layout]), a.out, a.iters, exe,
                                    model.RANKS)
    quality_report.write(a.out)
    return 1 if failed else 0

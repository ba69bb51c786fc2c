"""python3 -m occtools lep-shapes: LEP's premise against the CB message's shape, on the CPU (issue 15).

The paper-regime quality experiment needs a GPU; this measures, as far as two CPU cores reach,
whether the residual that lazy error propagation carries shrinks next to the gradient it joins
(--check-lep's error_ratio, paper Fig. 11) as the CB message grows from our CPU experiments'
512 x 256 towards the paper's 8192 x 1024 (micro-batch 8 x seq 1024 rows, hidden 1024). Every
shape gets the same depth (2 layers, P2, one DP replica), the same 2 micro-batches per
iteration, CB rank 16 (the paper's; --cb-rank) with LEP, the same optimizer, corpus, seed and
number of iterations; only hidden (heads = hidden / 64), seq and micro-batch change. Short
runs: the ratios are compared across shapes at equal iterations, after a start-up transient
whose size and length depend on the shape (hence the peak and the per-iteration values in the
report), not at the end of a long run. On two cores the defaults take about an hour and a
quarter, most of it the 8192 x 1024 run (about 33 s per iteration). --smoke: 3 iterations of
two tiny shapes, the plumbing only (cli.lep_shapes).

Writes OUT/lep-shapes.{json,md}: per shape and seed, the means of error_ratio, delta_ratio and
cosine over the last quarter of the iterations, error_ratio's peak (the transient) and its
iteration, CB's bytes, ms per iteration and the last loss, then error_ratio and delta_ratio per
iteration; the runs' logs and metrics stay in OUT. --from-json FILE rebuilds the .md from a
committed lep-shapes.json (docs/results/lep-shapes.json).
"""

import argparse
import glob
import json
import os
import re
import statistics

from occtools.common import engine, metrics, proc
from occtools.common.errors import Failure, positive_int, words
from occtools.common.tables import table

DEFAULT_SHAPES = ["256:128:4", "512:256:8", "1024:1024:8"]


def add_parser(sub):
    p = sub.add_parser("lep-shapes", help="LEP's premise against the CB message's shape, CPU (docs/results/lep-shapes.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=100, help="iterations per run, >= 3 (default 100)")
    p.add_argument("--out", default="bench-results/lep-shapes", help="default bench-results/lep-shapes")
    p.add_argument("--shapes", type=words, default=DEFAULT_SHAPES,
                   help=f'"HIDDEN:SEQ:MB ..." (default "{" ".join(DEFAULT_SHAPES)}")')
    p.add_argument("--seeds", type=words, default=["1"], help="default 1")
    p.add_argument("--cb-rank", type=positive_int, default=16, help="default 16")
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc)")
    p.add_argument("--smoke", action="store_true", help="3 iterations of two tiny shapes: the plumbing")
    p.add_argument("--report-only", action="store_true", help="no new runs")
    p.add_argument("--from-json", help="rebuild OUT/lep-shapes.md from this lep-shapes.json (no runs)")
    p.set_defaults(func=main)


def parse_shapes(shapes):
    out = []
    for s in shapes:
        m = re.fullmatch(r"(\d+):(\d+):(\d+)", s)
        if not m or int(m.group(1)) % 64 or int(m.group(1)) < 64:
            raise Failure(f"--shapes entry '{s}': use HIDDEN:SEQ:MB with HIDDEN a multiple of 64 (heads = HIDDEN / 64)")
        out.append(tuple(int(x) for x in m.groups()))
    return out


def run_name(hidden, seq, mb, rank, seed):
    return f"h{hidden}_s{seq}_mb{mb}" + ("" if rank == 16 else f"_r{rank}") + f"_seed{seed}"


def run_all(a, shapes):
    exe = engine.binary(a.bin)
    env = engine.rank_env()
    data = engine.preprocess(exe, os.path.join(a.out, "data", "kjv"), 4096, env=env)
    for seed in a.seeds:
        for hidden, seq, mb in shapes:
            run = run_name(hidden, seq, mb, a.cb_rank, seed)
            path = os.path.join(a.out, run + ".jsonl")
            rows = metrics.read_run(path)
            if rows and len(rows) == a.iters:
                print(f"lep-shapes: {run} already done")
                continue
            if rows is not None:
                os.remove(path)
            print(f"lep-shapes: {run} ({a.iters} iterations; message {seq * mb} x {hidden}, CB rank {a.cb_rank})",
                  flush=True)
            flags = ["--data-path", data, "--tokenizer-model", data + ".model", "--num-layers", 2, "--hidden-size",
                     hidden, "--num-attention-heads", hidden // 64, "--seq-length", seq, "--max-position-embeddings", seq,
                     "--micro-batch-size", mb, "--global-batch-size", 2 * mb, "--pipeline-model-parallel-size", 2,
                     "--train-iters", a.iters, "--seed", seed, "--lr", "6e-4", "--min-lr", "6e-5",
                     "--lr-warmup-fraction", "0.05", "--weight-decay", "0.1", "--clip-grad", "1.0",
                     "--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--eval-interval", a.iters + 1,
                     "--eval-iters", 1, "--log-interval", 5, "--inter-grad-comp", "--inter-grad-comp-rank", a.cb_rank,
                     "--use-error-feedback", "--check-lep"]
            log = os.path.join(a.out, run + ".log")
            if os.path.exists(log):
                os.remove(log)
            f = engine.train(exe, flags, path, log, np=2, env=env)
            if not f.ok:
                raise Failure(f"run {run} failed ({f.why()}; log: {log}): {proc.tail(log, 5)}", 1)


def summarize(out):
    rows = []
    for path in sorted(glob.glob(f"{out}/h*_s*_mb*_seed*.jsonl")):
        h, s, mb, rank, seed = re.search(r"h(\d+)_s(\d+)_mb(\d+)(?:_r(\d+))?_seed(\d+)\.jsonl$", path).groups()
        h, s, mb, rank, seed = int(h), int(s), int(mb), int(rank or 16), int(seed)
        recs = metrics.read_run(path)
        lep = [(r["iter"], r["lep_check"]) for r in recs if "lep_check" in r]
        if not lep:
            raise Failure(f"{path} has no lep_check rows (was --check-lep on?)")
        tail = [c for _, c in lep[-max(1, len(lep) // 4):]]  # the last quarter: past the start-up transient
        peak_iter, peak = max(((i, c["error_ratio"]) for i, c in lep), key=lambda p: p[1])

        def mean(xs, k):
            return statistics.fmean(x[k] for x in xs)
        rows.append({"hidden": h, "seq": s, "micro_batch": mb, "cb_rank": rank, "seed": seed, "message": f"{s * mb} x {h}",
                     "message_floats": s * mb * h, "iterations": len(recs), "averaged_from_iter": lep[-len(tail)][0],
                     "error_ratio": mean(tail, "error_ratio"), "error_ratio_peak": peak,
                     "error_ratio_peak_iter": peak_iter, "delta_ratio": mean(tail, "delta_ratio"),
                     "cosine": mean(tail, "cosine"),
                     "error_ratio_per_iter": [round(c["error_ratio"], 4) for _, c in lep],
                     "delta_ratio_per_iter": [round(c["delta_ratio"], 4) for _, c in lep],
                     "ms_per_iter_median": statistics.median(r["ms"] for r in recs[1:] or recs),
                     "pp_bwd_bytes_per_iter": recs[-1]["bytes"]["pp_bwd"],
                     "pp_bwd_bytes_saved_per_iter": recs[-1].get("bytes_saved", {}).get("pp_bwd", 0),
                     "last_loss": recs[-1]["loss"]})
    if not rows:
        raise Failure(f"no runs in {out}")
    rows.sort(key=lambda r: (r["message_floats"], r["cb_rank"], r["seed"]))
    return rows


def render(rows):
    lines = ["LEP's premise against the CB message's shape (`python3 -m occtools lep-shapes`, CPU): 2 layers, P2, "
             "one DP replica, 2 micro-batches per iteration, CB (PowerSGD at the rank shown) with LEP, --check-lep on "
             "the backward link; the same optimizer, corpus (KJV, 4096-token SentencePiece) and iterations for every "
             "shape. error_ratio = |LEP residual| / |gradient it joins|; delta_ratio = |input change between "
             "consecutive micro-batches| / |input|; cosine = residual vs input change. Means over the last quarter of "
             "the iterations; the peak is error_ratio's start-up transient.", ""]
    lines += table(["message (rows x hidden)", "hidden", "seq", "micro-batch", "CB rank", "seed", "iterations",
                    "error_ratio (mean)", "error_ratio peak (iteration)", "delta_ratio (mean)", "cosine (mean)",
                    "CB bytes/iter (saved)", "ms/iter", "last loss"],
                   [[r["message"], r["hidden"], r["seq"], r["micro_batch"], r["cb_rank"], r["seed"], r["iterations"],
                     f"{r['error_ratio']:.2f}", f"{r['error_ratio_peak']:.2f} ({r['error_ratio_peak_iter']})",
                     f"{r['delta_ratio']:.2f}", f"{r['cosine']:+.4f}",
                     f"{r['pp_bwd_bytes_per_iter']} ({r['pp_bwd_bytes_saved_per_iter']})",
                     f"{r['ms_per_iter_median']:.0f}", f"{r['last_loss']:.4f}"] for r in rows], "lrrrrrrrrrrlrr")
    for key in ("error_ratio", "delta_ratio"):
        lines += ["", f"{key} per iteration:", ""]
        lines += [f"- {r['message']} rank {r['cb_rank']} seed {r['seed']}: "
                  + " ".join(f"{x:.2f}" for x in r[f"{key}_per_iter"]) for r in rows]
    return lines


def main(a):
    if a.smoke:
        a.iters, a.shapes = 3, ["64:32:2", "128:64:2"]
    if a.iters < 3:
        raise Failure(f"--iters {a.iters}: use a whole number >= 3")
    shapes = parse_shapes(a.shapes)
    os.makedirs(a.out, exist_ok=True)
    if a.from_json:
        with open(a.from_json) as f:
            rows = json.load(f)
    else:
        if not a.report_only:
            run_all(a, shapes)
        rows = summarize(a.out)
        with open(f"{a.out}/lep-shapes.json", "w") as f:
            json.dump(rows, f, indent=1)
    lines = render(rows)
    with open(f"{a.out}/lep-shapes.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[2:2 + len(rows) + 2]))
    return 0

"""The regimes of python3 -m occtools match-regimes (match_regimes.py): the real settings the
planner projects, the shares of a plan's critical path and the pipeline-to-DP bytes ratio, and the
report (docs/results/regimes-matched.md) written from the result."""
import json
import math
import os
import random
import subprocess

from occtools.common.errors import Failure

SHARES = ("compute", "pipeline", "dp", "embedding", "tp")


# The real settings: the planner's flags for each (docs/planner.md says why these values).
REAL = {
    "paper": {
        "real_setting": "the paper's cluster: GPT-2.5B (52 layers, hidden 1920, 24 heads, seq 1024), T8 P4 D4 on "
                        "16 x 8 A100, 200 Gb/s InfiniBand per node, FP32 (TF32 GEMMs: 156 TFLOP/s x 0.45), "
                        "micro-batch 8, global batch 512, full recomputation",
        "flags": ["--num-layers", "52", "--hidden-size", "1920", "--num-attention-heads", "24", "--seq-length",
                  "1024", "--max-position-embeddings", "1024", "--vocab-size", "50257", "--micro-batch-size", "8",
                  "--global-batch-size", "512", "--tensor-model-parallel-size", "8",
                  "--pipeline-model-parallel-size", "4", "--nodes", "16", "--devices-per-node", "8",
                  "--device-tflops", "156", "--efficiency", "0.45", "--bytes-per-value", "4",
                  "--inter-node-bandwidth", "25", "--checkpoint-activations"],
        "bf16": False,
    },
    "datacenter": {
        "real_setting": "a current datacenter: GPT of 8.3B (72 layers, hidden 3072, 24 heads, seq 2048), bf16 "
                        "(989 TFLOP/s x 0.40), T8 P4 D4 on 16 x 8 H100, NVLink 450 GB/s per GPU, 400 Gb/s per GPU "
                        "between nodes (400 GB/s per node), micro-batch 2, global batch 512 (64 micro-batches per "
                        "pipeline), selective recomputation",
        "flags": ["--num-layers", "72", "--hidden-size", "3072", "--num-attention-heads", "24", "--seq-length",
                  "2048", "--max-position-embeddings", "2048", "--vocab-size", "50257", "--micro-batch-size", "2",
                  "--global-batch-size", "512", "--tensor-model-parallel-size", "8",
                  "--pipeline-model-parallel-size", "4", "--nodes", "16", "--devices-per-node", "8", "--bf16",
                  "--recompute-activations", "--device-tflops", "989", "--efficiency", "0.4",
                  "--memory-bandwidth", "3350", "--intra-node-bandwidth", "450", "--inter-node-bandwidth", "400"],
        "bf16": True,
    },
    "cross_region": {
        "real_setting": "across regions (ProtocolNanoGPT's network): GPT of 203M (8 layers, hidden 1024, 16 heads, "
                        "seq 1024), bf16, P8 D2 on 16 H100s each its own site, every link 200 Mb/s with 50 ms "
                        "latency (pipeline boundaries and DP replicas alike), micro-batch 8, global batch 512 (32 "
                        "micro-batches per pipeline)",
        "flags": ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length",
                  "1024", "--max-position-embeddings", "1024", "--vocab-size", "50257", "--micro-batch-size", "8",
                  "--global-batch-size", "512", "--tensor-model-parallel-size", "1",
                  "--pipeline-model-parallel-size", "8", "--nodes", "16", "--devices-per-node", "1", "--bf16",
                  "--device-tflops", "989", "--efficiency", "0.4", "--memory-bandwidth", "3350",
                  "--inter-node-bandwidth", "0.025", "--inter-node-latency", "50000"],
        "bf16": True,
    },
}


# The race (occtools race, issue 49: the whole race in <= 3 hours on the 2-core machine) runs each
# regime's job: per variant (up to 9, the auto plan included) 3 seeds of 300-iteration loss runs on
# unshaped links, evaluated 50 times on >= 64 samples, and 2 interleaved timing runs of 35
# iterations on the emulated cluster; the first regime adds the decomposition check (a compressed
# variant and the baseline trained to the target, ~150 iterations each, on the emulated cluster).
# A regime's job must let that fit one hour. These mirror the race's defaults
# (occtools/race/cli.py DEFAULTS); the estimate is the planner's, so it is a guide, not a promise.
RACE_BUDGET_S = 3600.0
RACE_VARIANTS, RACE_SEEDS, RACE_ITERS, RACE_EVALUATIONS, RACE_EVAL_SAMPLES = 9, 3, 300, 50, 64
RACE_TIMING_RUNS, RACE_TIMING_ITERS, RACE_START_S, RACE_DECOMPOSITION_ITERS = 18, 35, 10.0, 300


def race_seconds(iteration_ms, unshaped_ms, global_batch):
    """The race's predicted wall time for one regime: ITERATION_MS the emulated iteration,
    UNSHAPED_MS the same iteration without the links' costs (its compute and TP parts: a loss run
    on plain mpirun), an evaluation batch at a third of a training one (forward only)."""
    eval_batches = math.ceil(RACE_EVAL_SAMPLES / global_batch)
    loss_iteration_equivalents = RACE_ITERS + RACE_EVALUATIONS * eval_batches / 3.0
    loss = RACE_VARIANTS * RACE_SEEDS * (loss_iteration_equivalents * unshaped_ms / 1e3 + RACE_START_S)
    timing = RACE_TIMING_RUNS * (RACE_TIMING_ITERS * iteration_ms / 1e3 + RACE_START_S)
    decomposition = RACE_DECOMPOSITION_ITERS * iteration_ms / 1e3
    return loss + timing + decomposition


def plan(binary, flags, tmp):
    out = os.path.join(tmp, f"p{random.random():.12f}.json")
    r = subprocess.run([binary, "plan", *flags, "--json", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise Failure(f"plan failed ({' '.join(flags)}): {(r.stdout + r.stderr).strip()[-300:]}", 1)
    with open(out) as f:
        j = json.load(f)
    os.remove(out)
    return j


def layout_of(flags):
    get = lambda k, d: int(flags[flags.index(k) + 1]) if k in flags else d
    return get("--tensor-model-parallel-size", 1), get("--pipeline-model-parallel-size", 1)


def shares_of(j, tp, pp, dp):
    """The critical path's shares and the pipeline-to-DP bytes ratio of a plan's JSON."""
    crit = j["critical_ms"]
    total = sum(crit.values())
    fractions = [t / c if c > 0 else 0.0 for t, c in zip(j["tp_ms_per_micro_batch"], j["compute_ms_per_micro_batch"])]
    tp_fraction = sum(fractions) / len(fractions)
    shares = {
        "compute": crit["compute"] * (1 - tp_fraction) + crit["optimizer"] + crit["compress"] + crit["decompress"],
        "pipeline": crit["pp_comm"],
        "dp": crit["dp_comm"],
        "embedding": crit["emb_sync"],
        "tp": crit["compute"] * tp_fraction + crit["tp_allgather"],
        "other": crit["sync"],
    }
    shares = {k: v / total for k, v in shares.items()}
    pp_bytes = 2.0 * (pp - 1) * j["micro_batches"] * dp * tp * j["pp_message_bytes"]
    dp_bytes = sum(j["dp_bytes_per_rank"]) * tp * dp
    ratio = pp_bytes / dp_bytes if dp_bytes > 0 else None  # no DP traffic: no ratio (JSON null)
    return shares, ratio, total


def real_projection(binary, name, tmp):
    r = REAL[name]
    j = plan(binary, r["flags"], tmp)
    tp, pp = layout_of(r["flags"])
    nodes, per = int(r["flags"][r["flags"].index("--nodes") + 1]), int(r["flags"][r["flags"].index("--devices-per-node") + 1])
    dp = nodes * per // (tp * pp)
    shares, ratio, total = shares_of(j, tp, pp, dp)
    return {"shares": shares, "pp_to_dp_bytes": ratio, "iteration_ms": total, "layout": [tp, pp, dp],
            "plan_flags": r["flags"]}


def mismatch_text(real, best):
    parts = []
    real_shares = dict(real["shares"])
    if best.get("tp_folded") or best.get("tp_folded_into_compute"):
        parts.append(f"no TP in the emulated job: the real TP share ({100 * real_shares['tp']:.1f} %) is matched as "
                     f"compute (compute + TP {100 * (real_shares['compute'] + real_shares['tp']):.1f} %)")
        real_shares["compute"], real_shares["tp"] = real_shares["compute"] + real_shares["tp"], 0.0
    for k in SHARES + ("other",):
        r, e = real_shares[k], best["shares"][k]
        if r >= 0.05 and abs(e - r) / r > 0.25:
            parts.append(f"{k} {100 * e:.1f} % vs {100 * r:.1f} % ({100 * (e - r) / r:+.0f} %)")
        elif r < 0.05 and e > max(0.05, 1.25 * r):
            parts.append(f"{k} {100 * e:.1f} % where the real setting has {100 * r:.1f} %")
    rr, er = real["pp_to_dp_bytes"], best["pp_to_dp_bytes"]
    if rr and er and abs(math.log(er / rr)) > math.log(1.25):
        parts.append(f"pipeline-to-DP bytes {er:.3g} vs {rr:.3g}")
    if best.get("race_s", 0.0) > RACE_BUDGET_S:
        parts.append(f"the race predicted at {best['race_s'] / 60:.0f} min for this regime (over its "
                     f"{RACE_BUDGET_S / 60:.0f} min budget)")
    return "; ".join(parts) if parts else None


def rounded(x):
    return None if x is None else round(x, 5)


def markdown(doc):
    out = ["# Regimes matched to real clusters", "",
           "Written by `python3 -m occtools match-regimes` (docs/planner.md, \"Regimes matched to real clusters\"). "
           "Every number is the planner's prediction of the baseline iteration (no compression): the real setting "
           "with its hardware's assumed speeds, the emulated job with this machine's calibrated costs "
           f"({doc['calibration']}). Shares of the iteration's critical path; `other` is the scalar grad-norm and "
           "loss all-reduces. Matched: every share >= 5 % of the real iteration within +-25 % relative, and the "
           "pipeline-to-DP bytes ratio within +-25 %.", ""]
    for r in doc["regimes"]:
        e = r["emulated"]
        out += [f"## {r['name']}", "", f"Real: {r['real_setting']}.", "",
                f"Emulated: `scripts/cluster.sh run --nodes {e['nodes']} --ranks-per-node {e['ranks_per_node']} "
                f"--bandwidth {e['bandwidth']} --latency {e['latency']} -- optimus-cc train {' '.join(e['train_flags'])}` "
                f"with a {e['vocab_size']}-token vocabulary; predicted {e['predicted_iteration_ms']:.0f} ms per "
                "iteration" + (f", {e['predicted_unshaped_iteration_ms']:.0f} ms on unshaped links (a loss run), the "
                               f"race's share of this regime about {e['predicted_race_minutes']:.0f} min"
                               if "predicted_race_minutes" in e else "") + ".", "",
                "| | compute | pipeline | DP | embedding | TP | other | pipeline / DP bytes | iteration ms |",
                "|---|---|---|---|---|---|---|---|---|"]
        sides = [("real (projected)", r["real"], r["real"]["predicted_iteration_ms"]),
                 ("emulated (predicted)", e, e["predicted_iteration_ms"])]
        run = e.get("calibrated_run")
        if run:
            sides.append((f"emulated, a run at {run['network']} (planner calibrated on it)", run, run["measured_ms"]))
        for label, side, ms in sides:
            s = side["shares"]
            out.append(f"| {label} | " + " | ".join(f"{100 * s[k]:.1f} %" for k in SHARES) +
                       f" | {100 * side['shares_other']:.1f} % | {ratio_text(side)} | {ms:.0f} |")
        out += ["", f"Mismatch: {r['mismatch'] or 'none (matched)'}.", ""]
        if run:
            out += [f"The run: `{run['metrics']}`, {run['measured_ms']:.0f} ms per iteration measured (median); its "
                    "shares are those of the planner calibrated on it (measured per-stage compute and TP times, the "
                    "fitted link): the run's own critical path as far as the timers tell it.", ""]
        elif r["name"]:
            out += ["No calibrated run of this emulated job yet (`match-regimes --confirm RUN.jsonl --regimes "
                    f"{r['name']}`).", ""]
    return "\n".join(out) + "\n"


def fmt(side):
    return ", ".join(f"{k} {100 * side['shares'][k]:.1f} %" for k in SHARES) + f", pp/dp bytes {ratio_text(side)}"


def ratio_text(side):
    r = side["pp_to_dp_bytes"]
    return "n/a (no DP)" if r is None else f"{r:.3g}"

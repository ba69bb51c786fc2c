"""python3 -m occtools match-regimes: emulated-cluster jobs matched to three real clusters by the
planner (issue 49, docs/planner.md "Regimes matched to real clusters").

For each real setting the planner (`optimus-cc plan --json`) projects the baseline iteration's
shares of its critical path (compute, exposed pipeline, DP, embedding, TP) and the ratio of
pipeline to DP bytes. It then searches the knobs of an emulated job that fits this 2-core machine
(model size, vocabulary, layout, micro-batches, nodes and ranks per node on scripts/cluster.sh,
bandwidth, latency; at most 8 ranks) for the job whose shares, predicted by the same planner with
this machine's calibrated costs (occtools/planner/emulated-calibration.json: compute per rank, the
TP step, the link's efficiency and per-message costs, plus the emulated latency), match: each
share that is >= 5 % of the real iteration within +-25 % relative, the bytes ratio within
+-25 %, or as close as the knobs allow, with the mismatch stated.

    python3 -m occtools match-regimes [--bin build/optimus-cc] [--out docs/results/regimes-matched.json]
        [--regimes paper,datacenter,cross_region] [--evaluations N] [--calibration FILE.json] [--seed S]
    python3 -m occtools match-regimes --confirm RUN.jsonl --regimes NAME [--confirm-network "300mbit 0"]
        adds to NAME in --out the shares of a calibrated run of its emulated baseline (the run made with
        scripts/cluster.sh run ... -- optimus-cc train FLAGS --metrics RUN.jsonl)

Writes OUT (the schema helper tools read: {"regimes": [{name, real_setting, real: {shares,
pp_to_dp_bytes, ...}, emulated: {train_flags, nodes, ranks_per_node, bandwidth, latency, shares,
pp_to_dp_bytes, vocab_size, ...}, mismatch}]}) and OUT with .md (both side by side). Every number
is a prediction of the planner, not a measurement. The search is seeded (--seed) and
deterministic for a given binary and calibration; about 5-10 minutes on the 2-core machine.

Shares of the critical path: compute = its compute less the TP collectives inside it (the TP
fraction of each stage's forward + backward, averaged over stages) + optimizer; tp = that TP part
+ the TP all-gathers after pipeline receives; pipeline = exposed pipeline transfers; dp = exposed
DP all-reduces; embedding = the embedding all-reduce; other (an extra key) = the scalar grad-norm
and loss all-reduces. pp_to_dp_bytes: bytes on the pipeline links per iteration (both
directions, every boundary, micro-batch and replica) over the DP wire's bytes per iteration
(every rank).
"""
import argparse
import json
import math
import os
import random
import tempfile
from concurrent.futures import ThreadPoolExecutor

from occtools.common import engine
from occtools.common.errors import Failure, positive_int, words
from occtools.planner.regimes import (RACE_BUDGET_S, REAL, SHARES, fmt, layout_of, markdown, mismatch_text, plan, race_seconds,
                                      real_projection, rounded, shares_of)

HERE = os.path.dirname(os.path.abspath(__file__))
CALIBRATION = os.path.join(HERE, "emulated-calibration.json")


# The emulated job's knobs (what scripts/cluster.sh and train take on this machine).
HIDDEN = (64, 128, 192, 256, 384, 512)
LAYERS_PER_STAGE = (1, 2, 4)
SEQ = (32, 64, 128, 256)
VOCAB = (1024, 2048, 4096, 8192)
MICRO_BATCH = (1, 2, 4, 8)
MICRO_BATCHES_PER_STAGE = (1, 2, 4)  # micro-batches per pipeline = this x P (at least 2)
BANDWIDTH_MBIT = (5, 10, 20, 30, 50, 100, 200, 300, 500, 1000)
LATENCY_MS = (0, 1, 2, 5, 10, 20, 50)
MAX_RANKS = 8


class Knobs(dict):
    """One emulated job: hidden, layers_per_stage, seq, vocab, micro_batch, mb_per_stage, tp, pp, dp,
    bandwidth (mbit), latency (ms)."""

    def key(self):
        return tuple(sorted(self.items()))

    def ranks(self):
        return self["tp"] * self["pp"] * self["dp"]

    def heads(self):
        h = max(2, self["hidden"] // 64)
        while h % self["tp"]:
            h += 1
        return h

    def micro_batches(self):
        return max(2, self["mb_per_stage"] * self["pp"])

    def global_batch(self):
        return self["micro_batch"] * self.micro_batches() * self["dp"]

    def train_flags(self, bf16):
        L = self["layers_per_stage"] * self["pp"]
        gb = self.global_batch()
        f = ["--num-layers", str(L), "--hidden-size", str(self["hidden"]), "--num-attention-heads", str(self.heads()),
             "--seq-length", str(self["seq"]), "--max-position-embeddings", str(self["seq"]),
             "--micro-batch-size", str(self["micro_batch"]), "--global-batch-size", str(gb),
             "--tensor-model-parallel-size", str(self["tp"]), "--pipeline-model-parallel-size", str(self["pp"])]
        return f + (["--bf16"] if bf16 else [])

    def plan_flags(self, bf16, cal):
        ranks = self.ranks()
        rate = cal["compute"]["achieved_flops_per_rank"] * cal["compute"]["ranks"] / max(ranks, cal["cores"])
        rate = min(rate, cal["compute"]["achieved_flops_per_rank"] * cal["compute"]["ranks"] / cal["cores"])
        inter = cal["inter"]
        lat = self["latency"] / 1e3
        bw = self["bandwidth"] * 1e6 / 8 * inter["bandwidth_efficiency"]
        return self.train_flags(bf16) + [
            "--vocab-size", str(self["vocab"]), "--nodes", str(self["pp"] * self["dp"]),
            "--devices-per-node", str(self["tp"]), "--device-tflops", f"{rate / 1e12:.6g}", "--efficiency", "1",
            "--memory-bandwidth", f"{cal['memory_bandwidth_bytes_per_s'] / 1e9:.6g}",
            "--intra-node-bandwidth", f"{cal['tp']['bandwidth_bytes_per_s'] / 1e9:.6g}",
            "--intra-node-latency", f"{cal['tp']['latency_s'] * 1e6:.6g}",
            "--inter-node-bandwidth", f"{bw / 1e9:.6g}",
            "--inter-node-latency", f"{(inter['reducer_step_latency_s'] + lat) * 1e6:.6g}",
            "--inter-node-message-latency", f"{(inter['message_latency_s'] + lat) * 1e6:.6g}"]


def folded(shares):
    """SHARES with TP folded into compute: what an emulated job without TP is matched on."""
    out = dict(shares)
    out["compute"], out["tp"] = shares["compute"] + shares["tp"], 0.0
    return out


def score(real, shares, ratio, fold_tp=False):
    """The worst relative error: shares >= 5 % of the real iteration (relative), the bytes ratio
    (relative, in log), and a share that is small in the real setting but not in the emulated one
    (its excess over max(5 %, 1.25 x real), in units of 5 %; `other` too, the scalar all-reduces that a
    long latency makes large). FOLD_TP: the emulated job has no TP (T1 where the real one has
    T > 1); both sides' TP share counts as compute (no variant compresses TP traffic, so in the race
    it is time the variants cannot cut, as compute is)."""
    real_shares = folded(real["shares"]) if fold_tp else real["shares"]
    errs = {}
    for k in SHARES + ("other",):
        r, e = real_shares[k], shares[k]
        errs[k] = abs(e - r) / r if r >= 0.05 else max(0.0, e - max(0.05, 1.25 * r)) / 0.05
    rr = real["pp_to_dp_bytes"]
    if rr and ratio:
        errs["pp_to_dp_bytes"] = abs(math.log(ratio / rr)) / math.log(1.25) * 0.25
    else:
        errs["pp_to_dp_bytes"] = 0.0 if rr == ratio else 10.0
    # The worst error decides; the mean breaks its ties (a search step that improves the others counts).
    return max(errs.values()) + 0.2 * sum(errs.values()) / len(errs), errs


def allowed_layouts(real_layout):
    tp_r, pp_r, dp_r = real_layout
    out = []
    for tp in (1, 2):
        for pp in (1, 2, 4, 8):
            for dp in (1, 2, 4):
                # T1 where the real job has TP is allowed, its TP share folded into compute (score):
                # a T2 job's TP steps wait on the shared cores (~11 ms each), which puts even the
                # smallest T2 x P2 x D2 job's race over its hour.
                if tp * pp * dp > MAX_RANKS or (tp > 1 and tp_r == 1) or (pp > 1) != (pp_r > 1) or (dp > 1) != (dp_r > 1):
                    continue
                out.append((tp, pp, dp))
    return out


OPTIONS = {"hidden": HIDDEN, "layers_per_stage": LAYERS_PER_STAGE, "seq": SEQ, "vocab": VOCAB,
           "micro_batch": MICRO_BATCH, "mb_per_stage": MICRO_BATCHES_PER_STAGE, "bandwidth": BANDWIDTH_MBIT,
           "latency": LATENCY_MS}


class Search:
    def __init__(self, binary, real, bf16, cal, tmp, workers=2):
        self.binary, self.real, self.bf16, self.cal, self.tmp = binary, real, bf16, cal, tmp
        self.seen = {}
        self.pool = ThreadPoolExecutor(workers)
        self.layouts = allowed_layouts(real["layout"])

    def evaluate_many(self, knobs_list):
        todo = []
        for k in knobs_list:
            if k.key() not in self.seen and k.ranks() <= MAX_RANKS and k["hidden"] % k.heads() == 0:
                self.seen[k.key()] = None
                todo.append(k)
        for k, res in zip(todo, self.pool.map(self.evaluate, todo)):
            self.seen[k.key()] = res
        return [self.seen.get(k.key()) for k in knobs_list]

    def evaluate(self, k):
        try:
            j = plan(self.binary, k.plan_flags(self.bf16, self.cal), self.tmp)
        except Failure:
            return None
        shares, ratio, total = shares_of(j, k["tp"], k["pp"], k["dp"])
        fold = k["tp"] == 1 and self.real["layout"][0] > 1
        s, errs = score(self.real, shares, ratio, fold)
        unshaped = total * (shares["compute"] + shares["tp"])
        race = race_seconds(total, unshaped, k.global_batch())
        if race > RACE_BUDGET_S:
            s += race / RACE_BUDGET_S - 1.0  # too slow for the race: penalised
        return {"knobs": k, "score": s, "errors": errs, "shares": shares, "pp_to_dp_bytes": ratio, "iteration_ms": total,
                "race_s": race, "unshaped_ms": unshaped, "tp_folded": fold}

    def best(self):
        done = [r for r in self.seen.values() if r]
        return min(done, key=lambda r: r["score"]) if done else None

    def random_knobs(self, rng):
        tp, pp, dp = rng.choice(self.layouts)
        k = Knobs({name: rng.choice(opts) for name, opts in OPTIONS.items()})
        k.update(tp=tp, pp=pp, dp=dp)
        return k

    def neighbours(self, k):
        out = []
        for name, opts in OPTIONS.items():
            i = opts.index(k[name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(opts):
                    n = Knobs(k)
                    n[name] = opts[j]
                    out.append(n)
        for lay in self.layouts:
            if lay != (k["tp"], k["pp"], k["dp"]):
                n = Knobs(k)
                n.update(tp=lay[0], pp=lay[1], dp=lay[2])
                out.append(n)
        return out

    def run(self, evaluations, rng):
        self.evaluate_many([self.random_knobs(rng) for _ in range(evaluations // 3)])
        starts = sorted((r for r in self.seen.values() if r), key=lambda r: r["score"])[:6]
        for start in starts:
            current = start
            while len(self.seen) < evaluations:
                results = [r for r in self.evaluate_many(self.neighbours(current["knobs"])) if r]
                better = min(results, key=lambda r: r["score"]) if results else None
                if not better or better["score"] >= current["score"] - 1e-9:
                    break
                current = better
        return self.best()


def entry(name, real, best, bf16):
    k = best["knobs"]
    lat = f"{k['latency']}ms" if k["latency"] else "0"
    return {
        "name": name,
        "real_setting": REAL[name]["real_setting"],
        "real": {"shares": {s: round(real["shares"][s], 4) for s in SHARES}, "shares_other": round(real["shares"]["other"], 4),
                 "pp_to_dp_bytes": rounded(real["pp_to_dp_bytes"]), "predicted_iteration_ms": round(real["iteration_ms"], 1),
                 "layout": dict(zip(("tp", "pp", "dp"), real["layout"])), "plan_flags": real["plan_flags"]},
        "emulated": {"train_flags": k.train_flags(bf16), "nodes": k["pp"] * k["dp"], "ranks_per_node": k["tp"],
                     "bandwidth": f"{k['bandwidth']}mbit", "latency": lat,
                     "shares": {s: round(best["shares"][s], 4) for s in SHARES},
                     "shares_other": round(best["shares"]["other"], 4),
                     "pp_to_dp_bytes": rounded(best["pp_to_dp_bytes"]),
                     "vocab_size": k["vocab"],
                     "predicted_iteration_ms": round(best["iteration_ms"], 1),
                     "predicted_unshaped_iteration_ms": round(best["unshaped_ms"], 1),
                     "predicted_race_minutes": round(best["race_s"] / 60, 1),
                     "tp_folded_into_compute": best["tp_folded"],
                     "score": round(best["score"], 4)},
        "mismatch": mismatch_text(real, best),
    }


def add_parser(sub):
    ap = sub.add_parser("match-regimes", help="emulated-cluster jobs matched by the planner to three real clusters "
                                              "(docs/results/regimes-matched.md)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="optimus-cc (default build/optimus-cc)")
    ap.add_argument("--out", default="docs/results/regimes-matched.json", help="default docs/results/regimes-matched.json")
    ap.add_argument("--regimes", type=words, default=list(REAL), help=f"a subset of {', '.join(REAL)}")
    ap.add_argument("--evaluations", type=positive_int, default=800, help="planner calls per regime (default 800)")
    ap.add_argument("--calibration", default=CALIBRATION, help="this machine's fitted costs (default "
                                                               "occtools/planner/emulated-calibration.json)")
    ap.add_argument("--seed", type=int, default=1, help="the search's random seed (default 1)")
    ap.add_argument("--confirm", metavar="RUN.jsonl",
                    help="instead of searching: the metrics (train --metrics) of the emulated baseline of one regime "
                         "(--regimes NAME) run on scripts/cluster.sh; the planner calibrated on it (plan --calibrate) "
                         "gives the run's shares, which are added to that regime in --out beside the predicted ones")
    ap.add_argument("--confirm-network", default="",
                    help="--confirm: the run's network as cluster.sh took it, e.g. '300mbit 0' (recorded; default: the "
                         "regime's own)")
    ap.set_defaults(func=main)


def load_calibration(path):
    try:
        with open(path) as f:
            cal = json.load(f)
        for keys in (("cores",), ("compute", "achieved_flops_per_rank"), ("compute", "ranks"), ("tp", "latency_s"),
                     ("tp", "bandwidth_bytes_per_s"), ("inter", "bandwidth_efficiency"),
                     ("inter", "reducer_step_latency_s"), ("inter", "message_latency_s"),
                     ("memory_bandwidth_bytes_per_s",)):
            v = cal
            for k in keys:
                v = v[k]
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{'.'.join(keys)} is not a number > 0")
        return cal
    except OSError as e:
        raise Failure(f"cannot read --calibration {path} ({e.strerror}); pass the file of fitted costs")
    except (ValueError, KeyError, TypeError) as e:
        raise Failure(f"--calibration {path} is not a calibration of this command ({e}); start from "
                      f"occtools/planner/emulated-calibration.json")


def confirm(args, binary):
    """The calibrated run's shares beside the predicted ones, in the existing --out."""
    if len(args.regimes) != 1:
        raise Failure("--confirm takes one regime: pass --regimes NAME")
    try:
        with open(args.out) as f:
            doc = json.load(f)
        (entry_,) = [r for r in doc["regimes"] if r["name"] == args.regimes[0]]
        e = entry_["emulated"]
        flags = e["train_flags"]
    except (OSError, ValueError, KeyError, TypeError):
        raise Failure(f"--out {args.out} has no regime {args.regimes[0]}; run match-regimes first (it writes it)")
    tp, pp = layout_of(flags)
    dp = e["nodes"] * e["ranks_per_node"] // (tp * pp)
    with tempfile.TemporaryDirectory() as tmp:
        j = plan(binary, [*flags, "--vocab-size", str(e["vocab_size"]), "--devices-per-node", str(e["ranks_per_node"]),
                          "--calibrate", args.confirm], tmp)
    shares, ratio, total = shares_of(j, tp, pp, dp)
    e["calibrated_run"] = {
        "metrics": args.confirm, "network": args.confirm_network or f"{e['bandwidth']} {e['latency']}",
        "measured_ms": round(j.get("calibrated_ms", 0.0), 1), "critical_path_ms": round(total, 1),
        "shares": {k: round(shares[k], 4) for k in SHARES}, "shares_other": round(shares["other"], 4),
        "pp_to_dp_bytes": None if ratio is None else round(ratio, 5),
        "how": "plan --calibrate on the run (measured per-stage compute and TP times, the fitted link), its "
               "predicted critical path's shares"}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(markdown(doc))
    print(f"{args.regimes[0]}: calibrated on {args.confirm}: {fmt(e['calibrated_run'])}; measured "
          f"{e['calibrated_run']['measured_ms']:.0f} ms per iteration")
    return 0


def main(args):
    unknown = [r for r in args.regimes if r not in REAL]
    if unknown:
        raise Failure(f"--regimes: no regime {', '.join(unknown)}; pass some of {', '.join(REAL)}")
    if os.path.abspath(args.out) == os.path.abspath(args.calibration):
        raise Failure("--out is the --calibration file; write the result elsewhere")
    binary = engine.binary(args.bin)
    if args.confirm:
        return confirm(args, binary)
    cal = load_calibration(args.calibration)
    rng = random.Random(args.seed)
    doc = {"written_by": "python3 -m occtools match-regimes", "calibration": os.path.relpath(args.calibration),
           "regimes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.regimes:
            real = real_projection(binary, name, tmp)
            search = Search(binary, real, REAL[name]["bf16"], cal, tmp)
            best = search.run(args.evaluations, rng)
            if not best:
                raise Failure(f"{name}: no emulated job could be planned", 1)
            e = entry(name, real, best, REAL[name]["bf16"])
            e["emulated"]["evaluated"] = len(search.seen)
            doc["regimes"].append(e)
            print(f"{name}: real {fmt(e['real'])}; emulated {fmt(e['emulated'])} "
                  f"({' '.join(e['emulated']['train_flags'])}, {e['emulated']['nodes']} x "
                  f"{e['emulated']['ranks_per_node']}, {e['emulated']['bandwidth']}, {e['emulated']['latency']}); "
                  f"mismatch: {e['mismatch']}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    md = os.path.splitext(args.out)[0] + ".md"
    with open(md, "w") as f:
        f.write(markdown(doc))
    print(f"wrote {args.out} and {md}")
    return 0



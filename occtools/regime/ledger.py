"""The paper-regime quality experiment's ledger (issue 30): docs/results/regime.json, the
committed, append-only list of every run any session made, with the calls that made them.

A ledger is one JSON object:
    {"ledger": "optimus-cc quality-regime runs", "format": 1, "regime": "paper" | "smoke",
     "runs": [RUN, ...], "calls": [CALL, ...]}
RUN (one training run): id, call, variant, seed, flags, target_iters, iters_done, finished,
stop (why it did not finish, or null), val_curve [[iter, loss]], final_val_loss (at
target_iters; null unless finished), train_curve, lep (error_ratio, delta_ratio, cosine means
over the last 80 % of its iterations) and lep_curve, bytes_per_iter, ms_per_iter, wall_s,
startup_s, numerics (`optimus-cc --version`), engine, commit, device, device_key, date, shape,
shape_key (and calibration_rows on baselines: what `plan --auto` calibrates on).
CALL (one invocation of `occtools regime run`): id, date, device, commit, numerics, budget_s,
seconds, runs (ids), prediction and notes.

Runs are compared only inside a cohort: the same numerics version, shape and target
iterations. A run that did not finish is kept and reported as such, never compared.
"""
import json
import os

from occtools.common import ledger as records

MARK = "optimus-cc quality-regime runs"
FORMAT = 1
# The verdict needs these runs with at least this many iterations.
VERDICT_MIN_ITERS = {"paper": 300, "smoke": 6}
VERDICT_VARIANTS = ("baseline", "cb", "cb_lep")
VERDICT_SEEDS = (1, 2)
# Most needed first: the verdict's runs, one seed's comparable triple at a time, so that a
# session that ends early still leaves same-seed pairs; then the rest of the ablation.
PRIORITY = [("baseline", 1), ("cb", 1), ("cb_lep", 1), ("baseline", 2), ("cb", 2), ("cb_lep", 2),
            ("cb_lep_ec", 1), ("dp_powersgd", 1), ("optimus_cc", 1), ("auto", 1)]
LABELS = {"baseline": "baseline", "cb": "CB (no LEP)", "cb_lep": "CB + LEP", "cb_lep_ec": "CB + LEP + EC",
          "dp_powersgd": "DP-only PowerSGD", "optimus_cc": "full Optimus-CC", "auto": "auto plan"}
RUN_KEYS = {"id": str, "variant": str, "seed": int, "flags": str, "target_iters": int, "iters_done": int,
            "finished": bool, "val_curve": list, "numerics": int, "shape": dict, "shape_key": str, "date": str,
            "device": str, "commit": str}


class LedgerError(Exception):
    """A ledger that cannot be read or merged; the message is one line naming the fix."""


def shape_of(regime, layers=2):
    """The regime's model, batch and compression: what makes two runs comparable."""
    if regime == "smoke":  # the plumbing on the CPU: a tiny model, the same structure
        s = {"layers": 2, "hidden": 32, "heads": 4, "seq": 32, "micro_batch": 2, "micro_batches_per_pipeline": 8,
             "data_parallel": 2, "pipeline_parallel": 2, "precision": "fp32", "cb_rank": 4, "dp_rank": 4,
             "corpus": "kjv (SentencePiece)", "eval_interval": 3, "eval_iters": 1}
    else:
        # hidden 1024: at 1920 a 300-iteration run needs at least ~12 min of H200 compute (2.4x the training
        # FLOPs per token: docs/compression.md, the paper-regime paragraph), more than a device session; 2 layers, one per
        # stage (the CB message's shape does not depend on depth, the 50,304-word head costs as much as four
        # layers, and the CPU's LEP sweep it is compared with had 2; --layers N makes another cohort);
        # seq 1024 and micro-batch 8: every CB message is 8192 x 1024, the paper's shape; 8 micro-batches
        # per pipeline (LEP carries its residual from one to the next); DP rank 64 of 1024 columns is the
        # paper's 128 of 1920 (~6.5 %).
        s = {"layers": layers, "hidden": 1024, "heads": 16, "seq": 1024, "micro_batch": 8,
             "micro_batches_per_pipeline": 8, "data_parallel": 2, "pipeline_parallel": 2, "precision": "bf16",
             "cb_rank": 16, "dp_rank": 64, "corpus": "gcide (GPT-2 BPE)", "eval_interval": 50, "eval_iters": 4}
    s["global_batch"] = s["micro_batch"] * s["micro_batches_per_pipeline"] * s["data_parallel"]
    return s


def shape_key(s):
    return (f"L{s['layers']} h{s['hidden']} a{s['heads']} s{s['seq']} mb{s['micro_batch']} gb{s['global_batch']} "
            f"{s['precision']} P{s['pipeline_parallel']}D{s['data_parallel']} cb{s['cb_rank']} dp{s['dp_rank']} "
            f"ev{s['eval_interval']}x{s['eval_iters']} {s['corpus']}")


def variant_flags(variant, shape):
    """Train flags of a variant (auto: from `plan --auto`, see cli.py). --check-lep on every
    run with LEP (the engine refuses it without LEP, so plain CB runs cannot carry it)."""
    cb = f"--inter-grad-comp --inter-grad-comp-rank {shape['cb_rank']}"
    lep = "--use-error-feedback --check-lep"
    dpc = f"--grad-comp --grad-comp-rank {shape['dp_rank']} --grad-comp-warm-up 0.1"
    return {"baseline": "", "cb": cb, "cb_lep": f"{cb} {lep}",
            "cb_lep_ec": f"{cb} {lep} --inter-grad-comp-epilogue-only",
            "dp_powersgd": f"{dpc} --use-error-feedback",
            "optimus_cc": f"{cb} {lep} --inter-grad-comp-epilogue-only --emb-comm-opt {dpc} --selective-grad-comp-way 1",
            }[variant]


def new_ledger(regime):
    return {"ledger": MARK, "format": FORMAT, "regime": regime, "runs": [], "calls": []}


def load(path, missing_ok=False, regime=None):
    """Reads and checks a ledger; LedgerError (one line) if it is not one."""
    if not os.path.exists(path):
        if missing_ok:
            return new_ledger(regime or "paper")
        raise LedgerError(f"{path}: no such ledger; give the committed docs/results/regime.json or an OUT/regime.json")
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LedgerError(f"{path}: not valid JSON ({str(e).splitlines()[0]}); restore it with "
                          f"`git checkout -- {path}` or rerun the call that wrote it") from None
    check(d, path)
    return d


def check(d, path):
    fix = f"restore it with `git checkout -- {path}`"
    if not isinstance(d, dict) or d.get("ledger") != MARK:
        raise LedgerError(f"{path}: not a regime ledger (no \"ledger\": \"{MARK}\"); {fix}")
    if d.get("format") != FORMAT:
        raise LedgerError(f"{path}: ledger format {d.get('format')!r}, this script reads {FORMAT}; use the script "
                          f"of the commit that wrote it")
    if d.get("regime") not in VERDICT_MIN_ITERS:
        raise LedgerError(f"{path}: regime {d.get('regime')!r} is neither 'paper' nor 'smoke'; {fix}")
    if not isinstance(d.get("runs"), list) or not isinstance(d.get("calls"), list):
        raise LedgerError(f"{path}: \"runs\" and \"calls\" must be lists; {fix}")
    seen = set()
    for i, r in enumerate(d["runs"]):
        if not isinstance(r, dict):
            raise LedgerError(f"{path}: run {i} is not an object; {fix}")
        for k, t in RUN_KEYS.items():
            if not isinstance(r.get(k), t) or (t is int and isinstance(r.get(k), bool)):
                raise LedgerError(f"{path}: run {i} ({r.get('id', 'no id')}) lacks {k!r} of type {t.__name__}; {fix}")
        if r["id"] in seen:
            raise LedgerError(f"{path}: run id {r['id']} appears twice; {fix}")
        if r["variant"] not in LABELS:
            raise LedgerError(f"{path}: run {r['id']} has unknown variant {r['variant']!r}; {fix}")
        if r["finished"] and (r["iters_done"] != r["target_iters"] or not isinstance(r.get("final_val_loss"), float)):
            raise LedgerError(f"{path}: run {r['id']} is marked finished but has {r['iters_done']} of "
                              f"{r['target_iters']} iterations or no final validation loss; {fix}")
        seen.add(r["id"])
    for i, c in enumerate(d["calls"]):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            raise LedgerError(f"{path}: call {i} is not an object with an id; {fix}")


def save(d, path):
    """Atomic, one run or call per line (common/ledger.py)."""
    records.save(d, path, ("runs", "calls"))


def dumps(d):
    return records.dumps(d, ("runs", "calls"))


def merge(src, dst):
    """Appends to dst the runs and calls of src it lacks (by id). A record already in dst must be
    identical (the ledger is append-only). Returns (new runs, new calls)."""
    if src["regime"] != dst["regime"]:
        raise LedgerError(f"cannot merge a '{src['regime']}' ledger into a '{dst['regime']}' one "
                          f"(a --smoke ledger never joins the paper's)")
    try:
        return records.merge(src, dst, ("runs", "calls"))
    except records.Conflict as e:
        raise LedgerError(str(e)) from None


def cohort(r):
    return (r["numerics"], r["shape_key"], r["target_iters"])


def done(ledger, numerics, key, target):
    """(variant, seed) pairs this cohort needs no more runs of: finished runs, and an auto plan
    that chose no compression (its run would be the baseline's, bit for bit)."""
    out = set()
    for r in ledger["runs"]:
        if cohort(r) == (numerics, key, target) and (r["finished"] or r.get("same_as_baseline")):
            out.add((r["variant"], r["seed"]))
    return out


def pending(ledger, numerics, key, target, variants=None):
    """The runs this cohort still lacks, most needed first."""
    have = done(ledger, numerics, key, target)
    return [(v, s) for v, s in PRIORITY if (v, s) not in have and (not variants or v in variants)]

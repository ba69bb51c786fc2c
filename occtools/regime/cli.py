"""python3 -m occtools regime: the Optimus-CC quality question in the paper's regime (issue 30), accumulated over GPU
sessions in a committed ledger (docs/results/regime.json; occtools/regime/ledger.py says what
a run records). Does LEP help CB where each CB message is 8192 x 1024, and does full
Optimus-CC keep the baseline's quality?

  regime run [--ledger IN.json] [--out DIR] [--budget-s S] [--device cuda|cpu]
                     [--smoke] [--bin PATH] [--data PREFIX] [--corpus FILE.jsonl.zst]
                     [--layers N] [--iters N] [--max-runs N] [--variants a,b] [--no-measure]
      reads the ledger (default: the committed docs/results/regime.json; --smoke: an empty
      one), runs the runs its cohort (this engine's numerics version, this shape, --iters)
      still lacks, most needed first (ledger.PRIORITY), each only if its predicted
      duration fits what is left of --budget-s, and writes DIR/regime.json (the ledger with
      this call's runs and the call appended, rewritten after every run) and its report
      DIR/quality-regime.md. A run stopped by the budget or failing is appended as
      unfinished. Exit 0: every run started finished or was stopped by the budget;
      1: a run failed; 2: bad input.
  regime merge OUT/regime.json docs/results/regime.json
      appends the runs and calls the committed ledger lacks (idempotent).
  regime report LEDGER --out DIR
      DIR/quality-regime.md and DIR/quality-regime.png from every run in LEDGER.
  regime pending LEDGER [--numerics N] [--smoke] [--layers N] [--iters N]
      the runs still missing, in the order `run` would make them.

The regime (ledger.shape_of): GPT 2 layers, hidden 1024, 16 heads, seq 1024,
micro-batch 8, 8 micro-batches per pipeline (global batch 128), bf16, P2 x D2 on 4 ranks
sharing the GPU (host-staged MPI), GPT-2 BPE on the GCIDE corpus, CB rank 16, DP rank 64,
validation every 50 iterations, 300 iterations per run. Durations are predicted from the
ledger's earlier runs on the same device, numerics and shape (start-up, then seconds per
iteration, evaluations included); with none, the run itself is the calibration: its first
iterations print the predicted end. When no run can finish inside one call, the call says
so with the numbers and (unless --no-measure) spends its budget on the most needed run all
the same, kept as unfinished: its iterations measure this device's speed and LEP's ratios in
the regime. A run cut short is not continued later: its checkpoint (fp32 weights and Adam's
moments, about 1 GB here) cannot come back through the device tool (16 MiB per file).
--iters N is a recorded deviation from 300 (its runs form their own cohort); --smoke runs a
tiny model on the CPU (the plumbing: cli.quality_regime).
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import time
import uuid

from occtools.regime import ledger as L
from occtools.regime import report
from occtools.regime.train import HERE, Engine, Stopped, child_env, common_flags, corpus_tokens, die, now_iso, \
    on_term, prepare_data, say, train


# ---- predictions ---------------------------------------------------------------------------
def timing_samples(runs, eng, key, target):
    sam = [r for r in runs if r.get("device_key") == eng.device_key and r["numerics"] == eng.numerics
           and r["shape_key"] == key and r.get("s_per_iter") and r["iters_done"] >= 3]
    # Long runs first: their seconds per iteration carry little of the start and end of a run.
    long = [r for r in sam if r["iters_done"] >= min(50, target // 2)]
    return long or sam


def predict(runs, eng, key, variant, target):
    """(seconds, how) for a run of `target` iterations, from earlier runs on this device; None if none."""
    sam = timing_samples(runs, eng, key, target)
    if not sam:
        return None, None
    mine = [r["s_per_iter"] for r in sam if r["variant"] == variant]
    per_variant = {}
    for r in sam:
        per_variant.setdefault(r["variant"], []).append(r["s_per_iter"])
    # Another variant's speed stands in for an unmeasured one: the slowest, to be safe.
    s_it = statistics.median(mine) if mine else max(statistics.median(v) for v in per_variant.values())
    start = statistics.median(r["startup_s"] for r in sam)
    how = (f"{start:.0f} s start-up + {target} x {s_it:.2f} s/iteration (evaluations included), from "
           f"{len(sam)} earlier run(s) on {eng.device_key}" + ("" if mine else f", {variant} not yet measured"))
    return 1.03 * (start + target * s_it), how


def auto_plan(eng, ctx, runs):
    """The auto variant's flags: `plan --auto --max-loss-increase 0.5`, calibrated on a baseline of
    this cohort (its recorded rows) with the compressor sweep's loss costs, as the speedup command."""
    base = [r for r in runs if r["variant"] == "baseline" and r.get("calibration_rows") and L.cohort(r) == ctx["cohort"]]
    base.sort(key=lambda r: r.get("device_key") != eng.device_key)  # this device's first
    if not base:
        return None, "no baseline of this cohort with calibration rows yet"
    costs = f"{HERE}/docs/results/compressors.json"
    if not os.path.isfile(costs):
        return None, f"no {costs} (the compressor sweep's loss costs)"
    cal = f"{ctx['work']}/runs/auto-calibration.jsonl"
    with open(cal, "w") as f:
        for row in base[0]["calibration_rows"]:
            f.write(json.dumps(row) + "\n")
    s = ctx["shape"]
    r = subprocess.run(eng.occ + ["plan", "--ignore-unknown-flags"] + ctx["common"] + [
        "--train-iters", str(ctx["target"]), "--nodes", "1", "--devices-per-node",
        str(s["pipeline_parallel"] * s["data_parallel"]), "--calibrate", cal, "--calibrate-skip", "0", "--auto",
        "--max-loss-increase", "0.5", "--compressors-json", costs], capture_output=True, text=True, env=ctx["env"])
    with open(f"{ctx['work']}/runs/auto.plan.txt", "w") as f:
        f.write(r.stdout + r.stderr)
    m = re.search(r"^train flags: (.*)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        return None, f"plan --auto failed: {(r.stderr or r.stdout).strip()[-200:]}"
    flags = "" if m.group(1).strip() == "(none)" else m.group(1).strip()
    if "--inter-grad-comp" in flags and "--use-error-feedback" in flags:
        flags += " --check-lep"
    chosen = re.search(r"^chosen: (.*)$", r.stdout, re.M)
    return flags, (chosen.group(1).strip() if chosen else "") + f" (calibrated on baseline {base[0]['id']})"


# ---- run: one call -------------------------------------------------------------------------
def cmd_run(args):
    regime = "smoke" if args.smoke else "paper"
    if args.smoke:
        args.device = "cpu"
    ledger_in = args.ledger or (None if args.smoke else f"{HERE}/docs/results/regime.json")
    try:
        ledger = L.load(ledger_in, missing_ok=not args.ledger, regime=regime) if ledger_in else L.new_ledger(regime)
    except L.LedgerError as e:
        die(str(e))
    if ledger["regime"] != regime:
        die(f"--ledger {ledger_in} is a '{ledger['regime']}' ledger; this is a{' --smoke' if args.smoke else ' paper-regime'} "
            f"call (a --smoke run never joins the paper's ledger)")
    variants = [v for v in args.variants.split(",") if v] if args.variants else None
    for v in variants or []:
        if v not in L.LABELS:
            die(f"--variants: unknown variant {v!r}; use {', '.join(L.LABELS)}")
    shape = L.shape_of(regime, args.layers)
    target = args.iters or L.VERDICT_MIN_ITERS[regime]
    out = os.path.abspath(args.out or f"{HERE}/bench-results/quality-regime")
    os.makedirs(f"{out}/runs", exist_ok=True)
    t_call = time.time()
    deadline = t_call + args.budget_s
    eng = Engine(args.bin, args.device)
    prefix, data_flags = prepare_data(eng, args, shape, out)
    key = L.shape_key(shape)
    ctx = {"shape": shape, "target": target, "key": key, "cohort": (eng.numerics, key, target), "work": out,
           "smoke": args.smoke, "env": child_env(), "common": common_flags(args, shape, data_flags),
           "corpus_tokens": corpus_tokens(prefix + ".idx"), "call_id": f"call-{now_iso()}-{uuid.uuid4().hex[:6]}"}
    call = {"id": ctx["call_id"], "date": now_iso(), "device_key": eng.device_key, "commit": eng.commit,
            "numerics": eng.numerics, "engine": eng.version_line, "budget_s": args.budget_s, "shape_key": key,
            "target_iters": target, "runs": [], "notes": [], "seconds": None}
    ledger["calls"].append(call)
    older = sorted({r["numerics"] for r in ledger["runs"] if r["numerics"] != eng.numerics})
    todo = L.pending(ledger, eng.numerics, key, target, variants)
    say(f"{eng.version_line}, commit {eng.commit}, {eng.device_key}; cohort: {key}, {target} iterations; "
        f"ledger {ledger_in or '(new)'}: {len(ledger['runs'])} runs"
        + (f" ({sum(r['numerics'] in older for r in ledger['runs'])} of numerics {older}: not pooled)" if older else "")
        + f"; {len(todo)} still missing: {' '.join(f'{v}:s{s}' for v, s in todo) or 'none'}; budget {args.budget_s} s")

    def write():
        call["seconds"] = round(time.time() - t_call, 1)
        L.save(ledger, f"{out}/regime.json")

    failed = started = 0
    reserve = 5 if args.smoke else 20  # the report and the copy out
    min_left = 3 if args.smoke else 60  # seconds worth starting a run in
    skipped = []

    def skip(variant, seed, note):
        if not skipped:  # the first in full, the rest in one note at the end
            call["notes"].append(note)
            say(note)
        skipped.append(f"{variant} s{seed}")

    def run_one(variant, seed, flags, why, pred, how):
        nonlocal started, failed
        say(f"{variant} s{seed}: {flags or '(no compression)'}; "
            + (f"predicted {pred:.0f} s ({how})" if pred is not None else "no earlier run on this device: "
               "it calibrates itself") + f"; {deadline - time.time() - reserve:.0f} s left")
        started += 1
        rec = train(eng, ctx, variant, seed, flags, deadline - reserve, pred)
        if variant == "auto":
            rec["auto_plan"] = why
        ledger["runs"].append(rec)
        call["runs"].append(rec["id"])
        failed += rec["stop"] is not None and rec["stop"].startswith("failed")
        say(f"{variant} s{seed}: " + (f"finished in {rec['wall_s']:.0f} s, final validation loss "
                                      f"{rec['final_val_loss']:.4f}" if rec["finished"] else rec["stop"])
            + (f"; LEP residual/gradient {rec['lep']['error_ratio']:.2f}, input change {rec['lep']['delta_ratio']:.2f}"
               if rec.get("lep") else ""))
        write()

    old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        too_long = []  # runs predicted past a whole call's budget
        for i, (variant, seed) in enumerate(todo):
            if args.max_runs is not None and started >= args.max_runs:
                call["notes"].append(f"--max-runs {args.max_runs}: {len(todo) - i} missing run(s) left for a later call")
                break
            left = deadline - time.time() - reserve
            if left < min_left:
                skip(variant, seed, f"{variant} s{seed} not started: {max(left, 0):.0f} s of the budget left")
                continue
            if variant == "auto":
                flags, why = auto_plan(eng, ctx, ledger["runs"])
                if flags is None:
                    call["notes"].append(f"auto s{seed} not run: {why}")
                    say(call["notes"][-1])
                    continue
                say(f"auto plan: {flags or '(no compression)'}: {why}")
                if not flags:  # the run would repeat the baseline's bit for bit: recorded, not run
                    rec = {"id": f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-auto-s{seed}-{uuid.uuid4().hex[:6]}",
                           "call": call["id"], "variant": "auto", "seed": seed, "flags": "", "target_iters": target,
                           "iters_done": 0, "finished": False, "same_as_baseline": True, "auto_plan": why,
                           "stop": "not run: the auto plan chose no compression, so its run is the baseline's, bit for bit",
                           "val_curve": [], "final_val_loss": None, "numerics": eng.numerics, "engine": eng.version_line,
                           "commit": eng.commit, "device": eng.device, "device_key": eng.device_key, "date": now_iso(),
                           "shape": dict(shape, corpus_tokens=ctx["corpus_tokens"]), "shape_key": key}
                    ledger["runs"].append(rec)
                    call["runs"].append(rec["id"])
                    write()
                    continue
            else:
                flags, why = L.variant_flags(variant, shape), None
            pred, how = predict(ledger["runs"], eng, key, variant, target)
            if pred is not None and pred > left:
                skip(variant, seed, f"{variant} s{seed} not started: predicted {pred:.0f} s ({how}), {left:.0f} s of "
                                    f"the budget left")
                if pred > args.budget_s - reserve and variant != "auto":
                    too_long.append((variant, seed, flags, pred, how))
                continue
            run_one(variant, seed, flags, why, pred, how)
        if not started and too_long and not args.no_measure and deadline - time.time() - reserve >= min_left:
            # No run of the target fits one call: say so with the numbers, and spend the budget on the most needed
            # run that has no partial run in this cohort yet (its iterations measure this device's speed and, with
            # LEP, LEP's ratios in the regime); it is kept as unfinished.
            partial = {(r["variant"], r["seed"]) for r in ledger["runs"]
                       if L.cohort(r) == ctx["cohort"] and not r["finished"] and r["iters_done"]}
            variant, seed, flags, pred, how = next((x for x in too_long if x[:2] not in partial), too_long[0])
            call["notes"].append(f"a {target}-iteration run is predicted to take {pred:.0f} s here ({how}), more than "
                                 f"this call's whole budget ({args.budget_s} s): no run can finish in one call; "
                                 f"{variant} s{seed} runs until the budget ends and is kept as unfinished")
            say(call["notes"][-1])
            if f"{variant} s{seed}" in skipped[1:]:
                skipped.remove(f"{variant} s{seed}")
            run_one(variant, seed, flags, None, pred, how)
        if len(skipped) > 1:
            call["notes"].append(f"not started for want of budget: {', '.join(skipped[1:])}")
            say(call["notes"][-1])
    except Stopped as e:
        if e.args:
            ledger["runs"].append(e.args[0])
            call["runs"].append(e.args[0]["id"])
        call["notes"].append("the call was stopped from outside")
        write()
        say("stopped from outside; the ledger keeps the runs so far")
        return 1
    finally:
        signal.signal(signal.SIGTERM, old_term)
    write()
    report.write(ledger, out, quiet=True)
    nfin = sum(r["finished"] for r in ledger["runs"] if r["id"] in call["runs"])
    say(f"{len(call['runs'])} run(s) this call, {nfin} finished, {failed} failed; {len(L.pending(ledger, eng.numerics, key, target, variants))} "
        f"still missing; {out}/regime.json, {out}/quality-regime.md ({time.time() - t_call:.0f} s)")
    return 1 if failed else 0


def cmd_merge(args):
    try:
        src = L.load(args.src)
        dst = L.load(args.dst, missing_ok=True, regime=src["regime"])
        runs, calls = L.merge(src, dst)
    except L.LedgerError as e:
        die(str(e))
    L.save(dst, args.dst)
    print(f"merge: {runs} new run(s), {calls} new call(s) from {args.src} into {args.dst} "
          f"({len(dst['runs'])} runs in all)")
    return 0


def cmd_report(args):
    try:
        ledger = L.load(args.ledger)
    except L.LedgerError as e:
        die(str(e))
    os.makedirs(args.out, exist_ok=True)
    report.write(ledger, args.out)
    return 0


def cmd_pending(args):
    try:
        ledger = L.load(args.ledger)
    except L.LedgerError as e:
        die(str(e))
    regime = "smoke" if args.smoke else "paper"
    if ledger["regime"] != regime:
        die(f"{args.ledger} is a '{ledger['regime']}' ledger; pass --smoke for a smoke one" if not args.smoke else
            f"{args.ledger} is a '{ledger['regime']}' ledger, not a smoke one")
    numerics = args.numerics
    if numerics is None:
        numerics = Engine(args.bin, "cpu").numerics
    key = L.shape_key(L.shape_of(regime, args.layers))
    for v, s in L.pending(ledger, numerics, key, args.iters or L.VERDICT_MIN_ITERS[regime]):
        print(f"{v} s{s}")
    return 0


def add_parser(parent):
    ap = parent.add_parser("regime", help="the paper-regime quality experiment's ledger: run, merge, report, pending "
                                          "(docs/results/quality-regime.md)",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one call: the missing runs that fit the budget")
    r.add_argument("--ledger", help="the ledger to continue (default: docs/results/regime.json; --smoke: none)")
    r.add_argument("--out", help="DIR: regime.json, quality-regime.md, runs/ (default bench-results/quality-regime)")
    r.add_argument("--budget-s", type=int, default=360)
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--smoke", action="store_true", help="a tiny model on the CPU: the plumbing only")
    r.add_argument("--bin", help="optimus-cc to run (default: the bundle's run.sh, else build/optimus-cc)")
    r.add_argument("--data", help="a tokenized corpus PREFIX (default: GCIDE, tokenized here)")
    r.add_argument("--corpus", help="the GCIDE JSONL (default: the bundle's data/gcide.jsonl.zst)")
    r.add_argument("--layers", type=int, default=2)
    r.add_argument("--iters", type=int, help="target iterations (default 300; other values are a recorded deviation)")
    r.add_argument("--max-runs", type=int, help="start at most N runs")
    r.add_argument("--variants", help="only these variants (comma-separated)")
    r.add_argument("--no-measure", action="store_true",
                   help="when no run can finish in the budget, start none (default: run the most needed one, unfinished)")
    m = sub.add_parser("merge", help="append the runs and calls of SRC that DST lacks")
    m.add_argument("src")
    m.add_argument("dst")
    p = sub.add_parser("report", help="DIR/quality-regime.md and .png from a ledger")
    p.add_argument("ledger")
    p.add_argument("--out", required=True)
    q = sub.add_parser("pending", help="the runs still missing, most needed first")
    q.add_argument("ledger")
    q.add_argument("--numerics", type=int, help="default: this engine's (optimus-cc --version)")
    q.add_argument("--bin")
    q.add_argument("--smoke", action="store_true")
    q.add_argument("--layers", type=int, default=2)
    q.add_argument("--iters", type=int)
    ap.set_defaults(func=main)


def main(args):
    if args.cmd == "run":
        if args.budget_s <= 0 or (args.iters is not None and args.iters <= 0) or (args.max_runs is not None and args.max_runs < 0):
            die("--budget-s and --iters take positive whole numbers, --max-runs a whole number")
        if args.layers < 2 or args.layers % 2:
            die(f"--layers {args.layers}: use an even number >= 2 (P2)")
    return {"run": cmd_run, "merge": cmd_merge, "report": cmd_report, "pending": cmd_pending}[args.cmd](args)

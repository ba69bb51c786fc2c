"""python3 -m occtools race: which plan reaches the baseline's validation loss first (issue 49).

Per regime (--regimes FILE, the matched regimes; --quick: one built-in tiny regime) and per
variant (the baseline, DP-only PowerSGD, the paper's full Optimus-CC, MXFP4 + rANS on the
pipeline links with LEP, MXFP4 + EF on DP, DiLoCo and Streaming DiLoCo where DP crosses a node
boundary, the auto plan; those the layout can run):
  timing runs   on the emulated cluster (scripts/cluster.sh run, the regime's bandwidth and
                latency), --reps interleaved repetitions of --timing-iters iterations;
  loss runs     `mpirun -np WORLD optimus-cc train` on unshaped links, the same layout, each of
                --seeds, --iters iterations, evaluated every <= 2 % of the run on >= --eval-samples
                validation samples, the same fixed set at every evaluation and for every variant
                (train --eval-fixed-set);
  arithmetic    target = the baseline's mean validation loss at N (the latest N <= iters/2 where it
                still improves >= 1 % over the last fifth of [0, N]); iterations to target per seed
                by the interpolated crossing ("not reached" by 2N: null, with the loss at 2N);
                time to target = iterations x ms/iteration, 95 % intervals by a seeded bootstrap
                over seeds and repetitions; speedup over the baseline;
  decomposition one compressed variant of one regime trained on the emulated cluster up to the
                iteration it met the target: measured against predicted (within 10 % or not).
Writes OUT/time-to-target.json (occ-time-to-target/1), OUT/time-to-target-curves.json,
OUT/time-to-target.md and a plot per regime (--quick: time-to-target-quick.*, never where
`plan --auto` looks for measured costs). Resumable: every finished run is kept in --work and
skipped when the race runs again (an interrupted race continues where it stopped).
Without an emulated cluster (no root, no netns/tc) the loss runs still run and the timing is
skipped with a note (no time to target then). --report-only remakes the .md and plots from OUT's
json files.
"""

import argparse
import datetime
import math
import os
import shlex
import sys

from occtools.common import engine
from occtools.common.errors import Failure, positive_int, words
from occtools.race import regimes as R
from occtools.race import report, results, runs

DEFAULTS = {"iters": 300, "seeds": ["1234", "4321", "2024"], "timing_iters": 35, "reps": 2}
QUICK = {"iters": 50, "seeds": ["1234"], "timing_iters": 21, "reps": 1}


def add_parser(sub):
    p = sub.add_parser("race", help="time to a target loss per plan and regime (docs/results/time-to-target.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--regimes", default="docs/results/regimes-matched.json", help="the matched regimes (default "
                                                                                  "docs/results/regimes-matched.json)")
    p.add_argument("--quick", action="store_true", help="the built-in tiny regime, baseline and one compressed "
                                                        "variant, one seed, one repetition (CI: minutes)")
    p.add_argument("--only", type=words, default=[], help="only these regimes (names)")
    p.add_argument("--variants", type=words, default=[], help="only these variants (the baseline is always run)")
    p.add_argument("--iters", type=positive_int, help=f"loss-run iterations (default {DEFAULTS['iters']}, quick "
                                                      f"{QUICK['iters']}); N <= iters / 2")
    p.add_argument("--seeds", type=words, help=f"loss-run seeds (default {' '.join(DEFAULTS['seeds'])}, quick 1234)")
    p.add_argument("--eval-samples", type=positive_int, default=64, help="validation samples per evaluation, >= 64")
    p.add_argument("--timing-iters", type=positive_int, help=f"iterations per timing run (default "
                                                             f"{DEFAULTS['timing_iters']}, quick {QUICK['timing_iters']})")
    p.add_argument("--reps", type=positive_int, help=f"timing repetitions (default {DEFAULTS['reps']}, quick 1)")
    p.add_argument("--decomposition", help="REGIME:VARIANT for the decomposition check (default: the first regime's "
                                           "fastest compressed variant; 'none': no check)")
    p.add_argument("--auto-objective", choices=("time-to-target", "loss-budget"), default="time-to-target",
                   help="how the auto plan is chosen (default time-to-target: from the measured variants' iterations "
                        "to target, where plan has --objective time-to-target; else the loss budget --max-loss)")
    p.add_argument("--max-loss", default="0.5", help="the auto plan's --max-loss-increase with the loss-budget "
                                                     "objective (default 0.5)")
    p.add_argument("--compressors-json", default="docs/results/compressors.json", help="the auto plan's loss costs")
    p.add_argument("--work", help="the runs kept between calls (default bench-results/race/work, quick "
                                  "bench-results/race-quick/work)")
    p.add_argument("--out", help="where the results go (default docs/results, quick bench-results/race-quick)")
    p.add_argument("--cluster-name", default="race", help="the emulated cluster's name (default race)")
    p.add_argument("--data", help="a tokenized corpus PREFIX for every regime (default: KJV tokenized into "
                                   "WORK/data-vV with each regime's matched vocabulary V, emulated.vocab_size; 1024 "
                                   "where the regime has none)")
    p.add_argument("--cpu-gemm", choices=runs.CPU_GEMMS, default="openblas",
                   help="the CPU GEMM library of every run (OCC_CPU_GEMM; default openblas: the library the "
                        "planner's calibration and the committed runs used; another one reruns every run)")
    p.add_argument("--report-only", action="store_true", help="remake OUT's .md and plots from its json files")
    p.add_argument("--bin", help="optimus-cc (default build/optimus-cc, built first by scripts/setup.sh)")
    p.set_defaults(func=main)


def settle(a):
    d = QUICK if a.quick else DEFAULTS
    for k, v in d.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.work = a.work or ("bench-results/race-quick/work" if a.quick else "bench-results/race/work")
    a.out = a.out or ("bench-results/race-quick" if a.quick else "docs/results")
    if a.eval_samples < 64:
        raise Failure(f"--eval-samples {a.eval_samples}: the race evaluates on at least 64 samples")
    if a.timing_iters < results.warmup(a.timing_iters) + results.WINDOW:
        raise Failure(f"--timing-iters {a.timing_iters}: too few for one {results.WINDOW}-iteration window after the "
                      f"warm-up; use >= {results.warmup(a.timing_iters) + results.WINDOW}")
    if a.iters < 10:
        raise Failure(f"--iters {a.iters}: use >= 10 (the target needs evaluations up to 2N)")


def chosen_regimes(a):
    rs = [R.quick()] if a.quick else R.load(a.regimes)
    if a.only:
        unknown = [n for n in a.only if n not in {r["name"] for r in rs}]
        if unknown:
            raise Failure(f"--only: no regime {', '.join(unknown)} in {a.regimes}")
        rs = [r for r in rs if r["name"] in a.only]
    return rs


def race_regime(a, exe, ident, regime, data, cluster_why, log, check_wanted):
    """Runs (or finds) one regime's runs; returns (entry, extras, failures, runner, flags)."""
    name, notes, failures = regime["name"], [], []
    decomposition = None
    wanted = list(R.QUICK_VARIANTS) if a.quick else a.variants
    if wanted and "baseline" not in wanted:
        wanted = ["baseline"] + wanted
    table = []
    for v, flags, why in R.variants(regime, wanted):
        if why:
            notes.append(f"{v} left out: {why}")
        else:
            table.append([v, flags])
    flags = dict((v, f) for v, f in table)
    gb = int(R.flag_value(regime["emulated"]["train_flags"], "--global-batch-size", "0"))
    if gb < 1:
        raise Failure(f"{name}: emulated.train_flags needs --global-batch-size")
    interval, eval_iters = max(1, a.iters // 50), math.ceil(a.eval_samples / gb)
    runner = runs.Runner(exe, a.work, regime, a.cluster_name, ident)
    seed0, timing, loss = a.seeds[0], {}, {}

    def loss_runs(names):
        for seed in a.seeds:
            for v in names:
                try:
                    loss.setdefault(v, {})[seed] = runner.loss(v, flags[v], seed, a.iters, interval, eval_iters, data)
                except Failure as e:
                    failures.append(str(e))

    # 1. The measured variants' loss runs; 2. the auto plan, chosen with their iterations to
    # target where plan has --objective time-to-target; 3. every variant's timing, interleaved;
    # 4. the auto plan's loss runs.
    loss_runs([v for v in flags if v != "auto"])
    if not cluster_why:
        try:
            runs.cluster_up(regime, a.cluster_name, log)
        except Failure as e:  # e.g. a latency this machine's cluster.sh cannot emulate: the loss part stands
            failures.append(str(e))
            cluster_why = str(e)
    if cluster_why:
        notes.append(f"no timing runs: the emulated cluster cannot run here ({cluster_why})")
        if "auto" in flags:
            notes.append("auto left out: it is calibrated on the baseline's timing run")
            del flags["auto"]
    else:
        try:
            if "auto" in flags:
                runner.timing("baseline", flags["baseline"], 1, a.timing_iters, seed0, data)
                plan = auto_plan(a, regime, runner, flags, loss, data)
                if "why" in plan:
                    notes.append(f"auto left out: {plan['why']}")
                    del flags["auto"]
                else:
                    flags["auto"] = plan["flags"]
                    notes.append(f"auto plan ({plan['objective']}): {' '.join(plan['flags']) or '(no compression)'}"
                                 + "".join(f"; {x}" for x in plan.get("chosen", [])))
            names = list(flags)
            for rep in range(1, a.reps + 1):
                for i in range(len(names)):  # rotated: no variant always runs first or last
                    v = names[(i + rep - 1) % len(names)]
                    try:
                        timing.setdefault(v, []).append(runner.timing(v, flags[v], rep, a.timing_iters, seed0, data))
                    except Failure as e:
                        failures.append(str(e))
            if check_wanted:  # right after the timing rounds: the machine's load as like theirs as it gets
                try:
                    decomposition = check_decomposition(a, regime, runner, flags, loss, timing, data)
                except Failure as e:
                    failures.append(str(e))
        finally:
            runs.cluster_down(a.cluster_name, log)
    if "auto" in flags:
        loss_runs(["auto"])
    data_in = [{"name": v, "flags": flags[v], "loss": loss.get(v, {}), "timing": timing.get(v)} for v in flags]
    try:
        entry, extras = results.regime_entry(regime, a.seeds, a.iters, a.timing_iters, data_in)
    except ValueError as e:
        raise Failure(f"{name}: no result: {e}" + (f" (failed runs: {'; '.join(failures)})" if failures else ""), 1)
    extras["notes"] = notes + [f"FAILED: {f}" for f in failures]
    if decomposition:
        entry["decomposition_check"], extras["decomposition_text"] = decomposition[0], decomposition[1]
        extras["notes"] += decomposition[2]
    em = regime["emulated"]
    extras["emulated"] = (f"{em['nodes']} nodes x {em['ranks_per_node']} ranks, T{regime['tensor']} "
                          f"P{regime['pipeline']} D{regime['dp']}, vocabulary {em.get('vocab_size') or 1024}, "
                          f"{em['bandwidth']} per node link, latency "
                          f"{em['latency']}; train flags `{' '.join(em['train_flags'])}`; loss runs {a.iters} "
                          f"iterations, evaluated every {interval} on {eval_iters * gb} samples, seeds "
                          f"{' '.join(a.seeds)}; timing runs {a.timing_iters} iterations x {a.reps} repetitions")
    return entry, extras, failures, runner, flags


def auto_plan(a, regime, runner, flags, loss, data):
    """The auto plan: `plan --auto --objective time-to-target` on the measured variants'
    iterations to target (a provisional json of this regime, iterations only) where the binary
    has that objective (--auto-objective time-to-target, the default), else the loss budget of
    the compressor sweep (--max-loss-increase)."""
    objective = a.auto_objective
    extra = []
    if objective == "time-to-target":
        if not runs.plan_has_objective(runner.exe):
            objective = "loss-budget (this plan has no --objective time-to-target)"
        else:
            measured = [{"name": v, "flags": flags[v], "loss": loss.get(v, {}), "timing": None} for v in flags
                        if v != "auto" and all(s in loss.get(v, {}) for s in a.seeds)]
            try:
                entry, _ = results.regime_entry(regime, a.seeds, a.iters, a.timing_iters, measured)
            except ValueError as e:
                return {"why": f"no provisional target for the auto plan: {e}"}
            path = os.path.join(runner.dir, "provisional-time-to-target.json")
            report.write_json({"schema": report.SCHEMA, "regimes": [entry]}, path)
            extra = ["--objective", "time-to-target", "--time-to-target-json", path, "--regime", regime["name"]]
    if not extra:
        extra = ["--max-loss-increase", a.max_loss]
    plan = runner.auto_plan(a.compressors_json, extra, data)
    plan["objective"] = objective
    return plan


def check_decomposition(a, regime, runner, flags, loss, timing, data):
    """On the emulated cluster (up), right after the timing rounds: the chosen variant (default: the
    fastest compressed one to the target) and then the baseline, each trained with its loss run's
    flags up to the iteration its first seed met the target. Returns (record of the chosen variant
    for time-to-target.json, the report's text, notes) or None."""
    measured = [{"name": v, "flags": flags[v], "loss": loss.get(v, {}), "timing": timing.get(v)} for v in flags
                if v != "auto" and all(s in loss.get(v, {}) for s in a.seeds)]
    try:
        entry, _ = results.regime_entry(regime, a.seeds, a.iters, a.timing_iters, measured)
    except ValueError as e:
        return None, "", [f"no decomposition check: {e}"]
    choice = a.decomposition or ("quick:pp_mxfp4_lep_rans" if a.quick else "")
    variant = choice.partition(":")[2]
    if not variant:
        timed = [v for v in entry["variants"] if v["name"] != "baseline" and v["time_to_target_s"]]
        if not timed:
            return None
        variant = min(timed, key=lambda v: v["time_to_target_s"]["median"])["name"]
    record, texts, notes = None, [], []
    for i, v in enumerate([variant] + (["baseline"] if variant != "baseline" else [])):
        rec = next((r for r in entry["variants"] if r["name"] == v), None)
        if rec is None or not rec["ms_per_iteration"] or rec["iterations_to_target"][0] is None:
            notes.append(f"no decomposition check of {v}: no timing, or the target not reached")
            continue
        rows = runner.decomposition(v, flags[v], a.seeds[0], a.iters, math.ceil(rec["iterations_to_target"][0]), data)
        loss_rows = runs.read_run(os.path.join(runner.dir, "loss", f"{v}_s{a.seeds[0]}.jsonl"))
        rec_v, text = results.decomposition(entry, v, 0, rows, loss_rows)
        record = record or rec_v
        loads = [runs.load_at_start(os.path.join(runner.dir, *p)) for p in
                 [("decomposition", v)] + [("timing", f"{v}.r{k}") for k in range(1, a.reps + 1)]]
        texts.append(text + " (1-minute load average at the start of this run / of the timing runs: "
                     + " / ".join("?" if x is None else f"{x:.1f}" for x in loads) + ".)")
    return (record, " ".join(texts), notes) if record else None

def main(a):
    if a.report_only:
        settle(a)
        doc, side = report.load(a.out, a.quick)
        for p in report.write(doc, side, a.out):
            print(f"wrote {p}")
        return 0
    settle(a)
    regimes = chosen_regimes(a)
    exe = engine.binary(a.bin, build=not a.bin)
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.work, "cluster.log")
    corpora = {}

    def data_for(regime):
        """The regime's corpus: its matched vocabulary decides the embedding's size and bytes."""
        if a.data:
            return a.data
        vocab = int(regime["emulated"].get("vocab_size") or 1024)
        if vocab not in corpora:
            corpora[vocab] = engine.preprocess(exe, os.path.join(a.work, f"data-v{vocab}", "kjv"), vocab,
                                               env=engine.rank_env())
        return corpora[vocab]
    cluster_why = runs.cluster_check()
    if cluster_why:
        print(f"note: skipping the timing runs: the emulated cluster cannot run here: {cluster_why}", flush=True)
    ident = runs.engine_identity(exe, a.cpu_gemm)
    command = "python3 -m occtools race " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["race"] else [])
    side = {"quick": a.quick, "command": command, "date": datetime.date.today().isoformat(),
            "report_command": f"python3 -m occtools race --report-only --out {a.out}" + (" --quick" if a.quick else ""),
            "setup": (f"Loss runs on unshaped links (plain mpirun), timing runs on the emulated cluster "
                      f"(scripts/cluster.sh); engine {exe}, numerics {ident['numerics']}, CPU GEMMs "
                      f"{ident['cpu_gemm']} (OCC_CPU_GEMM, pinned for every run). Time per iteration: the median of "
                      f"{results.WINDOW}-iteration window means after the warm-up; intervals: 95 %, seeded bootstrap "
                      f"(2000 draws) over seeds and timing repetitions."
                      + (f" The regimes file says: {regimes[0]['file_note']}" if regimes[0].get("file_note") else "")),
            "regimes": {}}
    doc, failures = {"schema": report.SCHEMA, "regimes": []}, []
    kept = earlier_regimes(a, [r["name"] for r in regimes])
    order = [r["name"] for r in (R.load(a.regimes) if not a.quick else regimes)]
    for regime in regimes:
        wanted = not cluster_why and a.decomposition != "none" and (
            (a.decomposition or "").partition(":")[0] == regime["name"] or a.quick
                                      or (not a.decomposition and regime is regimes[0]))
        try:
            entry, extras, failed, runner, flags = race_regime(a, exe, ident, regime, data_for(regime), cluster_why,
                                                               log, wanted)
        except Failure as e:
            if e.status != 1:
                raise
            failures.append(str(e))  # a run failed: the other regimes still race
            continue
        failures += failed
        doc["regimes"].append(entry)
        side["regimes"][regime["name"]] = extras_json(extras)
        merge_earlier(doc, side, kept, order)
        report.write_json(doc, os.path.join(a.out, report.stem(a.quick) + ".json"))
        report.write_json(side, os.path.join(a.out, report.stem(a.quick) + "-curves.json"))
    merge_earlier(doc, side, kept, order)
    for p in report.write(doc, side, a.out):
        print(f"wrote {p}")
    for f in failures:
        print(f"error: {f}", file=sys.stderr)
    return 1 if failures else 0


def earlier_regimes(a, racing):
    """The regimes of an earlier call that this one does not race, from OUT's json files: a race
    of some regimes (--only) adds to the report instead of replacing it, so the regimes of a long
    race can be run in separate calls (sessions). {name: (entry, side entry, that call's command)}."""
    try:
        doc, side = report.load(a.out, a.quick)
    except (OSError, ValueError):
        return {}
    if doc.get("schema") != report.SCHEMA:
        return {}
    return {e["name"]: (e, side.get("regimes", {}).get(e["name"], {}), side.get("commands", {}).get(e["name"],
                                                                                                      side.get("command")))
            for e in doc.get("regimes", []) if e.get("name") not in racing}


def merge_earlier(doc, side, kept, order):
    """DOC and SIDE with the KEPT regimes of earlier calls added, in the regimes file's ORDER; each
    regime's command recorded (side["commands"])."""
    cmds = side.setdefault("commands", {})
    for r in doc["regimes"]:
        cmds.setdefault(r["name"], side["command"])
    have = {r["name"] for r in doc["regimes"]}
    for name, (entry, extra, command) in kept.items():
        if name not in have:
            doc["regimes"].append(entry)
            side["regimes"][name] = extra
            cmds[name] = command
    rank = {n: i for i, n in enumerate(order)}
    doc["regimes"].sort(key=lambda r: rank.get(r["name"], len(rank)))


def extras_json(extras):
    """What the report keeps of a regime's extras (the bootstrap samples stay out: they may be inf)."""
    return {k: v for k, v in extras.items() if k not in ("samples",)}

"""The race's runs, each kept in the work folder and skipped when the race runs again:

  WORK/REGIME/loss/VARIANT_sSEED.{jsonl,log,argv}   loss runs: `mpirun -np WORLD optimus-cc train`
      on unshaped links, the regime's layout, evaluated every <= 2 % of the run (metrics slim:
      the whole job's fields, no per-rank or per-stage detail)
  WORK/REGIME/timing/VARIANT.rK.{jsonl,log,argv}    timing runs on the emulated cluster
      (scripts/cluster.sh run), repetitions interleaved (every variant once per round, rotated)
  WORK/REGIME/auto.json                             the auto plan's flags (plan --auto, calibrated
      on the baseline's first timing repetition)
  WORK/REGIME/decomposition/VARIANT.{jsonl,log,argv} the decomposition check's run: the loss run's
      flags on the emulated cluster, stopped (--exit-interval) at the iteration the target was met

A run is finished when its .argv file (written last, after the run succeeded) holds the argv it
would run now and its .engine file the engine it would run on now (`engine_identity`: the
numerics version and the CPU's GEMM library, which can change the numbers with the same argv);
anything else of it is stale and run again. So an interrupted race continues where it stopped,
and a changed setting or engine reruns only what it changes."""

import json
import os
import time

from occtools.common import engine, proc
from occtools.common.errors import Failure
from occtools.common.metrics import read_run

CLUSTER = os.path.join(engine.ROOT, "scripts", "cluster.sh")
# Flags every run gets unless the regime sets them (the learning-rate schedule follows --train-iters).
DEFAULTS = {"--lr": "6e-4", "--min-lr": "6e-5", "--lr-warmup-fraction": "0.05", "--log-interval": "1000",
            "--comm-timeout": "600"}


def say(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def base_flags(regime, data):
    flags = list(regime["emulated"]["train_flags"])
    if "--data-path" not in flags:
        flags += ["--data-path", data, "--tokenizer-model", data + ".model"]
    for k, v in DEFAULTS.items():
        if k not in flags:
            flags += [k, v]
    return flags


def loss_flags(regime, data, iters, interval, eval_iters, seed):
    return base_flags(regime, data) + ["--train-iters", str(iters), "--eval-interval", str(interval),
                                       "--eval-iters", str(eval_iters), "--eval-fixed-set", "--seed", str(seed)]


def timing_flags(regime, data, iters, seed):
    return base_flags(regime, data) + ["--train-iters", str(iters), "--eval-iters", "0", "--seed", str(seed)]


def cluster_words(regime):
    """The shaping flags of scripts/cluster.sh for REGIME (--latency only where it is not 0)."""
    em = regime["emulated"]
    words = ["--nodes", str(em["nodes"]), "--bandwidth", em["bandwidth"]]
    if em["latency"].strip() not in ("0", "0ms", "0us", "0s", ""):
        words += ["--latency", em["latency"]]
    return words


# Named, never "auto": a run's record must say which library made its numbers on any machine.
CPU_GEMMS = ("openblas", "onednn")


def engine_identity(exe, cpu_gemm):
    """What decides a run's numbers besides its argv: the engine's numerics version (`optimus-cc
    --version`, core/numerics.h) and the CPU's GEMM library the race pins (OCC_CPU_GEMM)."""
    f = proc.run([exe, "--version"], 60, capture=True)
    words = f.output.split()
    if not f.ok or len(words) < 3 or words[1] != "numerics" or not words[2].isdigit():
        raise Failure(f"{exe} --version did not name its numerics version ({proc.oneline(f.output)[:120]}): rebuild it "
                      "(scripts/setup.sh)", 1)
    return {"numerics": int(words[2]), "cpu_gemm": cpu_gemm}


class Runner:
    """Runs (or finds finished) the runs of one regime into WORK/REGIME, every run on the engine
    IDENTITY (engine_identity: its CPU GEMM library is OCC_CPU_GEMM in the ranks' environment)."""

    def __init__(self, exe, work, regime, cluster_name, identity, env=None):
        self.exe, self.regime, self.cluster_name = exe, regime, cluster_name
        self.dir = os.path.join(work, regime["name"])
        self.env = dict(env or engine.rank_env(), OCC_CPU_GEMM=identity["cpu_gemm"])
        self.identity = identity

    def path(self, *parts):
        p = os.path.join(self.dir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def done(self, stem, argv):
        try:
            with open(stem + ".argv") as f, open(stem + ".engine") as g:
                return json.load(f) == argv and json.load(g) == self.identity
        except (OSError, json.JSONDecodeError):
            return False

    def run(self, stem, flags, launch, what, slim=False):
        """The metrics rows of run STEM: from the cache when finished with these FLAGS, else run
        by LAUNCH(argv, metrics, log) -> proc.Finished. Failure (status 1) when it fails. SLIM: the
        finished run's metrics keep only the whole job's fields (slim_metrics)."""
        argv = [str(f) for f in flags]
        metrics, log = stem + ".jsonl", stem + ".log"
        if self.done(stem, argv):
            return read_run(metrics)
        for stale in (stem + ".argv", stem + ".engine", stem + ".load", metrics, log):
            if os.path.exists(stale):
                os.remove(stale)
        t0, load = time.monotonic(), os.getloadavg()[0]
        f = launch(argv, metrics, log)
        if not f.ok:
            raise Failure(f"{self.regime['name']}: {what} failed ({f.why()}; see {log}): {proc.tail(log, 4)}", 1)
        if slim:
            slim_metrics(metrics)
        with open(stem + ".load", "w") as out:  # the machine's 1-minute load average at its start
            out.write(f"{load:.2f}\n")
        with open(stem + ".engine", "w") as out:
            json.dump(self.identity, out)
        with open(stem + ".argv", "w") as out:  # last: the mark of a finished run
            json.dump(argv, out)
        rows = read_run(metrics)
        val = [r["val_loss"] for r in rows if "val_loss" in r]
        say(f"{self.regime['name']}: {what}: {time.monotonic() - t0:.0f} s" + (f", last val loss {val[-1]:.4f}"
                                                                                if val else ""))
        return rows

    def loss(self, variant, flags, seed, iters, interval, eval_iters, data):
        argv = loss_flags(self.regime, data, iters, interval, eval_iters, seed) + flags
        stem = self.path("loss", f"{variant}_s{seed}")
        return self.run(stem, argv, lambda a, m, log: engine.train(self.exe, a, m, log, np=self.regime["world"],
                                                                   env=self.env), f"loss run {variant} seed {seed}",
                        slim=True)

    def on_cluster(self, argv, metrics, log):
        em = self.regime["emulated"]
        words = ["run", "--name", self.cluster_name, *cluster_words(self.regime), "--ranks-per-node",
                 str(em["ranks_per_node"]), "--", self.exe, "train", *argv, "--metrics", metrics]
        return proc.run(["bash", CLUSTER, *words], None, log=log, env=self.env)

    def timing(self, variant, flags, rep, iters, seed, data):
        argv = timing_flags(self.regime, data, iters, seed) + flags
        return self.run(self.path("timing", f"{variant}.r{rep}"), argv, self.on_cluster,
                        f"timing {variant} round {rep}")

    def decomposition(self, variant, flags, seed, iters, stop, data):
        """The loss run's training (same schedule, same data) on the emulated cluster, stopped after
        iteration STOP, without evaluations (they are not part of the predicted time)."""
        argv = timing_flags(self.regime, data, iters, seed) + ["--exit-interval", str(stop)] + flags
        return self.run(self.path("decomposition", variant), argv, self.on_cluster,
                        f"decomposition check {variant} ({stop} iterations)")

    def auto_plan(self, compressors_json, objective_flags, data):
        """The auto plan's compression flags ({"flags": [...]} or {"why": ...} when there is none),
        cached in WORK/REGIME/auto.json: `plan --auto` calibrated on the baseline's first timing
        repetition, with OBJECTIVE_FLAGS (--max-loss-increase X, or --objective time-to-target and
        the race's provisional json). Cached by its argv (a changed provisional json's content is
        not part of it: delete auto.json to choose again)."""
        path = self.path("auto.json")
        calib = os.path.join(self.dir, "timing", "baseline.r1.jsonl")
        em = self.regime["emulated"]
        argv = [self.exe, "plan", "--ignore-unknown-flags", *base_flags(self.regime, data), "--devices-per-node",
                str(em["ranks_per_node"]), "--calibrate", calib, "--auto", *objective_flags,
                "--compressors-json", compressors_json]
        try:
            with open(path) as f:
                cached = json.load(f)
            if cached.get("argv") == argv and cached.get("engine") == self.identity:
                return cached
        except (OSError, json.JSONDecodeError):
            pass
        if not os.path.isfile(compressors_json):
            result = {"why": f"no {compressors_json} (python3 -m occtools compressors): no auto plan"}
        else:
            f = proc.run(argv, 600, capture=True)
            line = [x for x in f.output.splitlines() if x.startswith("train flags:")]
            if not f.ok or not line:
                result = {"why": f"plan --auto failed ({f.why()}): {proc.oneline(f.output)[-200:]}"}
            else:
                words = line[-1].split(":", 1)[1].split()
                result = {"flags": [] if words == ["(none)"] else words,
                          "chosen": [x for x in f.output.splitlines() if x.startswith(("chosen", "expected"))]}
        result["argv"], result["engine"] = argv, self.identity
        with open(path, "w") as out:
            json.dump(result, out, indent=1)
        return result


def slim_metrics(path):
    """PATH's rows without their per-rank and per-stage detail ("ranks", "stages"): a loss run is
    read for its losses, evaluations, iteration times and whole-job bytes only, and slim it is a
    tenth of the size, small enough to keep the finished loss runs of a race that spans sessions
    in the repository (docs/results/race-work). Rewritten atomically; a row that is not JSON is
    kept as it is."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                out.append(line if line.endswith("\n") else line + "\n")
                continue
            if isinstance(row, dict):
                row.pop("ranks", None)
                row.pop("stages", None)
            out.append(json.dumps(row, separators=(",", ":")) + "\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(out)
    os.replace(tmp, path)


def plan_has_objective(exe):
    f = proc.run([exe, "plan", "--help"], 60, capture=True)
    return "--objective" in f.output and "time-to-target" in f.output


def load_at_start(stem):
    """The 1-minute load average recorded when run STEM started, or None."""
    try:
        with open(stem + ".load") as f:
            return float(f.read())
    except (OSError, ValueError):
        return None


def cluster_check():
    """None when scripts/cluster.sh can build an emulated cluster here, else why not."""
    f = proc.run(["bash", CLUSTER, "check"], 60, capture=True)
    return None if f.ok else proc.oneline(f.output) or f.why()


def cluster_up(regime, name, log):
    proc.run(["bash", CLUSTER, "down", "--name", name], 120, log=log)
    f = proc.run(["bash", CLUSTER, "up", "--name", name, *cluster_words(regime)], 300, log=log, capture=True)
    if not f.ok:
        raise Failure(f"{regime['name']}: scripts/cluster.sh up failed: {proc.oneline(f.output)[-300:]}", 1)


def cluster_down(name, log):
    proc.run(["bash", CLUSTER, "down", "--name", name], 120, log=log)

"""python3 -m occtools chaos: a 4-rank compressed job run by `optimus-cc launch` alone, through faults.

The job (P2 D2 with every Optimus-CC technique: CB + LEP + EC, FE, DP PowerSGD + SC, dropout
on; a checkpoint every few iterations, the last 3 kept) is started once, under the
supervisor. While it trains, this command injects faults and restarts nothing itself:

  * SIGKILLs of a random rank, at random moments (often inside a save);
  * one rank SIGSTOPped: a hang, which the supervisor must detect from the heartbeats, end
    with one line per rank saying where it waits, and restart from;
  * the newest checkpoint corrupted once on disk (7 bytes of one shard's header damaged while
    the job is frozen), then a rank killed: the supervisor must pass over it and resume from
    the newest checkpoint that verifies (which the job's start-up check must then verify, not
    the damaged newest).

Each fault lands at a later iteration than the one before (the supervisor refuses to
restart the same failure at the same iteration twice). The supervisor must end the run
with exit 0, and every logged loss and gradient norm (also those computed again after a
restart) and every file of the final checkpoint must equal the uninterrupted run's, bit for
bit. The last line sums up: faults, restarts, iterations lost, wall time.

--quick is what CI runs (cli.chaos): 48 iterations, 3 kills, the hang and the corruption (the
iterations leave room for a loaded machine, where a fault can land a few iterations after its
target and push the next ones later).
"""
import argparse
import filecmp
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time

from occtools.common.engine import ROOT
from occtools.common.errors import Failure


def add_parser(sub):
    ap = sub.add_parser("chaos", help="a supervised 4-rank compressed job through kills, a hang and a corrupted "
                        "checkpoint: bit-exact end", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="CI's version: 48 iterations, 3 kills")
    ap.add_argument("--iters", type=int, default=120)
    ap.add_argument("--kills", type=int, default=12)
    ap.add_argument("--save-interval", type=int, default=3)
    ap.add_argument("--hang-timeout", type=float, default=6.0)
    ap.add_argument("--async-save", action="store_true", help="the chaos run saves with --async-save")
    ap.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results", "chaos"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "optimus-cc"))
    ap.add_argument("--data", default="", help="a preprocessed dataset prefix (default: data/kjv.txt.zst)")
    ap.set_defaults(func=main)


def main(a):
    if a.seed is None:
        a.seed = random.randrange(1 << 16)
    if a.quick:
        a.iters, a.kills = 48, 3
    rng = random.Random(a.seed)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    binary = os.path.abspath(a.bin)
    if not os.access(binary, os.X_OK):
        raise Failure(f"{binary} not found; build first (bash scripts/setup.sh)")
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    out = lambda *p: os.path.join(a.out, *p)
    data = a.data
    if not data:
        data = out("kjv")
        run([binary, "preprocess", "--input", os.path.join(ROOT, "data/kjv.txt.zst"), "--output-prefix", data,
             "--vocab-size", "512"], out("preprocess.log"), env)
    mark = f"chaos-{os.getpid()}-{a.seed}"  # in the chaos run's metrics path, to find its ranks
    train = ["--data-path", data, "--tokenizer-model", data + ".model", "--num-layers", "4", "--hidden-size", "64",
             "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
             "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", str(a.iters),
             "--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--seed", "9", "--eval-interval", "1000",
             "--eval-iters", "1", "--log-interval", "1000", "--pipeline-model-parallel-size", "2",
             "--inter-grad-comp", "--inter-grad-comp-rank", "4", "--use-error-feedback",
             "--inter-grad-comp-epilogue-only", "--emb-comm-opt", "--grad-comp", "--grad-comp-rank", "4",
             "--grad-comp-warm-up", "0.1", "--selective-grad-comp-way", "1", "--comm-timeout", "60"]
    mpi = ["mpirun", "--oversubscribe", "-np", "4", binary, "train"]
    print(f"chaos: {a.iters} iterations, {a.kills} kills + a hang + a corrupted checkpoint, seed {a.seed}, "
          f"out {a.out}", flush=True)
    t0 = time.time()
    run(mpi + train + ["--save", out("straight"), "--save-interval", str(a.iters), "--metrics", out("straight.jsonl")],
        out("straight.log"), env)
    straight_wall = time.time() - t0

    # The faults, at increasing iterations spread over the run (never the last one).
    kinds = ["kill"] * a.kills + ["hang", "corrupt"]
    rng.shuffle(kinds)
    span = (a.iters - 2) / len(kinds)
    plan = [(max(1, int(span * i + 1 + rng.random() * span * 0.6)), kind) for i, kind in enumerate(kinds)]
    # The corruption needs a checkpoint before the newest to fall back to.
    c = kinds.index("corrupt")
    if plan[c][0] <= 2 * a.save_interval:
        plan[c], plan[-1] = (plan[c][0], plan[-1][1]), (plan[-1][0], "corrupt")
    metrics = out(f"chaos.{mark}.jsonl")
    launch = [binary, "launch", "--max-restarts", str(len(kinds) + 2), "--restart-backoff", "0",
              "--hang-timeout", str(a.hang_timeout), "--"] + mpi + train + [
        "--save", out("chaos"), "--save-interval", str(a.save_interval), "--keep-last", "3", "--metrics", metrics]
    if a.async_save:
        launch.append("--async-save")
    start = time.time()
    with open(out("launch.log"), "w") as log:
        sup = subprocess.Popen(launch, stdout=log, stderr=subprocess.STDOUT, env=env)
    done, struck_at = [], 0
    try:
        for target, kind in plan:
            # A row the current attempt logged, past the last fault's iteration (the
            # supervisor does not restart the same failure at the same iteration twice).
            rows = count_rows(metrics)
            target = max(target, struck_at + 2)
            if not wait_for(lambda: count_rows(metrics) > rows and last_iter(metrics) >= target
                            and len(rank_pids(binary, mark)) == 4, sup):
                break
            time.sleep(rng.random() * 0.05)  # anywhere in the iteration, a save included
            pids = rank_pids(binary, mark)
            if len(pids) != 4:
                continue
            if kind == "kill":
                os.kill(rng.choice(pids), signal.SIGKILL)
            elif kind == "hang":
                os.kill(rng.choice(pids), signal.SIGSTOP)
            else:
                for p in pids:  # frozen, so no save commits meanwhile
                    signal_if_alive(p, signal.SIGSTOP)
                try:
                    latest = int(open(out("chaos", "latest_checkpointed_iteration.txt")).read())
                    victim = corrupt_one_shard(out("chaos", f"iter_{latest:07d}"), rng)
                    os.kill(rng.choice(pids), signal.SIGKILL)
                finally:
                    for p in pids:  # (the killed rank may be reaped already)
                        signal_if_alive(p, signal.SIGCONT)
                kind = f"corrupt iter_{latest:07d} ({os.path.relpath(victim, out('chaos'))})"
            struck_at = last_iter(metrics)
            done.append(f"{kind} at iteration {struck_at}")
            print(f"chaos: {done[-1]}", flush=True)
            wait_for(lambda: set(rank_pids(binary, mark)).isdisjoint(pids), sup)  # that attempt is over
        rc = sup.wait(timeout=600)
    finally:
        if sup.poll() is None:  # this script failed: end the job, its ranks included
            for p in rank_pids(binary, mark):
                os.kill(p, signal.SIGKILL)
            sup.kill()
            sup.wait()
    wall = time.time() - start
    log_text = open(out("launch.log")).read()
    launch_lines = [l for l in log_text.splitlines() if l.startswith(("launch:", "error: launch"))]
    if rc != 0:
        print("\n".join(launch_lines[-8:]))
        fail(f"the supervisor exited {rc}")
    if len(done) != len(plan):
        fail(f"only {len(done)} of {len(plan)} faults were injected before the run ended")
    # What the supervisor must have said.
    hang = re.search(r"the job is hung.*\n((?:launch:   rank .*\n){4})", log_text)
    if not hang:
        fail("no hang report with one line per rank in the supervisor's output")
    if not re.search(r"fails verification: .*corrupted", log_text):
        fail("the corrupted checkpoint was not passed over")
    restarts = len(re.findall(r"^launch: attempt \d+ failed", log_text, re.M))
    if restarts != len(plan):
        fail(f"{restarts} restarts for {len(plan)} faults")
    summary = re.search(r"the job finished at iteration (\d+) of \d+ .* after (\d+) restarts?, (\d+) iterations? lost",
                        log_text)
    if not summary or int(summary.group(1)) != a.iters:
        fail("the supervisor did not report the job finished")

    compare_metrics(out("straight.jsonl"), metrics, a.iters)
    final = f"iter_{a.iters:07d}"
    files = sorted(os.path.relpath(os.path.join(d, f), out("straight", final))
                   for d, _, fs in os.walk(out("straight", final)) for f in fs)
    got = sorted(os.path.relpath(os.path.join(d, f), out("chaos", final))
                 for d, _, fs in os.walk(out("chaos", final)) for f in fs)
    if files != got:
        fail(f"the final checkpoints hold different files: {files} / {got}")
    for f in files:
        if not filecmp.cmp(out("straight", final, f), out("chaos", final, f), shallow=False):
            fail(f"final checkpoint file {f} differs")
    print(f"final checkpoint: {len(files)} files (weights, Adam moments, compressor state of all 4 ranks) "
          "bit-identical")
    print("supervisor: " + hang.group(0).splitlines()[0].removeprefix("launch: "))
    for line in hang.group(1).splitlines():
        print("  " + line.removeprefix("launch:   "))
    print(f"chaos: PASS {a.kills} SIGKILLs, a hang and a corrupted checkpoint survived under `optimus-cc launch` "
          f"alone: {summary.group(2)} restarts, {summary.group(3)} iterations lost, {wall:.0f} s wall "
          f"(uninterrupted: {straight_wall:.0f} s) "
          f"(seed {a.seed}{', --async-save' if a.async_save else ''})")
    return 0


def run(cmd, log, env):
    with open(log, "w") as f:
        if subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env) != 0:
            print(open(log).read()[-3000:])
            fail(f"{os.path.basename(log)}: the command failed")


def fail(why):
    print(f"chaos: FAIL {why}", flush=True)
    raise Failure(f"chaos: {why}", 1)


def signal_if_alive(pid, sig):
    """Sends sig to pid unless it has ended meanwhile (a rank exits or is reaped at any moment)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_for(condition, sup, timeout=300):
    """Polls condition until it holds (True) or the supervisor ends or time runs out (False)."""
    end = time.time() + timeout
    while time.time() < end and sup.poll() is None:
        if condition():
            return True
        time.sleep(0.01)
    return False


def rank_pids(binary, mark):
    r = subprocess.run(["pgrep", "-f", f"^{binary} train .*{mark}"], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def count_rows(metrics):
    try:
        with open(metrics, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def last_iter(metrics):
    """The iteration of the last row of the metrics file (0 before the first)."""
    try:
        with open(metrics, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - (1 << 18)))  # rows are a few KiB (per-rank timers)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return json.loads(line)["iter"]
        except (ValueError, KeyError):
            continue  # a line cut by the read window
    return 0


def corrupt_one_shard(iteration_dir, rng):
    """Damages 7 bytes of the header of a random model_optim_rng.bin of the checkpoint (at offset
    4096 when the header reaches that far, as in issue 48's report): the header is what the
    job's own start-up check reads, so the supervisor's choice of an older checkpoint must
    reach that check too (--ckpt-step), not only its load."""
    shards = sorted(os.path.join(d, f) for d, _, fs in os.walk(iteration_dir) for f in fs if f == "model_optim_rng.bin")
    victim = rng.choice(shards)
    with open(victim, "r+b") as f:
        f.seek(8)
        header_len = int.from_bytes(f.read(8), "little")  # "OCCTENS1" | uint64 header_len | header JSON
        pos = 4096 if header_len >= 4096 - 16 + 7 else 16 + rng.randrange(max(1, header_len - 7))
        f.seek(pos)
        f.write(b"\xde\xad\xbe\xef\x00\x11\x22")
    return victim


def compare_metrics(straight_path, chaos_path, iters):
    """Every row logged (rounds repeat the iterations after their checkpoint) equals the uninterrupted run's."""
    straight = {j["iter"]: (j["loss"], j["grad_norm"]) for j in map(json.loads, open(straight_path))}
    seen, bad = {}, []
    for j in map(json.loads, open(chaos_path)):
        seen[j["iter"]] = seen.get(j["iter"], 0) + 1
        if straight.get(j["iter"]) != (j["loss"], j["grad_norm"]):
            bad.append((j["iter"], j["loss"], straight.get(j["iter"])))
    missing = [i for i in range(1, iters + 1) if i not in seen]
    if bad or missing or len(straight) != iters:
        fail(f"{len(bad)} logged iterations differ from the uninterrupted run's (first: {bad[:1]}), missing {missing[:5]}")
    redone = sum(c - 1 for c in seen.values())
    print(f"losses and gradient norms: all {iters} iterations equal the uninterrupted run's bit for bit "
          f"({redone} computed again after a restart, each equal too)")


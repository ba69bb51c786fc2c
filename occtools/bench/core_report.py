"""bench-core's report: PREFIX.md (the tables) and PREFIX.json (every number of every run) from
the runs' JSON files (ENGINE-PRESET-THREADS-ROUND.json, ENGINE ours or torch)."""

import glob
import json
import os
import platform
import statistics

from occtools.common.tables import table


def agg(rs):
    reps = [x for r in rs for x in r["repeat_ms"]]
    cpu = [x for r in rs for x in r["repeat_cpu_ms"]]
    phases = {k: statistics.mean(r["phase_ms"][k] for r in rs) for k in rs[0]["phase_ms"]}
    return {"repeat_ms": reps, "best_ms": min(reps), "median_ms": statistics.median(reps),
            "repeat_cpu_ms": cpu, "best_cpu_ms": min(cpu), "median_cpu_ms": statistics.median(cpu),
            "phase_ms": phases, "flops_per_step": rs[0]["flops_per_step"],
            "tokens_per_step": rs[0]["tokens_per_step"], "runs": len(rs)}


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
            "raw": {"ours": e["ours"], "torch": e["torch"]},
        }
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


def render(rows, cpu, nproc, elapsed, quick, coretype):
    lines = [f"# Core benchmark: optimus-cc vs PyTorch {rows[0]['torch_version'] if rows else ''} eager (CPU, fp32)\n",
             f"Machine: {cpu}, {nproc} vCPUs; OpenBLAS core `{rows[0]['blas_core'] if rows else '?'}`"
             f" (OPENBLAS_CORETYPE={coretype or 'unset'}); {'quick' if quick else 'full'} run, {elapsed} s. A step = "
             "forward + backward + global grad-norm clip + AdamW, dropout 0, random tokens.\n"]
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


def write(raw, out, elapsed, quick, coretype=None):
    rows = summarize(raw)
    cpu, nproc = cpu_name(), os.cpu_count()
    text = render(rows, cpu, nproc, elapsed, quick, coretype)
    with open(out + ".md", "w") as fh:
        fh.write(text)
    with open(out + ".json", "w") as fh:
        json.dump({"cpu": cpu, "vcpus": nproc, "quick": quick, "elapsed_s": elapsed,
                   "openblas_coretype_env": coretype, "results": rows}, fh, indent=2)
        fh.write("\n")
    return text

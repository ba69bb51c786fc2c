"""`python3 -m occtools gpu-verdict KIND ARGS`: one of gpu-check's verdicts on files (a call's
runs, from its logs archive, or inputs made by hand). Prints the details, then
`SUMMARY <one line>` and `NUMBERS <json>`; exits 0 pass, 1 fail, 2 unreadable input,
3 nothing to compare. gpu-check itself runs the torch-based kinds (hf, hf-llama,
tensorboard) this way, in the machine's PyTorch python; `probe` prints that python's
versions and GPU as JSON.
"""

import argparse
import json
import sys

from occtools.gpu_check import bench_verdicts, verdicts
from occtools.gpu_check.verdicts import UNREADABLE


def statuses_of(report_json):
    """{name: (status, summary)} from a gpu-check.json report."""
    with open(report_json) as f:
        return {c["name"]: (c["status"], c.get("summary", "")) for c in json.load(f).get("checks", [])}


def probe():
    """The python's versions, and its view of the GPU (gpu-check's torch line and the micro-batch fit)."""
    import sys as _sys
    info = {"python": _sys.version.split()[0], "executable": _sys.executable}
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except Exception as e:  # noqa: BLE001 - a probe reports, never fails
        info["numpy_error"] = str(e)
    try:
        import torch
        info.update(torch=torch.__version__, torch_cuda=getattr(torch.version, "cuda", None),
                    cuda_available=bool(torch.cuda.is_available()),
                    sdpa=hasattr(torch.nn.functional, "scaled_dot_product_attention"), compile=hasattr(torch, "compile"))
        if info["cuda_available"]:
            p = torch.cuda.get_device_properties(0)
            info.update(gpu=p.name, gpu_mib=int(p.total_memory // 2**20), gpu_sm=f"{p.major}.{p.minor}",
                        gpu_multiprocessors=p.multi_processor_count)
    except Exception as e:  # noqa: BLE001
        info["torch_error"] = str(e)
    for mod in ("transformers", "safetensors", "tensorboard"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            info[mod + "_error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    return info


def add_parser(sub):
    p = sub.add_parser("gpu-verdict", help="one of gpu-check's verdicts on files (SUMMARY / NUMBERS lines)",
                       description=__doc__)
    kinds = p.add_subparsers(dest="kind", required=True)
    kinds.add_parser("probe", help="this python's torch, numpy, transformers and GPU, as JSON")
    k = kinds.add_parser("gtest", help="occ_cuda_tests' --gtest_output JSON: none failed, none skipped")
    k.add_argument("result")
    for name, extra in (("losses", True), ("val", False)):
        k = kinds.add_parser(name, help="run B's training losses (val: validation losses) against run A's")
        k.add_argument("a")
        k.add_argument("b")
        k.add_argument("--rel", type=float, required=True)
        if extra:
            k.add_argument("--after", type=int, default=0)
            k.add_argument("--expect", type=int, default=None)
        else:
            k.add_argument("--expect-iters", type=int, default=None)
    k = kinds.add_parser("bytes", help="bytes per traffic class of every iteration equal in A and B")
    k.add_argument("a")
    k.add_argument("b")
    k = kinds.add_parser("weights", help="final weights B vs A per tensor, bounded by A vs C (another layout)")
    k.add_argument("a")
    k.add_argument("b")
    k.add_argument("--spread", required=True)
    k.add_argument("--factor", type=float, default=4.0)
    k.add_argument("--floor", type=float, default=1e-5)
    k = kinds.add_parser("precision", help="fp32 run A vs --bf16/--fp16 run B")
    k.add_argument("a")
    k.add_argument("b")
    k.add_argument("--rel", type=float, required=True)
    k.add_argument("--kind", choices=["bf16", "fp16"], required=True)
    k.add_argument("--expect-iters", type=int, default=None)
    k = kinds.add_parser("recompute", help="none / selective / full: bit-identical, peak falling")
    k.add_argument("none")
    k.add_argument("selective")
    k.add_argument("full")
    k.add_argument("--peak-key", default="peak_gpu_mib")
    k.add_argument("--expect", type=int, default=None)
    k = kinds.add_parser("bench", help="a bench JSON: timing, FLOP count, device and precision")
    k.add_argument("result")
    k.add_argument("--expect-device", default=None)
    k.add_argument("--expect-precision", default=None)
    k = kinds.add_parser("op-profile", help="bench --op-profile's JSON: the share of each op family and op")
    k.add_argument("result")
    k = kinds.add_parser("fit-micro-batch", help="the largest micro-batch predicted to fit")
    k.add_argument("result")
    k.add_argument("--cap", type=int, default=64)
    k.add_argument("--headroom", type=float, default=0.1)
    k.add_argument("--gpu-mib", type=float, default=None, help="the GPU's memory (the probe's gpu_mib)")
    k.add_argument("--total-mib", type=float, default=None, help="the device's memory, instead of asking")
    k = kinds.add_parser("speed-targets", help="our bench vs torch.compile: tokens/s, MFU, peak memory")
    k.add_argument("--report", required=True, help="a gpu-check.json (which runs passed)")
    k.add_argument("--work", required=True, help="the folder with the runs' NAME.json")
    k.add_argument("--size", required=True)
    k.add_argument("--suffix", default="")
    k.add_argument("--report-only", action="store_true")
    for key, val in bench_verdicts.TARGETS.items():
        k.add_argument("--" + key.replace("_", "-"), type=type(val), default=val)
    k = kinds.add_parser("hf", help="export --hf-gpt2 against GPT2LMHeadModel and our model's definition")
    k.add_argument("--hf-dir", required=True)
    k.add_argument("--ours", required=True)
    k.add_argument("--dump", required=True)
    k.add_argument("--checker", required=True)
    k.add_argument("--rel", type=float, default=1e-4)
    k = kinds.add_parser("hf-llama", help="export --hf-llama against LlamaForCausalLM")
    k.add_argument("--hf-dir", required=True)
    k.add_argument("--dump", required=True)
    k.add_argument("--rel", type=float, default=1e-4)
    k = kinds.add_parser("tensorboard", help="our event files through TensorBoard's EventAccumulator")
    k.add_argument("dir")
    k.add_argument("metrics")
    k.add_argument("--killed", nargs=2, metavar=("DIR", "METRICS"))
    p.set_defaults(func=main)


def judge(a):
    """The Verdict of the parsed arguments."""
    from occtools.gpu_check import interop_verdicts as iv  # torch-based: imported only when asked
    k = a.kind
    if k == "gtest":
        return verdicts.gtest(a.result)
    if k == "losses":
        return verdicts.losses(a.a, a.b, a.rel, a.after, a.expect)
    if k == "val":
        return verdicts.validation(a.a, a.b, a.rel, a.expect_iters)
    if k == "bytes":
        return verdicts.traffic_bytes(a.a, a.b)
    if k == "weights":
        return verdicts.weights(a.a, a.b, a.spread, a.factor, a.floor)
    if k == "precision":
        return verdicts.precision(a.a, a.b, a.rel, a.kind, a.expect_iters)
    if k == "recompute":
        return verdicts.recompute(a.none, a.selective, a.full, a.peak_key, a.expect)
    if k == "bench":
        return bench_verdicts.bench(a.result, a.expect_device, a.expect_precision)
    if k == "op-profile":
        return bench_verdicts.op_profile(a.result)
    if k == "fit-micro-batch":
        return bench_verdicts.fit_micro_batch(a.result, a.cap, a.headroom, a.gpu_mib, a.total_mib)
    if k == "speed-targets":
        targets = {key: getattr(a, key) for key in bench_verdicts.TARGETS}
        return bench_verdicts.speed_targets(statuses_of(a.report), a.work, a.size, a.suffix, a.report_only, targets)
    if k == "hf":
        return iv.hf_gpt2(a.hf_dir, a.ours, a.dump, a.checker, a.rel)
    if k == "hf-llama":
        return iv.hf_llama(a.hf_dir, a.dump, a.rel)
    return iv.tensorboard(a.dir, a.metrics, a.killed)


def main(a):
    if a.kind == "probe":
        print(json.dumps(probe(), sort_keys=True))
        return 0
    try:
        v = judge(a)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {a.kind}: {type(e).__name__}: {e}", file=sys.stderr)
        print(f"SUMMARY {a.kind}: cannot read the inputs: {type(e).__name__}: {e}")
        return UNREADABLE
    print("SUMMARY " + v.summary)
    print("NUMBERS " + json.dumps(v.numbers, sort_keys=True, default=float))
    return v.code


def parse_output(text):
    """(summary, numbers) from a gpu-verdict run's output (the last SUMMARY and NUMBERS lines)."""
    summary, numbers = "", {}
    for line in text.splitlines():
        if line.startswith("SUMMARY "):
            summary = line[8:]
        elif line.startswith("NUMBERS "):
            try:
                numbers = json.loads(line[8:])
            except ValueError:
                numbers = {}
    return summary, numbers


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args()
    sys.exit(args.func(args))

"""The second call's interoperability checks: the Hugging Face GPT-2 and Llama exports,
TensorBoard's own reader on our event files, and the paper-regime quality experiment
(`occtools regime run`) with the rest of the budget. (docs/gpu.md, section 3.)
"""

import os
import shutil
import signal
import subprocess
import time

from occtools.common.files import timer_peak, read_jsonl
from occtools.gpu_check.steps import Step, register


def hf_export(ctx, step):
    """Train 2 layers 10 iterations on the GPU side, export --hf-gpt2; GPT2LMHeadModel of the export
    against our model's definition and the engine's logits of the checkpoint: within 1e-4 x max."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg, rd = ctx.devflags("train", ctx.gdev), ctx.devflags("reference-dump", ctx.gdev)
    if dg is None or rd is None or not ctx.has_flag("reference-dump", "--load"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train / reference-dump has no --device, or no --load")
    ck = ctx.w("e_ckpt")
    f = ctx.eng(log, step.caps[0], "train", *dg, *ctx.small(), "--num-layers", 2, "--train-iters", 10, "--eval-interval",
                10, "--eval-iters", 1, "--save", ck, "--save-interval", 10, "--metrics", ctx.w("e_train.jsonl"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"training: {ctx.tail(log)}", log=log)
    f = ctx.eng(log, step.caps[1], "export", "--load", ck, "--out", ctx.w("e.safetensors"), "--hf-gpt2", ctx.w("e_hf"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"export --hf-gpt2: {ctx.tail(log)}", log=log)
    # The checkpoint's model (sequence length 64 included) replaces the model flags; dropout off.
    f = ctx.eng(log, step.caps[2], "reference-dump", *rd, "--load", ck, "--micro-batch-size", 3, "--steps", 1, "--out",
                ctx.w("e_dump.safetensors"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"reference-dump --load: {ctx.tail(log)}", log=log)
    v = ctx.torch_verdict(ctx.log(step.name + ".verdict"), step.caps[3], "hf", "--hf-dir", ctx.w("e_hf"), "--ours",
                          ctx.w("e.safetensors"), "--dump", ctx.w("e_dump.safetensors"), "--checker",
                          os.path.join(ctx.bundle, "tests", "reference", "check_against_torch.py"), "--rel", "1e-4")
    peak = timer_peak(read_jsonl(ctx.w("e_train.jsonl")), "peak_gpu_mib")
    mem = f"; training peak {peak:.1f} MiB on the GPU" if peak else ""
    ctx.record(step.name, v.status, t0, v.summary + (mem if v.ok else ""), v.numbers,
               None if v.ok else ctx.log(step.name + ".verdict"))


def hf_llama(ctx, step):
    """A Llama-style model (RMSNorm, SwiGLU, RoPE, 2 query groups, untied, no biases) trained on the
    GPU side, export --hf-llama; LlamaForCausalLM of the export vs the engine's logits: 1e-4 x max."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg, rd = ctx.devflags("train", ctx.gdev), ctx.devflags("reference-dump", ctx.gdev)
    if dg is None or rd is None or not ctx.has_flag("train", "--swiglu"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device / --swiglu")
    ck = ctx.w("l_ckpt")
    f = ctx.eng(log, step.caps[0], "train", *dg, *ctx.small(), "--num-layers", 2, "--train-iters", 10, "--eval-interval",
                10, "--eval-iters", 1, "--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope",
                "--group-query-attention", "--num-query-groups", 2, "--untie-embeddings-and-output-weights",
                "--disable-bias-linear", "--save", ck, "--save-interval", 10)
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"training: {ctx.tail(log)}", log=log)
    f = ctx.eng(log, step.caps[1], "export", "--load", ck, "--out", ctx.w("l.safetensors"), "--hf-llama", ctx.w("l_hf"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"export --hf-llama: {ctx.tail(log)}", log=log)
    f = ctx.eng(log, step.caps[2], "reference-dump", *rd, "--load", ck, "--micro-batch-size", 3, "--steps", 1, "--out",
                ctx.w("l_dump.safetensors"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"reference-dump --load: {ctx.tail(log)}", log=log)
    v = ctx.torch_verdict(ctx.log(step.name + ".verdict"), step.caps[3], "hf-llama", "--hf-dir", ctx.w("l_hf"), "--dump",
                          ctx.w("l_dump.safetensors"), "--rel", "1e-4")
    ctx.record_verdict(step.name, t0, v, log=ctx.log(step.name + ".verdict"))


def hf_tokenizer(ctx, step):
    """transformers' AutoTokenizer loads hf_llama's export (tokenizer.model + tokenizer_config.json of
    a SentencePiece run) and encodes a text sample to our ids; generation_config.json's bos/eos equal
    config.json's (occtools/gpu_check/hf_tokenizer.py; issue 41)."""
    t0, log = time.monotonic(), ctx.log(step.name)
    hf_dir = ctx.w("l_hf")
    if not os.path.exists(os.path.join(hf_dir, "config.json")):
        return ctx.record(step.name, "SKIP", t0, "no export --hf-llama folder (hf_llama did not run or failed)")
    if not os.path.exists(os.path.join(hf_dir, "tokenizer.model")):
        return ctx.record(step.name, "FAIL", t0, "export --hf-llama of a SentencePiece run wrote no tokenizer.model")
    bin_cmd = f"{os.path.join(ctx.bundle, 'run.sh')} optimus-cc"
    os.makedirs(ctx.w("tokcheck"), exist_ok=True)
    f = ctx.occtools(log, step.caps[0], "hf-tokenizer-check", "--bin", bin_cmd,
               "--hf-dir", hf_dir, "--work", ctx.w("tokcheck"))
    with open(log, errors="replace") as fh:
        lines = [l.strip() for l in fh if l.startswith(("ok ", "FAIL", "SKIP"))]
    summary = "; ".join(lines) or f"hf-tokenizer-check: {f.why()}: {ctx.tail(log)}"
    status = {0: "PASS", 3: "SKIP"}.get(None if f.timed_out else f.rc, "FAIL")
    ctx.record(step.name, status, t0, summary, log=None if status != "FAIL" else log)


def tensorboard(ctx, step):
    """A run with --tensorboard-dir (timers, perplexities) and one killed with SIGKILL once 6
    iterations are in its metrics: TensorBoard's EventAccumulator loads both, every scalar equal to
    the metrics JSONL as float32, the killed one up to its last flush."""
    t0, log = time.monotonic(), ctx.log(step.name)
    dg = ctx.devflags("train", ctx.gdev)
    if dg is None or not ctx.has_flag("train", "--tensorboard-dir"):
        return ctx.record(step.name, "SKIP", t0, "optimus-cc train has no --device / --tensorboard-dir")
    tb = ["--log-interval", 1, "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard"]
    f = ctx.eng(log, step.caps[0], "train", *dg, *ctx.small(), "--train-iters", 12, "--eval-interval", 4, *tb,
                "--tensorboard-dir", ctx.w("tb"), "--metrics", ctx.w("tb.jsonl"))
    if not f.ok:
        return ctx.record(step.name, "FAIL", t0, f"train --tensorboard-dir: {f.why()}: {ctx.tail(log)}", log=log)
    # The killed run: many iterations, SIGKILL (its whole process group) once 6 are in its metrics.
    limit = ctx.budget.timeout(step.caps[1], "the killed run")
    metrics = ctx.w("tbk.jsonl")
    with open(log, "a") as out:
        out.write(f"+ optimus-cc train ... --tensorboard-dir {ctx.w('tbk')} (killed with SIGKILL)\n")
        out.flush()
        p = subprocess.Popen([os.path.join(ctx.bundle, "run.sh"), "optimus-cc", "train", *map(str, dg), *map(str, ctx.small()),
                              "--train-iters", "100000", "--eval-interval", "100000", *map(str, tb), "--tensorboard-dir",
                              ctx.w("tbk"), "--metrics", metrics], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=dict(ctx.env), start_new_session=True)
        end = time.monotonic() + limit
        while time.monotonic() < end and p.poll() is None:
            if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 6:
                break
            time.sleep(0.1)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    v = ctx.torch_verdict(ctx.log(step.name + ".verdict"), step.caps[2], "tensorboard", ctx.w("tb"), ctx.w("tb.jsonl"),
                          "--killed", ctx.w("tbk"), metrics)
    ctx.record_verdict(step.name, t0, v, log=ctx.log(step.name + ".verdict"))


def quality_regime(ctx, step):
    """`occtools regime run` on the bundle's GCIDE corpus, continuing the bundle's copy of the
    ledger docs/results/regime.json, with the rest of the budget: the runs it lacks, most needed
    first, each only if it is predicted to fit. PASS: no run failed. OUT gets regime.json and
    quality-regime.md. The CPU stand-in runs 3 runs of its --smoke plumbing on a fresh ledger."""
    t0, log, qr = time.monotonic(), ctx.log(step.name), ctx.w("quality-regime")
    if ctx.gdev == "cpu":
        mode = ["--smoke", "--max-runs", 3]
    elif not os.path.exists(os.path.join(ctx.bundle, "data", "gcide.jsonl.zst")):
        return ctx.record(step.name, "SKIP", t0, "no data/gcide.jsonl.zst: bundle with `python3 -m occtools gpu-bundle --gcide`")
    else:
        ledger = os.path.join(ctx.bundle, "docs", "results", "regime.json")
        if not os.path.exists(ledger):
            return ctx.record(step.name, "FAIL", t0, "the bundle lacks docs/results/regime.json (the ledger to continue): "
                                                     "rebuild it with `python3 -m occtools gpu-bundle`")
        mode = ["--ledger", ledger]
    # The experiment starts no run it predicts past its budget and stops a run at its end (on
    # SIGTERM it keeps the running job as unfinished and writes the ledger); the timeout is for a hang.
    limit = ctx.budget.timeout(10**6, "the regime experiment")
    f = ctx.occtools(log, limit, "regime", "run", "--device", ctx.gdev, *mode,
               "--budget-s", int(max(1, limit - 25)), "--out", qr)
    for name in ("regime.json", "quality-regime.md"):
        if os.path.exists(os.path.join(qr, name)):
            shutil.copy(os.path.join(qr, name), os.path.join(ctx.out, name))
    with open(log, errors="replace") as fh:
        lines = [l.strip() for l in fh if l.startswith("regime: ")]
    calls = [l[len("regime: "):] for l in lines if "run(s) this call" in l]
    notes = [l[len("regime: "):] for l in lines if "run(s) this call" not in l and any(
        k in l for k in ("no run can finish", "not started", "stopped", "failed"))]
    summary = "; ".join([calls[-1] if calls else "no run this call"] + ([";".join(notes)[:600]] if notes else []))
    if f.ok and os.path.exists(os.path.join(qr, "regime.json")):
        return ctx.record(step.name, "PASS", t0, summary + "; OUT/regime.json, OUT/quality-regime.md")
    ctx.record(step.name, "FAIL", t0, f"occtools regime run: {f.why()}: {summary} {ctx.tail(log)}", log=log)


register(Step("hf_export", hf_export, "export --hf-gpt2 through GPT2LMHeadModel vs our definition and the engine's "
              "logits: within 1e-4 x max", priority=2, predicted_s=15, caps=(120, 60, 60, 180), needs=("gpu", "torch")))
register(Step("hf_llama", hf_llama, "export --hf-llama through LlamaForCausalLM vs the engine's logits: within 1e-4 x max",
              priority=2, predicted_s=15, caps=(120, 60, 60, 180), needs=("gpu", "torch")))
register(Step("hf_tokenizer", hf_tokenizer, "transformers' AutoTokenizer on the --hf-llama export's tokenizer: our ids "
              "on a text sample; generation_config.json's bos/eos", priority=2, predicted_s=10, caps=(120,),
              needs=("gpu", "torch")))
register(Step("tensorboard", tensorboard, "our event files through TensorBoard's EventAccumulator, a SIGKILLed run's "
              "too", priority=2, predicted_s=12, caps=(120, 60, 120), needs=("gpu", "tensorboard")))
register(Step("quality_regime", quality_regime, "the paper-regime experiment (occtools regime run), the rest of the "
              "budget: no run failed", priority=4, predicted_s=200, caps=(420,), needs=("gpu", "numpy"), opt_in=True,
              quick_s=60))

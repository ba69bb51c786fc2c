#!/usr/bin/python3
"""Time full training steps of the optimus-cc GPT in PyTorch (eager CPU float32 by default).

Usage:
    /usr/bin/python3 bench/torch_step.py [--preset a|b|custom] [--threads N]
        [--num-layers L --num-attention-heads H --hidden-size C --seq-length T
         --vocab-size V --micro-batch-size B] [--steps N] [--warmup N] [--repeats R]
        [--device cpu|cuda] [--dtype fp32|bf16] [--sdpa] [--compile] [--json FILE]

The model is the one optimus-cc trains: pre-LN GPT, learned position embedding,
LM head tied to the word embedding (vocabulary padded to a multiple of 128), tanh
GeLU, one fused QKV linear (features ordered [head][q|k|v][D]), causal softmax
attention written as plain eager ops (matmul + mask + softmax + matmul: torch 1.13 has
no scaled_dot_product_attention), mean token cross-entropy, dropout 0. A step is
forward + backward + clip_grad_norm_(1.0) + AdamW (weight decay on 2-D tensors only),
like `optimus-cc bench`. Reports best and median ms/step over the repeats (each repeat
is the mean of --steps steps), the per-phase split, tokens/s and GFLOP/s with the same
FLOP count as `optimus-cc bench`.

Run it with Debian's /usr/bin/python3 (python3-torch 1.13). The thread count is set
before torch is imported (OMP_NUM_THREADS, and OPENBLAS_NUM_THREADS for the OpenBLAS
that Debian's torch calls for matmuls, which torch.set_num_threads does not reach),
and again with torch.set_num_threads.

On a GPU (occtools gpu-check runs it there, with torch 2.x): --device cuda; --dtype bf16
is mixed precision as PyTorch users train (torch.autocast to bfloat16, fp32 weights and
AdamW); --sdpa computes attention with F.scaled_dot_product_attention(is_causal=True)
(torch >= 2.0: flash attention on the GPU); --compile wraps the model in torch.compile
(the compilation happens in the warm-up steps, whose time is reported as compile_s). On
CUDA every phase boundary synchronises the device, and the report adds the peak memory
(torch.cuda.max_memory_allocated; the JSON also has max_memory_reserved and the device's total
memory, for sizing a larger micro-batch) and the MFU: the FLOP rate over --peak-tflops (989:
the H100/H200 dense bf16 peak). On the CPU the JSON has the process's peak resident set
instead. With the defaults (cpu, fp32, no --sdpa, no --compile) the script runs exactly the
CPU steps it always did.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

PRESETS = {
    "a": dict(num_layers=4, num_attention_heads=4, hidden_size=128, vocab_size=50304,
              micro_batch_size=4, seq_length=64),
    "b": dict(num_layers=4, num_attention_heads=12, hidden_size=768, vocab_size=1024,
              micro_batch_size=4, seq_length=256),
}
DEFAULTS = dict(num_layers=4, num_attention_heads=4, hidden_size=128, vocab_size=50304,
                micro_batch_size=4, seq_length=128)
FORMULA = ("FLOP/step = 6*(12*L*C^2)*B*T [layer matmul weights] + 6*V*C*B*T [tied LM head, "
           "padded V] + 12*L*B*T^2*C [attention QK^T and PV, full T x T]")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["a", "b", "custom"], default="custom")
    for k in DEFAULTS:
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None)
    ap.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per repeat")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip-grad", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--foreach", action="store_true",
                    help="AdamW(foreach=True) (default: torch's default, the per-tensor loop in 1.13)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast(bfloat16) mixed precision, fp32 weights")
    ap.add_argument("--sdpa", action="store_true",
                    help="attention by F.scaled_dot_product_attention (torch >= 2.0)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2.0)")
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="MFU denominator on CUDA (H100/H200 dense bf16)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    base = dict(DEFAULTS)
    if a.preset != "custom":
        base.update(PRESETS[a.preset])
    for k in DEFAULTS:  # explicit flags override the preset
        if getattr(a, k) is None:
            setattr(a, k, base[k])
    if a.steps < 1 or a.repeats < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--steps, --repeats and --threads must be >= 1, --warmup >= 0")
    if a.hidden_size % a.num_attention_heads:
        ap.error("--hidden-size must be a multiple of --num-attention-heads")
    return a


def main(argv):
    args = parse_args(argv)
    # Before torch loads OpenBLAS / its OpenMP runtime.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["MKL_NUM_THREADS"] = str(args.threads)
    import contextlib

    import torch
    import torch.nn.functional as F

    if args.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        print(f"torch_step: --sdpa needs torch >= 2.0 (this is {torch.__version__})", file=sys.stderr)
        return 2
    if args.compile and not hasattr(torch, "compile"):
        print(f"torch_step: --compile needs torch >= 2.0 (this is {torch.__version__})", file=sys.stderr)
        return 2
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_step: --device cuda but torch sees no GPU", file=sys.stderr)
        return 2
    device = torch.device(args.device)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if args.dtype == "bf16":
        autocast = lambda: torch.autocast(device_type=args.device, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.set_default_dtype(torch.float32)

    L, H, C = args.num_layers, args.num_attention_heads, args.hidden_size
    T, B = args.seq_length, args.micro_batch_size
    div = args.make_vocab_size_divisible_by
    V = (args.vocab_size + div - 1) // div * div
    D = C // H
    std = 0.02
    out_std = std / math.sqrt(2.0 * L)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(C, eps=1e-5)
            self.qkv = torch.nn.Linear(C, 3 * C)
            self.proj = torch.nn.Linear(C, C)
            self.ln2 = torch.nn.LayerNorm(C, eps=1e-5)
            self.fc = torch.nn.Linear(C, 4 * C)
            self.fcproj = torch.nn.Linear(4 * C, C)
            for lin, s in ((self.qkv, std), (self.proj, out_std), (self.fc, std), (self.fcproj, out_std)):
                torch.nn.init.normal_(lin.weight, 0.0, s)
                torch.nn.init.zeros_(lin.bias)

        def forward(self, x, causal):
            h = self.ln1(x)
            qkv = self.qkv(h).view(B, T, H, 3, D)
            q = qkv[:, :, :, 0, :].permute(0, 2, 1, 3)  # [B, H, T, D]
            k = qkv[:, :, :, 1, :].permute(0, 2, 1, 3)
            v = qkv[:, :, :, 2, :].permute(0, 2, 1, 3)
            if args.sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
                scores = scores.masked_fill(causal, float("-inf"))
                probs = torch.softmax(scores, dim=-1)
                y = probs @ v
            y = y.permute(0, 2, 1, 3).reshape(B, T, C)
            x = x + self.proj(y)
            h = self.ln2(x)
            x = x + self.fcproj(F.gelu(self.fc(h), approximate="tanh"))
            return x

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Parameter(torch.empty(V, C).normal_(0.0, std))
            self.wpe = torch.nn.Parameter(torch.empty(T, C).normal_(0.0, std))
            self.blocks = torch.nn.ModuleList(Block() for _ in range(L))
            self.lnf = torch.nn.LayerNorm(C, eps=1e-5)
            self.register_buffer("causal", torch.ones(T, T, dtype=torch.bool).triu(1))

        def forward(self, idx, labels):
            x = F.embedding(idx, self.wte) + self.wpe.unsqueeze(0)
            for blk in self.blocks:
                x = blk(x, self.causal)
            x = self.lnf(x)
            logits = F.linear(x, self.wte)  # tied head over the padded vocabulary
            return F.cross_entropy(logits.view(-1, V), labels.view(-1))

    model = GPT().to(device)
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt_kw = dict(lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    if args.foreach:
        opt_kw["foreach"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], **opt_kw)

    gen = torch.Generator().manual_seed(args.seed)
    batches = [(torch.randint(0, args.vocab_size, (B, T), generator=gen),
                torch.randint(0, args.vocab_size, (B, T), generator=gen)) for _ in range(4)]
    if cuda:
        batches = [(i.to(device), l.to(device)) for i, l in batches]
    step_model = torch.compile(model) if args.compile else model
    tokens = B * T
    phase = {"forward": 0.0, "backward": 0.0, "clip_adamw": 0.0}
    losses = []
    step_no = [0]

    def train_step():
        idx, lab = batches[step_no[0] % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = step_model(idx, lab)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, args.clip_grad)
        opt.step()
        sync()
        t3 = time.perf_counter()
        phase["forward"] += t1 - t0
        phase["backward"] += t2 - t1
        phase["clip_adamw"] += t3 - t2
        losses.append(loss.item())
        step_no[0] += 1

    gpu_name = torch.cuda.get_device_name(device) if cuda else None
    where = (f"{gpu_name}, {args.dtype}" + (", sdpa" if args.sdpa else "") +
             (", compiled" if args.compile else "")) if (cuda or args.dtype != "fp32" or args.sdpa
                                                        or args.compile) else None
    print(f"torch_step: preset {args.preset}: {L} layers, {H} heads, hidden {C}, seq {T}, "
          f"micro-batch {B}, vocab {args.vocab_size} (padded {V}), {nparams} parameters; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.warmup} warm-up "
          f"steps, {args.repeats} repeats of {args.steps} steps"
          + (f"; {where}" if where else ""), flush=True)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    t_warm = time.perf_counter()
    for _ in range(args.warmup):
        train_step()
    warmup_s = time.perf_counter() - t_warm
    for k in phase:
        phase[k] = 0.0
    rep_ms, rep_cpu_ms = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            train_step()
        rep_ms.append((time.perf_counter() - t0) * 1e3 / args.steps)
        rep_cpu_ms.append((time.process_time() - c0) * 1e3 / args.steps)
    n = args.steps * args.repeats
    best, med = min(rep_ms), statistics.median(rep_ms)
    if not math.isfinite(losses[-1]):
        print(f"torch_step: loss became {losses[-1]}", file=sys.stderr)
        return 1

    fl_layers = 6.0 * 12 * L * C * C * tokens
    fl_head = 6.0 * V * C * tokens
    fl_attn = 12.0 * L * T * T * C * B
    flops = fl_layers + fl_head + fl_attn
    print(FORMULA)
    print(f"  = {flops * 1e-9:.3f} GFLOP/step (layers {fl_layers * 1e-9:.3f}, LM head "
          f"{fl_head * 1e-9:.3f}, attention {fl_attn * 1e-9:.3f})")
    print(f"step: best {best:.3f} ms, median {med:.3f} ms over {args.repeats} repeats "
          f"({', '.join(f'{x:.2f}' for x in rep_ms)})")
    print(f"      process CPU time per step: best {min(rep_cpu_ms):.3f} ms, median "
          f"{statistics.median(rep_cpu_ms):.3f} ms (all threads together)")
    print(f"      phases (mean per step): forward {phase['forward'] * 1e3 / n:.3f} ms, backward "
          f"{phase['backward'] * 1e3 / n:.3f} ms, clip + AdamW {phase['clip_adamw'] * 1e3 / n:.3f} ms")
    print(f"tokens/s: {tokens / (best * 1e-3):.0f} (best), {tokens / (med * 1e-3):.0f} (median)")
    print(f"achieved: {flops / (best * 1e-3) * 1e-9:.2f} GFLOP/s (best), "
          f"{flops / (med * 1e-3) * 1e-9:.2f} (median)")
    print(f"loss: first {losses[0]:.4f}, last {losses[-1]:.4f}")
    peak_mib = mfu = None
    if cuda:
        peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
        # What the caching allocator held at its peak (allocated plus its slack), and the
        # device's memory: what a larger micro-batch has to fit in (occtools gpu-check).
        reserved_mib = torch.cuda.max_memory_reserved(device) / 2**20
        total_mib = torch.cuda.get_device_properties(device).total_memory / 2**20
        mfu = flops / (best * 1e-3) / (args.peak_tflops * 1e12)
        print(f"GPU: {gpu_name}: {flops / (best * 1e-3) * 1e-12:.1f} TFLOP/s, MFU {mfu:.1%} of "
              f"{args.peak_tflops:g} TFLOP/s; peak memory {peak_mib:.0f} MiB ({reserved_mib:.0f} MiB reserved "
              f"of {total_mib:.0f}); warm-up {warmup_s:.1f} s" + (" (includes compilation)" if args.compile else ""))
    else:
        import resource  # the CPU has no allocator counter: the process's peak resident set
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if args.json:
        out = {
            "engine": "torch", "torch_version": torch.__version__, "preset": args.preset,
            "model": dict(num_layers=L, num_attention_heads=H, hidden_size=C, seq_length=T,
                          vocab_size=args.vocab_size, padded_vocab_size=V, micro_batch_size=B,
                          parameters=nparams),
            "threads": torch.get_num_threads(), "warmup": args.warmup, "steps": args.steps,
            "repeats": args.repeats, "repeat_ms": rep_ms, "best_ms": best, "median_ms": med, "repeat_cpu_ms": rep_cpu_ms,
            "phase_ms": {k: v * 1e3 / n for k, v in phase.items()},
            "tokens_per_step": tokens, "tokens_per_s_best": tokens / (best * 1e-3),
            "tokens_per_s_median": tokens / (med * 1e-3), "flop_formula": FORMULA,
            "flops_per_step": flops,
            "flops_breakdown": {"layers": fl_layers, "lm_head": fl_head, "attention": fl_attn},
            "gflops_best": flops / (best * 1e-3) * 1e-9, "gflops_median": flops / (med * 1e-3) * 1e-9,
            "loss_first": losses[0], "loss_last": losses[-1],
            "precision": args.dtype,  # the key `optimus-cc bench --json` uses
        }
        if where:
            out.update(device=args.device, dtype=args.dtype, sdpa=args.sdpa, compile=args.compile,
                       warmup_s=warmup_s, compile_s=warmup_s if args.compile else None)
        if cuda:
            # peak_device_mib: the name of `optimus-cc bench --json`'s peak
            out.update(gpu=gpu_name, peak_gpu_mib=peak_mib, peak_device_mib=peak_mib, mfu=mfu,
                       peak_tflops=args.peak_tflops, peak_reserved_mib=reserved_mib, device_total_mib=total_mib)
        else:
            out.update(peak_host_rss_mib=rss_mib)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

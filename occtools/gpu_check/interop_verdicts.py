"""The interoperability verdicts: the Hugging Face GPT-2 and Llama exports against
transformers (or, where transformers is missing, a plain-PyTorch GPT-2), and our
TensorBoard event files against TensorBoard's own reader. They need torch, numpy and
(where present) transformers / tensorboard, so gpu-check runs them in a subprocess of
the machine's PyTorch python (`python3 -m occtools gpu-verdict hf|hf-llama|tensorboard`).
"""

import importlib.util
import json
import math
import os
import struct

from occtools.common.files import read_jsonl, read_safetensors
from occtools.gpu_check.verdicts import NOTHING, Verdict, verdict


def load_checker(path):
    """tests/reference/check_against_torch.py as a module (its float64 forward is our model's definition)."""
    spec = importlib.util.spec_from_file_location("check_against_torch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def to_hf(ours, L, C, H):
    """Our single-process tensors -> Hugging Face GPT-2 names and layouts (as export.cpp)."""
    import numpy as np
    D = C // H
    o = np.arange(3 * C)
    j, h, d = o // C, (o % C) // D, o % D
    rows = h * 3 * D + j * D + d  # c_attn column o takes our fused-QKV row rows[o]
    hf = {"wte.weight": ours["embedding.word_embeddings.weight"],
          "wpe.weight": ours["embedding.position_embeddings.weight"],
          "ln_f.weight": ours["final_layernorm.weight"], "ln_f.bias": ours["final_layernorm.bias"]}
    for l in range(L):
        p, q = f"layers.{l}.", f"h.{l}."
        hf[q + "ln_1.weight"] = ours[p + "input_layernorm.weight"]
        hf[q + "ln_1.bias"] = ours[p + "input_layernorm.bias"]
        hf[q + "attn.c_attn.weight"] = np.ascontiguousarray(ours[p + "attention.query_key_value.weight"][rows].T)
        hf[q + "attn.c_attn.bias"] = ours[p + "attention.query_key_value.bias"][rows]
        hf[q + "attn.c_proj.weight"] = np.ascontiguousarray(ours[p + "attention.dense.weight"].T)
        hf[q + "attn.c_proj.bias"] = ours[p + "attention.dense.bias"]
        hf[q + "ln_2.weight"] = ours[p + "post_attention_layernorm.weight"]
        hf[q + "ln_2.bias"] = ours[p + "post_attention_layernorm.bias"]
        hf[q + "mlp.c_fc.weight"] = np.ascontiguousarray(ours[p + "mlp.dense_h_to_4h.weight"].T)
        hf[q + "mlp.c_fc.bias"] = ours[p + "mlp.dense_h_to_4h.bias"]
        hf[q + "mlp.c_proj.weight"] = np.ascontiguousarray(ours[p + "mlp.dense_4h_to_h.weight"].T)
        hf[q + "mlp.c_proj.bias"] = ours[p + "mlp.dense_4h_to_h.bias"]
    return hf


def gpt2_plain(sd, ids, n_head, eps):
    """GPT-2 as Hugging Face defines it (Conv1D y = x W + b, c_attn columns [q|k|v], gelu_new, tied
    head), in float64 plain PyTorch: stands in for transformers when that package is missing."""
    import torch
    t = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in sd.items()}
    B, T = ids.shape
    C = t["wte.weight"].shape[1]
    D = C // n_head
    L = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("h."))

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (C,), t[p + ".weight"], t[p + ".bias"], eps)

    x = t["wte.weight"][ids] + t["wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for l in range(L):
        p = f"h.{l}."
        qkv = ln(x, p + "ln_1") @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        q, k, v = (z.view(B, T, n_head, D).transpose(1, 2) for z in qkv.split(C, dim=-1))
        att = torch.softmax(((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(mask, float("-inf")), dim=-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        a = ln(x, p + "ln_2") @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"]
        a = 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a ** 3)))
        x = x + a @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ t["wte.weight"].t()


def _from_pretrained(cls, hf_dir):
    import torch
    kw = dict(attn_implementation="eager")
    try:
        m = cls.from_pretrained(hf_dir, dtype=torch.float32, **kw)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        m = cls.from_pretrained(hf_dir, torch_dtype=torch.float32, **kw)
    return m.float().eval()


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(ids, dtype=torch.long)).logits.double().numpy()


def ratio(x, ref):
    """(max|x - ref| / max|ref|, max|x - ref|, max|ref|)."""
    import numpy as np
    d = float(np.max(np.abs(x.astype(np.float64) - ref)))
    s = float(np.max(np.abs(ref)))
    return d / s if s > 0 else (0.0 if d == 0 else math.inf), d, s


def hf_gpt2(hf_dir, ours_path, dump_path, checker_path, tol=1e-4):
    """export --hf-gpt2: (1) the HF tensors are the reference mapping of export --out; (2) the
    exported folder through GPT2LMHeadModel equals our model's float64 definition on random ids;
    (3) the engine's logits of the checkpoint (reference-dump --load) equal GPT2LMHeadModel's on
    step 0's batch, the tokenizer's vocab_size columns, fp32. Each within tol x max."""
    import numpy as np
    import torch
    checker = load_checker(checker_path)
    problems, nums, notes = [], {"tolerance_ratio": tol}, []
    try:
        import transformers
        have_tf = True
        nums["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001 - any import failure means: use the plain model
        have_tf = False
        notes.append(f"transformers not importable ({str(e).splitlines()[0] if str(e) else e}): "
                     "GPT-2 evaluated by a plain-PyTorch reimplementation of its definition")
    nums["used_transformers"] = have_tf
    with open(os.path.join(hf_dir, "config.json")) as f:
        hcfg = json.load(f)
    ours, _ = read_safetensors(ours_path)
    exported, _ = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    L, C, H = hcfg["n_layer"], hcfg["n_embd"], hcfg["n_head"]
    mapped = to_hf(ours, L, C, H)
    common = set(mapped) & set(exported)
    if set(mapped) != set(exported):
        problems.append(f"HF tensor names: missing {sorted(set(mapped) - set(exported))[:3]}, "
                        f"extra {sorted(set(exported) - set(mapped))[:3]}")
    shape_bad = [k for k in common if mapped[k].shape != exported[k].shape]
    if shape_bad:
        problems.append(f"HF tensor shapes differ: {shape_bad[:3]}")
    mapdiff = max((float(np.max(np.abs(mapped[k] - exported[k]))) for k in common if k not in shape_bad),
                  default=math.inf)
    nums["export_vs_mapping_max_abs_diff"] = mapdiff
    if mapdiff != 0.0:
        problems.append(f"export's HF tensors differ from the reference mapping by {mapdiff:.3e}")

    vocab = int(hcfg.get("optimus_cc", {}).get("tokenizer_vocab_size", hcfg["vocab_size"]))
    T = min(int(hcfg["n_positions"]), 64)
    ids = np.random.default_rng(1234).integers(0, vocab, size=(4, T + 1)).astype(np.int64)
    cfg = {"num_layers": L, "hidden_size": C, "num_attention_heads": H,
           "layernorm_epsilon": float(hcfg["layer_norm_epsilon"])}
    torch.set_default_dtype(torch.float64)
    p = {k: torch.as_tensor(v.astype(np.float64)) for k, v in ours.items()}
    with torch.no_grad():
        ref, _ = checker.forward(p, torch.as_tensor(ids), cfg)
    ref = ref.numpy()
    torch.set_default_dtype(torch.float32)
    pretrained = _from_pretrained(transformers.GPT2LMHeadModel, hf_dir) if have_tf else None

    def gpt2(x):
        return hf_logits(pretrained, x) if have_tf else gpt2_plain(exported, torch.as_tensor(x), H,
                                                                   cfg["layernorm_epsilon"]).numpy()

    got = gpt2(ids[:, :-1])
    r, d, s = ratio(got, ref)
    nums["trained"] = {"ratio": r, "max_abs_diff": d, "max_abs": s, "shape": list(got.shape)}
    if not r <= tol:
        problems.append(f"trained checkpoint: GPT-2 logits vs our model's differ by {r:.2e} x max")

    dump, meta = read_safetensors(dump_path)
    names = [k for k in dump if not k.startswith(("grad.", "batch.")) and k not in ("logits", "loss", "losses")]
    if set(names) != set(ours):
        problems.append(f"dump tensors are not the checkpoint's: only in the dump {sorted(set(names) - set(ours))[:3]}, "
                        f"only in the export {sorted(set(ours) - set(names))[:3]}")
    wdiff = max((float(np.max(np.abs(dump[k] - ours[k]))) for k in set(names) & set(ours)
                 if dump[k].shape == ours[k].shape), default=math.inf)
    nums["dump_weights_vs_checkpoint_max_abs_diff"] = wdiff
    if wdiff != 0.0:
        problems.append(f"reference-dump --load's weights differ from the checkpoint's by {wdiff:.3e}")
    dids = dump["batch.0"][:, :int(meta["seq_length"])].astype(np.int64)
    engine = dump["logits"].astype(np.float64)[..., :vocab]
    got = gpt2(dids)[..., :vocab]
    what = "engine logits of the checkpoint vs " + ("GPT2LMHeadModel.from_pretrained" if have_tf else "plain GPT-2")
    if engine.shape != got.shape:
        problems.append(f"logits shapes differ: engine {engine.shape}, GPT-2 {got.shape}")
        r3, d3, s3 = math.inf, math.inf, 0.0
    else:
        r3, d3, s3 = ratio(engine, got.astype(np.float64))
    nums["engine"] = {"ratio": r3, "max_abs_diff": d3, "max_abs": s3, "shape": list(engine.shape),
                      "compared_vocab": int(engine.shape[-1])}
    if not r3 <= tol:
        problems.append(f"{what} differ by {r3:.2e} x max")
    nums["notes"] = notes
    s = (f"export = mapping (max diff {mapdiff:g}); trained: {'GPT2LMHeadModel' if have_tf else 'plain GPT-2'} "
         f"vs our definition (float64) {r:.2e} x max; {what}: {r3:.2e} x max over "
         f"{'x'.join(map(str, engine.shape))} logits (tolerance {tol:g}); dump weights = checkpoint's "
         f"(max diff {wdiff:g})" + ("; " + "; ".join(notes) if notes else ""))
    return verdict(s, nums, True, problems)


def hf_llama(hf_dir, dump_path, tol=1e-4):
    """export --hf-llama: the engine's logits of the trained Llama-style checkpoint (reference-dump
    --load) vs LlamaForCausalLM.from_pretrained(the export) on batch.0, fp32, the tokenizer's
    vocab_size columns: within tol x max. NOTHING where transformers is not installed (CI checks
    the same export with tests/cli/fixture/hf_llama_check.py)."""
    import numpy as np
    try:
        import transformers
    except ImportError:
        return Verdict(NOTHING, "transformers is not installed: LlamaForCausalLM check skipped", {})
    with open(os.path.join(hf_dir, "config.json")) as f:
        hcfg = json.load(f)
    vocab = int(hcfg.get("optimus_cc", {}).get("tokenizer_vocab_size", hcfg["vocab_size"]))
    dump, meta = read_safetensors(dump_path)
    ids = dump["batch.0"][:, :int(meta["seq_length"])].astype(np.int64)
    engine = dump["logits"].astype(np.float64)[..., :vocab]
    got = hf_logits(_from_pretrained(transformers.LlamaForCausalLM, hf_dir), ids)[..., :vocab]
    if got.shape != engine.shape:
        return verdict(f"logits shapes differ: engine {engine.shape}, LlamaForCausalLM {got.shape}", {}, False)
    r, d, s = ratio(got, engine)
    nums = {"ratio": r, "max_abs_diff": d, "max_abs": s, "shape": list(got.shape),
            "transformers": transformers.__version__, "architecture": hcfg.get("optimus_cc", {}).get("architecture")}
    ok = r <= tol
    return verdict(f"engine logits of the Llama-style checkpoint vs LlamaForCausalLM.from_pretrained: max|diff| "
                   f"{d:.2e} = {r:.1e} x max ({'<=' if ok else '>'} {tol:g})", nums, ok)


# ---------------------------------------------------------------------------- tensorboard

TB_MEGATRON_TIMERS = {"forward": "forward-compute", "backward": "backward-compute", "optimizer": "optimizer",
                      "data": "batch-generator", "dp_allreduce": "all-grads-sync",
                      "emb_allreduce": "embedding-grads-all-reduce"}


def tb_expected(rows, timers=True, ppl=True):
    """The scalars docs/training.md documents for --tensorboard-dir (interval 1), from the metrics rows
    (an iteration's last row wins), as float32: {tag: {step: value}}."""
    want = {}
    for it, r in {int(r["iter"]): r for r in rows}.items():
        s = {"lm loss": r["loss"], "learning-rate": r["lr"], "grad-norm": r["grad_norm"], "tokens-per-sec": r["tokens_per_s"]}
        if "loss_scale" in r:
            s["loss-scale"] = r["loss_scale"]
        s.update({"bytes/" + k: v for k, v in r.get("bytes", {}).items()})
        s.update({"bytes-saved/" + k: v for k, v in r.get("bytes_saved", {}).items()})
        s.update({"lep/" + k: v for k, v in r.get("lep_check", {}).items()})
        if timers:
            s["iteration-time"] = r["ms"] / 1e3
            for k, v in r.get("timers", {}).items():
                if not k.startswith("peak_") and k != "iteration":
                    s[TB_MEGATRON_TIMERS.get(k, k.replace("_", "-")) + "-time"] = v / 1e3
        for key, tag in (("val_loss", "lm loss validation"), ("test_loss", "lm loss test")):
            if key in r:
                s[tag] = r[key]
                if ppl:
                    s[tag + " ppl"] = math.exp(r[key])
        for tag, v in s.items():
            want.setdefault(tag, {})[it] = struct.unpack("<f", struct.pack("<f", float(v)))[0]
    return want


def tb_load(path):
    """TensorBoard's own reader (EventAccumulator, every scalar kept) over a folder of event files."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: {int(e.step): float(e.value) for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def tb_diff(want, got):
    bad = []
    for tag in sorted(set(want) | set(got)):
        w, g = want.get(tag, {}), got.get(tag, {})
        if w != g:
            steps = [i for i in sorted(set(w) | set(g)) if w.get(i) != g.get(i)]
            bad.append(f"{tag}: steps {steps[:3]}: {[w.get(i) for i in steps[:2]]} vs {[g.get(i) for i in steps[:2]]}")
    return bad


def tensorboard(event_dir, metrics_path, killed=None):
    """Every tag and point TensorBoard's EventAccumulator loads equals the metrics JSONL (as float32);
    killed = (dir, metrics) of a run killed with SIGKILL: its file loads up to its last flush."""
    import tensorboard as tb
    got = tb_load(event_dir)
    bad = tb_diff(tb_expected(read_jsonl(metrics_path)), got)
    points = sum(len(p) for p in got.values())
    nums = {"tensorboard": tb.__version__, "tags": len(got), "points": points, "mismatches": bad[:5]}
    summary = (f"TensorBoard {tb.__version__}'s EventAccumulator loads {len(got)} tags, {points} points, equal to the "
               f"metrics JSONL" if not bad else f"EventAccumulator vs metrics: {'; '.join(bad[:3])}")
    if killed:
        kdir, kmetrics = killed
        rows = read_jsonl(kmetrics)
        kgot = tb_load(kdir)
        last = max(kgot.get("lm loss", {0: 0}))
        kwant = {t: {i: v for i, v in p.items() if i <= last} for t, p in tb_expected(rows).items()}
        kbad = tb_diff({t: p for t, p in kwant.items() if p}, kgot)
        if last < max(int(r["iter"]) for r in rows) - 1:
            kbad.insert(0, f"the killed run's file ends at step {last}, its metrics at {max(int(r['iter']) for r in rows)}")
        nums.update(killed_metrics_rows=len(rows), killed_last_step=last, killed_mismatches=kbad[:5])
        summary += (f"; a run killed (SIGKILL) after {len(rows)} iterations loads up to step {last}, equal to its metrics"
                    if not kbad else f"; killed run: {'; '.join(kbad[:3])}")
        bad += kbad
    return verdict(summary, nums, not bad)

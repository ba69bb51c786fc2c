"""gpu-check's Hugging Face Llama step (gpu_check_report.py hf-llama): the engine's logits of a
trained Llama-style checkpoint (reference-dump --load, on the device it ran on, dropout off)
against transformers' LlamaForCausalLM.from_pretrained(the `export --hf-llama` folder) on the
same tokens (batch.0's rows), fp32, the tokenizer's vocab_size columns: max|diff| <= rel x
max|engine|. Exit 3 (gpu-check records SKIP) where transformers is not installed; CI checks
the same export with a plain-torch re-implementation (tests/cli/fixture/hf_llama_check.py).
"""
import json
import os


def add_parsers(sub):
    p = sub.add_parser("hf-llama", help="LlamaForCausalLM.from_pretrained(export) vs the engine's logits")
    p.add_argument("--hf-dir", required=True)
    p.add_argument("--dump", required=True, help="reference-dump --load's output for the same checkpoint")
    p.add_argument("--rel", type=float, default=1e-4)
    return {"hf-llama": cmd_hf_llama}


def cmd_hf_llama(a):
    import numpy as np
    import torch
    from gpu_check_report import emit, ratio, read_safetensors
    try:
        import transformers
    except ImportError:
        print("SUMMARY transformers is not installed: LlamaForCausalLM check skipped")
        return 3
    with open(os.path.join(a.hf_dir, "config.json")) as f:
        hcfg = json.load(f)
    vocab = int(hcfg.get("optimus_cc", {}).get("tokenizer_vocab_size", hcfg["vocab_size"]))
    dump, meta = read_safetensors(a.dump)
    T = int(meta["seq_length"])
    ids = dump["batch.0"][:, :T].astype(np.int64)
    engine = dump["logits"].astype(np.float64)[..., :vocab]
    kw = dict(attn_implementation="eager")
    try:
        model = transformers.LlamaForCausalLM.from_pretrained(a.hf_dir, dtype=torch.float32, **kw)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = transformers.LlamaForCausalLM.from_pretrained(a.hf_dir, torch_dtype=torch.float32, **kw)
    model = model.float().eval()
    with torch.no_grad():
        got = model(input_ids=torch.as_tensor(ids, dtype=torch.long)).logits.double().numpy()[..., :vocab]
    if got.shape != engine.shape:
        return emit(f"logits shapes differ: engine {engine.shape}, LlamaForCausalLM {got.shape}", {}, False)
    r, d, s = ratio(got, engine)
    nums = {"ratio": r, "max_abs_diff": d, "max_abs": s, "shape": list(got.shape),
            "transformers": transformers.__version__, "architecture": hcfg.get("optimus_cc", {}).get("architecture")}
    ok = r <= a.rel
    return emit(f"engine logits of the Llama-style checkpoint vs LlamaForCausalLM.from_pretrained: max|diff| "
                f"{d:.2e} = {r:.1e} x max ({'<=' if ok else '>'} {a.rel:g})", nums, ok)

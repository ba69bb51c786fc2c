#!/usr/bin/python3
"""Check an `optimus-cc reference-dump` file against an independent PyTorch reference.

Usage:
    /usr/bin/python3 check_against_torch.py DUMP.safetensors [--require-clipping]
        [--sensitivity | --require-sensitive=DEV,DEV...] [-- FLAGS...]

DUMP is what `optimus-cc reference-dump --out DUMP ...` wrote. FLAGS, if given, are the
model/training flags that were passed to optimus-cc (Megatron names, e.g. `--num-layers 2
--hidden-size 64 ...`); each one is checked against the dump's metadata, so a binary that
ignores a flag cannot pass. --require-clipping asserts that global grad-norm clipping
actually fired (reference norm > clip_grad) on at least one step whose update is observed
by a later loss, so the clipping code is really exercised. --sensitivity reruns the
reference with deliberate deviations from the specification (DEVs: gelu_erf, swiglu_swapped,
rmsnorm_centered, rope_interleaved, rope_base_10000, gqa_interleaved_groups, tied_head, no_clip,
clip_norm_per_tensor, wd_none, wd_all, wd_matrices_only, coupled_wd, lr_off_by_one,
no_warmup, style_<other decay style>) and prints how far each would move the compared
quantities, in units of the tolerance; --require-sensitive=... fails unless each named
deviation moves something by more than twice the tolerance, i.e. unless this configuration
would catch a binary that made that mistake.

What it does:
  * parses the safetensors file itself (struct + json + numpy) and checks its structure:
    every parameter of the model present with the expected shape and dtype F32, a
    `grad.<param>` of the same shape for every parameter and nothing else under `grad.`,
    `batch.0..S-1` I32 [B, T+1] with tokens in range, `logits` [B, T, V], `loss` [1],
    `losses` [S], the metadata keys, non-overlapping in-bounds data, finite values;
  * rebuilds the Megatron GPT model (pre-norm, fused QKV per query group [q of its heads |
    k | v][head_dim] ([head][q|k|v] without GQA), causal softmax attention scaled by
    1/sqrt(D), tanh-GeLU MLP, final norm, logits tied to the word embedding over the padded
    vocab, mean token cross-entropy) in float64 from the dumped initial weights -- or its
    Llama-family variants as the dump's metadata says (RMSNorm, SwiGLU [gate; up], RoPE
    rotate-half on a share of each head, grouped-query attention, an untied output layer, no
    linear biases) -- and compares logits, loss and every gradient of step 0:
    max|ours - torch| <= 1e-4 * max|torch| per tensor;
  * replays the S training steps (global L2 grad-norm clipping as clip_grad_norm_, AdamW
    with decoupled weight decay on 2-D tensors only, the warm-up + cosine/linear/constant
    LR schedule implemented here from its definition) and compares every step's loss:
    |ours - torch| <= 1e-4 * |torch|.
Prints a per-tensor table and exits 1 with the reasons on any failure (2 on bad usage).
"""

import json
import math
import struct
import sys

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - setup problem
    print(f"FAIL: numpy is not importable by {sys.executable}: {e}", file=sys.stderr)
    sys.exit(1)
try:
    import torch
except ImportError as e:  # pragma: no cover - setup problem
    print(f"FAIL: torch is not importable by {sys.executable}: {e} "
          "(install Debian's python3-torch, see the README setup)", file=sys.stderr)
    sys.exit(1)

REL_TOL = 1e-4          # per-tensor: max|diff| <= REL_TOL * max|ref|
LOSS_REL_TOL = 1e-4     # per-step loss: |diff| <= LOSS_REL_TOL * |ref|

DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"),
          "I64": np.dtype("<i8"), "F16": np.dtype("<f2"), "U8": np.dtype("u1"),
          "I8": np.dtype("i1"), "I16": np.dtype("<i2"), "U16": np.dtype("<u2"),
          "BOOL": np.dtype("?")}

# metadata key -> kind
META_KEYS = {
    "num_layers": int, "hidden_size": int, "num_attention_heads": int, "seq_length": int,
    "max_position_embeddings": int, "padded_vocab_size": int, "micro_batch_size": int,
    "steps": int, "lr": float, "min_lr": float, "lr_warmup_iters": int,
    "lr_decay_style": str, "weight_decay": float, "adam_beta1": float, "adam_beta2": float,
    "adam_eps": float, "clip_grad": float, "norm_epsilon": float,
    # the architecture (Megatron's Llama-family flags; GPT-2: LayerNorm, 0, 4h,
    # learned_absolute, ..., num_query_groups = heads, 0, 1)
    "normalization": str, "swiglu": int, "ffn_hidden_size": int, "position_embedding_type": str,
    "rotary_base": float, "rotary_percent": float, "num_query_groups": int,
    "untie_embeddings_and_output_weights": int, "add_bias_linear": int,
}
# boolean flags (no value) -> how the metadata records them
BOOL_FLAGS = {"swiglu": ("swiglu", "1"), "untie_embeddings_and_output_weights":
              ("untie_embeddings_and_output_weights", "1"), "disable_bias_linear": ("add_bias_linear", "0"),
              "group_query_attention": None}
# CLI flags accepted by reference-dump that are checked against metadata in a special way
INT_FLAGS_NOT_IN_META = {"vocab_size", "make_vocab_size_divisible_by", "seed"}
# flags that change what the reference must compute but have no metadata key: the reference
# is dropout-free and decays over `steps` iterations, so these may only take neutral values
# unless the dump records them (lr_decay_iters is honoured when the metadata has it)
NEUTRAL_FLAGS = {"hidden_dropout": 0.0, "attention_dropout": 0.0}


class CheckFailed(Exception):
    pass


class Report:
    def __init__(self):
        self.failures = []

    def fail(self, msg):
        self.failures.append(msg)

    def require(self, cond, msg):
        if not cond:
            self.fail(msg)
        return cond


# --------------------------------------------------------------------------- reading

def read_safetensors(path):
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise CheckFailed(f"cannot read {path}: {e}")
    if len(blob) < 8:
        raise CheckFailed(f"{path}: {len(blob)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise CheckFailed(f"{path}: header length {n} runs past the end of the file "
                          f"({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckFailed(f"{path}: header is not valid UTF-8 JSON: {e}")
    if not isinstance(header, dict):
        raise CheckFailed(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is None:
        raise CheckFailed(f"{path}: no __metadata__ in the header")
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        raise CheckFailed(f"{path}: __metadata__ must map strings to strings")
    body = memoryview(blob)[8 + n:]
    tensors, dtypes, spans = {}, {}, []
    for name, info in header.items():
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckFailed(f"{path}: malformed header entry for {name!r}: {info!r}")
        if dtype not in DTYPES:
            raise CheckFailed(f"{path}: {name}: unknown dtype {dtype!r}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise CheckFailed(f"{path}: {name}: bad shape {shape!r}")
        npd = DTYPES[dtype]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= len(body)):
            raise CheckFailed(f"{path}: {name}: data_offsets [{b}, {e}] outside the "
                              f"{len(body)}-byte data section")
        if e - b != count * npd.itemsize:
            raise CheckFailed(f"{path}: {name}: data_offsets span {e - b} bytes but "
                              f"{dtype}{shape} needs {count * npd.itemsize}")
        tensors[name] = np.frombuffer(body[b:e], dtype=npd).reshape(shape).copy()
        dtypes[name] = dtype
        spans.append((b, e, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise CheckFailed(f"{path}: data of {n0} [{b0},{e0}) and {n1} [{b1},{e1}) overlap")
    return tensors, dtypes, meta


# --------------------------------------------------------------------------- config

def parse_meta(meta, rep):
    cfg = {}
    for key, kind in META_KEYS.items():
        if key not in meta:
            rep.fail(f"metadata: missing key {key!r}")
            continue
        try:
            cfg[key] = kind(meta[key]) if kind is not int else int(meta[key], 10)
        except ValueError:
            rep.fail(f"metadata: {key}={meta[key]!r} is not a valid {kind.__name__}")
    if len(cfg) != len(META_KEYS):
        raise CheckFailed("metadata incomplete; cannot build the reference")
    # optional: decay length (the specification decays over the `steps` iterations)
    try:
        cfg["lr_decay_iters"] = int(meta.get("lr_decay_iters", str(cfg["steps"])), 10)
    except ValueError:
        raise CheckFailed(f"metadata: lr_decay_iters={meta['lr_decay_iters']!r} is not an int")
    if cfg["lr_decay_style"] != "constant" and cfg["lr_decay_iters"] <= cfg["lr_warmup_iters"] \
            and cfg["steps"] > cfg["lr_warmup_iters"]:
        raise CheckFailed("metadata: decay over lr_decay_iters <= lr_warmup_iters is undefined")
    if cfg["lr_decay_style"] not in ("cosine", "linear", "constant"):
        raise CheckFailed(f"metadata: lr_decay_style={cfg['lr_decay_style']!r} is not "
                          "cosine|linear|constant")
    if cfg["hidden_size"] % cfg["num_attention_heads"] != 0:
        raise CheckFailed("metadata: hidden_size is not a multiple of num_attention_heads")
    for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_length",
              "max_position_embeddings", "padded_vocab_size", "micro_batch_size", "steps"):
        if cfg[k] <= 0:
            raise CheckFailed(f"metadata: {k}={cfg[k]} must be positive")
    if cfg["seq_length"] > cfg["max_position_embeddings"]:
        raise CheckFailed("metadata: seq_length exceeds max_position_embeddings")
    if cfg["normalization"] not in ("LayerNorm", "RMSNorm"):
        raise CheckFailed(f"metadata: normalization={cfg['normalization']!r} is not LayerNorm|RMSNorm")
    if cfg["position_embedding_type"] not in ("learned_absolute", "rope"):
        raise CheckFailed(f"metadata: position_embedding_type={cfg['position_embedding_type']!r} is not "
                          "learned_absolute|rope")
    H, G = cfg["num_attention_heads"], cfg["num_query_groups"]
    if G <= 0 or H % G != 0:
        raise CheckFailed(f"metadata: num_query_groups={G} does not divide num_attention_heads={H}")
    if cfg["ffn_hidden_size"] <= 0:
        raise CheckFailed("metadata: ffn_hidden_size must be positive")
    return cfg


def parse_flags(argv):
    """['--num-layers', '2', '--swiglu', ...] -> {'num_layers': '2', 'swiglu': None, ...}"""
    out, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("--"):
            raise CheckFailed(f"flags: expected --name, got {a!r}")
        if a[2:].replace("-", "_") in BOOL_FLAGS:
            out[a[2:].replace("-", "_")] = None
            i += 1
            continue
        if "=" in a:
            k, v = a[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(argv):
                raise CheckFailed(f"flags: {a} has no value")
            k, v = a[2:], argv[i + 1]
            i += 2
        out[k.replace("-", "_")] = v
    return out


def check_flags_against_meta(flags, meta, cfg, rep):
    """Every flag given to the binary must be reflected in the dump's metadata."""
    for k, v in flags.items():
        if k == "out":
            continue
        if k in BOOL_FLAGS:
            if BOOL_FLAGS[k] is not None:
                key, want = BOOL_FLAGS[k]
                rep.require(meta.get(key) == want, f"flags: --{k.replace('_', '-')} but metadata {key}="
                                                   f"{meta.get(key)!r}")
            continue
        if k == "vocab_size":
            div = int(flags.get("make_vocab_size_divisible_by", "128"))
            want = -(-int(v) // div) * div
            rep.require(cfg["padded_vocab_size"] == want,
                        f"flags: --vocab-size {v} (divisible by {div}) should pad to {want}, "
                        f"metadata padded_vocab_size={cfg['padded_vocab_size']}")
            if "vocab_size" in meta:
                rep.require(meta["vocab_size"] == v,
                            f"flags: --vocab-size {v} but metadata vocab_size={meta['vocab_size']}")
            continue
        if k in NEUTRAL_FLAGS and k not in meta:
            rep.require(float(v) == NEUTRAL_FLAGS[k],
                        f"flags: --{k.replace('_', '-')} {v}: the reference cannot model it "
                        f"(only {NEUTRAL_FLAGS[k]} is supported)")
            continue
        if k == "lr_decay_iters" and k not in meta:
            rep.fail(f"flags: --lr-decay-iters {v} given but the dump does not record "
                     "lr_decay_iters; the reference would decay over `steps`")
            continue
        if k in INT_FLAGS_NOT_IN_META:
            if k in meta:
                rep.require(int(meta[k]) == int(v), f"flags: --{k} {v} but metadata {k}={meta[k]}")
            continue
        if k not in META_KEYS:
            if k in meta:
                rep.require(meta[k] == v, f"flags: --{k} {v} but metadata {k}={meta[k]!r}")
            else:
                print(f"note: flag --{k.replace('_', '-')} is not recorded in the metadata; "
                      "not checked")
            continue
        kind = META_KEYS[k]
        if kind is int:
            ok = cfg[k] == int(v)
        elif kind is float:
            fv = float(v)
            ok = abs(cfg[k] - fv) <= 1e-6 * max(abs(fv), 1e-30)
        else:
            ok = cfg[k] == v
        rep.require(ok, f"flags: --{k.replace('_', '-')} {v} but metadata {k}={meta[k]!r}")


def arch(cfg):
    """The architecture fields with GPT-2's defaults (callers may pass a partial cfg)."""
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    return {"normalization": cfg.get("normalization", "LayerNorm"), "swiglu": bool(cfg.get("swiglu", 0)),
            "ffn": cfg.get("ffn_hidden_size", 4 * C),
            "rope": cfg.get("position_embedding_type", "learned_absolute") == "rope",
            "rotary_base": cfg.get("rotary_base", 10000.0), "rotary_percent": cfg.get("rotary_percent", 1.0),
            "groups": cfg.get("num_query_groups", H),
            "untied": bool(cfg.get("untie_embeddings_and_output_weights", 0)),
            "bias": bool(cfg.get("add_bias_linear", 1)),
            "eps": cfg.get("norm_epsilon", cfg.get("layernorm_epsilon", 1e-5))}


def param_shapes(cfg):
    L, C, V, H = cfg["num_layers"], cfg["hidden_size"], cfg["padded_vocab_size"], cfg["num_attention_heads"]
    a = arch(cfg)
    P, F, G, D = cfg["max_position_embeddings"], a["ffn"], a["groups"], C // H
    QKV, FC = (H + 2 * G) * D, (2 if a["swiglu"] else 1) * F
    ln = a["normalization"] == "LayerNorm"
    shapes = {"embedding.word_embeddings.weight": (V, C)}
    if not a["rope"]:
        shapes["embedding.position_embeddings.weight"] = (P, C)

    def norm(name):
        shapes[name + ".weight"] = (C,)
        if ln:
            shapes[name + ".bias"] = (C,)

    for i in range(L):
        p = f"layers.{i}."
        norm(p + "input_layernorm")
        shapes[p + "attention.query_key_value.weight"] = (QKV, C)
        if a["bias"]:
            shapes[p + "attention.query_key_value.bias"] = (QKV,)
        shapes[p + "attention.dense.weight"] = (C, C)
        if a["bias"]:
            shapes[p + "attention.dense.bias"] = (C,)
        norm(p + "post_attention_layernorm")
        shapes[p + "mlp.dense_h_to_4h.weight"] = (FC, C)
        if a["bias"]:
            shapes[p + "mlp.dense_h_to_4h.bias"] = (FC,)
        shapes[p + "mlp.dense_4h_to_h.weight"] = (C, F)
        if a["bias"]:
            shapes[p + "mlp.dense_4h_to_h.bias"] = (C,)
    norm("final_layernorm")
    if a["untied"]:
        shapes["output_layer.weight"] = (V, C)
    return shapes


def check_structure(tensors, dtypes, cfg, rep):
    S, B, T = cfg["steps"], cfg["micro_batch_size"], cfg["seq_length"]
    V = cfg["padded_vocab_size"]
    shapes = param_shapes(cfg)
    failures_before = len(rep.failures)

    def expect(name, shape, dtype):
        if name not in tensors:
            rep.fail(f"structure: missing tensor {name}")
            return False
        ok = rep.require(tuple(tensors[name].shape) == tuple(shape),
                         f"structure: {name} has shape {list(tensors[name].shape)}, "
                         f"expected {list(shape)}")
        ok &= rep.require(dtypes[name] == dtype,
                          f"structure: {name} has dtype {dtypes[name]}, expected {dtype}")
        return ok

    for n, s in shapes.items():
        expect(n, s, "F32")
        expect("grad." + n, s, "F32")
    expect("logits", (B, T, V), "F32")
    expect("loss", (1,), "F32")
    expect("losses", (S,), "F32")
    for k in range(S):
        if expect(f"batch.{k}", (B, T + 1), "I32"):
            tok = tensors[f"batch.{k}"]
            rep.require(tok.min() >= 0 and tok.max() < V,
                        f"structure: batch.{k} has tokens outside [0, {V}): "
                        f"min {tok.min()}, max {tok.max()}")

    known = set(shapes) | {"grad." + n for n in shapes} | {"logits", "loss", "losses"} \
        | {f"batch.{k}" for k in range(S)}
    for name in sorted(set(tensors) - known):
        head = name.split(".", 1)[0]
        if head in ("grad", "layers", "embedding", "final_layernorm", "output_layer", "batch",
                    "logits", "loss", "losses"):
            rep.fail(f"structure: unexpected tensor {name} {list(tensors[name].shape)} "
                     "(misnamed parameter/gradient, or a config mismatch?)")
        else:
            print(f"note: extra tensor {name} {list(tensors[name].shape)} not checked")

    for name in sorted(known & set(tensors)):
        a = tensors[name]
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            rep.fail(f"structure: {name} has {np.count_nonzero(~np.isfinite(a))} "
                     "non-finite values")
    if len(rep.failures) > failures_before:
        raise CheckFailed("dump structure is wrong; not running the reference")


# --------------------------------------------------------------------------- reference model

def layer_norm(x, w, b, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    return x / torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):  # only for the sensitivity probe (a plausible wrong GeLU)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def rope(x, base, rot, interleaved=False):
    """Rotary embedding of x [B, heads, T, D] on its first `rot` features: rotate-half pairs
    (i, i + rot/2) (Megatron's default, Hugging Face's Llama); interleaved pairs (2i, 2i+1)
    (Meta's original Llama) only for the sensitivity probe."""
    T = x.shape[2]
    inv = base ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot)  # [rot/2]
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]     # [T, rot/2]
    cos, sin = torch.cos(ang), torch.sin(ang)
    xr, xp = x[..., :rot], x[..., rot:]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        y1, y2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        yr = torch.stack((y1, y2), dim=-1).flatten(-2)
    else:
        x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
        yr = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return torch.cat((yr, xp), dim=-1)


def forward(p, tokens, cfg, mut=frozenset()):
    """tokens: int64 [B, T+1] -> (logits [B, T, V], mean cross-entropy loss).
    mut: names of deliberate deviations, used only by the sensitivity probe."""
    L, C, H = cfg["num_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    a = arch(cfg)
    eps, G, F = a["eps"], a["groups"], a["ffn"]
    D = C // H
    r = H // G  # query heads per k/v head
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    B, T = inputs.shape
    wte = p["embedding.word_embeddings.weight"]
    x = wte[inputs]
    if not a["rope"]:
        x = x + p["embedding.position_embeddings.weight"][:T].unsqueeze(0)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True where key > query

    def norm(x, name):
        if a["normalization"] == "RMSNorm":
            if "rmsnorm_centered" in mut:
                return layer_norm(x, p[name + ".weight"], None, eps)
            return rms_norm(x, p[name + ".weight"], eps)
        return layer_norm(x, p[name + ".weight"], p[name + ".bias"], eps)

    def linear(x, name):
        y = x @ p[name + ".weight"].t()
        return y + p[name + ".bias"] if a["bias"] else y

    for i in range(L):
        pre = f"layers.{i}."
        h = norm(x, pre + "input_layernorm")
        qkv = linear(h, pre + "attention.query_key_value")
        qkv = qkv.view(B, T, G, r + 2, D)  # per query group [q of its r heads | k | v]
        q = qkv[:, :, :, :r, :].reshape(B, T, H, D).permute(0, 2, 1, 3)  # [B, H, T, D], head g*r + j
        k = qkv[:, :, :, r, :].permute(0, 2, 1, 3)  # [B, G, T, D]
        v = qkv[:, :, :, r + 1, :].permute(0, 2, 1, 3)
        if a["rope"]:
            rot = int(D * a["rotary_percent"])
            base = 10000.0 if "rope_base_10000" in mut else a["rotary_base"]
            q = rope(q, base, rot, "rope_interleaved" in mut)
            k = rope(k, base, rot, "rope_interleaved" in mut)
        group = torch.arange(H) % G if "gqa_interleaved_groups" in mut else torch.arange(H) // r
        k, v = k[:, group], v[:, group]  # the k/v head of each query head
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # [B, H, Tq, Tk]
        scores = scores.masked_fill(causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        y = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, H * D)
        x = x + linear(y, pre + "attention.dense")
        h = norm(x, pre + "post_attention_layernorm")
        fc = linear(h, pre + "mlp.dense_h_to_4h")
        if a["swiglu"]:
            gate, up = fc[..., :F], fc[..., F:]
            if "swiglu_swapped" in mut:
                gate, up = up, gate
            act = torch.nn.functional.silu(gate) * up
        else:
            act = gelu_erf(fc) if "gelu_erf" in mut else gelu_tanh(fc)
        x = x + linear(act, pre + "mlp.dense_4h_to_h")
    x = norm(x, "final_layernorm")
    head = p["output_layer.weight"] if a["untied"] and "tied_head" not in mut else wte
    logits = x @ head.t()  # [B, T, V], padded entries included
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return logits, nll.mean()


def lr_at(it, cfg, mut=frozenset()):
    """Learning rate of update number it (1-based)."""
    lr, min_lr, W, Dn = cfg["lr"], cfg["min_lr"], cfg["lr_warmup_iters"], cfg["lr_decay_iters"]
    if "lr_off_by_one" in mut:
        it = it - 1
    if W > 0 and it <= W and "no_warmup" not in mut:
        return lr * it / W
    style = cfg["lr_decay_style"]
    for m in mut:
        if m.startswith("style_"):
            style = m[len("style_"):]
    if style == "constant":
        return lr
    if it > Dn:
        return min_lr
    ratio = (it - W) / (Dn - W)
    if style == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * ratio))
    if style == "linear":
        return min_lr + (lr - min_lr) * (1.0 - ratio)
    raise CheckFailed(f"unknown lr_decay_style {style!r}")


def run_reference(tensors, cfg, mut=frozenset(), steps=None):
    """Replays training in float64. mut (sensitivity probe only) names deliberate
    deviations from the specification; the real check always runs with mut empty."""
    torch.set_default_dtype(torch.float64)
    names = list(param_shapes(cfg))
    p = {n: torch.tensor(tensors[n].astype(np.float64), requires_grad=True) for n in names}
    if "wd_all" in mut:
        is_decayed = lambda n: True  # noqa: E731
    elif "wd_matrices_only" in mut:  # forgets the embeddings
        is_decayed = lambda n: p[n].dim() == 2 and not n.startswith("embedding.")  # noqa: E731
    else:
        is_decayed = lambda n: p[n].dim() == 2  # noqa: E731
    wd = 0.0 if "wd_none" in mut else cfg["weight_decay"]
    groups = [{"params": [p[n] for n in names if is_decayed(n)], "weight_decay": wd},
              {"params": [p[n] for n in names if not is_decayed(n)], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if "coupled_wd" in mut:  # Adam with L2 in the gradient instead of AdamW
        opt = torch.optim.Adam(groups, lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
                               eps=cfg["adam_eps"])
    else:
        opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
                                eps=cfg["adam_eps"])
    clip = cfg["clip_grad"]
    out = {"losses": [], "norms": [], "coefs": [], "lrs": []}
    for k in range(cfg["steps"] if steps is None else steps):
        tokens = torch.from_numpy(tensors[f"batch.{k}"].astype(np.int64))
        opt.zero_grad(set_to_none=True)
        logits, loss = forward(p, tokens, cfg, mut)
        loss.backward()
        for n in names:  # a tensor a deviation leaves unused (tied_head: the output layer) has no gradient
            if p[n].grad is None:
                p[n].grad = torch.zeros_like(p[n])
        out["losses"].append(loss.item())
        if k == 0:
            out["logits"] = logits.detach().numpy().copy()
            out["loss"] = loss.item()
            out["grads"] = {n: p[n].grad.detach().numpy().copy() for n in names}
        # global L2 norm over all parameters (the tied embedding is one tensor: counted once)
        norm = math.sqrt(sum(float((p[n].grad ** 2).sum()) for n in names))
        coef = clip / (norm + 1e-6) if clip > 0 and "no_clip" not in mut else 1.0
        if "clip_norm_per_tensor" in mut and clip > 0:
            for n in names:
                tn = float(p[n].grad.norm())
                if clip / (tn + 1e-6) < 1.0:
                    p[n].grad.mul_(clip / (tn + 1e-6))
        elif coef < 1.0:
            for n in names:
                p[n].grad.mul_(coef)
        lr = lr_at(k + 1, cfg, mut)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        out["norms"].append(norm)
        out["coefs"].append(min(coef, 1.0))
        out["lrs"].append(lr)
    return out


# --------------------------------------------------------------------------- comparison

def compare_tensors(tensors, ref, cfg, rep):
    rows = [("logits", tensors["logits"], ref["logits"]),
            ("loss", tensors["loss"], np.array([ref["loss"]]))]
    rows += [("grad." + n, tensors["grad." + n], ref["grads"][n]) for n in param_shapes(cfg)]
    width = max(len(r[0]) for r in rows)
    print(f"{'tensor':<{width}}  {'max|diff|':>11}  {'max|torch|':>11}  {'ratio':>9}  status")
    print("-" * (width + 45))
    bad = []
    for name, ours, theirs in rows:
        ours = ours.astype(np.float64)
        diff = float(np.max(np.abs(ours - theirs))) if ours.size else 0.0
        scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
        ok = diff <= REL_TOL * scale
        ratio = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        print(f"{name:<{width}}  {diff:11.4e}  {scale:11.4e}  {ratio:9.2e}  "
              f"{'ok' if ok else 'FAIL'}")
        if not ok:
            idx = np.unravel_index(np.argmax(np.abs(ours - theirs)), ours.shape)
            bad.append(name)
            rep.fail(f"{name}: max|ours - torch| = {diff:.4e} > {REL_TOL:g} * max|torch| = "
                     f"{REL_TOL * scale:.4e} (worst at index {list(map(int, idx))}: ours "
                     f"{ours[idx]:.8e}, torch {theirs[idx]:.8e})")
    return bad


def compare_losses(tensors, ref, cfg, rep):
    ours = tensors["losses"].astype(np.float64)
    print()
    print(f"{'step':>4}  {'lr':>11}  {'grad norm':>11}  {'clip coef':>9}  "
          f"{'loss (ours)':>13}  {'loss (torch)':>13}  {'rel diff':>9}  status")
    for k in range(cfg["steps"]):
        r = ref["losses"][k]
        rel = abs(ours[k] - r) / abs(r) if r != 0 else abs(ours[k])
        ok = rel <= LOSS_REL_TOL
        print(f"{k:>4}  {ref['lrs'][k]:11.4e}  {ref['norms'][k]:11.4e}  {ref['coefs'][k]:9.4f}  "
              f"{ours[k]:13.8f}  {r:13.8f}  {rel:9.2e}  {'ok' if ok else 'FAIL'}")
        if not ok:
            rep.fail(f"losses[{k}]: ours {ours[k]:.8f}, torch {r:.8f}, relative difference "
                     f"{rel:.3e} > {LOSS_REL_TOL:g}")
    print("(lr / grad norm / clip coef: the reference's values for the update made after "
          "that step's loss)")
    # the step-0 loss appears twice in the dump; they must agree with each other
    l0, ll0 = float(tensors["loss"][0]), float(tensors["losses"][0])
    rep.require(abs(l0 - ll0) <= LOSS_REL_TOL * abs(ll0),
                f"dump: loss {l0:.8f} and losses[0] {ll0:.8f} disagree")


def mutations(cfg):
    a = arch(cfg)
    muts = {} if a["swiglu"] else {"gelu_erf": "exact-erf GeLU instead of the tanh approximation"}
    if a["swiglu"]:
        muts["swiglu_swapped"] = "SwiGLU's silu on the up half instead of the gate half"
    if a["normalization"] == "RMSNorm":
        muts["rmsnorm_centered"] = "RMSNorm subtracting the mean (LayerNorm without bias)"
    if a["rope"]:
        muts["rope_interleaved"] = "RoPE pairing (2i, 2i+1) instead of rotate-half (i, i + r/2)"
        if a["rotary_base"] != 10000.0:
            muts["rope_base_10000"] = "RoPE with base 10000 instead of the configured rotary_base"
    if a["groups"] not in (1, cfg["num_attention_heads"]):
        muts["gqa_interleaved_groups"] = "query head h using k/v head h % groups instead of h // (heads/groups)"
    if a["untied"]:
        muts["tied_head"] = "logits from the word embedding instead of the untied output layer"
    muts.update({
        "no_clip": "grad-norm clipping skipped",
        "clip_norm_per_tensor": "clipping by each tensor's own norm instead of the global norm",
        "wd_none": "no weight decay",
        "wd_all": "weight decay also on biases and LayerNorm params",
        "wd_matrices_only": "no weight decay on the embeddings",
        "coupled_wd": "L2 added to the gradient (Adam) instead of decoupled (AdamW)",
        "lr_off_by_one": "schedule evaluated at it-1 instead of it",
    })
    if cfg["lr_warmup_iters"] > 1:  # with one warm-up step, warm-up changes nothing
        muts["no_warmup"] = "no warm-up"
    for style in ("cosine", "linear", "constant"):
        if style != cfg["lr_decay_style"]:
            muts["style_" + style] = f"{style} decay instead of {cfg['lr_decay_style']}"
    return muts


def sensitivity(tensors, cfg, ref, required):
    """Runs the reference with deliberate deviations from the specification and reports
    how far each would move the compared quantities: a deviation the tolerances cannot see
    is a blind spot of this configuration, not of the binary."""
    print("\nsensitivity of this configuration (effect of a deviation, in units of the "
          "tolerance; detectable if > 2):")
    muts = mutations(cfg)
    unknown = [m for m in required if m not in muts]
    if unknown:
        raise CheckFailed(f"--require-sensitive: unknown or inapplicable deviation(s) {unknown}; "
                          f"known here: {sorted(muts)}")
    blind = []
    for m, desc in muts.items():
        r = run_reference(tensors, cfg, frozenset([m]))
        eff = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref["losses"])) / LOSS_REL_TOL
        eff = max(eff, float(np.max(np.abs(r["logits"] - ref["logits"])) /
                             np.max(np.abs(ref["logits"]))) / REL_TOL)
        for n, g in ref["grads"].items():
            eff = max(eff, float(np.max(np.abs(r["grads"][n] - g)) / np.max(np.abs(g))) / REL_TOL)
        seen = eff > 2.0
        print(f"  {m:<22} {eff:10.2f}  {'detectable' if seen else 'BLIND':<10}  {desc}"
              f"{'  (required)' if m in required else ''}")
        if not seen:
            blind.append(m)
    missing = [m for m in required if m in blind]
    return missing


def main(argv):
    args, flags_argv = argv, []
    if "--" in argv:
        i = argv.index("--")
        args, flags_argv = argv[:i], argv[i + 1:]
    require_clip = "--require-clipping" in args
    want_sens = "--sensitivity" in args
    required = []
    pos = []
    for a in args:
        if a.startswith("--require-sensitive="):
            required += [m for m in a.split("=", 1)[1].split(",") if m]
            want_sens = True
        elif a not in ("--require-clipping", "--sensitivity"):
            pos.append(a)
    if len(pos) != 1 or pos[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    path = pos[0]
    rep = Report()
    try:
        flags = parse_flags(flags_argv)
        tensors, dtypes, meta = read_safetensors(path)
        cfg = parse_meta(meta, rep)
        print(f"{path}: " + ", ".join(f"{k}={meta[k]}" for k in META_KEYS))
        check_flags_against_meta(flags, meta, cfg, rep)
        check_structure(tensors, dtypes, cfg, rep)
        ref = run_reference(tensors, cfg)
        bad = compare_tensors(tensors, ref, cfg, rep)
        compare_losses(tensors, ref, cfg, rep)
        if require_clip:
            # the last step's update is never observed by a dumped loss
            observed = ref["norms"][:-1]
            clip = cfg["clip_grad"]
            rep.require(clip > 0 and any(n > clip for n in observed),
                        f"--require-clipping: the reference grad norm never exceeded "
                        f"clip_grad={clip} on steps 0..{cfg['steps'] - 2} "
                        f"(norms {[f'{n:.4g}' for n in observed]}); this configuration does "
                        "not exercise clipping")
        if want_sens:
            missing = sensitivity(tensors, cfg, ref, required)
            rep.require(not missing,
                        f"--require-sensitive: this configuration cannot detect {missing} "
                        "(the deviation moves nothing by more than 2x the tolerance); "
                        "change the configuration, not the tolerance")
        if bad:
            print(f"\n{len(bad)} of {2 + len(param_shapes(cfg))} tensors out of tolerance")
    except CheckFailed as e:
        rep.fail(str(e))
    if rep.failures:
        print(f"\nFAIL: {path}", file=sys.stderr)
        for f in rep.failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(f"\nPASS: {path} matches the PyTorch reference "
          f"(tensors within {REL_TOL:g} x max|ref|, losses within {LOSS_REL_TOL:g} relative)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

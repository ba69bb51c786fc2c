"""Reading what the engine writes: metrics JSONL, safetensors (with numpy, no safetensors package)."""

import json
import struct


def read_jsonl(path):
    """The rows of a JSON-lines file (blank lines skipped)."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def by_iter(rows, key):
    """{iteration: float(row[key])} over the rows that have the key."""
    return {int(r["iter"]): float(r[key]) for r in rows if key in r and r.get(key) is not None}


def timer_peak(rows, key):
    """Max over the metrics rows of timers.KEY (each row's peak is already the max over ranks)."""
    vals = [float(r.get("timers", {}).get(key, r.get(key))) for r in rows
            if r.get("timers", {}).get(key, r.get(key)) is not None]
    return max(vals) if vals else None


def read_safetensors(path):
    """({name: numpy array}, metadata) of a safetensors file; bf16 widened to float32."""
    import numpy as np
    dtypes = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8"),
              "F16": np.dtype("<f2"), "U16": np.dtype("<u2"), "BF16": None}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    body = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = dtypes.get(info["dtype"], "?")
        if dt == "?":
            raise ValueError(f"{path}: {name}: dtype {info['dtype']} not handled")
        if dt is None:  # bf16 -> f32 by widening the bits
            raw = np.frombuffer(body[b:e], dtype="<u2").astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(info["shape"]).copy()
        else:
            out[name] = np.frombuffer(body[b:e], dtype=dt).reshape(info["shape"]).copy()
    return out, meta

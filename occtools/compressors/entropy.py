"""python3 -m occtools entropy-report: what lossless coding of the block codes reaches on real
pipeline messages (issue 40 item 3).

DUMP_DIR holds the message dumps of a training run with the hidden flag
--debug-dump-messages DUMP_DIR (compress/message_dump.h: each sender's last messages on
the pipeline links, and the wire each block method sends for each, encoded by the engine).
For every message and block method it measures, in bits per value (scales and padding
included; the bf16 wire sends 16):
  raw      the codec's wire as sent (the byte formula of compress/block_compressor.h);
  zstd     the wire compressed by zstd -19 (Debian's zstd, the host path), measured;
  order-0  the wire's order-0 entropy: the codes (4 or 3 bits) and the scale bytes each coded
           with their own message's symbol frequencies, plus nvfp4's raw fp32 row scales: the
           size a static-table rANS coder (DietGPU's kind) approaches; a bound, not a coder
           run here.
Writes OUT_PREFIX.json (per message and per link class) and OUT_PREFIX.md; --from-json
OUT_PREFIX.json rebuilds the .md from the json alone. Needs python3-numpy.
"""

import argparse
import glob
import json
import math
import os
import struct
import subprocess
from collections import Counter

from occtools.common.errors import Failure

# block entries, code bits, scale bytes per block, bytes per row (nvfp4's fp32 R)
FORMATS = {"mxfp4": (32, 4, 1, 0), "nvfp4": (16, 4, 1, 4), "int4": (32, 4, 2, 0), "int3": (32, 3, 2, 0)}


def load(path):
    """A tensor file (core/tensor_file.h): magic, header length, JSON header, 64-aligned data."""
    b = open(path, "rb").read()
    if b[:8] != b"OCCTENS1":
        raise Failure(f"{path}: not a tensor file (core/tensor_file.h); give the folder of --debug-dump-messages")
    n = struct.unpack("<Q", b[8:16])[0]
    h = json.loads(b[16:16 + n])
    start = (16 + n + 63) // 64 * 64
    tensors = {t["name"]: b[start + t["offset"]:start + t["offset"] + t["bytes"]] for t in h["tensors"]}
    return h["meta"], tensors


def entropy_bits(symbols):
    counts = Counter(symbols)
    total = sum(counts.values())
    return -sum(c * math.log2(c / total) for c in counts.values())


def zstd_bytes(data):
    return len(subprocess.run(["zstd", "-19", "-q", "-c"], input=data, capture_output=True, check=True).stdout)


def analyse(method, wire, rows, cols):
    import numpy as np  # only here: every occtools module imports with the standard library alone
    B, bits, scale_bytes, row_bytes = FORMATS[method]
    nb = -(-cols // B)
    code_bytes = B * bits // 8
    size = rows * row_bytes + rows * nb * (scale_bytes + code_bytes)
    wire = wire[:size]
    scales = wire[rows * row_bytes:rows * row_bytes + rows * nb * scale_bytes]
    codes = np.frombuffer(wire[rows * row_bytes + rows * nb * scale_bytes:], dtype=np.uint8).reshape(rows, nb, code_bytes)
    # The codes of the entries (padding left out): bits of each block read as one little-endian bit string.
    bitstring = np.unpackbits(codes, axis=2, bitorder="little").reshape(rows, nb, B, bits)
    symbols = (bitstring * (1 << np.arange(bits))).sum(axis=3).reshape(rows, nb * B)[:, :cols]
    scale_symbols = (np.frombuffer(scales, dtype=np.uint8) if scale_bytes == 1
                     else np.frombuffer(scales, dtype="<u2"))
    order0 = (entropy_bits(symbols.ravel().tolist()) + entropy_bits(scale_symbols.tolist()) + 8 * rows * row_bytes)
    values = rows * cols
    return {"raw": 8 * size / values, "zstd": 8 * zstd_bytes(wire) / values, "order0": order0 / values,
            "code_entropy": entropy_bits(symbols.ravel().tolist()) / values}


def add_parser(sub):
    p = sub.add_parser("entropy-report", help="lossless coding of the block codes on dumped pipeline messages "
                                              "(docs/results/entropy.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dump_dir", nargs="?", help="a run's --debug-dump-messages folder")
    p.add_argument("out_prefix", nargs="?", help="writes OUT_PREFIX.json and OUT_PREFIX.md")
    p.add_argument("--label", default="", help="what run the messages come from (the report's first line)")
    p.add_argument("--from-json", help="rebuild this entropy json's .md (no dumps read)")
    p.set_defaults(func=main)


def measure(dump_dir, label):
    files = sorted(glob.glob(os.path.join(dump_dir, "*.occt")))
    if not files:
        raise Failure(f"no message dumps (*.occt) in {dump_dir}; run train with --debug-dump-messages DIR")
    messages = []
    for path in files:
        meta, tensors = load(path)
        rows, cols = meta["rows"], meta["cols"]
        link = meta["link"].split("_")[0] + "_" + meta["link"].split("_")[1]  # pp_fwd / pp_bwd
        entry = {"file": os.path.basename(path), "link": link, "rows": rows, "cols": cols, "index": meta["index"]}
        for method in FORMATS:
            entry[method] = analyse(method, tensors[f"wire/{method}"], rows, cols)
        messages.append(entry)
    summary = {}
    for link in sorted({m["link"] for m in messages}):
        sel = [m for m in messages if m["link"] == link]
        summary[link] = {"messages": len(sel), "values": sum(m["rows"] * m["cols"] for m in sel)}
        for method in FORMATS:
            w = [m["rows"] * m["cols"] for m in sel]
            summary[link][method] = {k: sum(m[method][k] * x for m, x in zip(sel, w)) / sum(w)
                                     for k in ("raw", "zstd", "order0", "code_entropy")}
    return {"label": label, "dump_dir": dump_dir, "summary": summary, "messages": messages}


def markdown(doc, out_prefix):
    label = doc.get("label", "")
    lines = [f"Lossless coding of the block codes on real pipeline messages{': ' + label if label else ''}. "
             "Bits per value, scales and padding included (the bf16 wire: 16); cut = 16 / bits. "
             "raw: the codec's wire; zstd: that wire through `zstd -19` (measured); order-0: the wire's order-0 "
             "entropy per message (codes and scale bytes each with their own frequencies; nvfp4's fp32 row scales "
             "raw): what a static-table rANS coder approaches, a bound, not a coder run. "
             f"Made by `python3 -m occtools entropy-report {doc['dump_dir']} {out_prefix}`.", "",
             "| link | messages | method | raw b/v (cut) | zstd -19 b/v (cut) | order-0 b/v (cut) | code entropy b/v |",
             "|---|---|---|---|---|---|---|"]
    for link, s in doc["summary"].items():
        for method in FORMATS:
            r = s[method]
            lines.append(f"| {link} | {s['messages']} | {method} | {r['raw']:.3f} ({16 / r['raw']:.2f}x) | "
                         f"{r['zstd']:.3f} ({16 / r['zstd']:.2f}x) | {r['order0']:.3f} ({16 / r['order0']:.2f}x) | "
                         f"{r['code_entropy']:.3f} |")
    return "\n".join(lines) + "\n"


def main(a):
    if a.from_json:
        with open(a.from_json) as f:
            doc = json.load(f)
        out_prefix = a.from_json.removesuffix(".json")
    elif a.dump_dir and a.out_prefix:
        doc = measure(a.dump_dir, a.label)
        out_prefix = a.out_prefix
        with open(out_prefix + ".json", "w") as f:
            json.dump(doc, f, indent=1)
    else:
        raise Failure("give DUMP_DIR OUT_PREFIX, or --from-json FILE")
    text = markdown(doc, out_prefix)
    with open(out_prefix + ".md", "w") as f:
        f.write(text)
    print(text)
    return 0

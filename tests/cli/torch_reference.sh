#!/usr/bin/env bash
# labels: reference
# The fp32 engine against an independent float64 PyTorch model: `optimus-cc reference-dump`
# writes the initial weights, step-0 logits/loss/gradients and the losses of a few AdamW
# steps; tests/reference/check_against_torch.py recomputes them all and compares.
# Usage (CTest): bash tests/cli/torch_reference.sh BIN SOURCE_DIR
#
# The configurations are chosen so that the check can actually see training mistakes: the
# checker's --require-sensitive names deviations (skipped clipping, weight decay on the wrong
# tensors, the wrong decay style, ...) that must move some compared quantity by more than
# twice the tolerance in that configuration; --require-clipping asserts clipping fires.
set -uo pipefail

BIN=${1:?usage: bash tests/cli/torch_reference.sh BIN SOURCE_DIR}
SRC=${2:?usage: bash tests/cli/torch_reference.sh BIN SOURCE_DIR}
PY=/usr/bin/python3
CHECK="$SRC/tests/reference/check_against_torch.py"

if [[ ! -x $PY ]]; then
  echo "FAIL: $PY not found; the reference check needs Debian's python3 with python3-torch" \
       "(see the README setup)"
  exit 1
fi
if ! why=$("$PY" -c 'import torch, numpy' 2>&1); then
  echo "FAIL: $PY cannot import torch/numpy, so the PyTorch reference check cannot run."
  echo "      This is a setup bug, not a skip: install python3-torch (README setup)."
  echo "$why" | tail -n 3 | sed 's/^/      /'
  exit 1
fi
if [[ ! -x $BIN ]]; then
  echo "FAIL: $BIN is not an executable (build it first)"
  exit 1
fi
if [[ ! -f $CHECK ]]; then
  echo "FAIL: $CHECK not found (is SOURCE_DIR '$SRC' right?)"
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/occ-torch-reference.XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'rm -rf "$tmp"' EXIT

failures=()

# run_case NAME "CHECKER OPTIONS" FLAGS...
run_case() {
  local name=$1 checkopts=$2
  shift 2
  local out="$tmp/$name.safetensors"
  echo
  echo "=== $name: optimus-cc reference-dump $*"
  timeout 300 "$BIN" reference-dump --out "$out" "$@" >"$tmp/$name.log" 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: reference-dump exited with status $rc; its output:"
    tail -n 40 "$tmp/$name.log"
    failures+=("$name: reference-dump exited with status $rc")
    return
  fi
  # shellcheck disable=SC2086  # checkopts is a list of words
  timeout 600 "$PY" "$CHECK" "$out" $checkopts -- "$@"
  rc=$?
  if [[ $rc -ne 0 ]]; then
    failures+=("$name: check_against_torch.py failed (status $rc)")
  fi
}

# (a) padded vocab (300 -> 384), warm-up + cosine decay, a clip small enough to fire on every
# step, a large Adam eps so that the clipping scale shows through Adam, strong decoupled
# weight decay so that its mask (2-D tensors incl. both embeddings only) is visible.
run_case a "--require-clipping --require-sensitive=no_clip,clip_norm_per_tensor,wd_none,wd_all,wd_matrices_only,coupled_wd,lr_off_by_one,no_warmup,style_linear,style_constant" \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 \
  --max-position-embeddings 16 --vocab-size 300 --micro-batch-size 3 --steps 8 --seed 1234 \
  --lr 3e-2 --min-lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 1.0 \
  --adam-beta1 0.9 --adam-beta2 0.999 --adam-eps 1e-4 --clip-grad 0.05

# (b) 3 layers, 6 heads of 8, unused position rows (32 > 12), vocab 130 -> 256, linear decay,
# non-default Adam betas, clip 1.0.
run_case b "--require-clipping --require-sensitive=no_clip,clip_norm_per_tensor,coupled_wd,lr_off_by_one,no_warmup,style_cosine,style_constant" \
  --num-layers 3 --hidden-size 48 --num-attention-heads 6 --seq-length 12 \
  --max-position-embeddings 32 --vocab-size 130 --micro-batch-size 2 --steps 7 --seed 7 \
  --lr 2e-2 --min-lr 2e-3 --lr-warmup-iters 3 --lr-decay-style linear --weight-decay 0.3 \
  --adam-beta1 0.8 --adam-beta2 0.95 --adam-eps 1e-8 --clip-grad 1.0

# (c) one layer, no vocab padding (128), no warm-up; a 10x init std makes the MLP
# pre-activations O(1), so that an exact-erf GeLU in place of the tanh one is visible.
run_case c "--require-sensitive=gelu_erf,coupled_wd,lr_off_by_one,style_linear,style_constant" \
  --num-layers 1 --hidden-size 64 --num-attention-heads 2 --seq-length 8 \
  --max-position-embeddings 8 --vocab-size 128 --micro-batch-size 4 --steps 4 --seed 99 \
  --init-method-std 0.2 --lr 1e-2 --min-lr 0 --lr-warmup-iters 0 --lr-decay-style cosine \
  --weight-decay 0.01 --clip-grad 1.0

# (d) the Llama family: RMSNorm, SwiGLU (Megatron's default width int(8h/3 / 64) * 64 = 128),
# RoPE (rotate-half, base 500 so that a wrong base shows at 16 positions), 4 query heads in 2
# groups, an untied output layer, no linear biases; a 10x init std makes every variant's
# deviation (interleaved RoPE pairs, mean-subtracting norm, swapped gate/up, wrong k/v head
# per query head, the head tied back to the embedding) visible.
run_case d "--require-clipping --require-sensitive=swiglu_swapped,rmsnorm_centered,rope_interleaved,rope_base_10000,gqa_interleaved_groups,tied_head,coupled_wd,lr_off_by_one,style_linear" \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 \
  --seq-length 16 --max-position-embeddings 16 --vocab-size 300 --micro-batch-size 3 --steps 6 --seed 11 \
  --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --position-embedding-type rope --rotary-base 500 \
  --untie-embeddings-and-output-weights --disable-bias-linear --init-method-std 0.2 \
  --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 1 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 0.5

# (e) the variants apart: RoPE on half of each head's dimensions, one k/v head for all 4 query
# heads (multi-query), SwiGLU of an explicit width, with biases and tied embeddings.
run_case e "--require-sensitive=swiglu_swapped,rmsnorm_centered,rope_interleaved,coupled_wd" \
  --num-layers 1 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 1 \
  --seq-length 12 --max-position-embeddings 12 --vocab-size 130 --micro-batch-size 2 --steps 4 --seed 3 \
  --normalization RMSNorm --swiglu --ffn-hidden-size 96 --position-embedding-type rope --rotary-percent 0.5 \
  --init-method-std 0.2 --lr 1e-2 --min-lr 0 --lr-warmup-iters 0 --lr-decay-style linear --weight-decay 0.01

echo
if [[ ${#failures[@]} -ne 0 ]]; then
  echo "torch_reference: FAILED"
  printf '  - %s\n' "${failures[@]}"
  exit 1
fi
echo "torch_reference: all configurations match PyTorch"

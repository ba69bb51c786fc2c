#!/usr/bin/env bash
# labels: data
# generate with its KV cache against the uncached forward (--no-kv-cache, the whole window
# per token): for a Llama-style model (RoPE, GQA) and a GPT-2 one (learned positions), the
# 48-token greedy continuation is identical and the logits each token was chosen from agree
# within 1e-5; a prompt longer than the context (seq-length 32) slides the window as before,
# identically with and without the cache; --top-p keeps sampling deterministic for a seed and
# --top-p 1e-6 is greedy. Prints (does not assert) tokens/s at 256 new tokens both ways.
source "$(dirname "$0")/fixture/lib.sh"
FIX=$SRC/tests/cli/fixture
BASE=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 2 --hidden-size 64
      --num-attention-heads 4 --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --eval-iters 0 --lr 3e-3)
LLAMA=(--normalization RMSNorm --swiglu --position-embedding-type rope --group-query-attention --num-query-groups 2
       --untie-embeddings-and-output-weights --disable-bias-linear --ffn-hidden-size 96)
PROMPT="And it came to pass, when the men of the city saw that"
gen() {  # gen CKPT OUT FLAGS...: generate into WORK/OUT.{txt,safetensors,err}
  local ckpt=$1 out=$2
  shift 2
  "$BIN" generate --load "$WORK/$ckpt" --print-ids --logits-out "$WORK/$out.safetensors" "$@" > "$WORK/$out.txt" \
    2> "$WORK/$out.err" || { cat "$WORK/$out.err"; failed "$out: generate failed"; return 1; }
}
equal_runs() {  # equal_runs NAME A B TOL: same ids, step logits within TOL
  local out
  if cmp -s <(grep '^ids:' "$WORK/$2.txt") <(grep '^ids:' "$WORK/$3.txt") &&
     out=$("$PY" - "$WORK/$2.safetensors" "$WORK/$3.safetensors" "$4" "$FIX" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[4])
from safetensors_compare import read
a, _ = read(sys.argv[1]); b, _ = read(sys.argv[2])
d = max(np.abs(a[k].astype(float) - b[k].astype(float)).max() for k in ("prompt_logits", "step_logits"))
print(f"{a['step_logits'].shape[0]} steps, max |logit diff| {d:.2e}")
sys.exit(0 if d <= float(sys.argv[3]) else 1)
PY
  ); then pass "$1: same tokens, $out"
  else echo "$out"; diff <(grep '^ids:' "$WORK/$2.txt") <(grep '^ids:' "$WORK/$3.txt") | head -3; failed "$1"; fi
}
for arch in llama gpt2; do
  extra=()
  [[ $arch == llama ]] && extra=("${LLAMA[@]}")
  MODEL=("${BASE[@]}" "${extra[@]}" --seq-length 64 --max-position-embeddings 64)
  train_run $arch 1 --save "$WORK/$arch" || continue
  gen $arch ${arch}_kv --prompt "$PROMPT" --temperature 0 --max-new-tokens 48 &&
    gen $arch ${arch}_nokv --prompt "$PROMPT" --temperature 0 --max-new-tokens 48 --no-kv-cache &&
    equal_runs "$arch: KV-cached greedy = uncached" ${arch}_kv ${arch}_nokv 1e-5
  gen $arch ${arch}_p1 --prompt "$PROMPT" --top-p 0.9 --temperature 1 --seed 3 --max-new-tokens 24 &&
    gen $arch ${arch}_p2 --prompt "$PROMPT" --top-p 0.9 --temperature 1 --seed 3 --max-new-tokens 24 --no-kv-cache &&
    equal_runs "$arch: --top-p 0.9 sampling with a seed, cached = uncached" ${arch}_p1 ${arch}_p2 1e-5
  gen $arch ${arch}_p0 --prompt "$PROMPT" --top-p 1e-6 --temperature 1 --max-new-tokens 48 &&
    cmp -s <(grep '^ids:' "$WORK/${arch}_p0.txt") <(grep '^ids:' "$WORK/${arch}_kv.txt") &&
    pass "$arch: --top-p 1e-6 samples the greedy tokens" || failed "$arch: --top-p 1e-6 is not greedy"
done
# A prompt longer than the context (32): the window slides, with or without the cache.
MODEL=("${BASE[@]}" "${LLAMA[@]}" --seq-length 32 --max-position-embeddings 32)
LONG="$PROMPT $PROMPT $PROMPT $PROMPT"
train_run short 1 --save "$WORK/short" && gen short short_kv --prompt "$LONG" --temperature 0 --max-new-tokens 20 &&
  gen short short_nokv --prompt "$LONG" --temperature 0 --max-new-tokens 20 --no-kv-cache &&
  equal_runs "a prompt longer than the context: the sliding window, cached = uncached" short_kv short_nokv 1e-5
# Speed at 256 new tokens (context 288): measured, printed.
MODEL=("${BASE[@]}" "${LLAMA[@]}" --seq-length 288 --max-position-embeddings 288 --train-iters 1)
if train_run long 1 --save "$WORK/long"; then
  for run in 1 2; do
    for kv in --kv-cache --no-kv-cache; do
      "$BIN" generate --load "$WORK/long" --prompt "$PROMPT" --temperature 0 --max-new-tokens 256 $kv --print-speed 2>&1 >/dev/null |
        grep '^generate:' | sed "s/^/  run $run: /"
    done
  done
fi
finish

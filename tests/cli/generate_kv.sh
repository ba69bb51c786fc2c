#!/usr/bin/env bash
# labels: data
# generate with its KV cache against the uncached forward (--no-kv-cache, the whole window
# per token): for a Llama-style model (RoPE, GQA) and a GPT-2 one (learned positions), the
# 40-token greedy continuation (the 21-token prompt and 40 new tokens fit the context of 64) is identical and the logits each token was chosen from agree
# within 1e-5; a prompt longer than the context (seq-length 32), or more new tokens than the
# context holds after the prompt, is refused naming the lengths (as Megatron refuses prompt +
# tokens_to_generate beyond its positions), and the default --max-new-tokens stops at the context;
# with --sliding-window the window slides, identically with and without the cache; --top-p keeps sampling deterministic for a seed and
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
  gen $arch ${arch}_kv --prompt "$PROMPT" --temperature 0 --max-new-tokens 40 &&
    gen $arch ${arch}_nokv --prompt "$PROMPT" --temperature 0 --max-new-tokens 40 --no-kv-cache &&
    equal_runs "$arch: KV-cached greedy = uncached" ${arch}_kv ${arch}_nokv 1e-5
  gen $arch ${arch}_p1 --prompt "$PROMPT" --top-p 0.9 --temperature 1 --seed 3 --max-new-tokens 24 &&
    gen $arch ${arch}_p2 --prompt "$PROMPT" --top-p 0.9 --temperature 1 --seed 3 --max-new-tokens 24 --no-kv-cache &&
    equal_runs "$arch: --top-p 0.9 sampling with a seed, cached = uncached" ${arch}_p1 ${arch}_p2 1e-5
  gen $arch ${arch}_p0 --prompt "$PROMPT" --top-p 1e-6 --temperature 1 --max-new-tokens 40 &&
    cmp -s <(grep '^ids:' "$WORK/${arch}_p0.txt") <(grep '^ids:' "$WORK/${arch}_kv.txt") &&
    pass "$arch: --top-p 1e-6 samples the greedy tokens" || failed "$arch: --top-p 1e-6 is not greedy"
done
# A prompt longer than the context (32), or too many new tokens: refused, naming the lengths;
# the default number of new tokens stops at the context; --sliding-window slides the window.
MODEL=("${BASE[@]}" "${LLAMA[@]}" --seq-length 32 --max-position-embeddings 32)
LONG="$PROMPT $PROMPT $PROMPT $PROMPT"
refused() {  # refused NAME PATTERN FLAGS...: one error line matching PATTERN, no --logits-out file
  local name=$1 pattern=$2
  shift 2
  rm -f "$WORK/refused.safetensors"
  if ! "$BIN" generate --load "$WORK/short" --logits-out "$WORK/refused.safetensors" "$@" > "$WORK/refused.log" 2>&1 &&
     [[ $(grep -c '^error:' "$WORK/refused.log") -eq 1 ]] && grep '^error:' "$WORK/refused.log" | grep -Eq "$pattern" &&
     [[ ! -e $WORK/refused.safetensors ]]; then
    pass "$name refused: $(grep '^error:' "$WORK/refused.log" | cut -c1-200)"
  else
    tail -n 3 "$WORK/refused.log"; failed "$name: not refused with one error line matching /$pattern/"
  fi
}
if train_run short 1 --save "$WORK/short"; then
  refused "a prompt longer than the context" "the prompt is [0-9]+ tokens, more than the 32 positions .*--seq-length.*shorter prompt"     --prompt "$LONG" --temperature 0 --max-new-tokens 1
  refused "prompt + --max-new-tokens beyond the context" "the prompt's 5 tokens and --max-new-tokens 28 need 33 positions, more than the 32 .*pass --max-new-tokens 27 or less"     --prompt-ids 5,17,300,2,99 --temperature 0 --max-new-tokens 28
  gen short short_fill --prompt-ids 5,17,300,2,99 --temperature 0 --top-k 0 &&
    "$PY" - "$WORK/short_fill.safetensors" "$FIX" <<'PY' && pass "the default --max-new-tokens stops at the context: 5 prompt positions + 27 new tokens (unless an end of document comes first)" || failed "the default --max-new-tokens"
import sys
sys.path.insert(0, sys.argv[2])
from safetensors_compare import read
t, _ = read(sys.argv[1])
assert t["prompt_logits"].shape[0] == 5, t["prompt_logits"].shape
assert 5 < t["tokens"].shape[0] <= 32 and t["step_logits"].shape[0] <= 27, (t["tokens"].shape, t["step_logits"].shape)
PY
  gen short short_kv --prompt "$LONG" --temperature 0 --max-new-tokens 20 --sliding-window &&
    gen short short_nokv --prompt "$LONG" --temperature 0 --max-new-tokens 20 --no-kv-cache --sliding-window &&
    equal_runs "--sliding-window: a prompt longer than the context, the window slides, cached = uncached" short_kv short_nokv 1e-5
fi
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

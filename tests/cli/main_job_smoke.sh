#!/usr/bin/env bash
# labels: smoke
# The main job in miniature: train on the corpus with evaluation, save, then
# generate from the checkpoint. Validation loss must fall and metrics hold the
# documented fields.
source "$(dirname "$0")/fixture/lib.sh"
"$BIN" train "${TINY[@]}" --train-iters 30 --eval-interval 10 --eval-iters 2 --lr 3e-3 --save "$WORK/ckpt" \
  --metrics "$WORK/m.jsonl" > "$WORK/train.log" 2>&1 || { cat "$WORK/train.log"; failed "training"; finish; exit; }
/usr/bin/python3 - "$WORK/m.jsonl" <<'PY' && pass "metrics fields present; validation loss fell" || failed "metrics / validation loss"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 30, len(rows)
for r in rows:
    for k in ("iter", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "timers"):
        assert k in r, k
    for k in ("forward", "backward", "optimizer", "data"):
        assert k in r["timers"], k
vals = [r["val_loss"] for r in rows if "val_loss" in r]
assert len(vals) == 3, vals
assert vals[-1] < vals[0] - 0.1, vals
print("validation losses:", vals)
PY
out=$("$BIN" generate --load "$WORK/ckpt" --tokenizer-model "$DATA/kjv.model" --prompt "And God said" \
  --max-new-tokens 20 --seed 5 2>&1) && [[ $out == "And God said"* ]] && pass "generate: $out" || failed "generate: $out"
out2=$("$BIN" generate --load "$WORK/ckpt" --tokenizer-model "$DATA/kjv.model" --prompt "And God said" \
  --max-new-tokens 20 --seed 5 2>&1)
[[ $out == "$out2" ]] && pass "generate is reproducible for a seed" || failed "generate differs for the same seed"
finish

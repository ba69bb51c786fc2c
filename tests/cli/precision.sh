#!/usr/bin/env bash
# labels: precision
# --bf16 / --fp16 (Megatron's mixed precision) on the CPU backend, where the
# reduced formats are applied by bit-exact rounding of fp32 storage (the numerics
# reference for the GPU): the step really computes in the format (losses differ
# from fp32's), training still tracks fp32 closely, recomputation stays
# bit-identical, --fp16's dynamic loss scaler skips overflowing iterations and
# backs off (counted in the metrics), and a resumed fp16 run continues exactly.
source "$(dirname "$0")/fixture/lib.sh"
N=12
RUN=("${TINY[@]}" --train-iters $N --hidden-dropout 0.1 --attention-dropout 0.1 --seed 3 --lr 3e-3
     --eval-interval 6)

train() {  # train NAME FLAGS...
  local name=$1
  shift
  "$BIN" train "${RUN[@]}" --metrics "$WORK/$name.jsonl" "$@" > "$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log"; failed "$name run exited non-zero"; return 1; }
}
col() { "$PY" -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l); print(j['iter'], repr(j.get(sys.argv[2])))" "$1" "$2"; }

train fp32 && train bf16 --bf16 && train bf16_full --bf16 --recompute-granularity full \
  && train fp16 --fp16 --loss-scale 4096 \
  && train fp16dyn --fp16 --loss-scale-window 4 --initial-loss-scale 16777216 || { finish; exit; }

if diff -q <(col "$WORK/fp32.jsonl" loss) <(col "$WORK/bf16.jsonl" loss) > /dev/null; then
  failed "bf16 losses equal fp32's bit for bit: nothing was rounded"
else
  pass "bf16 losses differ from fp32 (the step computes in bf16)"
fi
# fp16 with a static scale that never overflows here, so every iteration updates.
"$PY" - "$WORK/fp32.jsonl" "$WORK/bf16.jsonl" "$WORK/fp16.jsonl" <<'PY' && pass "bf16 and fp16 (static scale 4096) track fp32: validation loss within 1 %" || failed "reduced precision drifted from fp32"
import json, sys
rows = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
base = {r['iter']: r['val_loss'] for r in rows[0] if 'val_loss' in r}
ok = True
for name, rs in zip(('bf16', 'fp16'), rows[1:]):
    for r in rs:
        if 'val_loss' in r:
            rel = abs(r['val_loss'] - base[r['iter']]) / base[r['iter']]
            print(f"  {name} iter {r['iter']}: val {r['val_loss']:.5f} vs fp32 {base[r['iter']]:.5f} ({100*rel:.3f} %)")
            ok &= rel < 0.01
skipped = [json.loads(l).get('skipped_iters') for l in open(sys.argv[3])]
print('  fp16 static scale, skipped_iters:', skipped)
ok &= skipped[-1] == 0
sys.exit(0 if ok else 1)
PY
if diff <(col "$WORK/bf16.jsonl" loss) <(col "$WORK/bf16_full.jsonl" loss) > /dev/null; then
  pass "bf16 with full recomputation: losses bit-identical"
else
  failed "bf16 recomputation changed the losses"
fi

# fp16: an initial scale of 2^24 overflows fp16 at once: skipped, then backed off
# (hysteresis 2); with window 4 the scale doubles after 4 clean iterations.
"$PY" - "$WORK/fp16dyn.jsonl" <<'PY' && pass "fp16: overflowing iterations skipped and counted, the scale backs off and grows" || failed "fp16 loss scaling"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
scales = [r['loss_scale'] for r in rows]
skipped = [r['skipped_iters'] for r in rows]
print('  loss_scale per iteration:', scales)
print('  skipped_iters:', skipped)
assert skipped[0] == 1 and skipped[-1] >= 2, 'the 2^24 start should overflow and be skipped'
assert all(b >= a for a, b in zip(skipped, skipped[1:])), 'skipped count must not fall'
assert min(scales) < 2.0**24, 'the scale never backed off'
ups = [i for i in range(1, len(scales)) if scales[i] == 2 * scales[i - 1]]
assert ups, 'the scale never grew after a clean window'
i = len(skipped) - 1
assert skipped[-1] < len(rows), 'every iteration skipped'
PY

# fp16 resume: N/2 iterations, save, resume to N == straight (the scaler state is checkpointed).
H=$((N / 2))
train straight16 --fp16 --loss-scale-window 4 --initial-loss-scale 16777216 --save "$WORK/s16" --save-interval $H \
  && mkdir -p "$WORK/r16" && cp -r "$WORK/s16/iter_$(printf %07d $H)" "$WORK/r16/" \
  && echo $H > "$WORK/r16/latest_checkpointed_iteration.txt" \
  && train resumed16 --fp16 --loss-scale-window 4 --initial-loss-scale 16777216 --load "$WORK/r16" --save "$WORK/r16" --save-interval $H \
  || { finish; exit; }
after() { "$PY" -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if j['iter']>$H: print(j['iter'], repr(j['loss']), j['loss_scale'], j['skipped_iters'])" "$1"; }
if diff <(after "$WORK/straight16.jsonl") <(after "$WORK/resumed16.jsonl"); then
  pass "fp16 resume: losses, loss scale and skipped count continue exactly"
else
  failed "fp16 resume differs"
fi
final=iter_$(printf %07d $N)/mp_rank_00_000/model_optim_rng.bin
cmp -s "$WORK/s16/$final" "$WORK/r16/$final" && pass "fp16 resume: final checkpoint bit-identical" \
  || failed "fp16 resume: final checkpoints differ"

out=$("$BIN" train "${RUN[@]}" --bf16 --fp16 2>&1); rc=$?
if ((rc != 0)) && grep -q "exclude each other" <<< "$out"; then pass "--bf16 --fp16 refused: $out"
else failed "--bf16 --fp16: exit $rc, $out"; fi
out=$("$BIN" train "${RUN[@]}" --fp16 --inter-grad-comp 2>&1); rc=$?
if ((rc != 0)) && grep -q "fp16 cannot be combined with --inter-grad-comp" <<< "$out"; then pass "--fp16 with compression refused: $out"
else failed "--fp16 --inter-grad-comp: exit $rc, $out"; fi
# Stateless methods keep nothing an overflow could poison: accepted; with LEP they keep a residual: refused.
out=$("$BIN" train "${RUN[@]}" --fp16 --inter-grad-comp --inter-grad-comp-method int8 2>&1); rc=$?
((rc == 0)) && pass "--fp16 with stateless int8 CB trains" || failed "--fp16 with int8 CB: exit $rc, $(tail -2 <<< "$out")"
out=$("$BIN" train "${RUN[@]}" --fp16 --inter-grad-comp --inter-grad-comp-method int8 --use-error-feedback 2>&1); rc=$?
if ((rc != 0)) && grep -q "fp16 cannot be combined" <<< "$out"; then pass "--fp16 with int8 CB + LEP refused"
else failed "--fp16 int8 CB + LEP: exit $rc, $out"; fi
finish

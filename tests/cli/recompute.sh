#!/usr/bin/env bash
# labels: recompute
# Activation recomputation (--recompute-activations = selective, --recompute-granularity
# full) replays the forward kernels with the same inputs and dropout keys, so a run
# with it must give bit-identical losses and final weights, on one process and on
# P2 and T2 layouts, while holding less activation memory (peak_tensor_mib, exact).
source "$(dirname "$0")/fixture/lib.sh"
N=4
RUN=("${TINY[@]}" --train-iters $N --hidden-dropout 0.1 --attention-dropout 0.1 --seed 5 --save-interval $N)

# train NAME RANKS FLAGS...
train() {
  local name=$1 np=$2
  shift 2
  local launch=("$BIN")
  ((np > 1)) && launch=(mpirun --oversubscribe -np "$np" "$BIN")
  "${launch[@]}" train "${RUN[@]}" --save "$WORK/$name" --metrics "$WORK/$name.jsonl" "$@" > "$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log"; failed "$name run exited non-zero"; return 1; }
}
losses() { "$PY" -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l); print(j['iter'], repr(j['loss']), repr(j['grad_norm']), repr(j.get('val_loss')))" "$1"; }
peak() { "$PY" -c "
import json,sys
print(max(json.loads(l)['timers']['peak_tensor_mib'] for l in open(sys.argv[1])))" "$1"; }
same_run() {  # same_run A B WHAT: losses, norms and every final shard identical
  local a=$1 b=$2 what=$3
  if diff <(losses "$WORK/$a.jsonl") <(losses "$WORK/$b.jsonl") > /dev/null; then
    pass "$what: losses, grad norms and validation losses bit-identical"
  else
    failed "$what: losses differ"; diff <(losses "$WORK/$a.jsonl") <(losses "$WORK/$b.jsonl") | head -5
  fi
  local final=iter_$(printf %07d $N) differ=0 shards=0
  for f in "$WORK/$a/$final"/*/model_optim_rng.bin; do
    shards=$((shards + 1))
    cmp -s "$f" "$WORK/$b/$final/${f#"$WORK/$a/$final/"}" || differ=1
  done
  if ((shards > 0 && differ == 0)); then pass "$what: final weights and Adam moments bit-identical ($shards shards)"
  else failed "$what: final checkpoints differ"; fi
}

train base 1 && train selective 1 --recompute-activations && train full 1 --recompute-granularity full \
  && train selective2 1 --recompute-granularity selective || { finish; exit; }
same_run base selective "selective (--recompute-activations)"
same_run base selective2 "selective (--recompute-granularity selective)"
same_run base full "full"
grep -q "recompute: full" "$WORK/full.log" && pass "the choice is printed" || failed "no 'recompute: full' line"
pb=$(peak "$WORK/base.jsonl") ps=$(peak "$WORK/selective.jsonl") pf=$(peak "$WORK/full.jsonl")
echo "peak_tensor_mib: none $pb, selective $ps, full $pf"
"$PY" -c "import sys; b,s,f=map(float,sys.argv[1:]); sys.exit(0 if f < s < b else 1)" "$pb" "$ps" "$pf" \
  && pass "peak tensor memory falls: none $pb > selective $ps > full $pf MiB" \
  || failed "peak tensor memory does not fall with recomputation ($pb, $ps, $pf MiB)"

PP=(--pipeline-model-parallel-size 2)
train p2 2 "${PP[@]}" && train p2_full 2 "${PP[@]}" --recompute-granularity full && same_run p2 p2_full "P2 full"
TP=(--tensor-model-parallel-size 2)
train t2 2 "${TP[@]}" && train t2_sel 2 "${TP[@]}" --recompute-activations && same_run t2 t2_sel "T2 selective"

out=$("$BIN" train "${RUN[@]}" --save "$WORK/bad" --recompute-granularity block 2>&1); rc=$?
if ((rc != 0)) && grep -q "recompute-granularity block is not known" <<< "$out"; then
  pass "unknown granularity refused: $out"
else
  failed "unknown granularity: exit $rc, output: $out"
fi
finish

#!/usr/bin/env bash
# labels: parallel checkpoint
# Error feedback on DiLoCo's outer gradients (--diloco-outer-comp-error-feedback,
# train/diloco.h; issue 50 item 5), on diloco.sh's 4-layer model of hidden 32, D2:
#  (a) the arithmetic against NumPy (tests/cli/fixture/diloco_check.py): each replica
#      sends code(Delta_i + e_i) with topk2 at density 0.05, its residual follows
#      e <- m - decode(code(m)) from sync to sync starting at zero, and the outer step
#      and landing match as without EF; EF is off by default (topk2 included) and changes
#      the training when on (losses differ; the log's "data parallel:" line says + EF);
#  (b) the bytes: every rank's per-iteration counters are identical with and without EF
#      (--no-diloco-outer-comp-error-feedback; topk2 at its default density 0.02, and
#      lloydmax2 behind a Hadamard rotation), and equal DiLoCo's byte rule;
#  (c) resuming mid-round continues bit for bit with the residual in the checkpoint
#      (losses and every file of the final checkpoint), plain (saved after a sync, the
#      residual nonzero) and streaming (2 fragments, tau 1: a sync in flight at the save);
#  (d) a P2 D2 job with EF trains as the P1 D2 job (each tensor is coded alike however the
#      replica is split into stages; losses within 1e-5).
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1
source "$(dirname "$0")/fixture/diloco_model.sh"
EF=(--diloco-outer-comp-error-feedback)
NO_EF=(--no-diloco-outer-comp-error-feedback)
TOPK2=(--diloco-outer-comp-method topk2 --diloco-outer-comp-topk-density 0.05)
check() {  # NAME -- COMMAND...: passes when COMMAND succeeds, printing its last line
  local name=$1 out
  shift 2
  if out=$("$@" 2>&1); then pass "$name: $(tail -1 <<< "$out")"; else failed "$name: $out"; fi
}

# (a) NumPy, 3 syncs of H 2 (the 2nd and 3rd carry a residual); EF's losses differ from the
# default's (EF off, topk2 included).
train_run ef 2 --train-iters 6 --diloco-inner-steps 2 "${TOPK2[@]}" "${EF[@]}" --debug-diloco-dump "$WORK/dump_ef" &&
  check "D2 topk2 + EF against NumPy" -- "$PY" "$CHECK" outer-step "$WORK/dump_ef" --lr 0.7 --momentum 0.9 \
    --comp topk2 --density 0.05 --error-feedback
train_run no_ef 2 --train-iters 6 --diloco-inner-steps 2 "${TOPK2[@]}" &&
  check "EF off by default, on when asked, as the logs say" -- bash -c 'grep "^data parallel:" "$1" | grep -v "+ EF" &&
    grep "^data parallel:" "$2" | grep "outer gradients topk2.* + EF$"' _ "$WORK/no_ef.log" "$WORK/ef.log" &&
  check "EF changes the training after the 2nd sync" -- "$PY" -c "
import json, sys
a, b = ({r['iter']: r['loss'] for r in map(json.loads, open(p))} for p in sys.argv[1:3])
same = [i for i in (1, 2, 3, 4) if a[i] == b[i]]
diff = [i for i in (5, 6) if a[i] != b[i]]
assert same == [1, 2, 3, 4] and diff, (a, b)
print(f'losses equal up to step 4 (one sync, no residual yet), then differ at steps {diff}')" \
    "$WORK/ef.jsonl" "$WORK/no_ef.jsonl"

# (b) Bytes: identical counters with and without EF, and DiLoCo's rule.
same_bytes() {  # NAME -- FLAGS... : the run with and without EF
  local name=$1
  shift 2
  train_run "${name}_ef" 2 --train-iters 4 --eval-iters 0 --diloco-inner-steps 2 "$@" "${EF[@]}" &&
    train_run "${name}_plain" 2 --train-iters 4 --eval-iters 0 --diloco-inner-steps 2 "$@" "${NO_EF[@]}" &&
    check "$name: bytes with EF = without" -- "$PY" -c "
import json, sys
a, b = ([[r['bytes'] for r in row['ranks']] for row in map(json.loads, open(p))] for p in sys.argv[1:3])
dp = sum(r.get('dp', 0) for row in a for r in row)
assert a == b and dp > 0, (a, b)
print(f'every rank and iteration identical ({dp} dp bytes in all)')" "$WORK/${name}_ef.jsonl" "$WORK/${name}_plain.jsonl"
}
same_bytes bytes_topk2 -- --diloco-outer-comp-method topk2 &&  # density 0.02, the default
  check "bytes_topk2 with EF: DiLoCo's rule" -- "$PY" "$CHECK" bytes "$WORK/bytes_topk2_ef.jsonl" --layers $L \
    --hidden $C --vocab $V --maxpos $S --pp 1 --dp 2 --iters 4 --inner-steps 2 --comp topk2
same_bytes bytes_lloydmax2 -- --diloco-outer-comp-method lloydmax2 --diloco-outer-comp-rotation hadamard:64

# (c) Resume mid-round, bit for bit (the residual is in every rank's DiLoCo state).
resume() {  # NAME RANKS STOP ITERS FLAGS...
  local name=$1 np=$2 stop=$3 iters=$4 final
  shift 4
  train_run "${name}_straight" "$np" --train-iters "$iters" "$@" --save "$WORK/${name}_straight" \
    --save-interval "$stop" || return
  mkdir -p "$WORK/${name}_resumed"
  cp -r "$WORK/${name}_straight/iter_$(printf %07d "$stop")" "$WORK/${name}_resumed/"
  echo "$stop" > "$WORK/${name}_resumed/latest_checkpointed_iteration.txt"
  train_run "${name}_resumed" "$np" --train-iters "$iters" "$@" --load "$WORK/${name}_resumed" \
    --save "$WORK/${name}_resumed" || return
  compare_losses "${name}_straight" "${name}_resumed" 0 $((stop + 1))
  final=iter_$(printf %07d "$iters")
  if diff -r -q "$WORK/${name}_straight/$final" "$WORK/${name}_resumed/$final" > "$WORK/diff" &&
      "$PY" -c "
import json, struct, sys
blob = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack_from('<Q', blob, 8)
names = [t['name'] for t in json.loads(blob[16:16 + n])['tensors']]
assert any(x.startswith('outer/residual/') for x in names), names[:5]" \
        "$(find "$WORK/${name}_straight/$final" -name 'diloco_dp_001.bin' | head -1)"; then
    pass "$name: every file of the final checkpoint bit-identical, the residual among them"
  else
    failed "$name: final checkpoints differ or hold no residual: $(head -3 "$WORK/diff")"
  fi
}
resume ef_resume 2 3 6 --diloco-inner-steps 2 "${TOPK2[@]}" "${EF[@]}"
resume ef_stream_resume 2 6 8 --diloco-inner-steps 4 --diloco-fragments 2 --diloco-overlap-steps 1 \
  "${TOPK2[@]}" "${EF[@]}"

# (d) P2 D2 = P1 D2 with EF.
train_run ef_p1 2 --train-iters 4 --diloco-inner-steps 2 "${TOPK2[@]}" "${EF[@]}" &&
  train_run ef_p2 4 --train-iters 4 --diloco-inner-steps 2 "${TOPK2[@]}" "${EF[@]}" \
    --pipeline-model-parallel-size 2 && compare_losses ef_p1 ef_p2 1e-5
finish

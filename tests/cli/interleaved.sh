#!/usr/bin/env bash
# labels: parallel
# Interleaved 1F1B (--num-layers-per-virtual-pipeline-stage): per-iteration loss
# and grad norm equal plain 1F1B's and single-process training's within relative
# 1e-5 for P2 and P4 with 2 model chunks per rank, with T2 and with D2 as well
# (dropout on: its masks are keyed by global layer). The --trace shows Megatron's
# interleaved order on every rank (written out below from Megatron's own
# definition: warm-up (P-s-1)*2 + (V-1)*P, chunk (k mod PV) div P, backwards
# reversed). CB + LEP + EC: every rank compresses exactly the backward sends it
# makes after its last forward (counted per rank, against that rule computed
# here), and a run resumes bit-exactly (one LEP residual per chunk link). The
# interleaved checkpoint exports to the same model as the plain one. Bad
# settings are refused with one line on every rank.
source "$(dirname "$0")/fixture/lib.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
COMPARE="$SRC/tests/cli/fixture/safetensors_compare.py"
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 8 --hidden-size 32
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 16 --eval-iters 0 --log-interval 1 --seed 11 --lr 3e-3 --hidden-dropout 0.1
       --attention-dropout 0.1)
ITERS=(--train-iters 5)

# Equal losses: single process, plain P2 / P4, interleaved P2 / P4 (2 chunks per rank), T2, D2.
train_run single 1 "${ITERS[@]}"
train_run p2 2 "${ITERS[@]}" --pipeline-model-parallel-size 2 --save "$WORK/p2.ckpt"
train_run p2v2 2 "${ITERS[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 \
  --save "$WORK/p2v2.ckpt" --trace "$WORK/p2v2.trace.json"
grep -q "schedule: interleaved 1F1B, 2 model chunks of 2 layers" "$WORK/p2v2.log" &&
  pass "p2v2 announces the interleaved schedule" || failed "p2v2 does not announce the interleaved schedule"
train_run p4 4 "${ITERS[@]}" --pipeline-model-parallel-size 4
train_run p4v2 4 "${ITERS[@]}" --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 \
  --trace "$WORK/p4v2.trace.json"
train_run t2p2v2 4 "${ITERS[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 2
train_run p2d2v2 4 "${ITERS[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
train_run p2v4 2 "${ITERS[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
train_run p2d2v2_zero 4 "${ITERS[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 \
  --use-distributed-optimizer
for name in p2 p2v2 p4 p4v2 t2p2v2 p2d2v2 p2v4 p2d2v2_zero; do compare_losses single $name; done
compare_losses p2 p2v2
compare_losses p4 p4v2

# int8 activation compression on every forward link, the last rank's wrap-around one included.
train_run p2v2_int8 2 "${ITERS[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 \
  --activation-comp-method int8
if out=$("$PY" - "$WORK/p2v2.jsonl" "$WORK/p2v2_int8.jsonl" <<'PY'
import json, sys
def fwd(p):  # pp_fwd bytes per rank, first iteration
    row = json.loads(open(p).readline())
    return [r["bytes"]["pp_fwd"] for r in sorted(row["ranks"], key=lambda r: r["rank"])]
plain, int8 = fwd(sys.argv[1]), fwd(sys.argv[2])
ok = all(0 < b < 0.3 * a for a, b in zip(plain, int8)) and len(plain) == 2
print(f"pp_fwd bytes per rank {plain} -> {int8}")
sys.exit(0 if ok else 1)
PY
); then pass "int8 activations on both ranks' forward links: $out"; else failed "int8 activations: $out"; fi

# Megatron's interleaved order on every rank, from the trace (5 iterations).
check_trace() {  # check_trace TRACE P V M ITERS
  local out
  if out=$("$PY" - "$@" <<'PY'
import json, re, sys
path, P, V, M, iters = sys.argv[1], *map(int, sys.argv[2:])
events = json.load(open(path))["traceEvents"]

def megatron(s):
    # forward_backward_pipelining_with_interleaving, written out from its definition.
    total = M * V
    if M == P:
        warm = total
    else:
        warm = min((P - s - 1) * 2 + (V - 1) * P, total)
    def chunk(k, forward):
        c = (k % (P * V)) // P
        return c if forward else V - c - 1
    seen = {}
    def op(kind, k):
        c = chunk(k, kind == "F")
        mb = seen.get((kind, c), 0)   # each chunk's micro-batches in order (Megatron's per-chunk queues)
        seen[(kind, c)] = mb + 1
        return f"{kind}{mb}.c{c}"
    ops = [op("F", k) for k in range(warm)]
    for k in range(total - warm):
        ops += [op("F", k + warm), op("B", k)]
    return ops + [op("B", k) for k in range(total - warm, total)]

bad = []
for s in range(P):
    tl = sorted((e for e in events if e.get("ph") == "X" and e["pid"] == s and e.get("tid") == 0),
                key=lambda e: e["ts"])
    got = [e["name"] for e in tl if re.fullmatch(r"[FB]\d+\.c\d+", e["name"])]
    want = megatron(s) * iters
    if got != want:
        bad.append(f"rank {s}: got {' '.join(got[:2 * M * V])} expected {' '.join(want[:2 * M * V])}")
print("; ".join(bad) if bad else f"{P} ranks x {iters} iterations follow Megatron's interleaved order "
      f"(rank 0: {' '.join(megatron(0))})")
sys.exit(1 if bad else 0)
PY
  ); then pass "trace $1: $out"; else failed "trace $1: $out"; fi
}
check_trace "$WORK/p2v2.trace.json" 2 2 8 5
check_trace "$WORK/p4v2.trace.json" 4 2 8 5

# CB + LEP + EC: compressed sends per rank = the backward sends after its last forward.
CB=(--inter-grad-comp --inter-grad-comp-rank 2 --use-error-feedback --inter-grad-comp-epilogue-only)
train_run p4v2_ec 4 "${ITERS[@]}" --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 "${CB[@]}"
if out=$("$PY" - "$WORK/p4v2_ec.jsonl" 4 2 8 <<'PY'
import json, sys
path, P, V, M = sys.argv[1], *map(int, sys.argv[2:])
def program(s):
    total, warm = M * V, (M * V if M == P else min((P - s - 1) * 2 + (V - 1) * P, M * V))
    def op(kind, k):
        c = (k % (P * V)) // P
        return (kind, c if kind == "F" else V - c - 1)
    ops = [op("F", k) for k in range(warm)]
    for k in range(total - warm):
        ops += [op("F", k + warm), op("B", k)]
    return ops + [op("B", k) for k in range(total - warm, total)]
def expected(s):
    ops = program(s)
    last_f = max(i for i, o in enumerate(ops) if o[0] == "F")
    sends = [o for o in ops if o[0] == "B" and o[1] * P + s > 0]   # virtual stage 0 sends nothing back
    late = [o for o in ops[last_f + 1:] if o[0] == "B" and o[1] * P + s > 0]
    return len(sends), len(late)
bad, shown = [], []
for row in map(json.loads, open(path)):
    for r in row["ranks"]:
        want = expected(r["pp"])
        got = (r["cb"]["sends"], r["cb"]["compressed"])
        if got != want:
            bad.append(f"iter {row['iter']} rank {r['rank']}: (sends, compressed) {got}, rule {want}")
        if row["iter"] == 1:
            shown.append(f"s{r['pp']} {got[1]}/{got[0]}")
print("; ".join(bad[:3]) if bad else "compressed/sent per rank " + ", ".join(shown) + " (the general rule's)")
sys.exit(1 if bad else 0)
PY
); then pass "EC counts: $out"; else failed "EC counts: $out"; fi
awk '/"iter"/' "$WORK/p4v2_ec.jsonl" | "$PY" -c "
import json, math, sys
rows = [json.loads(l) for l in sys.stdin]
sys.exit(0 if rows and all(math.isfinite(r['loss']) for r in rows) and rows[-1]['loss'] < rows[0]['loss'] else 1)" &&
  pass "CB + LEP + EC interleaved trains (loss falls)" || failed "CB + LEP + EC interleaved: loss not finite or not falling"

# Bit-exact resume with CB + LEP (one residual per chunk link) under interleaving.
RES=(--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 --inter-grad-comp
     --inter-grad-comp-rank 2 --use-error-feedback --train-iters 6)
train_run straight 2 "${RES[@]}"
train_run first_half 2 "${RES[@]}" --save "$WORK/half.ckpt" --exit-interval 3
train_run second_half 2 "${RES[@]}" --load "$WORK/half.ckpt"
cat "$WORK/first_half.jsonl" "$WORK/second_half.jsonl" > "$WORK/resumed.jsonl"
compare_losses straight resumed 0  # 0: bit-identical, iterations 1-3 saved + 4-6 resumed

# The interleaved checkpoint (layers 0,1,4,5 on rank 0) merges into the same model as plain P2's.
if "$BIN" export --load "$WORK/p2.ckpt" --out "$WORK/p2.safetensors" > "$WORK/e1.log" 2>&1 &&
   "$BIN" export --load "$WORK/p2v2.ckpt" --out "$WORK/p2v2.safetensors" > "$WORK/e2.log" 2>&1 &&
   out=$("$PY" "$COMPARE" "$WORK/p2.safetensors" "$WORK/p2v2.safetensors" --rel 1e-5 2>&1); then
  pass "export of the interleaved checkpoint equals plain P2's: $out"
else
  cat "$WORK/e1.log" "$WORK/e2.log" 2>/dev/null | tail -n 5
  failed "export of the interleaved checkpoint: ${out:-failed}"
fi

# Refusals: one line naming the problem on every rank, non-zero exit, no hang.
refuse() {  # refuse WHAT PATTERN RANKS FLAGS...
  local what=$1 pattern=$2 np=$3
  shift 3
  timeout 60 mpirun -np "$np" "$BIN" train "${MODEL[@]}" --train-iters 1 "$@" > "$WORK/refuse.log" 2>&1
  local rc=$?
  if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -q -- "$pattern" "$WORK/refuse.log"; then
    pass "refused $what: $(grep -m1 -- "$pattern" "$WORK/refuse.log")"
  else
    tail -n 5 "$WORK/refuse.log"
    failed "$what: not refused with '$pattern' (exit $rc)"
  fi
}
refuse "micro-batches not a multiple of P" "is not divisible by --pipeline-model-parallel-size 4" 4 \
  --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 12
refuse "chunk size not dividing a stage" "does not divide the 4 layers" 2 \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3
refuse "one chunk per stage" "puts all 4 layers of a stage in one model chunk" 2 \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4
refuse "a single stage" "needs --pipeline-model-parallel-size >= 2" 1 --num-layers-per-virtual-pipeline-stage 2
refuse "resuming an interleaved checkpoint as plain 1F1B" "use the saved run's --num-layers-per-virtual-pipeline-stage" 2 \
  --pipeline-model-parallel-size 2 --load "$WORK/p2v2.ckpt" --train-iters 6
finish

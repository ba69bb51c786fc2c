#!/usr/bin/env bash
# labels: compression
# Every Optimus-CC technique is lossless when nothing is dropped: at PowerSGD ranks
# >= min(n, m) of every compressed matrix, each variant reproduces the uncompressed
# baseline's loss per iteration (relative <= 1e-5), P2 D2 (4 ranks), dropout 0, 3 iterations.
#
#   CB matrix: micro-batch x seq = 2 x 32 = 64 token rows by hidden 64 columns, so CB rank 64
#   is lossless. DP PowerSGD matrices (shape[0] x rest): word embedding 512 x 64, position
#   embedding 32 x 64, QKV 192 x 64, attention out 64 x 64, MLP up 256 x 64, MLP down 64 x 256,
#   LM-head copy 512 x 64: min(n, m) <= 64, so DP rank 64 is lossless (after DP averaging too:
#   P = (sum_d M_d) Q spans range(sum_d M_d) when Q is square orthonormal).
#   FE is exact up to float reassociation (one all-reduce over 2 x DP ranks, then / DP).
#
# Variants: CB; CB+LEP; CB+LEP+EC; FE; DP PowerSGD + error feedback; SC (DP PowerSGD on
# stage 0 only); all together. FE also at T2P2 against the T2P2 baseline.
# Each variant must also show that it did compress (otherwise "equal" proves nothing):
# CB variants report compressed pipeline sends, DP variants other dp bytes than the
# baseline on the compressing stages, FE other emb bytes.
# --check-lep: at the lossless rank the residual LEP carries is ~0; at rank 4 it is not.
# The other methods' lossless setting is topk with fraction 1 (every entry sent, values
# exact): on CB (+ LEP, whose residual must then be exactly 0), on the forward activations,
# on DP (all-gathered, decoded, summed in rank order) with error feedback, and all at once.
#
# Why --adam-eps 1e-3 (as in layouts_equal.sh): with Adam's eps 1e-8 an element whose true
# gradient is ~0 gets an update of about lr * noise / |noise|, so the fp32 rounding of any
# other summation order (a PowerSGD reconstruction, a different all-reduce grouping) would
# become a sizable fraction of an lr step. A larger eps keeps the update proportional to the
# gradient, so only a real loss of information moves the loss.
source "$(dirname "$0")/fixture/lib.sh"
ITERS=3
MODEL=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 64
       --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
       --global-batch-size 8 --train-iters $ITERS --eval-iters 0 --log-interval 1 --seed 5
       --hidden-dropout 0 --attention-dropout 0 --adam-eps "${OCC_ADAM_EPS:-1e-3}")

# run NAME TP [flags...]: 4 ranks, P2 and DP = 4 / (2 TP).
run() {
  local name=$1 tp=$2
  shift 2
  if ! timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${MODEL[@]}" --pipeline-model-parallel-size 2 \
      --tensor-model-parallel-size "$tp" "$@" --metrics "$WORK/$name.jsonl" > "$WORK/$name.log" 2>&1; then
    tail -n 20 "$WORK/$name.log"
    failed "$name: training run failed"
    return 1
  fi
}

# compare REF NAME WHAT: losses within relative 1e-5; WHAT says what must show compression:
#   cb        every stage-1 rank reports compressed backward sends (cb.compressed > 0)
#   dp:STAGES the dp bytes of every rank on STAGES (comma list) differ from the reference's
#   dpsame:STAGES[@RUN] ... equal the reference's, or run RUN's (SC leaves those stages
#             uncompressed; with FE the word embedding is out of the DP all-reduce, so the
#             uncompressed comparison is the FE-only run)
#   At T2P2 (DP = 1) FE's group {first, last} x DP is the tied-embedding pair itself: the same
#   bytes as the baseline, so only the losses are compared there.
#   emb       the emb bytes differ from the reference's
#   fwd       the pp_fwd bytes differ from the reference's (activations went compressed)
compare() {
  local ref=$1 name=$2 out
  shift 2
  if out=$("$PY" - "$WORK" "$ref" "$name" $ITERS "$@" <<'EOF'
import json, sys
work = sys.argv[1]
load = lambda n: [json.loads(l) for l in open(f"{work}/{n}.jsonl")]  # noqa: E731
ref, got = load(sys.argv[2]), load(sys.argv[3])
iters, whats = int(sys.argv[4]), sys.argv[5:]
bad = []
if [r["iter"] for r in got] != list(range(1, iters + 1)) or len(ref) != iters:
    bad.append(f"iterations {[r['iter'] for r in got]} (reference {len(ref)})")
worst = 0.0
for r, g in zip(ref, got):
    rel = abs(g["loss"] - r["loss"]) / abs(r["loss"])
    worst = max(worst, rel)
    if rel > 1e-5:
        bad.append(f"iter {r['iter']}: loss {g['loss']!r} vs baseline {r['loss']!r} (relative {rel:.2e})")
for what in whats:
    for r, g in zip(ref, got):
        rr = {x["rank"]: x for x in r["ranks"]}
        for x in g["ranks"]:
            if what == "cb" and x["pp"] == 1 and x.get("cb", {}).get("compressed", 0) <= 0:
                bad.append(f"iter {g['iter']} rank {x['rank']}: no compressed backward send ({x.get('cb')})")
            if what.startswith("dp:") and str(x["pp"]) in what[3:].split(",") \
                    and x["bytes"]["dp"] == rr[x["rank"]]["bytes"]["dp"]:
                bad.append(f"iter {g['iter']} rank {x['rank']}: dp bytes {x['bytes']['dp']} as uncompressed")
            if what.startswith("dpsame:"):
                stages, _, other = what[7:].partition("@")
                want = {y["rank"]: y for y in load(other)[g["iter"] - 1]["ranks"]} if other else rr
                if str(x["pp"]) in stages.split(",") and x["bytes"]["dp"] != want[x["rank"]]["bytes"]["dp"]:
                    bad.append(f"iter {g['iter']} rank {x['rank']}: dp bytes {x['bytes']['dp']}, uncompressed "
                               f"{want[x['rank']]['bytes']['dp']} (stage must not compress)")
        if what == "emb" and g["bytes"]["emb"] == r["bytes"]["emb"]:
            bad.append(f"iter {g['iter']}: emb bytes {g['bytes']['emb']} as the baseline's")
        if what == "fwd" and g["bytes"]["pp_fwd"] == r["bytes"]["pp_fwd"]:
            bad.append(f"iter {g['iter']}: pp_fwd bytes {g['bytes']['pp_fwd']} as the baseline's")
for line in bad[:10]:
    print("   ", line)
print(f"worst relative loss difference {worst:.1e}")
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "$name reproduces the baseline's losses ($out)"
  else
    echo "$out"
    failed "$name differs from the baseline"
  fi
}

# check_lep NAME LO HI: every iteration's --check-lep record (last stage) has the LEP residual
# over the gradient it joins in [LO, HI], a cosine in [-1, 1] and activations that changed.
check_lep() {
  local name=$1 out
  if out=$("$PY" - "$WORK/$name.jsonl" "$2" "$3" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
lo, hi = float(sys.argv[2]), float(sys.argv[3])
bad, ratios = [], []
for r in rows:
    c = r.get("lep_check")
    if c is None:
        bad.append(f"iter {r['iter']}: no lep_check record")
        continue
    ratios.append(c["error_ratio"])
    if not lo <= c["error_ratio"] <= hi:
        bad.append(f"iter {r['iter']}: error_ratio {c['error_ratio']:.3g} outside [{lo}, {hi}]")
    if not -1 <= c["cosine"] <= 1 or not c["delta_ratio"] > 0:
        bad.append(f"iter {r['iter']}: cosine {c['cosine']}, delta_ratio {c['delta_ratio']}")
print("; ".join(bad[:5]) if bad else f"error_ratio {min(ratios):.2g}..{max(ratios):.2g}")
sys.exit(1 if bad else 0)
EOF2
  ); then pass "$name --check-lep: $out"; else failed "$name --check-lep: $out"; fi
}

CB=(--inter-grad-comp --inter-grad-comp-rank 64)
DPC=(--grad-comp --grad-comp-rank 64)
run base 1 && {
  run cb 1 "${CB[@]}" && compare base cb cb
  run cb_lep 1 "${CB[@]}" --use-error-feedback --check-lep && compare base cb_lep cb && check_lep cb_lep 0 1e-4
  # Lossy (rank 4 of 64 columns): the residual LEP carries is a sizable part of the gradient.
  run cb_lep_r4 1 --inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback --check-lep && check_lep cb_lep_r4 0.2 100
  run cb_lep_ec 1 "${CB[@]}" --use-error-feedback --inter-grad-comp-epilogue-only && compare base cb_lep_ec cb
  run fe 1 --emb-comm-opt && compare base fe emb
  run dp 1 "${DPC[@]}" --use-error-feedback && compare base dp dp:0,1
  run sc 1 "${DPC[@]}" --selective-grad-comp-way 1 && compare base sc dp:0 dpsame:1
  run all 1 "${CB[@]}" --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt "${DPC[@]}" \
    --selective-grad-comp-way 1 && compare base all cb dp:0 dpsame:1@fe emb
  TOPK1=(--inter-grad-comp --inter-grad-comp-method topk --inter-grad-comp-topk-fraction 1)
  run topk1_cb_lep 1 "${TOPK1[@]}" --use-error-feedback --check-lep && compare base topk1_cb_lep cb \
    && check_lep topk1_cb_lep 0 0
  run topk1_act 1 --activation-comp-method topk --activation-comp-topk-fraction 1 && compare base topk1_act fwd
  run topk1_dp 1 --grad-comp --grad-comp-method topk --grad-comp-topk-fraction 1 --grad-comp-error-feedback \
    && compare base topk1_dp dp:0,1
  run topk1_all 1 "${TOPK1[@]}" --use-error-feedback --inter-grad-comp-epilogue-only --activation-comp-method topk \
    --activation-comp-topk-fraction 1 --grad-comp --grad-comp-method topk --grad-comp-topk-fraction 1 \
    && compare base topk1_all cb fwd dp:0,1
}
run t2p2_base 2 && run t2p2_fe 2 --emb-comm-opt && compare t2p2_base t2p2_fe
finish

#!/usr/bin/env bash
# labels: compression
# What each Optimus-CC technique sends, exactly: per rank and iteration, the number of
# compressed pipeline messages ("cb" of the metrics JSONL) and the bytes of every traffic
# class ("ranks"[i]["bytes"], summed in "bytes") equal the formulas below. fp32 = 4 bytes.
#
#   Notation: L layers, P stages (L/P layers each), T tensor-, D data-parallel size, C hidden,
#   V padded vocab, s seq length, b micro-batch size, M = global batch / (b D) micro-batches,
#   N = b s tokens per micro-batch. Stage p, tp rank t, dp rank d, world rank w.
#   ring(n, S, r): ring all-reduce of n elements over S ranks by group rank r
#     (comm/mpi_communicator.cpp: chunk c = [n c/S, n (c+1)/S); r sends every chunk but
#     (r+1) mod S in the reduce-scatter and every chunk but (r+2) mod S in the all-gather):
#     elements sent = 2n - len((r+1) mod S) - len((r+2) mod S)   (0 when S = 1).
#
#   CB matrix of one TP rank: n = N/T rows (tokens), m = C columns, k = min(r_cb, n, m).
#   words(method, n, m): 4-byte words of one compressed n x m message (compress/*_compressor.h):
#     powersgd k (n + m); int8, fp8-e4m3, fp8-e5m2 ceil((4n + n m) / 4);
#     topk (k = clamp(round(f m), 1, m)) min(2 n k, ceil((4 n k + n ceil(m/8)) / 4));
#     sign ceil((4n + ceil(n m / 8)) / 4);
#     block methods, nb = ceil(m / B) blocks per row (the last one padded):
#     mxfp4 ceil(17 n nb / 4) (B = 32); nvfp4 ceil((4n + 9 n nb) / 4) (B = 16);
#     int4 ceil(18 n nb / 4), int3 ceil(14 n nb / 4) (B = 32);
#     int2, lloydmax2 ceil(18 n nb / 4), lloydmax3 ceil(26 n nb / 4) (B = 64);
#     a rotation (--*-comp-rotation) changes no byte;
#     topk2 (density f; the n m values cut into chunks of 4096, the last shorter; chunk c of
#     len_c sends k_c = clamp(round(f len_c), 1, len_c); K = sum k_c, b = max(1, bits of
#     min(4096, n m) - 1)): ceil((4 nchunks + ceil(K b / 8) + ceil(2 K / 8)) / 4).
#     adaptive (compress/adaptive_codec.h), t = n ceil(m / 64) tiles, h = min(t, floor(F t + 0.5))
#     at 4 bits (F: --*-comp-adaptive-high-fraction): ceil((ceil(t / 8) + 18 t + 16 h) / 4).
#   c_p compressed backward sends of stage p > 0 per iteration:
#     no CB: 0;  CB: M;  CB + EC: min(P - p, M) (its last P - p sends: the epilogue); stage 0: none.
#   cb      stage p > 0: {"sends": M, "compressed": c_p}; stage 0 reports no "cb".
#   pp_fwd  stage p < P-1: M * v n m; with --activation-comp-method A: M * 4 words(A, n, m).
#   pp_bwd  stage p > 0:   c_p * 4 words(CB method, n, m)  +  (M - c_p) * v n m.
#           v: bytes per value of the uncompressed wire, 4 (fp32) or 2 (--bf16).
#           A compressed message is smaller than an uncompressed one iff k (n + m) < n m,
#           i.e. r < n m / (n + m); checked on the measured bytes against the baseline.
#   bytes_saved.pp_bwd (where reported): c_p * (v n m - 4 words); pp_fwd likewise with M sends.
#   tp      (T > 1) as tests/cli/byte_counters.sh (compression does not change it: the
#           decoded slice is all-gathered over TP like a received one).
#   dp      buckets = make_buckets (parallel/grad_sync.h) over the rank's ParamLayout with
#           group(t) = -1 for the word embedding under FE (left out), 1 for the matrices DP
#           PowerSGD takes (2+ dims, stage compresses: --grad-comp, D > 1 and p < K under SC,
#           not FE's embedding), else 0; from the last tensor back, a tensor joins the open
#           bucket if of the same group and the bucket holds < --dp-bucket-size elements.
#           Iteration i (0-based) compresses iff the stage compresses and i >= warm-up * iters.
#           Uncompressed iteration: 4 * sum over buckets of ring(n_bucket, D, d).
#           Compressed iteration:   4 * (sum over group-0 buckets of ring(n_bucket, D, d)
#                                        + ring(sum_i n_i k_i, D, d) + ring(sum_i m_i k_i, D, d))
#           over the compressed matrices i viewed as n_i = shape[0] by m_i = numel / shape[0],
#           k_i = min(r_dp, n_i, m_i) (one all-reduce of all P's, one of all Q's).
#           A byte method (--grad-comp-method int8|fp8-*|topk|sign|topk2|block) all-gathers instead:
#           4 * (sum over group-0 buckets of ring(n_bucket, D, d) + (D - 1) sum_i words(i)).
#   emb     first and last stage (P > 1). Baseline: ring(V/T C, 2, 0 if first else 1).
#           FE: one all-reduce over {first, last} x D ranks of the same tp rank, ordered by
#           (stage, dp): 4 * ring(V/T C, 2 D, d if first else D + d).
#   other   8 ring(1, T P, p T + t) (grad norm, model group) + 8 ring(1, W, w) (loss).
#   timers  "compress" > 0 exactly on ranks that encode something in the iteration (c_p > 0
#           or DP PowerSGD), "decompress" > 0 exactly on ranks that decode (c_{p+1} > 0 or DP
#           PowerSGD); both 0 elsewhere.
#
# Runs (4 ranks each): P4 with M = 6 (baseline, CB, CB+LEP+EC), P4 with M = 2 < P - 1 (EC
# compresses all M), T2P2 with CB (n = N/T), P2D2 with DP PowerSGD at rank 48 (k_i differ
# across matrices; warm-up: iteration 1 uncompressed), P2D2 with FE, and P2D2 with all
# techniques (SC K = 1, small DP buckets).
source "$(dirname "$0")/fixture/lib.sh"
export OCC_FIXTURE="$SRC/tests/cli/fixture"
ITERS=2
BASE=(--data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" --num-layers 4 --hidden-size 64
      --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
      --train-iters $ITERS --eval-iters 0 --seed 3)
V=512  # the fixture tokenizer's 512 tokens, already a multiple of 128

# check NAME key=value... -- flags...: 4 ranks; compares every iteration with the formulas.
# Keys: gb T P D bucket cb (CB rank, 0: off) ec (0/1) fe (0/1) dp (DP rank, 0: off)
#       sc (K, -1: every stage) warmup (fraction); optional methods cbm, dpm (default powersgd),
#       am (activations, default none) and their topk fractions cbf, dpf, af (adaptive:
#       its high fractions cbh, dph, ah, default 0.125).
check() {
  local name=$1
  shift
  local params=()
  while [[ $1 != -- ]]; do params+=("$1"); shift; done
  shift
  if ! timeout 120 mpirun -np 4 --oversubscribe "$BIN" train "${BASE[@]}" "$@" \
      --metrics "$WORK/$name.jsonl" > "$WORK/$name.log" 2>&1; then
    tail -n 20 "$WORK/$name.log"
    failed "$name: training run failed"
    return
  fi
  local out
  if out=$("$PY" - "$WORK/$name.jsonl" L=4 C=64 V=$V maxpos=32 s=32 b=2 iters=$ITERS "${params[@]}" <<'EOF'
import json, math, sys

import os
sys.path.insert(0, os.environ["OCC_FIXTURE"])
from traffic_model import CLASSES, make_buckets, metric_rows, numel, rank_tensors, ring  # noqa: E402

jsonl, p = sys.argv[1], dict(a.split("=") for a in sys.argv[2:])
L, C, V, maxpos, s, b, gb, T, P, D, bucket, iters = (int(p[k]) for k in
    ("L", "C", "V", "maxpos", "s", "b", "gb", "T", "P", "D", "bucket", "iters"))
r_cb, ec, fe, r_dp, sc, warmup = int(p["cb"]), p["ec"] == "1", p["fe"] == "1", int(p["dp"]), int(p["sc"]), float(p["warmup"])
W, Ls, M, N, F = T * P * D, L // P, gb // (b * D), b * s, 4 * C
n, m = N // T, C
k = min(r_cb, n, m)
cbm, dpm, am = p.get("cbm", "powersgd"), p.get("dpm", "powersgd"), p.get("am", "none")
cbf, dpf, af = float(p.get("cbf", 0.1)), float(p.get("dpf", 0.01)), float(p.get("af", 0.25))
cbh, dph, ah = float(p.get("cbh", 0.125)), float(p.get("dph", 0.125)), float(p.get("ah", 0.125))
if cbm == "adaptive":
    cbf = cbh
if dpm == "adaptive":
    dpf = dph
if am == "adaptive":
    af = ah
vb = int(p.get("vb", 4))  # bytes per value of the uncompressed pipeline wire (2 in a --bf16 run)


def words(method, rows, cols, rank, frac):
    """4-byte words of one compressed rows x cols message."""
    if method == "powersgd":
        kk = min(rank, rows, cols)
        return kk * (rows + cols)
    if method in ("int8", "fp8-e4m3", "fp8-e5m2"):
        return math.ceil((4 * rows + rows * cols) / 4)
    if method == "topk":
        kk = min(max(math.floor(frac * cols + 0.5), 1), cols)
        return min(2 * rows * kk, math.ceil((4 * rows * kk + rows * math.ceil(cols / 8)) / 4))
    if method == "sign":
        return math.ceil((4 * rows + math.ceil(rows * cols / 8)) / 4)
    if method == "topk2":
        nv, ch = rows * cols, 4096
        lens = [min(ch, nv - o) for o in range(0, nv, ch)]
        K = sum(min(max(math.floor(frac * ln + 0.5), 1), ln) for ln in lens)
        bits = max(1, (min(ch, nv) - 1).bit_length())
        return math.ceil((4 * len(lens) + math.ceil(K * bits / 8) + math.ceil(2 * K / 8)) / 4)
    block = {"mxfp4": (32, 0, 17), "nvfp4": (16, 4, 9), "int4": (32, 0, 18), "int3": (32, 0, 14),
             "int2": (64, 0, 18), "lloydmax2": (64, 0, 18), "lloydmax3": (64, 0, 26)}
    if method in block:
        B, per_row, per_block = block[method]
        return math.ceil((per_row * rows + per_block * rows * math.ceil(cols / B)) / 4)
    if method == "adaptive":  # frac: the high fraction
        t = rows * math.ceil(cols / 64)
        h = min(t, math.floor(frac * t + 0.5))
        return math.ceil((math.ceil(t / 8) + 18 * t + 16 * h) / 4)
    raise ValueError(method)


cb_words = words(cbm, n, m, r_cb, cbf)
fwd_words = n * m if am == "none" else words(am, n, m, 0, af)


def tensors(pp):
    return rank_tensors(L, C, V, maxpos, T, P, pp)


def stage_compresses_dp(pp):
    return r_dp > 0 and D > 1 and (sc < 0 or pp < sc)


def group(pp, t):
    shape, word = t
    if fe and word:
        return -1
    return 1 if stage_compresses_dp(pp) and len(shape) >= 2 else 0


def buckets_of(pp):
    """parallel/grad_sync.h make_buckets: [(elements, group)]."""
    return make_buckets(tensors(pp), bucket, lambda t: group(pp, t))


def compressed_sends(pp):
    if r_cb == 0 or pp == 0:
        return 0
    return min(P - pp, M) if ec else M


def expected(it, tp, pp, dp, rank):
    first, last = pp == 0, pp == P - 1
    c = compressed_sends(pp)
    e = {"pp_fwd": 0 if last else M * (vb * n * m if am == "none" else 4 * fwd_words),
         "pp_bwd": 0 if first else c * 4 * cb_words + (M - c) * vb * n * m}
    tpe = 0
    if T > 1:
        NC = N * C
        r = lambda x: ring(x, T, tp)  # noqa: E731
        ag = (T - 1) * (NC // T)
        fwd = (r(NC) if first else 0) + 2 * Ls * r(NC) + (3 * r(N) if last else 0) + (0 if first else ag)
        bwd = (r(NC) if last else 0) + 2 * Ls * r(NC) + (0 if last else ag)
        tpe = 4 * M * (fwd + bwd)
    e["tp"] = tpe
    dp_on = stage_compresses_dp(pp) and (it - 1) >= warmup * iters
    bk = buckets_of(pp)
    if dp_on:
        mats = [t[0] for t in tensors(pp) if group(pp, t) == 1]
        dense = sum(ring(x, D, dp) for x, g in bk if g == 0)
        if dpm == "powersgd":
            ks = [min(r_dp, sh[0], numel(sh) // sh[0]) for sh in mats]
            p_total = sum(sh[0] * kk for sh, kk in zip(mats, ks))
            q_total = sum(numel(sh) // sh[0] * kk for sh, kk in zip(mats, ks))
            e["dp"] = 4 * (dense + ring(p_total, D, dp) + ring(q_total, D, dp))
        else:
            msg = sum(words(dpm, sh[0], numel(sh) // sh[0], r_dp, dpf) for sh in mats)
            e["dp"] = 4 * (dense + (D - 1) * msg)
    else:
        e["dp"] = 4 * sum(ring(x, D, dp) for x, g in bk)
    emb = V // T * C
    if P > 1 and (first or last):
        e["emb"] = 4 * (ring(emb, 2 * D, dp if first else D + dp) if fe else ring(emb, 2, 0 if first else 1))
    else:
        e["emb"] = 0
    e["other"] = 8 * ring(1, T * P, pp * T + tp) + 8 * ring(1, W, rank)
    saved = {"pp_bwd": c * (vb * n * m - 4 * cb_words),
             "pp_fwd": 0 if last or am == "none" else M * (vb * n * m - 4 * fwd_words)}
    encodes = c > 0 or dp_on or (am != "none" and not last)
    decodes = (pp < P - 1 and compressed_sends(pp + 1) > 0) or dp_on or (am != "none" and not first)
    return e, c, saved, encodes, decodes


rows, bad = metric_rows(jsonl, iters, W)
classes = CLASSES
summary = []
# bytes_saved is reported (by rank, when nonzero) once any rank saved something.
has_saved = any("bytes_saved" in r for row in rows for r in row.get("ranks", []))
for row in rows:
    it = row["iter"]
    ranks = row["ranks"]
    total = dict.fromkeys(classes, 0)
    for r in ranks:
        tp, pp, dp, rank = r["tp"], r["pp"], r["dp"], r["rank"]
        where = f"iter {it} rank {rank} (tp {tp} pp {pp} dp {dp})"
        want, c, saved, encodes, decodes = expected(it, tp, pp, dp, rank)
        for key in classes:
            if r["bytes"].get(key) != want[key]:
                bad.append(f"{where}: {key} = {r['bytes'].get(key)}, expected {want[key]}")
            total[key] += want[key]
        cb = r.get("cb")
        if pp == 0:
            if cb is not None and cb.get("sends", 0) != 0:
                bad.append(f"{where}: stage 0 reports backward sends {cb}")
        elif cb != {"sends": M, "compressed": c}:
            bad.append(f"{where}: cb = {cb}, expected sends {M}, compressed {c}")
        if has_saved:
            for key in ("pp_bwd", "pp_fwd"):
                got = r.get("bytes_saved", {}).get(key, 0)
                if got != saved[key]:
                    bad.append(f"{where}: bytes_saved.{key} = {got}, expected {saved[key]}")
        tm = r["timers"]
        if (tm.get("compress", 0) > 0) != encodes:
            bad.append(f"{where}: compress timer {tm.get('compress')} ms, expected {'> 0' if encodes else '0'}")
        if (tm.get("decompress", 0) > 0) != decodes:
            bad.append(f"{where}: decompress timer {tm.get('decompress')} ms, expected {'> 0' if decodes else '0'}")
        if it == 1 and tp == 0 and dp == 0 and pp > 0:
            summary.append(f"stage {pp} compressed {c}/{M}")
    for key in classes:
        if row["bytes"].get(key) != total[key]:
            bad.append(f"iter {it}: total {key} = {row['bytes'].get(key)}, expected {total[key]}")
for line in bad[:20]:
    print("   ", line)
if len(bad) > 20:
    print(f"    ... {len(bad) - 20} more")
if not bad:
    t = rows[-1]["bytes"]
    print("; ".join(summary) + ("; " if summary else "") + ", ".join(f"{x} {t[x]}" for x in classes))
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "$name: cb counts, bytes of every rank and class, compress/decompress timers as the formulas ($out)"
  else
    echo "$out"
    failed "$name: counters differ from the formulas"
  fi
}

# smaller NAME REF: every stage > 0 of NAME sends fewer pp_bwd bytes than in REF (rank 4 < n m / (n + m)).
smaller() {
  local out
  if out=$("$PY" - "$WORK/$1.jsonl" "$WORK/$2.jsonl" <<'EOF'
import json, sys
got, ref = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
bad = []
for g, r in zip(got, ref):
    rb = {x["rank"]: x["bytes"]["pp_bwd"] for x in r["ranks"]}
    for x in g["ranks"]:
        if x["pp"] > 0 and not x["bytes"]["pp_bwd"] < rb[x["rank"]]:
            bad.append(f"iter {g['iter']} rank {x['rank']}: pp_bwd {x['bytes']['pp_bwd']} not < {rb[x['rank']]}")
print("; ".join(bad[:5]) or f"total pp_bwd {got[-1]['bytes']['pp_bwd']} < {ref[-1]['bytes']['pp_bwd']}")
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "$1: compressed backward traffic smaller than $2's ($out)"
  else
    failed "$1: compressed backward traffic not smaller than $2's: $out"
  fi
}

OFF="cb=0 ec=0 fe=0 dp=0 sc=-1 warmup=0"
P4=(--pipeline-model-parallel-size 4)
P2D2=(--pipeline-model-parallel-size 2 --global-batch-size 8)
CB4=(--inter-grad-comp --inter-grad-comp-rank 4)
check P4_base gb=12 T=1 P=4 D=1 bucket=262144 $OFF -- "${P4[@]}" --global-batch-size 12
check P4_cb gb=12 T=1 P=4 D=1 bucket=262144 $OFF cb=4 -- "${P4[@]}" --global-batch-size 12 "${CB4[@]}"
smaller P4_cb P4_base
check P4_cb_lep_ec gb=12 T=1 P=4 D=1 bucket=262144 $OFF cb=4 ec=1 -- "${P4[@]}" --global-batch-size 12 \
  "${CB4[@]}" --use-error-feedback --inter-grad-comp-epilogue-only
smaller P4_cb_lep_ec P4_base
check P4_M2_ec gb=4 T=1 P=4 D=1 bucket=262144 $OFF cb=4 ec=1 -- "${P4[@]}" --global-batch-size 4 \
  "${CB4[@]}" --inter-grad-comp-epilogue-only
check T2P2_cb gb=8 T=2 P=2 D=1 bucket=262144 $OFF cb=4 -- --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --global-batch-size 8 "${CB4[@]}"
check P2D2_dp48_warmup gb=8 T=1 P=2 D=2 bucket=5000 $OFF dp=48 warmup=0.5 -- "${P2D2[@]}" \
  --dp-bucket-size 5000 --grad-comp --grad-comp-rank 48 --grad-comp-warm-up 0.5 --use-error-feedback
check P2D2_fe gb=8 T=1 P=2 D=2 bucket=262144 $OFF fe=1 -- "${P2D2[@]}" --emb-comm-opt
check P2D2_all gb=8 T=1 P=2 D=2 bucket=5000 $OFF cb=4 ec=1 fe=1 dp=4 sc=1 -- "${P2D2[@]}" --dp-bucket-size 5000 \
  "${CB4[@]}" --use-error-feedback --inter-grad-comp-epilogue-only --emb-comm-opt --grad-comp --grad-comp-rank 4 \
  --selective-grad-comp-way 1
# Beyond the paper: the other methods on each link class (their wire formulas above).
check P4_cb_int8 gb=12 T=1 P=4 D=1 bucket=262144 $OFF cb=4 cbm=int8 -- "${P4[@]}" --global-batch-size 12 \
  --inter-grad-comp --inter-grad-comp-method int8
check P4_cb_sign_lep_ec gb=12 T=1 P=4 D=1 bucket=262144 $OFF cb=4 ec=1 cbm=sign -- "${P4[@]}" \
  --global-batch-size 12 --inter-grad-comp --inter-grad-comp-method sign --use-error-feedback --inter-grad-comp-epilogue-only
check P4_act_topk_cb_topk gb=12 T=1 P=4 D=1 bucket=262144 $OFF cb=4 cbm=topk cbf=0.05 am=topk af=0.5 -- "${P4[@]}" \
  --global-batch-size 12 --inter-grad-comp --inter-grad-comp-method topk --inter-grad-comp-topk-fraction 0.05 \
  --activation-comp-method topk --activation-comp-topk-fraction 0.5
check T2P2_act_fp8_cb_e5m2 gb=8 T=2 P=2 D=1 bucket=262144 $OFF cb=4 cbm=fp8-e5m2 am=fp8-e4m3 -- \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --global-batch-size 8 --inter-grad-comp \
  --inter-grad-comp-method fp8-e5m2 --activation-comp-method fp8-e4m3
check P2D2_dp_int8_warmup gb=8 T=1 P=2 D=2 bucket=5000 $OFF dp=4 dpm=int8 warmup=0.5 -- "${P2D2[@]}" \
  --dp-bucket-size 5000 --grad-comp --grad-comp-method int8 --grad-comp-warm-up 0.5 --use-error-feedback
check P2D2_dp_topk_sc gb=8 T=1 P=2 D=2 bucket=5000 $OFF dp=4 dpm=topk dpf=0.02 sc=1 fe=1 -- "${P2D2[@]}" \
  --dp-bucket-size 5000 --grad-comp --grad-comp-method topk --grad-comp-topk-fraction 0.02 \
  --selective-grad-comp-way 1 --emb-comm-opt
# The block methods at hidden 48 (32-blocks padded by 16; nvfp4's 16-blocks exact), every link.
check P4_h48_act_nvfp4_cb_mxfp4 gb=12 T=1 P=4 D=1 bucket=262144 $OFF C=48 cb=4 cbm=mxfp4 am=nvfp4 -- "${P4[@]}" \
  --hidden-size 48 --global-batch-size 12 --inter-grad-comp --inter-grad-comp-method mxfp4 \
  --inter-grad-comp-rounding stochastic --use-error-feedback --activation-comp-method nvfp4
check P2D2_h48_all_int gb=8 T=1 P=2 D=2 bucket=5000 $OFF C=48 cb=4 ec=1 cbm=int3 dp=4 dpm=int4 am=int3 -- \
  "${P2D2[@]}" --hidden-size 48 --dp-bucket-size 5000 --inter-grad-comp --inter-grad-comp-method int3 \
  --use-error-feedback --inter-grad-comp-epilogue-only --grad-comp --grad-comp-method int4 --activation-comp-method int3
# In --bf16 the uncompressed pipeline messages are 2 bytes per value (EC leaves some), the
# codecs' bytes are unchanged, and what they save is counted against the 16-bit wire.
check P4_h48_bf16_act_mxfp4_cb_int3_ec gb=12 T=1 P=4 D=1 bucket=262144 $OFF C=48 vb=2 cb=4 ec=1 cbm=int3 am=mxfp4 \
  -- "${P4[@]}" --bf16 --hidden-size 48 --global-batch-size 12 --inter-grad-comp --inter-grad-comp-method int3 \
  --use-error-feedback --inter-grad-comp-epilogue-only --activation-comp-method mxfp4
# Issue 50: the 2- and 3-bit codes behind Hadamard rotations at hidden 48 (one 64-block per
# row, 16 padded; the rotation's pieces 32 + 16), on every link and in --bf16.
check P4_h48_bf16_rot_act_lm2_cb_lm3_lep gb=12 T=1 P=4 D=1 bucket=262144 $OFF C=48 vb=2 cb=4 cbm=lloydmax3 \
  am=lloydmax2 -- "${P4[@]}" --bf16 --hidden-size 48 --global-batch-size 12 --inter-grad-comp \
  --inter-grad-comp-method lloydmax3 --inter-grad-comp-rotation hadamard:32 --use-error-feedback \
  --activation-comp-method lloydmax2 --activation-comp-rotation hadamard
check P2D2_h48_rot_all_int2 gb=8 T=1 P=2 D=2 bucket=5000 $OFF C=48 cb=4 ec=1 cbm=int2 dp=4 dpm=lloydmax2 \
  am=int2 -- "${P2D2[@]}" --hidden-size 48 --dp-bucket-size 5000 --inter-grad-comp --inter-grad-comp-method int2 \
  --inter-grad-comp-rotation hadamard:16 --inter-grad-comp-rounding stochastic --use-error-feedback \
  --inter-grad-comp-epilogue-only --grad-comp --grad-comp-method lloydmax2 --grad-comp-rotation hadamard:256 \
  --activation-comp-method int2 --activation-comp-rotation hadamard:64
# Issue 50: topk2 on DP (2-bit values, the indices counted; chunks of 4096 and shorter ones).
check P2D2_dp_topk2_ef gb=8 T=1 P=2 D=2 bucket=5000 $OFF dp=4 dpm=topk2 dpf=0.03 -- "${P2D2[@]}" \
  --dp-bucket-size 5000 --grad-comp --grad-comp-method topk2 --grad-comp-topk-density 0.03 --grad-comp-error-feedback
# Issue 50 item 3: the adaptive codec (4 bits on the most energetic tiles, its bit map
# counted) at hidden 48 (one padded tile per row) in --bf16 behind rotations, and at
# hidden 80 (a full and a padded tile per row) on every link, DP's matrices included.
check P4_h48_bf16_rot_adaptive gb=12 T=1 P=4 D=1 bucket=262144 $OFF C=48 vb=2 cb=4 cbm=adaptive cbh=0.3 \
  am=adaptive -- "${P4[@]}" --bf16 --hidden-size 48 --global-batch-size 12 --inter-grad-comp \
  --inter-grad-comp-method adaptive --inter-grad-comp-adaptive-high-fraction 0.3 --inter-grad-comp-rotation hadamard:32 \
  --inter-grad-comp-rounding stochastic --use-error-feedback --activation-comp-method adaptive \
  --activation-comp-rotation hadamard
check P2D2_h80_adaptive_all gb=8 T=1 P=2 D=2 bucket=5000 $OFF C=80 cb=4 ec=1 cbm=adaptive cbh=0 dp=4 dpm=adaptive \
  dph=0.5 am=adaptive ah=1 -- "${P2D2[@]}" --hidden-size 80 --dp-bucket-size 5000 --inter-grad-comp \
  --inter-grad-comp-method adaptive --inter-grad-comp-adaptive-high-fraction 0 --inter-grad-comp-epilogue-only \
  --grad-comp --grad-comp-method adaptive --grad-comp-adaptive-high-fraction 0.5 --grad-comp-error-feedback \
  --activation-comp-method adaptive --activation-comp-adaptive-high-fraction 1
check P2D2_all_sign gb=8 T=1 P=2 D=2 bucket=5000 $OFF cb=4 ec=1 cbm=int8 dp=4 dpm=sign am=int8 -- "${P2D2[@]}" \
  --dp-bucket-size 5000 --inter-grad-comp --inter-grad-comp-method int8 --use-error-feedback \
  --inter-grad-comp-epilogue-only --grad-comp --grad-comp-method sign --activation-comp-method int8
finish

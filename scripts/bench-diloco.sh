#!/usr/bin/env bash
# DiLoCo against per-step data parallelism on the emulated cluster (issue 34), at each
# bandwidth: scripts/bench-speedup.sh --small (the speedup model, 8 layers of hidden 256,
# P2 D2 on 4 nodes of one rank, every transfer over a shaped link) with the variants
#   baseline | dp_powersgd (DP PowerSGD r16 + EF) | pp_int8 (int8 on both pipeline links)
#   | diloco_h8 | diloco_h32 | streaming_int8 | diloco_h8_pp_int8 | auto (plan --auto --max-loss-increase 0.5 over compressors.json and
#     diloco-quality.json, calibrated on this bandwidth's first baseline run)
# interleaved over repetitions (scripts/speedup_variants.sh has their flags). DiLoCo's syncs
# make some iterations long, so a run's time is its MEAN ms per iteration over its last 32
# iterations (9-40 of 40), whole rounds of every H (4 syncs of H 8, 1 of H 32, 4 of each
# streaming fragment; DP PowerSGD's 10 % warm-up is over by iteration 5); scripts/diloco_speedup_report.py gives
# each variant's mean over the repetitions with a 95 % t-interval, and the speedup per round
# (paired with that round's baseline). The machine's load is sampled every 30 s.
#   bash scripts/bench-diloco.sh [--bandwidths "300mbit 30mbit"] [--reps R] [--out DIR]
#        [--quality FILE] [--part NAME] [--report-only]
# Writes OUT/BANDWIDTH/ (bench-speedup.sh's output: runs, speedup.md on medians), OUT/load.txt,
# and OUT/diloco-speedup.{md,json}. --part NAME writes OUT/BANDWIDTH-NAME instead: further
# interleaved rounds beside an earlier output (bench-speedup.sh starts its output afresh); the
# report pools OUT/BANDWIDTH and every OUT/BANDWIDTH-* of the same cluster settings, their
# rounds counted apart.
set -euo pipefail
cd "$(dirname "$0")/.."
BANDWIDTHS="300mbit 30mbit" REPS=3 OUT=bench-results/diloco-speedup QUALITY=docs/results/diloco-quality.json
ITERS=40 WINDOW=32 REPORT_ONLY=0 PART=""
VARIANTS=${OCC_VARIANTS:-"baseline dp_powersgd pp_int8 diloco_h8 diloco_h32 streaming_int8 diloco_h8_pp_int8 auto"}
while (($#)); do
  case $1 in
    --bandwidths) BANDWIDTHS=$2; shift 2;;
    --reps) REPS=$2; shift 2;;
    --iters) ITERS=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --quality) QUALITY=$2; shift 2;;
    --part) PART=$2; shift 2;;
    --report-only) REPORT_ONLY=1; shift;;
    *) echo "error: unknown flag $1 (use --bandwidths LIST, --reps R, --iters N, --out DIR, --quality FILE, --part NAME, --report-only)" >&2; exit 2;;
  esac
done
mkdir -p "$OUT"
if ((!REPORT_ONLY)); then
  [[ -f $QUALITY ]] || echo "note: no $QUALITY (scripts/experiment-diloco.sh): the auto plan cannot consider DiLoCo"
  ( while true; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done ) >> "$OUT/load.txt" &
  sampler=$!
  trap 'kill $sampler 2> /dev/null' EXIT
  for bw in $BANDWIDTHS; do
    echo "== $bw: $VARIANTS, $REPS repetitions of $ITERS iterations"
    OCC_CLUSTER_NAME=${OCC_CLUSTER_NAME:-dlcbench} OCC_VARIANTS=$VARIANTS \
      bash scripts/bench-speedup.sh --small --iters "$ITERS" --reps "$REPS" --bandwidth "$bw" --out "$OUT/$bw${PART:+-$PART}"
  done
fi
dirs=()
for bw in $BANDWIDTHS; do
  for d in "$OUT/$bw" "$OUT/$bw"-*; do [[ -f $d/runs/settings ]] && dirs+=("$d"); done
done
/usr/bin/python3 scripts/diloco_speedup_report.py --quality "$QUALITY" --load "$OUT/load.txt" --out "$OUT/diloco-speedup" \
  --window "$WINDOW" \
  --command "bash scripts/bench-diloco.sh --bandwidths \"$BANDWIDTHS\" --reps $REPS --iters $ITERS" "${dirs[@]}"

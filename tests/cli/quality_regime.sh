#!/usr/bin/env bash
# labels: parallel
# scripts/experiment-quality-regime.sh --smoke: the paper-regime quality experiment's
# plumbing on the CPU with a tiny model (the real run needs a GPU: hidden 1024, seq 1024).
# It must calibrate, size the runs, run every variant of its plan (baseline, CB, CB+LEP,
# CB+LEP+EC, full Optimus-CC, DP-only PowerSGD; baseline, CB and CB+LEP on a second seed),
# and report each against the same-seed baseline with LEP's premises (--check-lep) and the
# epochs each run saw.
source "$(dirname "$0")/fixture/lib.sh"
if ! timeout 300 bash "$SRC/scripts/experiment-quality-regime.sh" --smoke --bin "$BIN" --out "$WORK/qr" > "$WORK/qr.log" 2>&1; then
  tail -n 20 "$WORK/qr.log"
  failed "experiment-quality-regime.sh --smoke failed"
  finish
  exit
fi
n=$(ls "$WORK"/qr/[0-9]_*_s[12].jsonl 2> /dev/null | wc -l)
[[ $n -eq 9 ]] && pass "9 runs of the plan wrote metrics" || failed "$n of 9 runs wrote metrics"
if out=$("$PY" - "$WORK/qr" << 'PY'
import json, sys
d = sys.argv[1]
q, g = json.load(open(f"{d}/quality.json")), json.load(open(f"{d}/regime.json"))
want = {"1_baseline": [1, 2], "2_dp_powersgd": [1], "3_cb_r4": [1, 2], "4_cb_lep_r4": [1, 2], "5_cb_lep_ec_r4": [1],
        "7_optimus_cc_r4": [1]}
got = {k: v["seeds"] for k, v in q.items()}
assert got == want, f"variants and seeds {got}"
for k in ("4_cb_lep_r4", "5_cb_lep_ec_r4", "7_optimus_cc_r4"):
    lc = q[k]["per_seed"]["1"]["lep_check_mean"]
    assert lc["error_ratio"] > 0 and lc["delta_ratio"] > 0, f"{k}: no LEP premises measured"
for k in ("3_cb_r4", "4_cb_lep_r4"):
    assert q[k]["mean_vs_baseline_pct"] is not None
assert g["iterations"] == 6 and g["runs_done"] == 9 and g["tokens_per_run"] == 6 * 8 * 32, g
assert 0 < g["epochs_per_run"] < 1 and g["corpus_tokens"] > 1_000_000, g
print(f"{len(q)} variants, seeds as planned, LEP error_ratio {q['4_cb_lep_r4']['per_seed']['1']['lep_check_mean']['error_ratio']:.2f}, "
      f"{g['epochs_per_run']} epochs per run")
PY
); then pass "report: $out"; else failed "report: $out"; fi
grep -q "^| CB + LEP | 4 | s1: .*, s2: " "$WORK/qr/quality.md" && grep -q "epochs of the" "$WORK/qr/quality.md" &&
  pass "quality.md: CB + LEP on two seeds, epochs stated" || failed "quality.md lacks the two-seed row or the epochs"
finish

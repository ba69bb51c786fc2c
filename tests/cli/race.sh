#!/usr/bin/env bash
# labels: cluster tooling
# python3 -m occtools race --quick (issue 49): the built-in tiny regime (P2 on 2 emulated nodes,
# 100 Mbit/s), the baseline and MXFP4 + rANS on the pipeline links, one seed: loss runs on
# unshaped links, timing runs on the emulated cluster, the target and each variant's crossing,
# time to target with intervals, the decomposition check (its training losses equal the loss
# run's bit for bit), time-to-target.json in its schema, the report and the plot. Run again it
# starts no run (resumable) and writes the same json. Where this machine cannot build an
# emulated cluster the loss part still runs and the timing part is skipped with a note.
# Bad regimes files: one error line, exit 2. About 55 s (2 min at load 24; less without the cluster).
source "$(dirname "$0")/fixture/lib.sh"
cd "$SRC" || exit 1
NAME=occrace
CLUSTER=(bash "$SRC/scripts/cluster.sh")
trap '"${CLUSTER[@]}" down --name $NAME > /dev/null 2>&1; rm -rf "$WORK"' EXIT
RACE=(env PYTHONPATH="$SRC" PYTHONDONTWRITEBYTECODE=1 "$PY" -m occtools race --bin "$BIN" --data "$DATA/kjv"
      --cluster-name $NAME --work "$WORK/work" --out "$WORK/out")
if why=$("${CLUSTER[@]}" check 2>&1); then have_cluster=1; else have_cluster=0; echo "note: no emulated cluster: $why"; fi

"${RACE[@]}" --quick > "$WORK/race1.txt" 2>&1
rc=$?
[[ $rc -eq 0 ]] && pass "race --quick exits 0" || { failed "race --quick rc=$rc"; tail -n 20 "$WORK/race1.txt"; }
if out=$("$PY" - "$WORK/out/time-to-target-quick.json" "$have_cluster" <<'PY'
import json, sys
doc, cluster = json.load(open(sys.argv[1])), sys.argv[2] == "1"
bad = []
assert doc["schema"] == "occ-time-to-target/1" and len(doc["regimes"]) == 1
r = doc["regimes"][0]
if sorted(r) != sorted(["name", "real_setting", "matched_shares", "target", "variants", "decomposition_check"]):
    bad.append(f"regime keys {sorted(r)}")
n = r["target"]["baseline_iteration"]
if not (0 < n <= 25):
    bad.append(f"N {n} not in (0, 25] (runs of 50)")
names = [v["name"] for v in r["variants"]]
if names != ["baseline", "pp_mxfp4_lep_rans"]:
    bad.append(f"variants {names}")
keys = ["name", "train_flags", "bytes_per_iteration", "iterations_to_target", "loss_at_2N", "ms_per_iteration",
        "time_to_target_s", "speedup"]
for v in r["variants"]:
    if sorted(v) != sorted(keys):
        bad.append(f"{v['name']} keys {sorted(v)}")
    if len(v["iterations_to_target"]) != 1 or len(v["loss_at_2N"]) != 1:
        bad.append(f"{v['name']}: one seed expected")
base, pp = r["variants"]
# The baseline crosses its own target near N (the target is its loss at N, the first crossing may be earlier).
it = base["iterations_to_target"][0]
if it is None or it > n:
    bad.append(f"baseline crosses its target at {it}, after N = {n}")
if "--activation-comp-method" not in pp["train_flags"] or "--inter-grad-comp-lossless" not in pp["train_flags"]:
    bad.append(f"pp flags {pp['train_flags']}")
if cluster:
    b, p = base["bytes_per_iteration"], pp["bytes_per_iteration"]
    if not (p["pipeline"] < b["pipeline"] / 4 and p["embedding"] == b["embedding"]):
        bad.append(f"bytes: {b} vs {p}")
    for v in r["variants"]:
        ms = v["ms_per_iteration"]
        if not (ms and ms["ci95"][0] <= ms["median"] <= ms["ci95"][1]):
            bad.append(f"{v['name']} ms {ms}")
        t = v["time_to_target_s"]
        if v["iterations_to_target"][0] is not None and abs(t["median"] - v["iterations_to_target"][0] * ms["median"] / 1000) > 1e-9:
            bad.append(f"{v['name']}: time to target {t} is not iterations x ms")
    if base["speedup"]["median"] != 1.0:
        bad.append(f"baseline speedup {base['speedup']}")
    d = r["decomposition_check"]
    if not d or d["variant"] != "pp_mxfp4_lep_rans" or not d["measured_s"] > 0:
        bad.append(f"decomposition {d}")
else:
    if any(v["ms_per_iteration"] or v["time_to_target_s"] for v in r["variants"]) or r["decomposition_check"]:
        bad.append("timing results without an emulated cluster")
print("; ".join(bad) if bad else f"N {n}, target {r['target']['loss']:.4f}, crossings "
      + ", ".join(f"{v['name']} {v['iterations_to_target'][0]}" for v in r["variants"]))
sys.exit(1 if bad else 0)
PY
); then pass "time-to-target.json: $out"; else failed "time-to-target.json: $out"; fi
md=$WORK/out/time-to-target-quick.md
grep -q "^# Time to a target loss (QUICK" "$md" && grep -q "^| baseline |" "$md" && grep -q "^| pp_mxfp4_lep_rans |" "$md" &&
  pass "time-to-target.md: labelled quick, one row per variant" || failed "time-to-target.md: $(head -c 400 "$md")"
if ((have_cluster)); then
  grep -q "equal the loss run's bit for bit" "$md" && pass "decomposition run: the same training losses as the loss run" ||
    failed "decomposition: $(grep Decomposition "$md")"
  if "$PY" -c "import matplotlib" 2> /dev/null; then
    [[ -s $WORK/out/time-to-target-quick-quick.png ]] && pass "plot written" || failed "no plot"
  fi
else
  grep -q "no timing runs: the emulated cluster cannot run here" "$md" && pass "no cluster: the timing is skipped with a note" ||
    failed "no note about the skipped timing"
fi

# Resumable: a second call finds every run finished, starts none, writes the same json.
cp "$WORK/out/time-to-target-quick.json" "$WORK/first.json"
"${RACE[@]}" --quick > "$WORK/race2.txt" 2>&1
rc=$?
started=$(grep -c ": \(loss run\|timing\|decomposition check\) " "$WORK/race2.txt")
[[ $rc -eq 0 && $started -eq 0 ]] && pass "second call: no run started" || failed "second call: rc=$rc, $started runs started"
cmp -s "$WORK/first.json" "$WORK/out/time-to-target-quick.json" && pass "second call: the same time-to-target.json" ||
  failed "second call changed the json"
# A run made by another engine (its .engine: another numerics version or CPU GEMM library, the
# same argv) is stale: the next call makes that run again, and only it.
eng=$WORK/work/quick/loss/baseline_s1234.engine
if [[ -f $eng ]] && grep -q '"cpu_gemm": "openblas"' "$eng"; then
  pass "each run records its engine: $(cat "$eng")"
else
  failed "no engine record: $(cat "$eng" 2>&1)"
fi
echo '{"numerics": 0, "cpu_gemm": "openblas"}' > "$eng"
"${RACE[@]}" --quick > "$WORK/race4.txt" 2>&1
started=$(grep -c ": \(loss run\|timing\|decomposition check\) " "$WORK/race4.txt")
[[ $started -eq 1 ]] && grep -q ": loss run baseline seed 1234: " "$WORK/race4.txt" && grep -q '"numerics": [1-9]' "$eng" &&
  pass "a run of another engine is made again, alone" || failed "another engine: $started runs started: $(grep ': \(loss run\|timing\|decomposition\)' "$WORK/race4.txt")"
grep -q "CPU GEMMs openblas (OCC_CPU_GEMM, pinned for every run)" "$WORK/out/time-to-target-quick.md" &&
  pass "the report names the engine" || failed "the report does not name the CPU GEMM library"
"${RACE[@]}" --quick --report-only > "$WORK/race3.txt" 2>&1 && grep -q "wrote .*time-to-target-quick.md" "$WORK/race3.txt" &&
  pass "--report-only remakes the report" || failed "--report-only: $(cat "$WORK/race3.txt")"

# Bad regimes files: one error line naming the problem, exit 2, no run.
bad() {
  local label=$1 pattern=$2 r
  shift 2
  r=$("${RACE[@]}" "$@" 2>&1)
  local rc=$?
  [[ $rc -eq 2 && $(wc -l <<< "$r") -eq 1 && $r =~ $pattern ]] && pass "$label: $r" || failed "$label: rc=$rc '$r'"
}
bad "missing regimes file" "^error: --regimes .*cannot read it" --regimes "$WORK/none.json"
echo '{"regimes": [' > "$WORK/broken.json"
bad "regimes file not JSON" "^error: --regimes .*not JSON" --regimes "$WORK/broken.json"
cat > "$WORK/comp.json" <<'JSON'
{"regimes": [{"name": "x", "real_setting": "y", "real": {}, "emulated": {"train_flags": ["--grad-comp"], "nodes": 2,
 "ranks_per_node": 1, "bandwidth": "100mbit", "latency": "0"}}]}
JSON
bad "compression flag in a regime" "^error: .*holds compression flag '--grad-comp'" --regimes "$WORK/comp.json"
bad "too few evaluation samples" "^error: --eval-samples 32: .*at least 64" --quick --eval-samples 32
finish

#!/usr/bin/env bash
# labels: parallel
# python3 -m occtools regime run --smoke: the paper-regime quality experiment's ledger on the CPU with a
# tiny model (the real runs need a GPU: hidden 1024, seq 1024). Two calls accumulate: the first
# makes the three most needed runs, the second continues its ledger with the next three
# without touching the first's records, and the report then writes the verdict; `merge` adds
# a call's runs to a committed ledger once (a second merge adds nothing); `pending` lists what
# is missing in priority order; a run of another numerics version is never compared or
# pooled; a budget too small for the run stops it and the ledger keeps it as unfinished; a
# corrupt ledger, or a smoke ledger merged into the paper's, is refused with a one-line error.
source "$(dirname "$0")/fixture/lib.sh"
export PYTHONPATH=$SRC
RR=("$PY" -m occtools regime)
SMOKE=(run --smoke --bin "$BIN" --data "$DATA/kjv")
numerics=$("$BIN" --version | sed -n 's/^optimus-cc numerics //p')

# 1. Call 1: the three most needed runs, in priority order, on a fresh ledger.
if ! timeout 300 "${RR[@]}" "${SMOKE[@]}" --out "$WORK/a" --budget-s 200 --max-runs 3 > "$WORK/a.log" 2>&1; then
  tail -n 20 "$WORK/a.log"; failed "call 1 failed"; finish; exit
fi
# 2. Call 2 continues call 1's ledger.
if ! timeout 300 "${RR[@]}" "${SMOKE[@]}" --ledger "$WORK/a/regime.json" --out "$WORK/b" --budget-s 200 --max-runs 3 \
    > "$WORK/b.log" 2>&1; then
  tail -n 20 "$WORK/b.log"; failed "call 2 failed"; finish; exit
fi
if out=$("$PY" - "$WORK/a/regime.json" "$WORK/b/regime.json" "$numerics" << 'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
numerics = int(sys.argv[3])
order = [(r["variant"], r["seed"]) for r in b["runs"]]
assert order == [("baseline", 1), ("cb", 1), ("cb_lep", 1), ("baseline", 2), ("cb", 2), ("cb_lep", 2)], order
assert b["runs"][:3] == a["runs"] and b["calls"][:1] == a["calls"], "call 2 rewrote call 1's records"
assert len(b["calls"]) == 2 and b["calls"][1]["runs"] == [r["id"] for r in b["runs"][3:]], b["calls"]
for r in b["runs"]:
    assert r["finished"] and r["iters_done"] == r["target_iters"] == 6 and r["stop"] is None, r["id"]
    assert r["numerics"] == numerics and r["device_key"] == "cpu" and r["commit"], r["id"]
    assert [i for i, _ in r["val_curve"]] == [0, 3, 6] and r["final_val_loss"] == r["val_curve"][-1][1], r["val_curve"]
    assert (r["lep"] is not None) == (r["variant"] == "cb_lep"), r["id"]  # --check-lep on the LEP runs
base, cb, lep = b["runs"][:3]
# CB compresses the backward pipeline messages, nothing else: fewer pp_bwd bytes, the same dp bytes.
assert cb["bytes_per_iter"]["pp_bwd"] < base["bytes_per_iter"]["pp_bwd"], (cb["bytes_per_iter"], base["bytes_per_iter"])
assert cb["bytes_per_iter"]["dp"] == base["bytes_per_iter"]["dp"]
assert 0 < lep["lep"]["error_ratio"] and 0 < lep["lep"]["delta_ratio"] < 2, lep["lep"]
assert len(base["calibration_rows"]) == 3 and "calibration_rows" not in cb
print(f"6 runs in priority order over 2 calls, call 1's records untouched; LEP residual/gradient {lep['lep']['error_ratio']:.2f}")
PY
); then pass "accumulate: $out"; else failed "accumulate: $out"; fi
if grep -q '^\*\*LEP .*After 6 iterations (numerics' "$WORK/b/quality-regime.md" &&
  grep -q '^\*\*Pending' "$WORK/a/quality-regime.md" && grep -q 'Missing: baseline seed 2, CB (no LEP) seed 2, CB + LEP seed 2\.' "$WORK/a/quality-regime.md" &&
  grep -q '^| CB + LEP | 2 | s1: .* (.*%), s2: .* (.*%) |' "$WORK/b/quality-regime.md"; then
  pass "report: pending after call 1 (names the missing runs), the verdict and a two-seed CB + LEP row after call 2"
else
  failed "report: no verdict after call 2, or call 1's report does not list the missing runs"
fi

# 3. Priority order of what is still missing (and all of it for a numerics version with no runs).
p1=$("${RR[@]}" pending "$WORK/a/regime.json" --smoke --numerics "$numerics" | paste -sd' ')
p2=$("${RR[@]}" pending "$WORK/b/regime.json" --smoke --numerics "$numerics" | paste -sd' ')
p3=$("${RR[@]}" pending "$WORK/b/regime.json" --smoke --numerics $((numerics + 1)) | paste -sd' ')
if [[ $p1 == "baseline s2 cb s2 cb_lep s2 cb_lep_ec s1 dp_powersgd s1 optimus_cc s1 auto s1" &&
  $p2 == "cb_lep_ec s1 dp_powersgd s1 optimus_cc s1 auto s1" && $p3 == "baseline s1 cb s1 cb_lep s1 "* ]]; then
  pass "pending: the second seed's triple, then the rest of the ablation; a new numerics version starts over"
else
  failed "pending: '$p1' / '$p2' / '$p3'"
fi

# 4. merge into a committed ledger: the new runs once; merging the same OUT again adds nothing.
cp "$WORK/a/regime.json" "$WORK/committed.json"
m1=$("${RR[@]}" merge "$WORK/b/regime.json" "$WORK/committed.json")
cp "$WORK/committed.json" "$WORK/committed.1.json"
m2=$("${RR[@]}" merge "$WORK/b/regime.json" "$WORK/committed.json")
if [[ $m1 == "merge: 3 new run(s), 1 new call(s)"* && $m2 == "merge: 0 new run(s), 0 new call(s)"* ]] &&
  cmp -s "$WORK/committed.1.json" "$WORK/committed.json" && cmp -s "$WORK/b/regime.json" "$WORK/committed.json"; then
  pass "merge: 3 runs and 1 call added, then nothing (idempotent)"
else
  failed "merge: '$m1' then '$m2'"
fi

# 5. Numerics: a ledger whose seed-1 baseline is of numerics 1 must not compare numerics 2's runs with it.
"$PY" - "$WORK/b/regime.json" "$WORK/n.json" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["runs"][0]["numerics"] = 1  # baseline s1
json.dump(d, open(sys.argv[2], "w"))
PY
mkdir -p "$WORK/n"
"${RR[@]}" report "$WORK/n.json" --out "$WORK/n" > /dev/null 2>&1
pn=$("${RR[@]}" pending "$WORK/n.json" --smoke --numerics "$numerics" | head -n 1)
if grep -q '^| CB (no LEP) | 2 | s1: [0-9.]* (no same-seed baseline in this cohort), s2: [0-9.]* ([-+]' "$WORK/n/quality-regime.md" &&
  grep -q '^1 run(s) of older numerics version(s) \[1\]' "$WORK/n/quality-regime.md" &&
  grep -q '^\*\*Pending.*Missing: baseline seed 1\.' "$WORK/n/quality-regime.md" && [[ $pn == "baseline s1" ]]; then
  pass "numerics: a numerics-1 baseline is not compared with numerics-2 runs; the verdict waits for a numerics-2 one"
else
  grep -E '^\| CB \(no LEP\)|older numerics|^\*\*' "$WORK/n/quality-regime.md"
  failed "numerics: runs of different numerics pooled, or the verdict not withheld (pending: '$pn')"
fi

# 6. A run the budget cannot hold: 20000 iterations in a 12 s call, predicted from the ledger's runs,
#    runs to the budget's end and is kept as unfinished, never compared.
if "${RR[@]}" "${SMOKE[@]}" --ledger "$WORK/b/regime.json" --out "$WORK/c" --budget-s 12 --iters 20000 \
    --variants cb_lep > "$WORK/c.log" 2>&1 &&
  out=$("$PY" - "$WORK/c/regime.json" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["runs"][-1]
assert len(d["runs"]) == 7 and r["variant"] == "cb_lep" and r["target_iters"] == 20000, r["id"]
assert not r["finished"] and 0 < r["iters_done"] < 20000 and r["final_val_loss"] is None, r["stop"]
assert r["stop"].startswith(f"budget: stopped at iteration {r['iters_done']} of 20000"), r["stop"]
assert any("no run can finish in one call" in n for n in d["calls"][-1]["notes"]), d["calls"][-1]["notes"]
print(r["stop"])
PY
  ); then
  if grep -q "^| CB + LEP | 1 | [0-9]* | [0-9]* / 20000 | .* | budget: stopped at iteration" "$WORK/c/quality-regime.md" &&
    grep -q '^\*\*LEP .*After 6 iterations' "$WORK/c/quality-regime.md" &&
    grep -q '^### numerics [0-9]*, 20000 iterations' "$WORK/c/quality-regime.md" &&
    grep -A 2 '^### numerics [0-9]*, 20000 iterations' "$WORK/c/quality-regime.md" | grep -q 'No finished run in this cohort'; then
    pass "unfinished: $out; reported as such, the verdict still from the 6-iteration cohort"
  else
    failed "unfinished run not reported as such"
  fi
else
  tail -n 5 "$WORK/c.log"
  failed "budget-stopped run: ${out:-call failed}"
fi

# 7. Bad input: one-line errors, non-zero status, nothing run.
printf '{"ledger": "optimus-cc quality-regime runs", "runs": [' > "$WORK/bad.json"
"${RR[@]}" report "$WORK/bad.json" --out "$WORK/r" > "$WORK/bad1.out" 2>&1
rc1=$?
"${RR[@]}" "${SMOKE[@]}" --ledger "$WORK/bad.json" --out "$WORK/x" > "$WORK/bad2.out" 2>&1
rc2=$?
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["runs"][0]["final_val_loss"] = None; json.dump(d, open(sys.argv[2], "w"))' \
  "$WORK/b/regime.json" "$WORK/bad3.json"
"${RR[@]}" report "$WORK/bad3.json" --out "$WORK/r" > "$WORK/bad3.out" 2>&1
rc3=$?
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["regime"] = "paper"; json.dump(d, open(sys.argv[2], "w"))' \
  "$WORK/b/regime.json" "$WORK/paper.json"
"${RR[@]}" merge "$WORK/a/regime.json" "$WORK/paper.json" > "$WORK/bad4.out" 2>&1
rc4=$?
if [[ $rc1 == 2 && $rc2 == 2 && $rc3 == 2 && $rc4 == 2 ]] && [[ $(cat "$WORK"/bad{1,2,3,4}.out | wc -l) == 4 ]] &&
  grep -q '^error: .*bad.json: not valid JSON' "$WORK/bad1.out" && grep -q '^error: .*bad.json: not valid JSON' "$WORK/bad2.out" &&
  grep -q '^error: .*marked finished but has 6 of 6 iterations or no final validation loss' "$WORK/bad3.out" &&
  grep -q "^error: cannot merge a 'smoke' ledger into a 'paper' one" "$WORK/bad4.out" && [[ ! -e $WORK/x/runs ]]; then
  pass "bad input: corrupt JSON, a finished run without its loss, smoke into paper: one-line errors, status 2, nothing run"
else
  cat "$WORK"/bad{1,2,3,4}.out
  failed "bad input: status $rc1 $rc2 $rc3 $rc4"
fi
finish

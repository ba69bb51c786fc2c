#!/usr/bin/env bash
# labels: plan
# python3 -m occtools match-regimes: a short search (one regime, 24 planner calls) writes
# the schema helper tools read, its shares are the planner's (each side sums to 1 with
# `other`; the real side equals a direct `plan --json` of the real setting), the emulated job
# fits the machine (<= 8 ranks) and the mismatch is stated exactly when a share misses
# +-25 %; bad input is a one-line error. About 15 s.
source "$(dirname "$0")/fixture/lib.sh"
cd "$SRC" || exit 1
MR=("$PY" -m occtools match-regimes --bin "$BIN")
if "${MR[@]}" --regimes cross_region --evaluations 24 --out "$WORK/m.json" > "$WORK/log" 2>&1; then
  pass "match-regimes ran: $(grep '^cross_region' "$WORK/log" | cut -c1-160)"
else
  failed "match-regimes failed: $(tail -3 "$WORK/log")"
fi
"$PY" - "$WORK/m.json" "$BIN" <<'EOF' && pass "schema, shares, real projection, fit and mismatch hold" || failed "match-regimes output wrong"
import json, subprocess, sys, tempfile, os
sys.path.insert(0, ".")
from occtools.planner import match_regimes as M
doc = json.load(open(sys.argv[1]))
(r,) = doc["regimes"]
ok = r["name"] == "cross_region" and isinstance(r["real_setting"], str)
for side in (r["real"], r["emulated"]):
    ok = ok and set(side["shares"]) == set(M.SHARES) and abs(sum(side["shares"].values()) + side["shares_other"] - 1) < 1e-3
    ok = ok and side["pp_to_dp_bytes"] > 0
e = r["emulated"]
t = lambda k: int(e["train_flags"][e["train_flags"].index(k) + 1])
T, P = t("--tensor-model-parallel-size"), t("--pipeline-model-parallel-size")
ok = ok and e["ranks_per_node"] == T and (e["nodes"] * e["ranks_per_node"]) % (T * P) == 0  # TP inside a node
ok = ok and e["nodes"] * e["ranks_per_node"] <= 8 and e["bandwidth"].endswith("mbit") and (e["latency"] == "0" or e["latency"].endswith("ms"))
ok = ok and not any(f.startswith(("--grad-comp", "--inter-grad-comp", "--activation-comp", "--emb-comm-opt")) for f in e["train_flags"])
with tempfile.TemporaryDirectory() as tmp:
    real = M.real_projection(sys.argv[2], "cross_region", tmp)
ok = ok and all(abs(real["shares"][k] - r["real"]["shares"][k]) < 1e-3 for k in M.SHARES)
missed = [k for k in M.SHARES if r["real"]["shares"][k] >= 0.05 and
          abs(e["shares"][k] - r["real"]["shares"][k]) / r["real"]["shares"][k] > 0.25]
ok = ok and all(k in (r["mismatch"] or "") for k in missed) and (r["mismatch"] is None) == (
    not missed and M.mismatch_text(r["real"], {**e, "iteration_ms": e["predicted_iteration_ms"]}) is None)
ok = ok and os.path.isfile(sys.argv[1][:-5] + ".md")
sys.exit(0 if ok else 1)
EOF
one_error() {  # NAME PATTERN -- COMMAND...
  local name=$1 pattern=$2
  shift 3
  if "$@" > "$WORK/out" 2> "$WORK/err"; then failed "$name: exit 0"; return; fi
  if [[ $(grep -c . "$WORK/err") -eq 1 ]] && grep -qE "^error: .*$pattern" "$WORK/err"; then
    pass "$name: $(cat "$WORK/err")"
  else
    failed "$name: $(cat "$WORK/err")"
  fi
}
one_error "unknown regime" "--regimes: no regime moon; pass some of paper, datacenter, cross_region" -- \
  "${MR[@]}" --regimes moon --out "$WORK/x.json"
echo '{"cores": 2}' > "$WORK/cal.json"
one_error "bad calibration" "--calibration .*cal.json is not a calibration of this command" -- \
  "${MR[@]}" --calibration "$WORK/cal.json" --out "$WORK/x.json"
finish

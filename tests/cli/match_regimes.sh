#!/usr/bin/env bash
# labels: plan
# python3 -m occtools match-regimes: a short search (one regime, 24 planner calls) writes
# the schema helper tools read, its shares are the planner's (each side sums to 1 with
# `other`; the real side equals a direct `plan --json` of the real setting), the emulated job
# fits the machine (<= 8 ranks) and the mismatch is stated exactly when a share misses
# +-25 % or the race's predicted time exceeds its hour; --confirm adds a calibrated run's
# shares; bad input is a one-line error. About 25 s.
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
    not missed and M.mismatch_text(r["real"], {**e, "iteration_ms": e["predicted_iteration_ms"],
                                              "race_s": 60 * e["predicted_race_minutes"]}) is None)
ok = ok and os.path.isfile(sys.argv[1][:-5] + ".md")
# The race's share of this regime: the planner's estimate from its two iteration times, stated as a
# mismatch when over the budget (the full race must fit 3 hours on this machine).
from occtools.planner import regimes as G
gb = t("--global-batch-size")
race = G.race_seconds(e["predicted_iteration_ms"], e["predicted_unshaped_iteration_ms"], gb) / 60
ok = ok and abs(race - e["predicted_race_minutes"]) < 0.2 and 0 < e["predicted_unshaped_iteration_ms"] < e["predicted_iteration_ms"]
ok = ok and (race <= G.RACE_BUDGET_S / 60) == ("budget" not in (r["mismatch"] or ""))
sys.exit(0 if ok else 1)
EOF
# --confirm: a run of a regime's emulated baseline (here a tiny P2 job on 2 local ranks, for a
# hand-made regime) calibrates the planner; its shares are added beside the predicted ones.
"$PY" - "$WORK/m.json" "$WORK/c.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
e = doc["regimes"][0]["emulated"]
e.update(train_flags=["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
                      "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "8",
                      "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2"],
         nodes=2, ranks_per_node=1, vocab_size=512)
json.dump(doc, open(sys.argv[2], "w"))
EOF
if timeout 120 mpirun -np 2 --oversubscribe "$BIN" train "${TINY[@]}" --pipeline-model-parallel-size 2 \
    --global-batch-size 8 --train-iters 5 --eval-iters 0 --metrics "$WORK/run.jsonl" > "$WORK/train.log" 2>&1 \
    && "${MR[@]}" --confirm "$WORK/run.jsonl" --regimes cross_region --out "$WORK/c.json" > "$WORK/confirm.log" 2>&1 \
    && "$PY" -c 'import json, sys
run = json.load(open(sys.argv[1]))["regimes"][0]["emulated"]["calibrated_run"]
assert abs(sum(run["shares"].values()) + run["shares_other"] - 1) < 1e-3 and run["measured_ms"] > 0, run
assert "a run at" in open(sys.argv[2]).read()' "$WORK/c.json" "$WORK/c.md"; then
  pass "--confirm: $(cut -c1-150 "$WORK/confirm.log")"
else
  failed "--confirm: $(tail -2 "$WORK/train.log" "$WORK/confirm.log")"
fi

one_error "unknown regime" "--regimes: no regime moon; pass some of paper, datacenter, cross_region" -- \
  "${MR[@]}" --regimes moon --out "$WORK/x.json"
echo '{"cores": 2}' > "$WORK/cal.json"
one_error "bad calibration" "--calibration .*cal.json is not a calibration of this command" -- \
  "${MR[@]}" --calibration "$WORK/cal.json" --out "$WORK/x.json"
finish

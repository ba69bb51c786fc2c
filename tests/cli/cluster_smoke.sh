#!/usr/bin/env bash
# labels: cluster parallel
# The emulated cluster (scripts/cluster.sh): 2 nodes x 2 ranks, T2 P2. Ranks see
# distinct hosts, TP stays inside a node, the pipeline and embedding bytes the
# ranks counted crossed the node's shaped link (tbf counters), what the script
# built is removed afterwards, bad flags are refused. Where this machine cannot
# create namespaces (no root, no netns/tc) the test says why and is skipped (77).
source "$(dirname "$0")/fixture/lib.sh"
CLUSTER=(bash "$SRC/scripts/cluster.sh")
if ! why=$("${CLUSTER[@]}" check); then
  echo "SKIP: cannot build an emulated cluster here: $why"
  exit 77
fi
NAME=occci
"${CLUSTER[@]}" down --name $NAME > /dev/null
trap '"${CLUSTER[@]}" down --name $NAME > /dev/null; rm -rf "$WORK"' EXIT
leftovers() { ip netns list | awk '{print $1}' | grep -c "^$NAME-" || true; }

# 1. A job on a cluster created (and removed) by `run` itself: one hostname per node.
hosts=$("${CLUSTER[@]}" run --name $NAME --nodes 2 --ranks-per-node 2 -- hostname | sort | uniq -c | awk '{print $1 "x" $2}' | paste -sd' ')
[[ $hosts == "2x$NAME-node0 2x$NAME-node1" ]] && pass "ranks see one hostname per node: $hosts" || failed "hostnames: '$hosts'"
[[ $(leftovers) -eq 0 ]] && pass "run removed the namespaces it created" || failed "namespaces left after run: $(ip netns list)"

# 2. Training T2 P2 on 2 nodes x 2 ranks over 100 Mbit/s links.
"${CLUSTER[@]}" up --name $NAME --nodes 2 --bandwidth 100mbit > /dev/null
qdisc=$(ip netns exec $NAME-n0 tc qdisc show dev eth0)
[[ $qdisc == *"tbf"*"rate 100Mbit"* ]] && pass "node link shaped by tbf at 100 Mbit/s" || failed "qdisc: $qdisc"
sent_before=$(ip netns exec $NAME-n0 tc -s qdisc show dev eth0 | awk '/Sent/ {print $2; exit}')
OCC_CLUSTER_STATS=$WORK/links "${CLUSTER[@]}" run --name $NAME --nodes 2 --ranks-per-node 2 --bandwidth 100mbit -- \
  "$BIN" train "${TINY[@]}" --num-layers 2 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --train-iters 3 --metrics "$WORK/m.jsonl" > "$WORK/out.txt" 2>&1
rc=$?
[[ $rc -eq 0 ]] && pass "training on the cluster exits 0" || { failed "training rc=$rc"; cat "$WORK/out.txt"; }
placement=$(grep "^placement:" "$WORK/out.txt")
[[ $placement == "placement: 2 hosts: $NAME-node0 [0,1] $NAME-node1 [2,3]" ]] && pass "$placement" || failed "placement: '$placement'"
grep -q "spans hosts" "$WORK/out.txt" && failed "TP group reported as spanning hosts" || pass "TP groups stay inside a node"
sent_after=$(ip netns exec $NAME-n0 tc -s qdisc show dev eth0 | awk '/Sent/ {print $2; exit}')
# Bytes node 0's ranks (stage 0) counted as sent to the other node vs what its shaped link carried.
read -r counted tp <<< "$($PY - "$WORK/m.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
node0 = lambda r: r["rank"] in (0, 1)
counted = sum(sum(r["bytes"][c] for c in ("pp_fwd", "pp_bwd", "emb")) for row in rows for r in row["ranks"] if node0(r))
tp = sum(r["bytes"]["tp"] for row in rows for r in row["ranks"] if node0(r))
print(counted, tp)
PY
)"
shaped=$((sent_after - sent_before))
link_tx=$(awk -v h="$NAME-node0" '$1 == h {split($2, a, "="); print a[2]}' "$WORK/links")
echo "node 0: counted inter-node bytes $counted, tbf sent $shaped, link tx $link_tx, TP bytes (must stay local) $tp"
((counted > 0 && shaped >= counted)) && pass "the counted inter-node bytes went through the shaped link" || failed "shaped $shaped < counted $counted"
# Headers, acknowledgements and the launcher's control traffic add a little; TP traffic would add far more.
((shaped < counted + counted / 5 + 400000)) && pass "link carried no more than the counted bytes plus protocol overhead" ||
  failed "link carried $shaped bytes for $counted counted"
((tp > counted / 2)) && pass "TP bytes ($tp) would have been visible on the link had they crossed it" || failed "TP bytes $tp too small to discriminate"
((link_tx >= counted)) && pass "the job's link counters (OCC_CLUSTER_STATS) cover the counted bytes" || failed "link tx $link_tx < counted $counted"
"${CLUSTER[@]}" down --name $NAME > /dev/null
[[ $(leftovers) -eq 0 ]] && pass "down removed every namespace" || failed "namespaces left after down: $(ip netns list)"

# 3. Bad input: one error line, non-zero exit, nothing created.
out=$("${CLUSTER[@]}" run --name $NAME --bandwidth fast -- true 2>&1)
rc=$?
[[ $rc -eq 2 && $out == "error: --bandwidth 'fast' is not a tc rate"* && $(leftovers) -eq 0 ]] && pass "bad bandwidth refused: $out" ||
  failed "bad bandwidth: rc=$rc '$out'"
out=$("${CLUSTER[@]}" run --name $NAME --nodes 2 2>&1)
[[ $? -eq 2 && $out == "error: run needs a program"* ]] && pass "run without a program refused" || failed "run without program: '$out'"
finish

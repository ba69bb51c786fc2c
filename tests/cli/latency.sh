#!/usr/bin/env bash
# labels: cluster parallel
# Latency on the emulated cluster (scripts/cluster.sh run --latency D): with netem
# on the links where the kernel has it, else in our MPI transport
# (OCC_EMULATED_LATENCY: a message to another node is handed to the network no
# earlier than its send time + D). Two nodes of one rank, 100 Mbit/s links, at
# 0, 10 and 50 ms: a ping-pong (the pipeline's point to point) and a ring
# all-reduce (2 steps over 2 nodes) each take 2 x D plus what they take at 0 ms
# (the bandwidth term and the stack's own cost), within 10 %; a 1 MB ping-pong
# at 50 ms pays the latency on top of its bandwidth term (they add, as on a real
# path); values and byte counts stay exact (comm-check's verdict); training is
# bit for bit the same with latency; a bad value fails with one line. Where the
# cluster cannot be built the test says why and is skipped (77). ~40 s.
source "$(dirname "$0")/fixture/lib.sh"
CLUSTER=(bash "$SRC/scripts/cluster.sh")
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if ! why=$("${CLUSTER[@]}" check); then
  echo "SKIP: cannot build an emulated cluster here: $why"
  exit 77
fi
NAME=occlat
"${CLUSTER[@]}" down --name $NAME > /dev/null
trap '"${CLUSTER[@]}" down --name $NAME > /dev/null; rm -rf "$WORK"' EXIT
"${CLUSTER[@]}" up --name $NAME --nodes 2 --bandwidth 100mbit > /dev/null || { failed "cluster up"; finish; exit; }

# comm_check TAG LATENCY PING_BYTES ITERS: comm-check on the cluster; WORK/TAG.{log,err}.
comm_check() {
  timeout 120 "${CLUSTER[@]}" run --name $NAME --nodes 2 --ranks-per-node 1 --bandwidth 100mbit --latency "$2" -- \
    "$BIN" comm-check --device cpu --count 2048 --bench-iters "$4" --bench-gap-ms 20 --ping-bytes "$3" \
    > "$WORK/$1.log" 2> "$WORK/$1.err"
}
# timing TAG WHAT: "MEDIAN BEST" (ms) of comm-check's "WHAT ... median X ms ...; best Y ms" line.
timing() {
  grep -m 1 "^comm-check: $2" "$WORK/$1.log" | sed -n 's/.* median[a-z ]* \([0-9.]*\) ms .*; best \([0-9.]*\) ms$/\1 \2/p'
}
declare -A ping ring ping_median ring_median
for d in 0 10 50; do
  if comm_check "lat$d" "${d}ms" 4096 25 && grep -q "^comm-check: all-reduce (sum, max, mean), reduce-scatter, all-gather and send/receive .* values as expected on every rank, bytes per rank equal to the ring's" "$WORK/lat$d.log"; then
    read -r ping_median[$d] ping[$d] <<< "$(timing "lat$d" "ping-pong of 4096 B between rank 0 ($NAME-node0) and rank 1 ($NAME-node1)")"
    read -r ring_median[$d] ring[$d] <<< "$(timing "lat$d" "all-reduce of")"
    pass "${d} ms: values and bytes exact; ping-pong best ${ping[$d]} ms (median ${ping_median[$d]}), ring all-reduce best ${ring[$d]} ms (median ${ring_median[$d]})"
  else
    tail -n 5 "$WORK/lat$d.log" "$WORK/lat$d.err"
    failed "${d} ms: comm-check did not pass"
    ping[$d]=-1 ring[$d]=-1 ping_median[$d]=-1 ring_median[$d]=-1
  fi
done
via=$(grep -m 1 "^cluster '$NAME': latency 10ms one way" "$WORK/lat10.err")
[[ $via == *"by netem on the links"* || $via == *"added by the MPI transport to every message between nodes"* ]] &&
  pass "run says how: $via" || failed "no mechanism line: '$via'"
grep -q "^cluster '$NAME': " "$WORK/lat0.err" && failed "0 ms printed a latency line" || pass "0 ms: no latency added, none announced"
if [[ $via == *"MPI transport"* ]]; then
  grep -q "^comm-check: emulated latency 50 ms one way on every message between nodes (2 nodes), added by the MPI transport" "$WORK/lat50.log" &&
    pass "the ranks apply it: $(grep -m 1 '^comm-check: emulated' "$WORK/lat50.log" | cut -c1-80)" || failed "no comm-check latency line"
fi

# within TAG MEASURED EXPECTED: |measured - expected| <= 10 % of expected (ms).
within() {
  if awk -v m="$2" -v e="$3" 'BEGIN { d = m - e; if (d < 0) d = -d; exit !(m >= 0 && d <= 0.1 * e) }'; then
    pass "$1: $2 ms, expected $3 ms (within 10 %)"
  else
    failed "$1: $2 ms, expected $3 ms (more than 10 % off)"
  fi
}
# 4 KB each way stay inside tbf's 64 KiB burst (refilled during the 20 ms gaps): the
# bandwidth term is what 0 ms measures, the same at every latency. Compared: the best of
# 25 round trips (what the link and the rule give; a loaded machine's scheduling only adds
# to it, and CI runs two tests at once), and no median below 2 x D (nothing arrives early).
# Because the load only adds, a best more than 10 % over is measured once more and the
# better best kept (CI once saw a 2-step all-reduce's best of 15 at 22.2 ms against 20.2
# while the GPU bundle test ran beside it); a rule that adds too much stays over.
# remeasure D: a second comm-check at D; ping[D] and ring[D] keep the better best.
remeasure() {
  local p r
  comm_check "again$1" "${1}ms" 4096 25 || return
  read -r _ p <<< "$(timing "again$1" "ping-pong of 4096 B between rank 0 ($NAME-node0) and rank 1 ($NAME-node1)")"
  read -r _ r <<< "$(timing "again$1" "all-reduce of")"
  echo "note: ${1} ms measured again (a best more than 10 % over): ping-pong best $p ms, ring all-reduce best $r ms"
  ping[$1]=$(awk -v a="${ping[$1]}" -v b="$p" 'BEGIN { print (b != "" && b + 0 < a + 0) ? b : a }')
  ring[$1]=$(awk -v a="${ring[$1]}" -v b="$r" 'BEGIN { print (b != "" && b + 0 < a + 0) ? b : a }')
}
# over MEASURED EXPECTED: true when the measured best is more than 10 % over EXPECTED.
over() { awk -v m="$1" -v e="$2" 'BEGIN { exit !(m > 1.1 * e) }'; }
grep -q "^comm-check: emulated latency\|OCC_EMULATED_LATENCY" "$WORK/lat0.log" && failed "0 ms set a latency up" ||
  pass "0 ms: no latency set up (ping-pong ${ping[0]} ms, all-reduce ${ring[0]} ms: the stack and the link alone)"
for d in 10 50; do
  if over "${ping[$d]}" "$(awk -v d=$d -v z="${ping[0]}" 'BEGIN { print 2 * d + z }')" ||
     over "${ring[$d]}" "$(awk -v d=$d -v z="${ring[0]}" 'BEGIN { print 2 * d + z }')"; then
    remeasure $d
  fi
  within "ping-pong at $d ms (2 x $d + ${ping[0]})" "${ping[$d]}" "$(awk -v d=$d -v z="${ping[0]}" 'BEGIN { print 2 * d + z }')"
  within "ring all-reduce at $d ms, 2 steps (2 x $d + ${ring[0]})" "${ring[$d]}" "$(awk -v d=$d -v z="${ring[0]}" 'BEGIN { print 2 * d + z }')"
  awk -v p="${ping[$d]}" -v r="${ring[$d]}" -v d=$d 'BEGIN { exit !(p >= 2 * d && r >= 2 * d) }' &&
    pass "$d ms: no round trip under 2 x $d ms" || failed "$d ms: a round trip under 2 x $d ms (${ping[$d]}, ${ring[$d]})"
done
# 1 MB each way: the bandwidth term (~2 x 80 ms at 100 Mbit/s) and the latency add.
big0=-1 big50=-1
comm_check big0 0 1000000 4 && read -r _ big0 <<< "$(timing big0 "ping-pong of 1000000 B")"
comm_check big50 50ms 1000000 4 && read -r _ big50 <<< "$(timing big50 "ping-pong of 1000000 B")"
within "1 MB ping-pong at 50 ms (2 x 50 + ${big0}, its bandwidth term)" "$big50" "$(awk -v z="$big0" 'BEGIN { print 100 + z }')"

# Training: the latency changes the time, never the numbers (P2 across the two nodes).
MODEL=("${TINY[@]}" --pipeline-model-parallel-size 2 --train-iters 3)
for d in 0 20; do
  timeout 120 "${CLUSTER[@]}" run --name $NAME --nodes 2 --ranks-per-node 1 --latency "${d}ms" -- \
    "$BIN" train "${MODEL[@]}" --metrics "$WORK/train$d.jsonl" > "$WORK/train$d.log" 2>&1 ||
    { tail -n 5 "$WORK/train$d.log"; failed "train at $d ms failed"; }
done
compare_losses train0 train20 0
if [[ $via == *"MPI transport"* ]]; then
  grep -q "^train: emulated latency 20 ms one way on every message between nodes (2 nodes)" "$WORK/train20.log" &&
    pass "train applies the latency" || failed "train: no latency line"
fi

# Bad input: one error line, non-zero exit.
out=$(OCC_EMULATED_LATENCY=soon timeout 60 mpirun --oversubscribe -np 2 -x OCC_EMULATED_LATENCY "$BIN" comm-check --device cpu --count 8 2>&1)
rc=$?
[[ $rc -ne 0 && $(grep -c "^error: " <<< "$out") -eq 1 ]] &&
  grep -q "^error: OCC_EMULATED_LATENCY 'soon' is not a time; use a time such as 50ms" <<< "$out" &&
  pass "a bad OCC_EMULATED_LATENCY is refused: $(grep '^error: ' <<< "$out")" || failed "bad latency: rc=$rc $out"
out=$("${CLUSTER[@]}" run --name $NAME --latency 10ms --latency-via carrier-pigeon -- true 2>&1)
[[ $? -eq 2 && $out == "error: --latency-via 'carrier-pigeon' is not a mechanism"* ]] && pass "bad --latency-via refused" ||
  failed "bad --latency-via: '$out'"
finish

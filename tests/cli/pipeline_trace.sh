#!/usr/bin/env bash
# labels: parallel
# The --trace of a 4-stage pipeline (6 micro-batches, 2 iterations) shows exactly the
# non-interleaved 1F1B schedule on every stage s: min(P-s-1, M) warm-up forwards, then
# alternating F/B pairs, then the cool-down backwards, with the right micro-batch indices;
# every rank appears with its process name; on stage s > 0 every forward F<mb> comes right
# after its "recv F<mb>" and on stage s < P-1 every backward B<mb> right after its
# "recv B<mb>"; every F<mb>/B<mb> that feeds a neighbour is followed by its "send"; and, as
# the ranks share one clock here, F<mb> on stage s starts only after F<mb> on stage s-1 has
# ended (B<mb>: after stage s+1's).
source "$(dirname "$0")/fixture/lib.sh"
P=4 M=6 ITERS=2
if ! timeout 120 mpirun -np $P --oversubscribe "$BIN" train --data-path "$DATA/kjv" --tokenizer-model "$DATA/kjv.model" \
    --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
    --micro-batch-size 1 --global-batch-size $M --train-iters $ITERS --eval-iters 0 \
    --pipeline-model-parallel-size $P --trace "$WORK/trace.json" > "$WORK/run.log" 2>&1; then
  tail -n 20 "$WORK/run.log"
  failed "P$P training run with --trace failed"
  finish
  exit
fi
out=$(/usr/bin/python3 - "$WORK/trace.json" $P $M $ITERS 2>&1 <<'EOF'
import json, re, sys

path, P, M, iters = sys.argv[1], *map(int, sys.argv[2:])
failures = 0


def check(ok, msg):
    global failures
    print(("ok   " if ok else "FAIL ") + msg)
    failures += not ok
    return ok


try:
    events = json.load(open(path))["traceEvents"]
except Exception as e:  # noqa: BLE001
    check(False, f"trace {path} is not a JSON object with traceEvents: {e}")
    sys.exit(1)

names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
check(sorted(names) == list(range(P)), f"process_name metadata for ranks {sorted(names)} (expected 0..{P - 1})")
for r in range(P):
    check(f"stage {r}" in names.get(r, ""), f"rank {r} is named {names.get(r)!r} (mentions stage {r})")


def schedule(s):
    """Non-interleaved 1F1B, written out from its definition."""
    w = min(P - s - 1, M)
    ops = [("F", j) for j in range(w)]
    for i in range(M - w):
        ops += [("F", w + i), ("B", i)]
    return ops + [("B", j) for j in range(M - w, M)]


compute = {}  # (stage, iteration, kind, mb) -> (start, end)
for s in range(P):
    tl = sorted((e for e in events if e.get("ph") == "X" and e["pid"] == s and e.get("tid") == 0),
                key=lambda e: e["ts"])
    fb = [(e["name"][0], int(e["name"][1:])) for e in tl if re.fullmatch(r"[FB]\d+", e["name"])]
    want = schedule(s)
    w = min(P - s - 1, M)
    if not check(fb == want * iters, f"stage {s}: F/B order is 1F1B ({w} warm-up forwards, {M - w} steady "
                 f"F/B pairs, {w} cool-down backwards) in each of {iters} iterations"):
        print(f"     got      {' '.join(k + str(j) for k, j in fb)}")
        print(f"     expected {' '.join(k + str(j) for k, j in want * iters)}")
        continue
    # Neighbouring events on this rank's compute thread.
    bad_recv, bad_send, count = [], [], {}
    for i, e in enumerate(tl):
        if not re.fullmatch(r"[FB]\d+", e["name"]):
            continue
        kind, mb = e["name"][0], int(e["name"][1:])
        it = count.get(e["name"], 0)
        count[e["name"]] = it + 1
        compute[(s, it, kind, mb)] = (e["ts"], e["ts"] + e["dur"])
        needs_recv = s > 0 if kind == "F" else s < P - 1
        if needs_recv and (i == 0 or tl[i - 1]["name"] != f"recv {kind}{mb}"):
            bad_recv.append(f"{e['name']} (iteration {it + 1}) after {tl[i - 1]['name'] if i else 'nothing'!r}")
        needs_send = s < P - 1 if kind == "F" else s > 0
        if needs_send and (i + 1 == len(tl) or tl[i + 1]["name"] != f"send {kind}{mb}"):
            bad_send.append(f"{e['name']} (iteration {it + 1}) before "
                            f"{tl[i + 1]['name'] if i + 1 < len(tl) else 'nothing'!r}")
    what = ("forwards" if s > 0 else "") + (" and " if 0 < s < P - 1 else "") + ("backwards" if s < P - 1 else "")
    check(not bad_recv, f"stage {s}: every one of its {what} right after its recv: "
          + ("yes" if not bad_recv else "; ".join(bad_recv[:4])))
    check(not bad_send, f"stage {s}: every F (s < P-1) / B (s > 0) right before its send: "
          + ("yes" if not bad_send else "; ".join(bad_send[:4])))

# Causality across ranks (one host, one monotonic clock): 1 us slack for rounding.
late = []
for (s, it, kind, mb), (start, _) in compute.items():
    src = s - 1 if kind == "F" else s + 1
    if (src, it, kind, mb) in compute and start < compute[(src, it, kind, mb)][1] - 1.0:
        late.append(f"{kind}{mb} (iteration {it + 1}) on stage {s} starts {compute[(src, it, kind, mb)][1] - start:.0f} us "
                    f"before it ends on stage {src}")
if compute:
    check(not late, "every F<mb> starts after stage s-1's F<mb> ended, every B<mb> after stage s+1's B<mb>"
          + ("" if not late else ": " + "; ".join(late[:4])))
sys.exit(1 if failures else 0)
EOF
)
rc=$?
# Fold the Python checks into this script's tally.
while IFS= read -r line; do
  case $line in "ok   "*) pass "${line#ok   }" ;; "FAIL "*) failed "${line#FAIL }" ;; *) echo "$line" ;; esac
done <<< "$out"
[[ $rc -eq 0 ]] || grep -q '^FAIL ' <<< "$out" || failed "trace checker exited with status $rc"
finish

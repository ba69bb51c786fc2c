#!/usr/bin/env bash
# labels: ops
# --tensorboard-dir (issue 33): the event file, read back by a reader written for the test
# (tests/cli/fixture/tfevents_read.py: TFRecord framing, both CRC-32Cs, Event / Summary
# fields), holds every scalar of the metrics JSONL under its tag, equal as float32; a run
# killed with SIGKILL leaves a file that reads up to its last flush; its resumed run adds a
# file whose restart marker replaces what the killed run logged after the checkpoint, so the
# curves equal the metrics' (the last row of each iteration).
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
READ="$SRC/tests/cli/fixture/tfevents_read.py"
# compare TB_DIR METRICS FLAGS...: every scalar the documented mapping gives for the metrics
# rows (the last row of an iteration wins) is in the event files, equal as float32, and
# nothing else is. FLAGS: timers, ppl, interval=N, torn (a file may end in a cut record),
# killed (the run was killed: compare up to the event file's last iteration).
compare() {
  local dir=$1 metrics=$2
  shift 2
  "$PY" - "$READ" "$dir" "$metrics" "$@" <<'PY'
import importlib.util, json, math, struct, sys
spec = importlib.util.spec_from_file_location("tfevents_read", sys.argv[1])
reader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reader)
flags = sys.argv[4:]
timers, ppl = "timers" in flags, "ppl" in flags
interval = int(next((f.split("=")[1] for f in flags if f.startswith("interval=")), 1))
tb = reader.read(sys.argv[2], allow_torn_tail="torn" in flags)
rows = {}
for line in open(sys.argv[3]):
    r = json.loads(line)
    rows[r["iter"]] = r
megatron = {"forward": "forward-compute", "backward": "backward-compute", "optimizer": "optimizer",
            "data": "batch-generator", "dp_allreduce": "all-grads-sync", "emb_allreduce": "embedding-grads-all-reduce"}
want = {}
for it, r in rows.items():
    s = {}
    if it % interval == 0:
        s.update({"lm loss": r["loss"], "learning-rate": r["lr"], "grad-norm": r["grad_norm"],
                  "tokens-per-sec": r["tokens_per_s"]})
        if "loss_scale" in r:
            s["loss-scale"] = r["loss_scale"]
        s.update({"bytes/" + k: v for k, v in r.get("bytes", {}).items()})
        s.update({"bytes-saved/" + k: v for k, v in r.get("bytes_saved", {}).items()})
        s.update({"lep/" + k: v for k, v in r.get("lep_check", {}).items()})
        if timers:
            s["iteration-time"] = r["ms"] / 1e3
            for k, v in r.get("timers", {}).items():
                if not k.startswith("peak_") and k != "iteration":
                    s[megatron.get(k, k.replace("_", "-")) + "-time"] = v / 1e3
    for key, tag in (("val_loss", "lm loss validation"), ("test_loss", "lm loss test")):
        if key in r:
            s[tag] = r[key]
            if ppl:
                s[tag + " ppl"] = math.exp(r[key])
    for tag, v in s.items():
        want.setdefault(tag, {})[it] = struct.unpack("<f", struct.pack("<f", v))[0]
got = tb["scalars"]
bad = []
if tb["file_version"] != "brain.Event:2":
    bad.append(f"file_version {tb['file_version']!r}")
if "killed" in flags:  # a killed run: TensorBoard has the iterations up to its last flush
    last = max(got.get("lm loss", {0: 0}))
    if last < max(rows) - 1:
        bad.append(f"the event file ends at iteration {last}, the metrics at {max(rows)}")
    want = {t: {i: v for i, v in p.items() if i <= last} for t, p in want.items()}
    want = {t: p for t, p in want.items() if p}
for tag in sorted(set(want) | set(got)):
    if want.get(tag) != got.get(tag):
        w, g = want.get(tag, {}), got.get(tag, {})
        diff = [i for i in sorted(set(w) | set(g)) if w.get(i) != g.get(i)]
        bad.append(f"{tag}: iterations {diff[:4]}: {[w.get(i) for i in diff[:2]]} vs {[g.get(i) for i in diff[:2]]}")
n = sum(len(p) for p in got.values())
if bad:
    print("; ".join(bad[:4]))
    sys.exit(1)
print(f"{tb['files']} file(s), {tb['records']} records, {len(got)} tags, {n} points equal the metrics "
      f"(restarts at {tb['restarts']}); tags: {', '.join(sorted(got)[:12])}...")
PY
}

# 1. Two ranks (P2) with CB + LEP and --check-lep: losses, lr, norms, bytes per class, bytes
#    saved, LEP's ratios, timers, validation and test losses and perplexities.
RUN=("${TINY[@]}" --pipeline-model-parallel-size 2 --inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback
     --check-lep --train-iters 6 --eval-interval 2)
if mpirun --oversubscribe -np 2 "$BIN" train "${RUN[@]}" --tensorboard-dir "$WORK/tb" --log-timers-to-tensorboard \
    --log-validation-ppl-to-tensorboard --metrics "$WORK/m.jsonl" > "$WORK/run.log" 2>&1; then
  out=$(compare "$WORK/tb" "$WORK/m.jsonl" timers ppl) && pass "P2 run: $out" || failed "P2 run: $out"
  [[ $(ls "$WORK/tb" | wc -l) == 1 ]] && pass "one event file, written by the logging rank: $(ls "$WORK/tb")" ||
    failed "event files: $(ls "$WORK/tb")"
  grep -q "^tensorboard: $WORK/tb/events.out.tfevents\." "$WORK/run.log" && pass "the run names its event file" ||
    failed "no 'tensorboard:' line"
else
  tail -n 20 "$WORK/run.log"
  failed "P2 run with --tensorboard-dir"
fi
# --tensorboard-log-interval 2: training scalars on even iterations, evaluations always.
if "$BIN" train "${TINY[@]}" --train-iters 5 --eval-interval 3 --tensorboard-dir "$WORK/tb_i" --tensorboard-log-interval 2 \
    --metrics "$WORK/i.jsonl" > "$WORK/i.log" 2>&1; then
  out=$(compare "$WORK/tb_i" "$WORK/i.jsonl" interval=2) && pass "--tensorboard-log-interval 2: $out" || failed "--tensorboard-log-interval 2: $out"
else
  tail -n 20 "$WORK/i.log"
  failed "run with --tensorboard-log-interval 2"
fi

# 2. SIGKILL mid-run, then resume from its last checkpoint (every 3 iterations).
K=("${TINY[@]}" --train-iters 3000 --eval-interval 1000 --save "$WORK/ck" --save-interval 3 --tensorboard-dir "$WORK/tb_k"
   --metrics "$WORK/k.jsonl")
"$BIN" train "${K[@]}" > "$WORK/k.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -f $WORK/k.jsonl && $(wc -l < "$WORK/k.jsonl") -ge 8 ]] && break
  sleep 0.1
done
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
killed_at=$(wc -l < "$WORK/k.jsonl")
if ((killed_at >= 8 && killed_at < 3000)); then
  out=$(compare "$WORK/tb_k" "$WORK/k.jsonl" torn killed) && pass "killed at iteration $killed_at: $out" || failed "killed run: $out"
  "$BIN" train "${K[@]}" --load "$WORK/ck" --exit-interval 1000 > "$WORK/k2.log" 2>&1
  rc=$?
  ck=$(grep -o 'loaded checkpoint .* at iteration [0-9]*' "$WORK/k2.log" | grep -o '[0-9]*$')
  if ((rc == 0)) && [[ -n $ck ]]; then
    out=$(compare "$WORK/tb_k" "$WORK/k.jsonl" torn) && pass "resumed from iteration $ck to 1000: $out" || failed "resumed run: $out"
    "$PY" "$READ" "$WORK/tb_k" --allow-torn-tail | "$PY" -c "import json, sys; r = json.load(sys.stdin)['restarts']; sys.exit(r != [1, $ck + 1])" &&
      pass "restart markers at iterations 1 and $((ck + 1)) (two files)" || failed "restart markers"
  else
    tail -n 5 "$WORK/k2.log"
    failed "resume after SIGKILL: status $rc"
  fi
else
  tail -n 5 "$WORK/k.log"
  failed "the run was not killed mid-way ($killed_at metrics rows)"
fi
finish

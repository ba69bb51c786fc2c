#!/usr/bin/env bash
# Chaos test: a 4-rank compressed run (P2 D2 with every Optimus-CC technique: CB + LEP + EC,
# FE, DP PowerSGD + SC, dropout on) is killed at random moments and restarted with the same
# command (--load) until it finishes, and must end exactly where the uninterrupted run ends:
# every iteration's loss and gradient norm (also those computed again after a restart) and
# every file of the final checkpoint (weights, Adam moments, compressor state) bit for bit.
#
#   bash scripts/chaos.sh [--quick] [--iters N] [--kills K] [--seed S] [--out DIR]
#                         [--bin BIN] [--data PREFIX]
#
# Each round waits until a random number of its iterations (not the last) are logged, then
# either SIGKILLs one random rank (most rounds; a checkpoint is saved every iteration, so
# kills often land inside a save) or sends mpirun SIGUSR1 (--exit-signal-handler: a clean
# stop with a checkpoint). Rounds go on until the run completes; K kills at most, then the
# last round runs to the end. --quick: 24 iterations, 4 kills (what CI runs, cli.chaos).
# Exit status 0 when everything matched; the summary line says how many kills were survived.
set -uo pipefail
cd "$(dirname "$0")/.."
ITERS=60 KILLS=12 SEED=$RANDOM OUT=bench-results/chaos BIN=build/optimus-cc DATA=
while (($#)); do
  case $1 in
    --quick) ITERS=24 KILLS=4; shift ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --kills) KILLS=${2:?}; shift 2 ;;
    --seed) SEED=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --bin) BIN=${2:?}; shift 2 ;;
    --data) DATA=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
RANDOM=$SEED
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
[[ -x $BIN ]] || { echo "chaos: $BIN not found; build first (bash scripts/setup.sh)" >&2; exit 2; }
rm -rf "$OUT"
mkdir -p "$OUT"
if [[ -z $DATA ]]; then
  "$BIN" preprocess --input data/kjv.txt.zst --output-prefix "$OUT/kjv" --vocab-size 512 > "$OUT/preprocess.log" 2>&1 \
    || { cat "$OUT/preprocess.log"; exit 1; }
  DATA=$OUT/kjv
fi
MARK=chaos-$$-$SEED  # in the chaos rounds' metrics paths, to find their ranks
RUN=(--data-path "$DATA" --tokenizer-model "$DATA.model" --num-layers 4 --hidden-size 64 --num-attention-heads 4
  --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --train-iters "$ITERS"
  --hidden-dropout 0.1 --attention-dropout 0.1 --seed 9 --eval-interval 1000 --eval-iters 1 --log-interval 1000
  --pipeline-model-parallel-size 2 --inter-grad-comp --inter-grad-comp-rank 4 --use-error-feedback
  --inter-grad-comp-epilogue-only --emb-comm-opt --grad-comp --grad-comp-rank 4 --grad-comp-warm-up 0.1
  --selective-grad-comp-way 1 --comm-timeout 30 --exit-signal-handler)
MPI=(mpirun --oversubscribe -np 4)

echo "chaos: $ITERS iterations, up to $KILLS kills, seed $SEED, out $OUT"
"${MPI[@]}" "$BIN" train "${RUN[@]}" --save "$OUT/straight" --save-interval "$ITERS" \
  --metrics "$OUT/straight.jsonl" > "$OUT/straight.log" 2>&1 || { cat "$OUT/straight.log"; echo "chaos: FAIL the uninterrupted run failed"; exit 1; }

rank_pids() { pgrep -f -- "^$BIN train .*$MARK" || true; }  # the ranks, not mpirun
rows() { [[ -f $1 ]] && wc -l < "$1" || echo 0; }
kills=0 clean_stops=0 round=0 done=0
while ((!done)); do
  round=$((round + 1))
  load=()
  latest_before=$(cat "$OUT/chaos/latest_checkpointed_iteration.txt" 2> /dev/null || echo none)
  [[ $latest_before != none ]] && load=(--load "$OUT/chaos")
  metrics=$OUT/chaos.round$round.$MARK.jsonl
  "${MPI[@]}" "$BIN" train "${RUN[@]}" "${load[@]}" --save "$OUT/chaos" --save-interval 1 --metrics "$metrics" \
    > "$OUT/round$round.log" 2>&1 &
  mpirun_pid=$!
  action=none
  if ((kills + clean_stops < KILLS)); then
    # Strike after a random number of this round's iterations (before the last), plus up
    # to 50 ms: with a save after every iteration, often inside a save.
    start=0
    [[ $latest_before =~ ^[0-9]+$ ]] && start=$latest_before
    remaining=$((ITERS - start))
    if ((remaining > 1)); then
      span=$((2 * ITERS / (KILLS + 1)))  # so that the K strikes spread over the whole run
      ((span > remaining - 1)) && span=$((remaining - 1))
      ((span < 1)) && span=1
      target=$((1 + RANDOM % span))
      for _ in $(seq 3000); do (($(rows "$metrics") >= target)) && break; kill -0 $mpirun_pid 2> /dev/null || break; sleep 0.01; done
      sleep "$(printf '0.%03d' $((RANDOM % 50)))"
    fi
    if ((remaining > 1)) && kill -0 $mpirun_pid 2> /dev/null; then
      if ((RANDOM % 4 == 0)); then
        kill -USR1 $mpirun_pid && action=sigusr1
      else
        mapfile -t pids < <(rank_pids)
        if ((${#pids[@]})); then
          victim=${pids[$((RANDOM % ${#pids[@]}))]}
          kill -9 "$victim" 2> /dev/null && action="sigkill-pid-$victim"
        fi
      fi
    fi
  fi
  wait $mpirun_pid
  rc=$?
  latest=$(cat "$OUT/chaos/latest_checkpointed_iteration.txt" 2> /dev/null || echo none)
  echo "round $round: $action, mpirun exit $rc, $(rows "$metrics") iterations logged, latest checkpoint $latest"
  case $action in
    sigusr1) clean_stops=$((clean_stops + 1))
      ((rc == 0)) || { tail -5 "$OUT/round$round.log"; echo "chaos: FAIL a SIGUSR1 stop exited $rc"; exit 1; } ;;
    sigkill*) kills=$((kills + 1)) ;;
  esac
  # Leftover ranks of a killed job would corrupt the next round.
  sleep 0.3
  left=$(rank_pids | tr '\n' ' ')
  [[ -z $left ]] || { echo "chaos: FAIL ranks still running after round $round: $left"; kill -9 $left; exit 1; }
  if [[ $latest == "$ITERS" ]]; then done=1; fi
  if ((!done && rc == 0)) && [[ $action == none ]]; then
    tail -5 "$OUT/round$round.log"; echo "chaos: FAIL round $round exited 0 before iteration $ITERS"; exit 1
  fi
  if ((round > KILLS + 5)); then echo "chaos: FAIL no progress after $round rounds"; exit 1; fi
done

# Every logged iteration (rounds repeat the ones after their checkpoint) must equal the
# uninterrupted run's, bit for bit; and every iteration must have been logged.
cat "$OUT"/chaos.round*.jsonl > "$OUT/chaos.jsonl"
python3 - "$OUT/straight.jsonl" "$OUT/chaos.jsonl" "$ITERS" <<'EOF' || exit 1
import json, sys
straight = {j["iter"]: (j["loss"], j["grad_norm"]) for j in map(json.loads, open(sys.argv[1]))}
seen, bad = {}, []
for j in map(json.loads, open(sys.argv[2])):
    v = (j["loss"], j["grad_norm"])
    seen[j["iter"]] = seen.get(j["iter"], 0) + 1
    if straight.get(j["iter"]) != v:
        bad.append((j["iter"], v, straight.get(j["iter"])))
n = int(sys.argv[3])
missing = [i for i in range(1, n + 1) if i not in seen]
redone = sum(c - 1 for c in seen.values())
if bad or missing or len(straight) != n:
    print(f"chaos: FAIL {len(bad)} iterations differ from the uninterrupted run (first: {bad[:1]}), missing {missing[:5]}")
    sys.exit(1)
print(f"losses and gradient norms: all {n} iterations equal the uninterrupted run's bit for bit "
      f"({redone} iterations computed again after a restart, each equal too)")
EOF
final=$(printf 'iter_%07d' "$ITERS")
nfiles=0
while IFS= read -r f; do
  cmp -s "$OUT/straight/$final/$f" "$OUT/chaos/$final/$f" || { echo "chaos: FAIL final checkpoint file $f differs"; exit 1; }
  nfiles=$((nfiles + 1))
done < <(cd "$OUT/straight/$final" && find . -type f | sort)
[[ $(cd "$OUT/chaos/$final" && find . -type f | wc -l) == "$nfiles" ]] || { echo "chaos: FAIL the final checkpoints hold different files"; exit 1; }
echo "final checkpoint: $nfiles files (weights, Adam moments, compressor state of all 4 ranks) bit-identical"
echo "chaos: PASS $kills SIGKILLs and $clean_stops SIGUSR1 stops survived in $round rounds, nothing lost (seed $SEED)"

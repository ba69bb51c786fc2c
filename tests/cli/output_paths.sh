#!/usr/bin/env bash
# labels: ops;checkpoint
# Where a run writes is checked before training (issue 33, item 4): an uncreatable or
# unwritable --save, --tensorboard-dir or --trace is refused before the first iteration
# (before the model is even built), on every rank, with one error line naming the flag,
# the path and the reason, and a non-zero exit.
source "$(dirname "$0")/fixture/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
RUN=("${TINY[@]}" --train-iters 2 --pipeline-model-parallel-size 2)
MPI=(mpirun --oversubscribe -np 2)

# refused NAME PATTERN FLAGS...: a 2-rank run with FLAGS stops before training with one matching line.
refused() {
  local name=$1 pattern=$2
  shift 2
  local t0=$SECONDS
  "${MPI[@]}" "$BIN" train "${RUN[@]}" "$@" > "$WORK/out.log" 2>&1
  local rc=$?
  if [[ $rc != 0 && $(grep -c '^error:' "$WORK/out.log") == 1 ]] && grep -qE -- "^error: $pattern" "$WORK/out.log" &&
      ! grep -qE '^(iter |model:|validation loss)' "$WORK/out.log"; then
    pass "$name: exit $rc in $((SECONDS - t0)) s, before the model was built: $(grep '^error:' "$WORK/out.log" | cut -c1-170)"
  else
    cat "$WORK/out.log"
    failed "$name: status $rc, want one line /$pattern/ and no training"
  fi
}

# Uncreatable: /proc refuses new entries, even to root.
refused "--save /proc/..." "cannot create --save directory /proc/occ-x/ck: .+; give a directory" --save /proc/occ-x/ck
refused "--tensorboard-dir /proc/..." "cannot create --tensorboard-dir /proc/occ-x/tb: .+; give a directory" \
  --tensorboard-dir /proc/occ-x/tb
refused "--trace in a missing folder" "cannot write --trace file $WORK/none/trace.json: No such file or directory" \
  --trace "$WORK/none/trace.json"
# A --save that is a file, not a folder.
touch "$WORK/a-file"
refused "--save naming a file" "cannot create --save directory $WORK/a-file: " --save "$WORK/a-file"

# Unwritable but existing: a read-only tmpfs (root can mount one here), else a folder without
# write permission for an unprivileged user (setpriv), else skipped with the reason.
mkdir -p "$WORK/ro"
if mount -t tmpfs -o ro,size=64k tmpfs "$WORK/ro" 2> "$WORK/mount.err"; then
  trap 'umount "$WORK/ro" 2> /dev/null; rm -rf "$WORK"' EXIT
  refused "--save on a read-only file system" "cannot write in --save directory $WORK/ro: Read-only file system" --save "$WORK/ro"
  refused "--save below a read-only file system" "cannot create --save directory $WORK/ro/ck: Read-only file system" \
    --save "$WORK/ro/ck"
  refused "--tensorboard-dir on a read-only file system" "cannot write in --tensorboard-dir $WORK/ro: .*Read-only file system" \
    --tensorboard-dir "$WORK/ro"
  refused "--trace on a read-only file system" "cannot write --trace file $WORK/ro/t.json: Read-only file system" \
    --trace "$WORK/ro/t.json"
else
  echo "SKIP unwritable folders: cannot mount a read-only tmpfs here ($(cat "$WORK/mount.err"))"
fi

# Writable paths pass the checks and leave no probe files behind.
"${MPI[@]}" "$BIN" train "${RUN[@]}" --save "$WORK/ok/ck" --tensorboard-dir "$WORK/ok/tb" --trace "$WORK/ok/t.json" \
  > "$WORK/ok.log" 2>&1 || { cat "$WORK/ok.log"; failed "a run with writable paths"; }
probes=$(find "$WORK/ok" -name '*probe*' | wc -l)
[[ -f $WORK/ok/t.json && -f $WORK/ok/ck/latest_checkpointed_iteration.txt && $probes == 0 ]] &&
  pass "writable --save, --tensorboard-dir and --trace: trained, saved, no probe file left" ||
  failed "writable paths: trace $(ls "$WORK/ok"), $probes probe files"
finish

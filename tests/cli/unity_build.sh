#!/usr/bin/env bash
# labels: unit
# The main job's first build compiles the library in unity batches (CMakeLists.txt:
# OCC_FAST_BUILD), where files in one batch share their anonymous namespaces: two files
# with the same file-local name build file by file, as the tests do, and break only the
# main job. This configures a unity build of the whole library as ONE batch (so any
# batching is covered) and checks that translation unit's syntax and semantics
# (-fsyntax-only: ~15 s, no code generated). Needs neither the binary nor the fixture data.
set -uo pipefail
SRC=${2:?usage: bash unity_build.sh BIN SOURCE_DIR}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cmake -S "$SRC" -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCC_TESTS=OFF -DOCC_CUDA=OFF \
  -DOCC_FAST_BUILD=ON -DOCC_UNITY_BATCH=100000 > "$DIR/cmake.log" 2>&1 ||
  { cat "$DIR/cmake.log"; echo "unity_build: CMake failed to configure a unity build"; exit 1; }
UNIT=CMakeFiles/occ.dir/Unity/unity_0_cxx.cxx
[[ ! -e $DIR/CMakeFiles/occ.dir/Unity/unity_1_cxx.cxx ]] || { echo "unity_build: the library did not fit one batch"; exit 1; }
COMPILE=$(cd "$DIR" && ninja -t commands "$UNIT.o" | tail -n 1)
[[ $COMPILE == *"$UNIT"* ]] || { echo "unity_build: no compile command for $UNIT: $COMPILE"; exit 1; }
if ! (cd "$DIR" && bash -c "$COMPILE -fsyntax-only") > "$DIR/compile.log" 2>&1; then
  grep -E "error:" "$DIR/compile.log" | head -n 20
  echo "unity_build: the library does not compile as one unity batch; give the clashing file-local names" \
    "(above) names unique across files"
  exit 1
fi
echo "unity_build: $(grep -c '^#include' "$DIR/$UNIT") sources compile as one unity batch"

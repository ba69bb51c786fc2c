#!/usr/bin/env bash
# Checks the architecture's rule that dependencies point one way:
#   core -> {kernels, comm, data} -> parallel -> compress -> model -> train -> plan -> apps
# A file under src/LAYER/ may include headers of its own layer and of the
# layers before it, never of a later one; kernels, comm and data share a rank
# and do not include each other. Prints every offending include as
# FILE:LINE: ... and exits 1 if there is one (0 when the tree is clean).
# Usage: bash scripts/check-layers.sh [SRC_DIR]   (default: the repository's src/)
set -euo pipefail
SRC=${1:-"$(cd "$(dirname "$0")/.." && pwd)/src"}
[[ -d $SRC ]] || { echo "check-layers: no directory $SRC" >&2; exit 2; }
cd "$SRC"

# Every quoted include of every source file, as FILE:LINE:TEXT.
includes=$(grep -rnE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
  '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' . | sed 's#^\./##' || true)

awk -F: '
  BEGIN {
    split("core:0 kernels:1 comm:1 data:1 parallel:2 compress:3 model:4 train:5 plan:6 apps:7", pairs, " ")
    for (i in pairs) { split(pairs[i], kv, ":"); rank[kv[1]] = kv[2] }
    bad = 0
  }
  {
    file = $1; line = $2
    text = $0; sub(/^[^:]*:[^:]*:/, "", text)
    match(text, /"[^"]+"/); inc = substr(text, RSTART + 1, RLENGTH - 2)
    split(file, f, "/"); from = f[1]
    split(inc, g, "/"); to = g[1]
    if (!(from in rank)) {
      printf "src/%s:%s: file is in no layer (%s/); add its directory to scripts/check-layers.sh\n", file, line, from
      bad = 1; next
    }
    if (!(to in rank) || g[2] == "") next   # not one of our layers (a sibling header or a library)
    if (rank[to] > rank[from] || (rank[to] == rank[from] && to != from)) {
      printf "src/%s:%s: includes \"%s\": layer %s may not depend on %s\n", file, line, inc, from, to
      bad = 1
    }
  }
  END { exit bad }
' <<< "$includes" && echo "check-layers: every include in $SRC points down the layers" && exit 0
exit 1

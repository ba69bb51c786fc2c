#!/usr/bin/env bash
# labels: unit
# The layering rule (core -> kernels, comm, data -> parallel -> compress -> model ->
# train -> plan -> apps): no source file includes a header of a layer above its own.
# Runs `python3 -m occtools check-layers` over src/, which prints any offending include.
# Needs neither the binary nor the fixture data.
set -uo pipefail
SRC=${2:?usage: bash layers.sh BIN SOURCE_DIR}
cd "$SRC" && PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m occtools check-layers "$SRC/src"

#!/usr/bin/env bash
# labels: unit
# The layering rule (core -> kernels, comm, data -> parallel -> compress -> model ->
# train -> plan -> apps): no source file includes a header of a layer above its own.
# Runs scripts/check-layers.sh over src/, which prints any offending include.
# Needs neither the binary nor the fixture data.
set -uo pipefail
SRC=${2:?usage: bash layers.sh BIN SOURCE_DIR}
bash "$SRC/scripts/check-layers.sh" "$SRC/src"

#!/usr/bin/env bash
# labels: smoke
# What worked keeps working (issue 38): the commands README.md quotes, run as a user would
# copy them (the main job shortened; preprocess, train with --split 949,50,1 on a corpus
# whose test split is under one sample, generate, export, plan, the 3D-parallel launch),
# read from the README itself by fixture/readme_commands.py.
source "$(dirname "$0")/fixture/lib.sh"
"$PY" "$SRC/tests/cli/fixture/readme_commands.py" "$BIN" "$SRC" "$DATA" "$WORK"

#!/usr/bin/env bash
# labels: errors
# The bad-input corpus (issue 38): every command given malformed or hostile input, each
# case asserting the exit code, one "error:" line naming the flag or file, nothing
# written or left behind, and no hang. The table and its checks are in
# fixture/bad_inputs.py; the checkpoints and datasets it damages come from real runs
# (fixture/bad_input_fixtures.py).
source "$(dirname "$0")/fixture/lib.sh"
"$PY" "$SRC/tests/cli/fixture/bad_inputs.py" "$BIN" "$SRC" "$DATA" "$WORK"

#!/usr/bin/env bash
# The main job: set up, tokenize the bundled King James Bible, train a small
# GPT on it (validation loss printed as it falls), then sample from it.
#   OCC_RUN_DIR  where data, checkpoints and metrics go (default: runs/kjv)
#   extra arguments are passed to `optimus-cc train` (they override the config)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
RUN=${OCC_RUN_DIR:-runs/kjv}
mkdir -p "$RUN"
if [[ ! -f $RUN/kjv.idx || ! -f $RUN/kjv.model ]]; then
  build/optimus-cc preprocess --input data/kjv.txt.zst --output-prefix "$RUN/kjv" --vocab-size 4096
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
rm -rf "$RUN/checkpoints" "$RUN/metrics.jsonl"
build/optimus-cc train --config configs/kjv-small.json --data-path "$RUN/kjv" --tokenizer-model "$RUN/kjv.model" \
  --save "$RUN/checkpoints" --metrics "$RUN/metrics.jsonl" "$@"
echo
echo "sample:"
build/optimus-cc generate --load "$RUN/checkpoints" --tokenizer-model "$RUN/kjv.model" \
  --prompt "And God said" --max-new-tokens 60

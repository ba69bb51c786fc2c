#!/usr/bin/env bash
# labels: data
# preprocess --json-keys (Megatron's preprocess_data.py flag): a two-field JSONL gives one
# dataset per field, named PREFIX_KEY_document.bin/.idx, each with the tokens of a one-field
# file of the same texts ("text" by default, as PREFIX.bin/.idx); a malformed line and a
# missing key are one-line errors naming the line number.
source "$(dirname "$0")/fixture/lib.sh"
"$PY" - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
rows = [{"title": f"Chapter {i}", "text": f"In the beginning was document {i}, and it was good.\nLine two.", "id": i}
        for i in range(12)]
with open(f"{w}/two.jsonl", "w") as f:
    for r in rows: f.write(json.dumps(r) + "\n")
for key in ("title", "text"):
    with open(f"{w}/{key}.jsonl", "w") as f:
        for r in rows: f.write(json.dumps({"text": r[key]}) + "\n")
with open(f"{w}/bad.jsonl", "w") as f:
    f.write(json.dumps(rows[0]) + "\n" + json.dumps(rows[1]) + "\n{\"text\": \"unterminated\n")
with open(f"{w}/missing.jsonl", "w") as f:
    f.write(json.dumps(rows[0]) + "\n\n" + json.dumps({"text": "no title"}) + "\n")
PY
TOK=(--tokenizer-model "$DATA/kjv.model")
ids() { "$PY" "$SRC/tests/cli/fixture/read_indexed.py" "$1"; }
if "$BIN" preprocess --input "$WORK/two.jsonl" --output-prefix "$WORK/two" --json-keys text title "${TOK[@]}" \
    > "$WORK/two.log" 2>&1; then
  for key in text title; do
    "$BIN" preprocess --input "$WORK/$key.jsonl" --output-prefix "$WORK/one_$key" "${TOK[@]}" > /dev/null 2>&1
    if [[ -f $WORK/two_${key}_document.bin && -f $WORK/two_${key}_document.idx ]] &&
       cmp -s <(ids "$WORK/two_${key}_document") <(ids "$WORK/one_$key") && [[ $(ids "$WORK/one_$key" | wc -l) -eq 12 ]]; then
      pass "--json-keys text title: two_${key}_document.bin/.idx holds the tokens of a one-field file of the same texts (12 documents)"
    else
      failed "--json-keys: the $key dataset differs from the one-field file's"
    fi
  done
else
  cat "$WORK/two.log"; failed "preprocess --json-keys text title"
fi
expect_error() {
  local name=$1 pattern=$2
  shift 2
  if ! "$@" > "$WORK/bad.log" 2>&1 && [[ $(grep -c '^error:' "$WORK/bad.log") -eq 1 ]] &&
      grep '^error:' "$WORK/bad.log" | grep -Eq "$pattern"; then
    pass "$name refused: $(grep '^error:' "$WORK/bad.log" | cut -c1-170)"
  else
    cat "$WORK/bad.log"; failed "$name: not refused with one error line matching /$pattern/"
  fi
}
expect_error "a malformed JSONL line" "bad.jsonl line 3 is not valid JSON" \
  "$BIN" preprocess --input "$WORK/bad.jsonl" --output-prefix "$WORK/bad" "${TOK[@]}"
expect_error "a line without the key" "missing.jsonl line 3 has no \"title\" string field" \
  "$BIN" preprocess --input "$WORK/missing.jsonl" --output-prefix "$WORK/missing" --json-keys text title "${TOK[@]}"
expect_error "--json-keys on plain text" "json-keys reads JSON lines" \
  "$BIN" preprocess --input "$SRC/data/kjv.txt.zst" --output-prefix "$WORK/plain" --json-keys text "${TOK[@]}"
finish

#!/usr/bin/env bash
# labels: data
# python3 -m occtools extract-gcide on a small file in dict-gcide's format: the database's header
# entry is dropped, each entry becomes one JSONL document with its paragraphs' lines
# joined, the pronunciation markup, cross-reference braces and source tags removed (the
# exact output below); preprocess reads the result; a missing dictionary is one error line.
source "$(dirname "$0")/fixture/lib.sh"
export PYTHONPATH=$SRC
printf '%s\n' '00-database-info' '     This file was converted from the original database.' '' \
  'Abdicator \Ab"di*ca`tor\, n.' '   One who abdicates.' '   [1913 Webster]' '' \
  'Abdomen \Ab*do"men\, n. [L. abdomen: cf. F. abdomen.]' \
  '   1. (Anat.) The belly, or that part of the body between the' \
  '      thorax and the pelvis. See {Belly}.' '      [1913 Webster]' '' \
  '   2. (Zool.) The posterior section of the body.' '      [1913 Webster] [PJC]' | gzip -c > "$WORK/mini.dict.dz"
cat > "$WORK/want.jsonl" <<'JSON'
{"text": "Abdicator n. One who abdicates."}
{"text": "Abdomen n. [L. abdomen: cf. F. abdomen.] 1. (Anat.) The belly, or that part of the body between the thorax and the pelvis. See Belly.\n2. (Zool.) The posterior section of the body."}
JSON
if GCIDE_DICT="$WORK/mini.dict.dz" "$PY" -m occtools extract-gcide "$WORK/mini.jsonl.zst" > "$WORK/x.log" 2>&1 &&
   zstdcat "$WORK/mini.jsonl.zst" | cmp -s - "$WORK/want.jsonl"; then
  pass "extract-gcide: header entry dropped, 2 entries cleaned exactly as expected"
else
  cat "$WORK/x.log"; zstdcat "$WORK/mini.jsonl.zst" 2>/dev/null
  failed "extract-gcide output differs from the expected documents"
fi
if "$BIN" preprocess --input "$WORK/mini.jsonl.zst" --output-prefix "$WORK/mini" --tokenizer-model "$DATA/kjv.model" \
    > "$WORK/p.log" 2>&1 && grep -q "preprocess: 2 documents" "$WORK/p.log"; then
  pass "preprocess reads the corpus: $(head -c 60 "$WORK/p.log")..."
else
  cat "$WORK/p.log"; failed "preprocess of the extracted corpus"
fi
if GCIDE_DICT="$WORK/absent.dz" "$PY" -m occtools extract-gcide "$WORK/none.jsonl.zst" > "$WORK/e.log" 2>&1; then
  failed "a missing dictionary was not refused"
elif [[ $(wc -l < "$WORK/e.log") -eq 1 ]] && grep -q "apt-get install dict-gcide" "$WORK/e.log"; then
  pass "missing dictionary refused: $(cat "$WORK/e.log")"
else
  cat "$WORK/e.log"; failed "missing dictionary: not one line naming the package"
fi
finish

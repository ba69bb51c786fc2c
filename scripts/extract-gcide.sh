#!/usr/bin/env bash
# Builds a second, larger training corpus from Debian's dict-gcide package (the GNU
# Collaborative International Dictionary of English, GPL-3+; about 40 MB of text): one
# JSONL document {"text": ...} per dictionary entry, zstd-compressed, for `optimus-cc
# preprocess --input` (--json-keys text). The bundled KJV (about 1 M tokens) is too small
# for runs of tens of millions of tokens without repeating it many times.
#   bash scripts/extract-gcide.sh OUTPUT.jsonl.zst
# Each entry keeps its headword line and definitions, with the lines of a paragraph joined
# and the pronunciation markup (\Ab*do"men\), the cross-reference braces ({Acerb}) and
# the source tags ([1913 Webster], [PJC], ...) removed; the database's own header entries (00-database-*) are dropped. The output
# is a pure function of the package's files (byte-identical on every run).
set -euo pipefail
out=${1:?usage: scripts/extract-gcide.sh OUTPUT.jsonl.zst}
dict=${GCIDE_DICT:-/usr/share/dictd/gcide.dict.dz}  # GCIDE_DICT: another file of the format (tests)
[[ -r $dict ]] || { echo "error: $dict not found; apt-get install dict-gcide" >&2; exit 1; }
command -v zstd >/dev/null || { echo "error: 'zstd' not found; apt-get install zstd" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
zcat "$dict" | /usr/bin/python3 -c '
import json, re, sys

source_tag = re.compile(r"\[(?:[0-9]{4} Webster|Webster [0-9]{4}[^\]]*|PJC|WordNet[^\]]*|Century Dict[^\]]*|RJC|JC|[A-Z]{2,4})\]")
pron = re.compile(r"\\[^\\\n]*\\,?")
entries = skipped = 0

def emit(lines):
    global entries, skipped
    if not lines:
        return
    if lines[0].startswith("00-database") or lines[0].startswith("00database"):
        skipped += 1
        return
    paragraphs, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paragraphs.append(" ".join(cur)); cur = []
    if cur:
        paragraphs.append(" ".join(cur))
    text = "\n".join(re.sub(r"\s{2,}", " ", source_tag.sub("", pron.sub("", p))).replace("{", "").replace("}", "").strip()
                     for p in paragraphs)
    text = "\n".join(p for p in text.split("\n") if p)
    if text:
        sys.stdout.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        entries += 1

entry = []
for raw in sys.stdin.buffer:
    line = raw.decode("utf-8", errors="replace").rstrip("\n")
    # An entry starts with its headword at column 0; definitions are indented.
    if line and not line[0].isspace() and (not entry or not entry[-1].strip()):
        emit(entry)
        entry = []
    entry.append(line)
emit(entry)
print(f"{entries} entries ({skipped} database header entries dropped)", file=sys.stderr)
' > "$tmp/gcide.jsonl"
zstd -q -19 -T0 -f "$tmp/gcide.jsonl" -o "$out"
echo "wrote $out: $(wc -l < "$tmp/gcide.jsonl") documents, $(wc -c < "$tmp/gcide.jsonl") bytes of JSONL, $(wc -c < "$out") compressed"

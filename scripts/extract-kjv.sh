#!/usr/bin/env bash
# Regenerates data/kjv.txt.zst (the bundled training corpus) from Debian's
# bible-kjv package: one verse per line, a blank line between chapters, no
# headings or verse numbers. Usage: scripts/extract-kjv.sh [OUTPUT]
# (default: a temporary file; pass data/kjv.txt.zst to overwrite; the result
# is byte-identical to the committed file).
set -euo pipefail

out=${1:-}
command -v bible >/dev/null || { echo "error: 'bible' not found; apt-get install bible-kjv" >&2; exit 1; }
command -v zstd >/dev/null || { echo "error: 'zstd' not found; apt-get install zstd" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A wide line limit keeps each verse on one line.
bible -l100000 'Gen1:1-Rev22:21' > "$tmp/raw.txt"

# Verse lines: leading spaces, a number, a space. Heading lines ("Genesis 1",
# "1 Kings 3") become the blank separator before every chapter but the first.
# Blank lines in the raw output are dropped.
awk '
  /^ +[0-9]+ / { sub(/^ +[0-9]+ /, ""); print; started = 1; next }
  /^$/         { next }
  /[0-9]+$/    { if (started) print ""; next }
  { print "unexpected line " NR ": " $0 > "/dev/stderr"; exit 1 }
' "$tmp/raw.txt" > "$tmp/kjv.txt"

verses=$(grep -c . "$tmp/kjv.txt")
chapters=$(( $(grep -c '^$' "$tmp/kjv.txt") + 1 ))
if [[ $verses -ne 31102 || $chapters -ne 1189 ]]; then
  echo "error: extracted $verses verses in $chapters chapters, expected 31102 in 1189; check the bible-kjv version" >&2
  exit 1
fi

zstd -q -19 -f "$tmp/kjv.txt" -o "$tmp/kjv.txt.zst"
if [[ -z $out ]]; then
  out=$(mktemp --suffix=.txt.zst)
fi
mv "$tmp/kjv.txt.zst" "$out"
echo "wrote $out: $verses verses, $chapters chapters, $(wc -c < "$tmp/kjv.txt") bytes uncompressed"

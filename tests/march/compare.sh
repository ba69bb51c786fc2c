#!/usr/bin/env bash
# data.blend_index_march: the blending index built at -march=native and at
# -march=x86-64 must be the same bytes (no fused multiply-add changes a tie).
# Usage: compare.sh NATIVE_BINARY X86_64_BINARY
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$1" "$work/native.bin"
"$2" "$work/x86-64.bin"
if cmp -s "$work/native.bin" "$work/x86-64.bin"; then
  echo "PASS: the blending index of 206 weight vectors x 20,000 samples is the same at -march=native and -march=x86-64 ($(stat -c %s "$work/native.bin") bytes)"
else
  echo "FAIL: the blending index differs between -march=native and -march=x86-64: $(cmp "$work/native.bin" "$work/x86-64.bin")"
  exit 1
fi

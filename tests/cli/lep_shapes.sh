#!/usr/bin/env bash
# labels: parallel
# python3 -m occtools lep-shapes --smoke: the LEP-premise sweep's plumbing (two tiny
# shapes, 3 iterations, at CB ranks 16 and 4). Each run must carry --check-lep's
# measurements into the table, sorted by message size and rank, with CB's bytes those of a
# PowerSGD message pair at its rank (P and Q for each of the 2 micro-batches); bad --shapes
# must fail with a message.
source "$(dirname "$0")/fixture/lib.sh"
# Twice into one folder: CB rank 16, then --cb-rank 4 (the rank goes into the runs' names).
LS=("$PY" -m occtools lep-shapes)
export PYTHONPATH=$SRC
if ! { timeout 120 "${LS[@]}" --smoke --bin "$BIN" --out "$WORK/ls" &&
  timeout 120 "${LS[@]}" --smoke --cb-rank 4 --bin "$BIN" --out "$WORK/ls"; } > "$WORK/ls.log" 2>&1; then
  tail -n 20 "$WORK/ls.log"
  failed "occtools lep-shapes --smoke failed"
  finish
  exit
fi
if out=$("$PY" - "$WORK/ls/lep-shapes.json" << 'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [(r["message"], r["cb_rank"]) for r in rows] == [("64 x 64", 4), ("64 x 64", 16), ("128 x 128", 4), ("128 x 128", 16)], rows
for r in rows:
    assert r["iterations"] == 3 and len(r["error_ratio_per_iter"]) == 3, r
    assert r["error_ratio"] > 0 and r["delta_ratio"] > 0, r
    rows_, cols = r["seq"] * r["micro_batch"], r["hidden"]
    # PowerSGD at rank R: P (rows x R) and Q (cols x R) floats per micro-batch, 2 micro-batches.
    assert r["pp_bwd_bytes_per_iter"] == 2 * 4 * r["cb_rank"] * (rows_ + cols), r
print(", ".join(f"{r['message']} r{r['cb_rank']}: error_ratio {r['error_ratio']:.2f}" for r in rows))
PY
); then pass "report: $out"; else failed "report: $out"; fi
grep -q "^| 128 x 128 | 128 | 64 | 2 | 16 | 1 | 3 |" "$WORK/ls/lep-shapes.md" && pass "lep-shapes.md has the table" ||
  failed "lep-shapes.md lacks the 128 x 128 row"
if "${LS[@]}" --shapes "100:32:2" --out "$WORK/bad" > "$WORK/bad.log" 2>&1; then
  failed "--shapes 100:32:2 was accepted"
else
  grep -q "multiple of 64" "$WORK/bad.log" && pass "bad --shapes refused: $(head -n 1 "$WORK/bad.log")" ||
    failed "bad --shapes: $(head -n 1 "$WORK/bad.log")"
fi
finish

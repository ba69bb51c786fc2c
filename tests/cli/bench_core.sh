#!/usr/bin/env bash
# labels: precision
# python3 -m occtools bench-core (issue 51): the tiny preset, one thread, two rounds, without
# --llmc: the engines table has ours-fp32, ours-bf16, ours-fp32 on OpenBLAS and PyTorch eager (each with its precision,
# its matrix-product path and its spread), no llm.c row and a line saying llm.c was left out; the
# ratios in the JSON are the engines' medians over ours from the raw samples; the run order
# rotates between rounds; --from-json rebuilds the .md identically; bad --llmc / --presets are
# one-line errors.
source "$(dirname "$0")/fixture/lib.sh"
cd "$SRC" || exit 1
export PYTHONDONTWRITEBYTECODE=1

one_error "--llmc without llm.c" "--llmc $WORK: no train_gpt2.c and llmc/ there" -- \
  "$PY" -m occtools bench-core --presets tiny --llmc "$WORK" --bin "$BIN"
one_error "--presets bogus" "unknown preset 'bogus'" -- "$PY" -m occtools bench-core --presets bogus --bin "$BIN"

if ! "$PY" -m occtools bench-core --presets tiny --threads 1 --quick --rounds 2 --bin "$BIN" --out "$WORK/core" \
    > "$WORK/core.log" 2>&1; then
  tail -20 "$WORK/core.log"
  failed "bench-core --presets tiny: $(tail -1 "$WORK/core.log")"
  finish
  exit
fi
pass "bench-core --presets tiny --quick --rounds 2 ran"

# The CPU can do bf16 products (and oneDNN loads) or the bf16 step's products run in fp32.
BF16_PRODUCTS=0
grep -qw avx512_bf16 /proc/cpuinfo && ldconfig -p | grep -q 'libdnnl.so' && [[ ${OCC_CPU_GEMM:-auto} != openblas ]] \
  && BF16_PRODUCTS=1
if out=$("$PY" - "$WORK/core" "$BF16_PRODUCTS" <<'PY'
import json, statistics, sys
prefix, bf16_products = sys.argv[1], sys.argv[2] == "1"
md = open(prefix + ".md").read()
j = json.load(open(prefix + ".json"))
bad = []
header = next((l for l in md.splitlines() if l.startswith("| preset | threads | engine |")), "")
for col in ("precision", "matrix products", "best ms", "median ms", "min-max ms", "spread", "samples",
            "/ ours-fp32 (median / best)", "/ ours-bf16 (median)"):
    if f"| {col} |" not in header:
        bad.append(f"engines table lacks column '{col}'")
rows = {l.split("|")[3].strip(): [c.strip() for c in l.split("|")[1:-1]]
        for l in md.splitlines() if l.startswith("| tiny | 1 |") and "|" in l[12:]}
for name in ("ours-fp32", "ours-bf16", "ours-fp32 on OpenBLAS", "PyTorch eager"):
    if name not in rows:
        bad.append(f"no {name} row")
if any(k.startswith("llm.c") for k in rows):
    bad.append("an llm.c row without --llmc")
if "llm.c: left out (no `--llmc DIR`" not in md:
    bad.append("the report does not say llm.c was left out")
if "Command: `python3 -m occtools bench-core --presets tiny" not in md:
    bad.append("the report does not give the command")
(r,) = j["results"]
e = r["engines"]
if sorted(e) != ["ours", "oursbf16", "oursblas", "torch"]:
    bad.append(f"engines {sorted(e)}")
else:
    if e["ours"]["precision"] != "fp32" or e["oursbf16"]["precision"] != "bf16":
        bad.append(f"precisions {e['ours']['precision']}, {e['oursbf16']['precision']}")
    for k in ("ours", "oursbf16"):
        path = e[k]["matrix_products"]
        if not (path.startswith("openblas") or path.startswith("onednn")):
            bad.append(f"{k}: matrix products '{path}'")
    if not e["oursblas"]["matrix_products"].startswith("openblas (OCC_CPU_GEMM=openblas)") \
            or e["oursblas"]["precision"] != "fp32":
        bad.append(f"ours-fp32 on OpenBLAS ran {e['oursblas']['precision']} on '{e['oursblas']['matrix_products']}'")
    has_bf16 = "bf16 operands" in e["oursbf16"]["matrix_products"]
    if has_bf16 != bf16_products:
        bad.append(f"bf16 products {has_bf16}, expected {bf16_products}: {e['oursbf16']['matrix_products']}")
    raw = {k: [x for run in r["raw"][k] for x in run["repeat_ms"]] for k in e}
    for k, t in e.items():
        if len(raw[k]) != 4 or t["n"] != 4:  # 2 rounds x 2 repeats
            bad.append(f"{k}: {len(raw[k])} samples, n {t['n']}")
            continue
        want = statistics.median(raw[k]) / statistics.median(raw["ours"])
        if abs(t["median_over_ours"] - want) > 1e-9 * want:
            bad.append(f"{k}: median / ours {t['median_over_ours']} != {want}")
        spread = 100 * (max(raw[k]) - min(raw[k])) / statistics.median(raw[k])
        if abs(t["spread_pct"] - spread) > 1e-9 * max(spread, 1):
            bad.append(f"{k}: spread {t['spread_pct']} != {spread}")
order = {rd: [x["engine"] for x in sorted(j["run"]["runs"], key=lambda x: x["position"]) if x["round"] == rd]
         for rd in (0, 1)}
if order != {0: ["ours", "oursbf16", "oursblas", "torch"], 1: ["oursbf16", "oursblas", "torch", "ours"]}:
    bad.append(f"run order {order}")
print("; ".join(bad) if bad else f"ours-bf16 {e['oursbf16']['median_over_ours']:.2f}x ours-fp32's median, "
      f"PyTorch {e['torch']['median_over_ours']:.2f}x ({e['oursbf16']['matrix_products']})")
sys.exit(1 if bad else 0)
PY
); then pass "engines table and JSON: $out"; else cat "$WORK/core.md"; failed "bench-core report: $out"; fi
"$PY" -m occtools bench-core --from-json "$WORK/core.json" --out "$WORK/again" > /dev/null 2>&1 \
  && cmp -s "$WORK/core.md" "$WORK/again.md" && pass "--from-json rebuilds the .md identically" \
  || { diff "$WORK/core.md" "$WORK/again.md" | head; failed "--from-json"; }
finish

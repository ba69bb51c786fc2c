#!/usr/bin/env bash
# labels: bundle
# The verdicts of gpu-check (python3 -m occtools gpu-verdict: occtools/gpu_check/verdicts.py,
# bench_verdicts.py) on small synthetic inputs, each with an input that passes and one
# that fails, so that a check that can no longer fail shows here and not on the GPU:
#   - weights: the final weights' per-tensor bound max(4 x the two CPU layouts' spread,
#     1e-5 x max|w|), the floor included;
#   - fit-micro-batch: the largest micro-batch predicted to fit from one run's peak and
#     the device's memory (a multiple of 8, capped; exit 3 when the run's is already it);
#   - speed-targets: tokens/s vs torch.compile, MFU at medium, peak memory at the same
#     micro-batch; the op profile named when a target is missed; SKIP (3) when a run it
#     needs was skipped, FAIL when it failed; the CPU stand-in's report-only mode;
#   - op-profile and the report's op-profile table (each op's share);
#   (the budget and the plans, and the package's shape: tests/tooling, run by cli.tooling).
# No engine run: seconds.
# shellcheck source=fixture/lib.sh
source "$(dirname "$0")/fixture/lib.sh"
export PYTHONPATH=$SRC PYTHONDONTWRITEBYTECODE=1
cd "$WORK" || exit 1

# expect NAME RC PATTERN ARGS...: `occtools gpu-verdict ARGS` exits RC and its SUMMARY matches PATTERN
expect() {
  local name=$1 want=$2 pat=$3 rc
  shift 3
  "$PY" -m occtools gpu-verdict "$@" > "$WORK/$name.out" 2>&1
  rc=$?
  local re="^SUMMARY .*$pat"
  [[ $pat == ^* ]] && re="^SUMMARY ${pat#^}"
  if [[ $rc == "$want" ]] && grep -qE -- "$re" "$WORK/$name.out"; then
    pass "$name: exit $rc: $(sed -n 's/^SUMMARY //p' "$WORK/$name.out" | cut -c1-150)"
  else
    cat "$WORK/$name.out"
    failed "$name: exit $rc (want $want), SUMMARY should match '$pat'"
  fi
}

"$PY" - << 'EOF' || { failed "could not write the synthetic inputs"; finish; exit; }
import json, struct
import numpy as np

def safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for n, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

# weights: A the CPU, C the CPU in another layout (w moved by 1e-4, b not at all), B the GPU.
rng = np.random.default_rng(0)
A = {"w": rng.normal(size=(8, 8)).astype(np.float32), "b": np.full(4, 0.5, np.float32)}
safetensors("A.safetensors", A)
safetensors("C.safetensors", {"w": A["w"] + 1e-4, "b": A["b"]})
safetensors("B_ok.safetensors", {"w": A["w"] + 3e-4, "b": A["b"] + 4e-6})     # 3x the spread; b under the floor 5e-6
safetensors("B_w.safetensors", {"w": A["w"] + 5e-4, "b": A["b"]})             # 5x the spread
safetensors("B_floor.safetensors", {"w": A["w"], "b": A["b"] + 6e-6})         # b beyond its floor
safetensors("B_names.safetensors", {"w": A["w"]})                             # a tensor missing

# benchmark JSONs as optimus-cc bench / torch_step.py write them (GPT-2 small and medium shapes)
def bench(path, L, C, H, mb, best_ms, peak, params, **kw):
    j = {"model": dict(num_layers=L, hidden_size=C, num_attention_heads=H, seq_length=1024, vocab_size=50304,
                       padded_vocab_size=50304, micro_batch_size=mb, parameters=params),
         "best_ms": best_ms, "median_ms": best_ms, "device": "cuda (NVIDIA H200, sm_90, 140 GiB)", "precision": "bf16"}
    if peak is not None:
        j["peak_device_mib"] = peak
    j.update(kw)
    with open(path, "w") as f:
        json.dump(j, f)

S, M = (12, 768, 12), (24, 1024, 16)
for d in ("pass", "miss", "skip", "fail", "cpu", "mbmax"):
    import os
    os.makedirs(d, exist_ok=True)
# pass: ours 1.16x torch.compile's tokens/s and 0.95x its memory (small; no MFU target at small)
bench("pass/bench_occ_small.json", *S, 8, 20.0, 5000, 124_000_000)
bench("pass/bench_torch_small_compile.json", *S, 8, 23.1, 5240, 124_000_000)
bench("pass/bench_torch_small.json", *S, 8, 32.5, 8308, 124_000_000)
# miss (medium): tokens/s 0.21x, MFU 7 %, memory 1.75x; the op profile says why
bench("miss/bench_occ_medium.json", *M, 8, 280.0, 22198, 355_000_000)
bench("miss/bench_torch_medium_compile.json", *M, 8, 58.7, 12660, 355_000_000)
with open("miss/profile_occ_medium.json", "w") as f:
    json.dump({"best_ms": 280.0, "model": {"micro_batch_size": 8}, "op_profile": [
        {"op": "attention_backward", "calls_per_step": 24, "ms_per_step": 100.0, "share": 0.4, "tflops": 13.0},
        {"op": "attention_forward", "calls_per_step": 24, "ms_per_step": 50.0, "share": 0.2, "tflops": 16.0},
        {"op": "linear_forward", "calls_per_step": 96, "ms_per_step": 60.0, "share": 0.24, "tflops": 400.0},
        {"op": "round_to_precision", "calls_per_step": 300, "ms_per_step": 40.0, "share": 0.16, "tflops": 0}]}, f)
# skip / fail: torch.compile's run was skipped / failed
bench("skip/bench_occ_small.json", *S, 8, 20.0, 5000, 124_000_000)
bench("fail/bench_occ_small.json", *S, 8, 20.0, 5000, 124_000_000)
# cpu: the stand-in, no torch.compile, eager stands in; torch reports no device peak
bench("cpu/bench_occ_small.json", *S, 8, 900.0, 300, 124_000_000, device="cpu")
bench("cpu/bench_torch_small.json", *S, 8, 700.0, None, 124_000_000, device="cpu", peak_host_rss_mib=900)
# mbmax: each engine at its own largest micro-batch (ours 56, compile 64): 1.1x the tokens/s, MFU 37 %;
# memory not compared
bench("mbmax/bench_occ_medium_mbmax.json", *M, 56, 380.0, 120000, 355_000_000)
bench("mbmax/bench_torch_medium_compile_mbmax.json", *M, 64, 480.0, 100000, 355_000_000)
# fit-micro-batch inputs
bench("fit_ours.json", *S, 8, 100.0, 9303, 124_000_000)
bench("fit_torch.json", *S, 8, 30.0, 8308, 124_000_000, peak_reserved_mib=12000, device_total_mib=143771)
bench("fit_nopeak.json", *S, 8, 30.0, None, 124_000_000)
# gpu-check.json reports: which runs passed
def report(d, rows):
    with open(f"{d}/gpu-check.json", "w") as f:
        json.dump({"checks": [{"name": n, "status": s, "summary": m} for n, s, m in rows]}, f)

report("pass", [("bench_occ_small", "PASS", "ok"), ("bench_torch_small_compile", "PASS", "ok"), ("bench_torch_small", "PASS", "ok")])
report("miss", [("bench_occ_medium", "PASS", "ok"), ("bench_torch_medium_compile", "PASS", "ok"),
                ("bench_torch_medium", "SKIP", "time budget spent"), ("profile_occ_medium", "PASS", "ok")])
report("skip", [("bench_occ_small", "PASS", "ok"),
                ("bench_torch_small_compile", "SKIP", "time budget spent (20 s left of 440, needs ~90 s)")])
report("fail", [("bench_occ_small", "PASS", "ok"), ("bench_torch_small_compile", "FAIL", "torch_step.py: exit status 1")])
report("cpu", [("bench_occ_small", "PASS", "ok"), ("bench_torch_small_compile", "SKIP", "this torch has no torch.compile"),
               ("bench_torch_small", "PASS", "ok")])
report("mbmax", [("bench_occ_medium_mbmax", "PASS", "ok"), ("bench_torch_medium_compile_mbmax", "PASS", "ok")])
EOF
# ---- weights ----------------------------------------------------------------------------------
expect weights_pass 0 'worst b at 0\.80 of its bound .*the floor' weights A.safetensors B_ok.safetensors --spread C.safetensors
expect weights_beyond_spread 1 '^1 tensors beyond their bound: w ' weights A.safetensors B_w.safetensors --spread C.safetensors
expect weights_beyond_floor 1 '^1 tensors beyond their bound: b ' weights A.safetensors B_floor.safetensors --spread C.safetensors
expect weights_names 1 'tensor names differ' weights A.safetensors B_names.safetensors --spread C.safetensors

# ---- fit-micro-batch ----------------------------------------------------------------------------
expect fit_h200 0 'largest micro-batch that fits: 64 ' fit-micro-batch fit_ours.json --gpu-mib 143771
if grep -q '"micro_batch": 64,' fit_h200.out; then pass "fit_h200: micro_batch 64"; else failed "fit_h200: no micro_batch 64 in NUMBERS"; fi
# 40000 MiB: 36000 usable = 1892 fixed + 926.4 per sample x 36.8 -> 32 (a multiple of 8)
expect fit_40g 0 'fits: 32 .* fits 36\)' fit-micro-batch fit_ours.json --total-mib 40000
# 12000 MiB: fits 9 -> 8, the run's own micro-batch: nothing larger to run (exit 3)
expect fit_full 3 'micro-batch 8 is already the largest that fits' fit-micro-batch fit_ours.json --total-mib 12000
if grep -q '"micro_batch": 8,' fit_full.out; then pass "fit_full: micro_batch 8"; else failed "fit_full: no micro_batch 8 in NUMBERS"; fi
# PyTorch: its allocator's reserved peak (12000 MiB) counts, and the JSON's device_total_mib
expect fit_torch 0 'peak 12000 MiB \(peak_reserved_mib\).*the run.s device_total_mib' fit-micro-batch fit_torch.json
expect fit_nopeak 2 'no peak memory' fit-micro-batch fit_nopeak.json --total-mib 40000

# ---- speed-targets ------------------------------------------------------------------------------
expect speed_pass 0 '^small, micro-batch 8: tokens/s 409\.6k vs torch\.compile 354\.6k = 1\.16x .*vs eager 252\.1k = 1\.63x.*= 0\.95x' \
  speed-targets --report pass/gpu-check.json --work pass --size small
expect speed_miss 1 '^MISSED: tokens/s 0\.21x .*<= 58\.7 ms \(now 280\.0 ms\); MFU 7\.[0-9]% < 35%; peak memory 1\.75x .*holds the step back .*attention 60%.*attention_backward 100\.0 ms \(40%\) at 13 TFLOP/s' \
  speed-targets --report miss/gpu-check.json --work miss --size medium
expect speed_skip 3 'not compared: bench_torch_small_compile SKIP: time budget spent' \
  speed-targets --report skip/gpu-check.json --work skip --size small
expect speed_fail 1 'no comparison: bench_torch_small_compile FAIL' speed-targets --report fail/gpu-check.json --work fail --size small
expect speed_cpu 0 '^CPU stand-in, targets reported, not asserted.*vs PyTorch eager.*reports none.*eager stands in; off target: tokens/s 0\.78x' \
  speed-targets --report cpu/gpu-check.json --work cpu --size small --report-only
expect speed_mbmax 0 '^medium, micro-batch 56 \(ours\) / 64 \(compile\): .* = 1\.11x .*MFU 37\.0%.*other micro-batches: not compared' \
  speed-targets --report mbmax/gpu-check.json --work mbmax --size medium --suffix _mbmax

# ---- op profile and the report ------------------------------------------------------------------
expect op_profile 0 'attention 60%.*attention_backward 100\.0 ms \(40%\) at 13 TFLOP/s' op-profile miss/profile_occ_medium.json
# The report's op-profile table lists every op with its share (occtools/gpu_check/report.py).
if "$PY" - > report.out 2>&1 << 'EOF'
import json
from occtools.gpu_check import report
from occtools.gpu_check.context import Result
line = [l for l in open("op_profile.out") if l.startswith("NUMBERS ")][-1]
r = Result("profile_occ_medium", "PASS", 3.0, "profiled", json.loads(line[8:]))
md = report.markdown(report.document({"gpu_line": "GPU: synthetic"}, [r]))
assert "## Op profile: profile_occ_medium" in md, md
assert "| round_to_precision | 300.0 | 40.000 | 16.0% | |" in md, md
EOF
then
  pass "report: the op-profile table lists every op with its share"
else
  cat report.out
  failed "report: no op-profile table"
fi
finish

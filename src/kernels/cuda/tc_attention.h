#pragma once
// Causal self-attention on tensor cores (FlashAttention-2 style: mma.sync
// m16n8k16 with bf16 or fp16 operands and fp32 accumulation, ldmatrix,
// cp.async double buffering), forward and backward, with attention dropout
// drawn in the kernel from Philox, bit-identical to the CPU's masks
// (kernels/attention.cpp attention_dropout_row). The simple twin is the CPU
// attention (tests/cuda/test_cuda_tc_attention.cpp); the index logic is in
// tc_attention_index.h (tests/unit/test_tc_attention_index.cpp).
//
// Host declarations only (no device syntax): g++ may include this file.
//
// ---- for the integrator ---------------------------------------------------------------------
// Semantics: those of kernels::attention_forward / attention_backward, with
//   scale = 1/sqrt(D), key tk visible to query tq iff tk <= tq, P = softmax of
//   the visible scaled scores, out = (P o M) V with M the CPU's dropout
//   multipliers (0 or 1/(1-p) computed as 1.0f / (1.0f - p); sample =
//   d.sample_base + b, global head = s.head0 + h). s.H_total is not used.
// Formats: qkv, out, dout, dqkv hold 16-bit values, all in `format` (Bf16 or
//   Fp16; anything else throws). Products take P (and dS) rounded to the same
//   format, accumulate in fp32, and outputs are rounded once (to nearest even)
//   from fp32 when stored. lse and the scratch are fp32.
// Layouts (elements, row-major):
//   qkv  [B*T, s.qkv_width()]: row b*T + t, features per query group [q of its
//        heads | k | v][D] (kernels.h AttentionShape; without grouped-query
//        attention [head][q|k|v][D]); query head h attends with k/v head
//        h / s.group_size(), whose dK and dV sum over the group's query heads;
//   out  [B*T, H*D]:   features [head][D]; dout the same;
//   dqkv like qkv, written entirely (not accumulated); it must not alias qkv, out or dout;
//   lse  [B, H, T] fp32: natural-log log-sum-exp of the scaled, undropped scores
//        (tc_attention_stats_floats(s) floats), written by forward, read by backward.
// Alignment: qkv, out, dout and dqkv 16-byte aligned (cudaMalloc'd buffers are;
//   a sub-buffer must start at a multiple of 8 elements); D % 8 == 0 keeps every
//   row 16-byte aligned. Misaligned pointers throw occ::Error.
// Scratch (backward): tc_attention_backward_scratch_bytes(s) bytes of device
//   memory, 256-byte aligned (CudaOps::scratch() is); its contents are
//   overwritten (Delta = rowsum(dout o out) in fp32, [B, H, T]).
// Stream: every launch goes to `stream`, in order; nothing synchronises the host.
//   Backward is three launches (Delta, dK/dV, dQ) that depend only on stream order.
// Shapes: tc_attention_supported(s): D in {64, 128}, T >= 1, B, H >= 1, k/v heads dividing H, head0 >= 0
//   (grid limits: T <= 2^22, B*H*T < 2^31). Other shapes throw; keep the fp32
//   kernels for them (e.g. D = 32).
// Determinism: no atomics; every output element is summed by one thread in a
//   fixed order, so a call repeats bit for bit on the same GPU model.
// Dropout: d.p in [0, 1) (else throws); masks are regenerated from Philox in
//   backward (never stored): pass the same Dropout to forward and backward.
// Cost: backward recomputes P in two kernels (dK/dV by key block, dQ by query
//   block) instead of accumulating dQ with floating-point atomics: 7 tile
//   products per element instead of FlashAttention-2's 5, the price of
//   bit-for-bit repeatable gradients.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/precision.h"
#include "kernels/kernels.h"

namespace occ::kernels::cuda {

// Shapes the tensor-core kernels take (see above).
bool tc_attention_supported(const AttentionShape& s);
// Floats of softmax statistics forward keeps for backward: lse [B, H, T].
int64_t tc_attention_stats_floats(const AttentionShape& s);
// out [B*T, H*D] and lse [B, H, T] from qkv [B*T, s.qkv_width()] (16-bit, `format`).
void tc_attention_forward(void* out, float* lse, const void* qkv, const AttentionShape& s, const Dropout& d,
                          Precision format, cudaStream_t stream);
// Device scratch the backward needs (bytes).
size_t tc_attention_backward_scratch_bytes(const AttentionShape& s);
// dqkv (written, same layout as qkv) from dout, qkv, out (forward's output) and lse.
void tc_attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                           void* scratch, const AttentionShape& s, const Dropout& d, Precision format,
                           cudaStream_t stream);

}  // namespace occ::kernels::cuda

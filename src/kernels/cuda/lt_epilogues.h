#pragma once
// The epilogues of the cuBLASLt linear layers (lt_matmul.h) as separate
// kernels, for the cases cuBLASLt cannot fuse, and the two small helpers the
// fused bias gradients need (cuBLASLt's bias-gradient epilogues overwrite their
// vector, so they write a scratch vector that lt_add_into adds on).
//
// Each fallback computes what the fused epilogue computes, from the GEMM's fp32
// result and with one rounding to the output format, so fused and unfused runs
// agree up to the order of the GEMM's sums and the tanh of the GeLU. GeLU is the
// tanh approximation with kernels/elementwise.cpp's constants, tanhf for tanh.
// Host declarations only (C++17); the kernels are in lt_epilogues.cu.
#include <cstdint>

#include "core/precision.h"

namespace occ::kernels::cuda {

class CudaOps;

// x = acc + bias[col] (acc: fp32 [N, OC], nullptr for zeros; bias: [OC] in
// bias_format, nullptr for none). pre_gelu == nullptr: out = x. Otherwise
// pre_gelu = x and out = gelu(x). out and pre_gelu in out_format.
void lt_forward_epilogue(CudaOps& ops, void* out, Precision out_format, void* pre_gelu, const float* acc,
                         const void* bias, Precision bias_format, int64_t N, int64_t OC);

// g = acc * gelu'(pre_gelu) (acc: fp32 [N, C], nullptr for zeros; pre_gelu [N, C]
// in pre_format); dinp = g, or dinp + g when accumulate, in dinp_format; and
// dbias[C] += column sums of g in fp32 when dbias is not nullptr.
void lt_gelu_backward_epilogue(CudaOps& ops, void* dinp, Precision dinp_format, bool accumulate, const float* acc,
                               const void* pre_gelu, Precision pre_format, float* dbias, int64_t N, int64_t C);

// sums[C] += column sums of x[N, C] (x in `format`), in fp32 with
// reduce.cuh's fixed order.
void lt_column_sums_add(CudaOps& ops, float* sums, const void* x, Precision format, int64_t N, int64_t C);

// dst[i] += src[i], src in `src_format` (a bias-gradient vector cuBLASLt wrote in D's type), widened.
void lt_add_into(CudaOps& ops, float* dst, const void* src, Precision src_format, int64_t n);

}  // namespace occ::kernels::cuda

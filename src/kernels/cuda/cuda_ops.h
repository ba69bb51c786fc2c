#pragma once
// The CUDA backend's public face beyond ops.h's cuda_ops(): separate backend
// instances with a chosen attention implementation, so that tests (and
// benchmarks) can hold the fused kernel and its batched-GEMM twin side by
// side. Plain C++ (no CUDA types): included from host code compiled by g++.
#include <memory>

#include "kernels/ops.h"

namespace occ::kernels {

enum class CudaAttention {
  // Flash-attention-style kernels: forward keeps per-row log-sum-exp and the
  // output, backward recomputes the probabilities tile by tile; no [T, T]
  // matrix in global memory. Head dimensions 32, 64 and 128 (others use BatchedGemm).
  Fused,
  // cuBLAS strided-batched GEMMs around a causal-softmax kernel; keeps the
  // probabilities [B, H, T, T] exactly like the CPU backend. The reference twin.
  BatchedGemm,
};

// A new backend instance on the current CUDA device (own cuBLAS handle, workspace
// and scratch). Throws occ::Error when no GPU is usable.
std::unique_ptr<Ops> make_cuda_ops(CudaAttention attention);

// The attention implementation cuda_ops() uses: OCC_CUDA_ATTENTION=fused|gemm in
// the environment, fused when unset. Anything else throws occ::Error.
CudaAttention default_cuda_attention();

}  // namespace occ::kernels

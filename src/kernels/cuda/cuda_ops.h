#pragma once
// The CUDA backend's public face beyond ops.h's cuda_ops(): separate backend
// instances with a chosen attention implementation, so that tests (and
// benchmarks) can hold the fused kernel and its batched-GEMM twin side by
// side. Plain C++ (no CUDA types): included from host code compiled by g++.
#include <memory>
#include <string>

#include "kernels/ops.h"

namespace occ::kernels {

enum class CudaAttention {
  // Flash where it applies (16-bit q/k/v of a supported head size), else Fused
  // (else BatchedGemm for head sizes Fused lacks).
  Auto,
  // Tensor-core kernels (kernels/cuda/tc_attention.h) on 16-bit q/k/v (a --bf16 /
  // --fp16 step), head dimensions 64 and 128; other steps run Fused.
  Flash,
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

// "auto" | "flash" | "fused" | "gemm"; anything else throws occ::Error naming the choices.
CudaAttention parse_cuda_attention(const std::string& name);
// The attention implementation cuda_ops() starts with: OCC_CUDA_ATTENTION in the
// environment (parse_cuda_attention's names), auto when unset.
CudaAttention default_cuda_attention();
// Switches cuda_ops() (the process's backend) to `a` (--attention-backend).
void select_cuda_attention(CudaAttention a);

}  // namespace occ::kernels

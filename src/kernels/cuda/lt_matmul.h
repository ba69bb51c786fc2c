#pragma once
// Linear layers through cuBLASLt on 16-bit operands (bf16 or fp16) with fp32
// accumulation (CUBLAS_COMPUTE_32F: no TF32, no 16-bit accumulation), reading
// the operands where they lie (no conversion passes) and writing 16-bit or fp32
// outputs, with the bias, the bias gradients and GeLU fused into the GEMM as
// cuBLASLt epilogues (as karpathy/llm.c does):
//
//   linear_forward          out = inp w^T + bias   (BIAS), or with pre_gelu:
//                           pre_gelu = inp w^T + bias, out = gelu(pre_gelu)  (GELU_AUX[_BIAS])
//   linear_backward_input   dinp = dout w (= or +=), or with pre_gelu:
//                           dinp = (dout w) * gelu'(pre_gelu)  (DGELU), and
//                           dbias_of_dinp += its column sums   (DGELU_BGRAD, in dinp's format)
//   linear_backward_weight  dw += dout^T inp in fp32, dbias += column sums of dout (BGRADB)
//
// Row-major semantics as kernels/kernels.h; lt_problem.h shows how each
// product maps onto a column-major GEMM and its layouts, lt_descriptors.h the
// cuBLASLt descriptors.
//
// GeLU. cuBLASLt's GELU epilogues are the tanh approximation (XLA calls
// GELU_BIAS "bias then GeLU approximate"; PyTorch's _addmm_activation falls back
// to gelu(approximate="tanh")), 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// the formula and constants of kernels/elementwise.cpp. cuBLAS does not document
// its tanh: it may be a hardware approximation (tanh.approx.f32, ~2^-11
// relative), where the CPU kernel's exp-based tanh and the fallback kernel's
// tanhf are within ~1e-7. tests/cuda/test_cuda_lt_matmul.cpp bounds the
// difference (5e-4 (1 + |x|) for GeLU, 5e-3 |dout w| for its gradient at
// |x| <= 3) and prints what it measures.
//
// Where cuBLASLt cannot fuse an epilogue for a case (a documented constraint,
// no algorithm from the heuristic, or the first cublasLtMatmul of that problem
// refusing it), the GEMM runs with the DEFAULT epilogue into fp32 and a small
// kernel applies the epilogue (lt_epilogues.h): the same single rounding of the
// same fp32 values, so results agree up to the order of the sums and the GeLU's
// tanh implementation. last_call() says which way a call went.
//
// Descriptors, layouts and the chosen algorithm are cached per problem
// (LtKey: shape, transposes, types, epilogue, leading dimensions, alignments),
// so the heuristic runs once per shape, and a shape always runs the same
// algorithm: results repeat bit for bit on the same GPU and library.
//
// One LtMatmul per CudaOps: it runs on the backend's stream and borrows its
// scratch() (bias-gradient vectors, column-sum partials) and operand_buffer()
// (the fp32 product of a fallback). Not thread-safe, like CudaOps.
// C++17 and no device syntax: any file of the backend may include it.
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/precision.h"
#include "kernels/cuda/lt_problem.h"

namespace occ::kernels::cuda {

class CudaOps;

// Formats: operands (A and B) Bf16 or Fp16; outputs Fp32 or the operand format;
// vectors Fp32 or the operand format. Buffers are device memory, row-major.
struct LinearForwardArgs {
  void* out = nullptr;  // [N, OC], out_format
  Precision out_format = Precision::Fp32;
  const void* inp = nullptr;  // [N, C], operands
  const void* w = nullptr;    // [OC, C], operands
  const void* bias = nullptr;  // [OC], bias_format; nullptr: no bias
  Precision bias_format = Precision::Fp32;
  // [N, OC] in out_format. When set: pre_gelu = inp w^T + bias and out =
  // gelu_tanh(inp w^T + bias), both rounded once from the fp32 value.
  void* pre_gelu = nullptr;
  int64_t N = 0, C = 0, OC = 0;
  Precision operands = Precision::Bf16;
};

struct LinearBackwardInputArgs {
  void* dinp = nullptr;  // [N, C], dinp_format
  Precision dinp_format = Precision::Fp32;
  const void* dout = nullptr;  // [N, OC], operands
  const void* w = nullptr;     // [OC, C], operands
  bool accumulate = false;     // dinp += the result (dinp's old values read in dinp_format)
  // [N, C] in the operand format. When set, the result is (dout w) * gelu'(pre_gelu).
  const void* pre_gelu = nullptr;
  // [C] fp32: += column sums of (dout w) * gelu'(pre_gelu), summed in fp32 before
  // the product is rounded. Fused (DGELU_BGRAD), cuBLASLt writes the call's sums in
  // dinp's format (its documented bias-gradient type: one rounding, then widened and
  // added); the fallback kernel adds them unrounded. Needs pre_gelu.
  float* dbias_of_dinp = nullptr;
  int64_t N = 0, C = 0, OC = 0;
  Precision operands = Precision::Bf16;
};

struct LinearBackwardWeightArgs {
  float* dw = nullptr;     // [OC, C] fp32: += dout^T inp
  float* dbias = nullptr;  // [OC] fp32: += column sums of dout; nullptr: none
  const void* dout = nullptr;  // [N, OC], operands
  const void* inp = nullptr;   // [N, C], operands
  int64_t N = 0, C = 0, OC = 0;
  Precision operands = Precision::Bf16;
};

// What the last call ran (for tests and benchmarks).
struct LtCallInfo {
  LtEpilogue epilogue = LtEpilogue::None;  // the epilogue the call asked for
  bool fused = false;                      // it ran inside the GEMM (DEFAULT: always)
  std::string fallback_reason;             // why not, when not
  bool ran_gemm = false;                   // false when k = 0 left nothing to multiply
  cublasLtMatmulAlgo_t algo{};             // the GEMM's algorithm (when ran_gemm)
  size_t algo_workspace_bytes = 0;         // the workspace it asked for
};

class LtMatmul {
 public:
  explicit LtMatmul(CudaOps& ops);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  void linear_forward(const LinearForwardArgs& args);
  void linear_backward_input(const LinearBackwardInputArgs& args);
  void linear_backward_weight(const LinearBackwardWeightArgs& args);

  const LtCallInfo& last_call() const { return last_; }
  // Heuristic queries made so far (one per distinct problem) and problems cached.
  int64_t heuristic_queries() const { return heuristic_queries_; }
  size_t cached_problems() const { return plans_.size(); }

  // cuBLASLt's workspace: the size NVIDIA recommends for Hopper.
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

 private:
  struct Plan;
  // The cached plan of `key`, made on first use (pointers: the first call's, whose
  // alignments the key records and the heuristic reads).
  Plan& plan_for(const LtKey& key, const LtPointers& p);
  // D = alpha op(A) op(B) + beta D with the plan's epilogue. Returns false, launching
  // nothing, when the plan's fused epilogue turned out to be unsupported.
  bool execute(Plan& plan, float beta, const void* a, const void* b, void* d, const void* vector, const void* aux);
  // A GEMM with the DEFAULT epilogue, which must run.
  void gemm(const ColumnMajorGemm& g, Precision operands, Precision output, float beta, const void* a, const void* b,
            void* d);
  // Tries the fused epilogue; on false, last_.fallback_reason says why not.
  bool try_fused(const LtKey& key, bool accumulate, float beta, const LtPointers& p);
  void record(const Plan& plan);

  CudaOps& ops_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::unordered_map<LtKey, std::unique_ptr<Plan>, LtKeyHash> plans_;
  int64_t heuristic_queries_ = 0;
  LtCallInfo last_;
};

}  // namespace occ::kernels::cuda

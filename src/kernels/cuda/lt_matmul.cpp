// cuBLASLt linear layers (lt_matmul.h): the plan cache (descriptors from
// lt_descriptors.h, and the heuristic's algorithm, per LtKey) and the three
// linear-layer calls, with their fallbacks (lt_epilogues.h).
#include "kernels/cuda/lt_matmul.h"

#include <cuda_runtime_api.h>

#include <exception>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/lt_descriptors.h"
#include "kernels/cuda/lt_epilogues.h"

namespace occ::kernels::cuda {

namespace {

size_t bytes_of(Precision p) { return p == Precision::Fp32 ? 4 : 2; }
bool sixteen_bit(Precision p) { return p == Precision::Bf16 || p == Precision::Fp16; }

// ---- argument checks: one-line errors naming the call and the problem --------------
void check_operands(const char* call, Precision operands) {
  if (!sixteen_bit(operands))
    fail("{}: cuBLASLt operands must be bf16 or fp16, not {} (fp32 operands go through CudaOps::gemm)", call,
         precision_name(operands));
}
void check_format(const char* call, const char* what, Precision p, Precision operands) {
  if (p != Precision::Fp32 && p != operands)
    fail("{}: {} must be fp32 or the operands' format {}, not {}", call, what, precision_name(operands),
         precision_name(p));
}
void check_shape(const char* call, int64_t N, int64_t C, int64_t OC) {
  constexpr int64_t kMax = 0x7fffffff;  // cuBLASLt supports dimensions "that can be expressed as int32_t"
  if (N < 0 || C < 0 || OC < 0 || N > kMax || C > kMax || OC > kMax)
    fail("{}: shape N={} C={} OC={} is outside cuBLASLt's range (0 .. 2^31-1 each)", call, N, C, OC);
}
// A buffer that takes part must exist and hold whole elements of its format.
void check_buffer(const char* call, const char* what, const void* p, Precision format) {
  if (!p) fail("{}: {} is null", call, what);
  if (reinterpret_cast<uintptr_t>(p) % bytes_of(format) != 0)
    fail("{}: {} ({}) is not aligned to its {}-byte elements", call, what, precision_name(format), bytes_of(format));
}

}  // namespace

// ---- plans ------------------------------------------------------------------------
struct LtMatmul::Plan {
  enum class State { Untried, Proven, Unsupported };
  Plan(const LtKey& key, const LtPointers& p) : descriptors(key, p.vector, p.aux) {}
  LtDescriptors descriptors;
  cublasLtMatmulAlgo_t algo{};
  size_t algo_workspace = 0;
  State state = State::Untried;
  std::string unsupported;  // why, when Unsupported
};

namespace {

// The heuristic's preference, released on every path.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { OCC_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref)); }
  ~Preference() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, T value) {
    OCC_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  }
};

}  // namespace

LtMatmul::LtMatmul(CudaOps& ops) : ops_(ops) {
  OCC_CUBLASLT_CHECK(cublasLtCreate(&handle_));
  // Through device_alloc, so that the run's peak device memory counts it.
  try {
    workspace_ = device_alloc(Device::Cuda, kWorkspaceBytes);
  } catch (const std::exception&) {
    cublasLtDestroy(handle_);
    handle_ = nullptr;
    fail("out of GPU memory allocating cuBLASLt's {} MiB workspace", kWorkspaceBytes >> 20);
  }
}

LtMatmul::~LtMatmul() {
  // Errors are ignored: a destructor cannot report them. Kernels still queued may
  // use the workspace: cudaFree waits for the device first.
  plans_.clear();  // their descriptors before the handle
  if (handle_) cublasLtDestroy(handle_);
  device_free(Device::Cuda, workspace_);
}

LtMatmul::Plan& LtMatmul::plan_for(const LtKey& key, const LtPointers& p) {
  auto found = plans_.find(key);
  if (found != plans_.end()) return *found->second;

  auto plan = std::make_unique<Plan>(key, p);
  const LtDescriptors& d = plan->descriptors;
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
  // What the pointers guarantee (cuBLASLt assumes 256 bytes unless told).
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(key.align_a));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(key.align_b));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(key.align_d));  // C is D
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(key.align_d));

  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, d.operation(), d.a(), d.b(), d.d(), d.d(),
                                                               pref.pref, 1, &result, &found_count);
  ++heuristic_queries_;
  if (status == CUBLAS_STATUS_SUCCESS && found_count > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = result.algo;
    plan->algo_workspace = result.workspaceSize;
  } else {
    const std::string why = status != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(status)
                            : found_count == 0           ? "no algorithm"
                                                         : cublasLtGetStatusString(result.state);
    // A plain GEMM must run; a fused epilogue falls back to a separate kernel.
    if (key.epilogue == LtEpilogue::None) fail("cuBLASLt has no algorithm ({}) for {}", why, describe(key));
    plan->state = Plan::State::Unsupported;
    plan->unsupported = "cuBLASLt heuristic: " + why;
  }
  Plan& ref = *plan;
  plans_.emplace(key, std::move(plan));
  return ref;
}

bool LtMatmul::execute(Plan& plan, float beta, const void* a, const void* b, void* d, const void* vector,
                       const void* aux) {
  if (plan.state == Plan::State::Unsupported) return false;
  const LtDescriptors& desc = plan.descriptors;
  plan.descriptors.set_pointers(vector, aux);
  const float alpha = 1.0f;
  // In place: C == D with D's layout (beta = 0: cuBLASLt does not read C).
  const cublasStatus_t status =
      cublasLtMatmul(handle_, desc.operation(), &alpha, a, desc.a(), b, desc.b(), &beta, d, desc.d(), d, desc.d(),
                     &plan.algo, workspace_, kWorkspaceBytes, ops_.stream());
  if (status == CUBLAS_STATUS_SUCCESS) {
    plan.state = Plan::State::Proven;
    return true;
  }
  // cuBLASLt validates a call before it launches anything: a fused epilogue that it
  // refuses for this problem on the problem's first call falls back, and is not tried again.
  if (desc.key().epilogue != LtEpilogue::None && plan.state == Plan::State::Untried &&
      (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
    plan.state = Plan::State::Unsupported;
    plan.unsupported = std::string("cublasLtMatmul: ") + cublasLtGetStatusString(status);
    return false;
  }
  fail("cuBLASLt: cublasLtMatmul failed ({}) for {}", cublasLtGetStatusString(status), describe(desc.key()));
}

void LtMatmul::record(const Plan& plan) {
  last_.ran_gemm = true;
  last_.algo = plan.algo;
  last_.algo_workspace_bytes = plan.algo_workspace;
}

void LtMatmul::gemm(const ColumnMajorGemm& g, Precision operands, Precision output, float beta, const void* a,
                    const void* b, void* d) {
  const LtKey key = make_key(g, operands, output, LtEpilogue::None, Precision::Fp32, Precision::Fp32, 0,
                             LtPointers{a, b, d, nullptr, nullptr});
  Plan& plan = plan_for(key, LtPointers{a, b, d, nullptr, nullptr});
  execute(plan, beta, a, b, d, nullptr, nullptr);  // a DEFAULT plan runs or throws
  record(plan);
}

bool LtMatmul::try_fused(const LtKey& key, bool accumulate, float beta, const LtPointers& p) {
  if (const char* ruled_out = fusion_ruled_out(key, accumulate)) {
    last_.fallback_reason = ruled_out;
    return false;
  }
  Plan& plan = plan_for(key, p);
  if (!execute(plan, beta, p.a, p.b, const_cast<void*>(p.d), p.vector, p.aux)) {
    last_.fallback_reason = plan.unsupported;
    return false;
  }
  record(plan);
  last_.fused = true;
  return true;
}

// ---- the linear layer ------------------------------------------------------------------

void LtMatmul::linear_forward(const LinearForwardArgs& x) {
  const char* call = "LtMatmul::linear_forward";
  check_operands(call, x.operands);
  check_format(call, "out_format", x.out_format, x.operands);
  if (x.bias) check_format(call, "bias_format", x.bias_format, x.operands);
  check_shape(call, x.N, x.C, x.OC);
  const LtEpilogue e = x.pre_gelu ? (x.bias ? LtEpilogue::GeluAuxBias : LtEpilogue::GeluAux)
                                  : (x.bias ? LtEpilogue::Bias : LtEpilogue::None);
  last_ = LtCallInfo{};
  last_.epilogue = e;
  if (x.N == 0 || x.OC == 0) return;
  check_buffer(call, "out", x.out, x.out_format);
  if (x.pre_gelu) {
    check_buffer(call, "pre_gelu", x.pre_gelu, x.out_format);
    if (x.pre_gelu == x.out) fail("{}: pre_gelu and out are the same buffer; the GeLU needs both", call);
  }
  if (x.bias) check_buffer(call, "bias", x.bias, x.bias_format);
  if (x.C > 0) {
    check_buffer(call, "inp", x.inp, x.operands);
    check_buffer(call, "w", x.w, x.operands);
  }
  const ColumnMajorGemm g = forward_gemm(x.N, x.C, x.OC);
  if (x.C > 0) {
    if (e == LtEpilogue::None) {
      gemm(g, x.operands, x.out_format, 0.0f, x.w, x.inp, x.out);
      last_.fused = true;
      return;
    }
    const LtPointers p{x.w, x.inp, x.out, x.bias, x.pre_gelu};
    const LtKey key = make_key(g, x.operands, x.out_format, e, x.bias_format, x.out_format, /*aux_ld=*/x.OC, p);
    if (try_fused(key, false, 0.0f, p)) return;
  } else {
    last_.fallback_reason = "k = 0 (no product to fuse into)";
  }
  // The product in fp32, then bias (and GeLU) with one rounding, as the epilogue would.
  float* acc = nullptr;
  if (x.C > 0) {
    acc = static_cast<float*>(ops_.operand_buffer(sizeof(float) * size_t(x.N * x.OC)));
    gemm(g, x.operands, Precision::Fp32, 0.0f, x.w, x.inp, acc);
  }
  lt_forward_epilogue(ops_, x.out, x.out_format, x.pre_gelu, acc, x.bias, x.bias_format, x.N, x.OC);
}

void LtMatmul::linear_backward_input(const LinearBackwardInputArgs& x) {
  const char* call = "LtMatmul::linear_backward_input";
  check_operands(call, x.operands);
  check_format(call, "dinp_format", x.dinp_format, x.operands);
  check_shape(call, x.N, x.C, x.OC);
  if (x.dbias_of_dinp && !x.pre_gelu)
    fail("{}: dbias_of_dinp needs pre_gelu (the bias gradient is fused with the GeLU gradient only); use "
         "linear_backward_weight's dbias for the layer's own bias",
         call);
  const LtEpilogue e = x.pre_gelu ? (x.dbias_of_dinp ? LtEpilogue::DGeluBGrad : LtEpilogue::DGelu) : LtEpilogue::None;
  last_ = LtCallInfo{};
  last_.epilogue = e;
  if (x.N == 0 || x.C == 0) return;
  check_buffer(call, "dinp", x.dinp, x.dinp_format);
  if (x.pre_gelu) check_buffer(call, "pre_gelu", x.pre_gelu, x.operands);
  if (x.dbias_of_dinp) check_buffer(call, "dbias_of_dinp", x.dbias_of_dinp, Precision::Fp32);
  if (x.OC > 0) {
    check_buffer(call, "dout", x.dout, x.operands);
    check_buffer(call, "w", x.w, x.operands);
  }
  const ColumnMajorGemm g = backward_input_gemm(x.N, x.C, x.OC);
  const float beta = x.accumulate ? 1.0f : 0.0f;
  if (x.OC > 0) {
    if (e == LtEpilogue::None) {
      gemm(g, x.operands, x.dinp_format, beta, x.w, x.dout, x.dinp);
      last_.fused = true;
      return;
    }
    // The bias gradient overwrites its vector, which cuBLASLt writes in D's type
    // (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: "the same type as the elements of the
    // output matrix"): its fp32 column sums rounded once, into a scratch vector
    // that is widened and added to the fp32 gradient after (as PyTorch's autograd
    // sums a 16-bit bias's gradient in fp32 and stores it in the bias's type).
    const Precision vector_format = x.dinp_format;
    void* bgrad = x.dbias_of_dinp ? ops_.scratch(bytes_of(vector_format) * size_t(x.C)) : nullptr;
    const LtPointers p{x.w, x.dout, x.dinp, bgrad, x.pre_gelu};
    const LtKey key = make_key(g, x.operands, x.dinp_format, e, vector_format, x.operands, /*aux_ld=*/x.C, p);
    if (try_fused(key, x.accumulate, beta, p)) {
      if (bgrad) lt_add_into(ops_, x.dbias_of_dinp, bgrad, vector_format, x.C);
      return;
    }
  } else {
    last_.fallback_reason = "k = 0 (no product to fuse into)";
  }
  float* acc = nullptr;
  if (x.OC > 0) {
    acc = static_cast<float*>(ops_.operand_buffer(sizeof(float) * size_t(x.N * x.C)));
    gemm(g, x.operands, Precision::Fp32, 0.0f, x.w, x.dout, acc);
  }
  if (x.pre_gelu) {
    lt_gelu_backward_epilogue(ops_, x.dinp, x.dinp_format, x.accumulate, acc, x.pre_gelu, x.operands,
                              x.dbias_of_dinp, x.N, x.C);
  } else if (!x.accumulate) {  // OC = 0: the product is zero
    lt_forward_epilogue(ops_, x.dinp, x.dinp_format, nullptr, nullptr, nullptr, Precision::Fp32, x.N, x.C);
  }
}

void LtMatmul::linear_backward_weight(const LinearBackwardWeightArgs& x) {
  const char* call = "LtMatmul::linear_backward_weight";
  check_operands(call, x.operands);
  check_shape(call, x.N, x.C, x.OC);
  const LtEpilogue e = x.dbias ? LtEpilogue::BGradB : LtEpilogue::None;
  last_ = LtCallInfo{};
  last_.epilogue = e;
  // N = 0 adds nothing; OC = 0 leaves nothing to add to.
  if (x.N == 0 || x.OC == 0 || (x.C == 0 && !x.dbias)) return;
  check_buffer(call, "dout", x.dout, x.operands);
  if (x.dbias) check_buffer(call, "dbias", x.dbias, Precision::Fp32);
  if (x.C > 0) {
    check_buffer(call, "dw", x.dw, Precision::Fp32);
    check_buffer(call, "inp", x.inp, x.operands);
  }
  const ColumnMajorGemm g = backward_weight_gemm(x.N, x.C, x.OC);
  if (x.C > 0) {
    // dw += ...: beta = 1 with C == D = dw (fp32).
    if (e == LtEpilogue::None) {
      gemm(g, x.operands, Precision::Fp32, 1.0f, x.inp, x.dout, x.dw);
      last_.fused = true;
      return;
    }
    // D (dw) is fp32, so the bias gradient's documented type is fp32 too.
    float* bgrad = static_cast<float*>(ops_.scratch(sizeof(float) * size_t(x.OC)));
    const LtPointers p{x.inp, x.dout, x.dw, bgrad, nullptr};
    const LtKey key = make_key(g, x.operands, Precision::Fp32, e, Precision::Fp32, Precision::Fp32, 0, p);
    if (try_fused(key, true, 1.0f, p)) {
      lt_add_into(ops_, x.dbias, bgrad, Precision::Fp32, x.OC);
      return;
    }
    gemm(g, x.operands, Precision::Fp32, 1.0f, x.inp, x.dout, x.dw);
  } else {
    last_.fallback_reason = "no weight gradient to fuse into (C = 0)";
  }
  lt_column_sums_add(ops_, x.dbias, x.dout, x.operands, x.N, x.OC);
}

}  // namespace occ::kernels::cuda

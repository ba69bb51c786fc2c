// The CUDA backend object: cuBLAS handle, workspace and scratch, memory ops,
// the GEMM entry point, and the factories. The kernel families live in the
// other .cu files of this folder (one per family), as members of CudaOps.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "kernels/cuda/common.cuh"

namespace occ::kernels {

namespace cuda {

namespace {

// cuBLAS workspace: the size NVIDIA recommends for Hopper. Owning it means
// cuBLAS never allocates inside a call.
constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;

template <class S>
__global__ void fill_kernel(S* dst, float value, int64_t n) {
  const S v = narrow<S>(value);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = v;
}

// dst = src converted (widening is exact; narrowing rounds to nearest, ties to even).
template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = narrow<D>(widen(src[i]));
}

// The same rounding functions as the CPU backend (core/precision.h).
__global__ void round_kernel(float* x, int64_t n, Precision p) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] = round_to(p, x[i]);
}

// cuBLAS takes 32-bit sizes; larger ones would need the _64 API and never occur here.
int as_int(int64_t v, const char* what) {
  if (v < 0 || v > int64_t(0x7fffffff))
    throw_error("CUDA backend: GEMM " + std::string(what) + " = " + std::to_string(v) + " is outside cuBLAS's int range");
  return int(v);
}

}  // namespace

CudaOps::CudaOps(CudaAttention attention) : attention_(attention) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky error so the process can go on with the CPU
    throw_error(std::string("--device cuda: no CUDA GPU is visible to this process (") +
                (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + "); use --device cpu");
  }
  OCC_CUBLAS_CHECK(cublasCreate(&blas_));
  OCC_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  // The reference numerics: plain fp32 (every call also passes CUBLAS_COMPUTE_32F,
  // never the _FAST_TF32 variants, so TF32 tensor cores stay off).
  OCC_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  blas_workspace_ = device_alloc(Device::Cuda, kBlasWorkspaceBytes);  // counted in the peak
  OCC_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes));
}

CudaOps::~CudaOps() {
  // Errors are ignored: a destructor cannot report them, and the process may be exiting.
  if (blas_) cublasDestroy(blas_);
  device_free(Device::Cuda, blas_workspace_);
  device_free(Device::Cuda, scratch_);
  device_free(Device::Cuda, operands_);
  for (TokenSlot& slot : token_slots_) {
    if (slot.event) cudaEventDestroy(slot.event);
    if (slot.host) cudaFreeHost(slot.host);
  }
}

void CudaOps::synchronize() { OCC_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

namespace {

// A device block of at least `bytes`, grown geometrically (rounded to 1 MiB)
// so that a sequence of growing requests reallocates rarely; never shrinks.
void* grow_block(void*& block, size_t& have, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes <= have) return block;
  // Kernels queued earlier may still read the old block. Freed through
  // device_free: held back while the pipeline may have NCCL sends queued
  // (core/device.h: DeferredDeviceFrees).
  OCC_CUDA_CHECK(cudaStreamSynchronize(stream));
  device_free(Device::Cuda, block);
  block = nullptr;
  have = 0;
  size_t want = bytes + bytes / 2;
  want = (want + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
  // Through device_alloc, so that the run's peak device memory counts it.
  try {
    block = device_alloc(Device::Cuda, want);
  } catch (const std::exception&) {
    throw_error("out of GPU memory allocating " + std::to_string(want >> 20) + " MiB of " + what +
                "; use a smaller --micro-batch-size or --recompute-activations");
  }
  have = want;
  return block;
}

}  // namespace

void* CudaOps::scratch(size_t bytes) { return grow_block(scratch_, scratch_bytes_, bytes, stream_, "kernel scratch"); }

void* CudaOps::operand_buffer(size_t bytes) {
  return grow_block(operands_, operands_bytes_, bytes, stream_, "16-bit GEMM operands");
}

void CudaOps::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch,
                   int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int im = as_int(m, "m"), in = as_int(n, "n"), ik = as_int(k, "k");
  const int ilda = as_int(lda, "lda"), ildb = as_int(ldb, "ldb"), ildc = as_int(ldc, "ldc");
  if (batch == 1) {
    OCC_CUBLAS_CHECK(cublasGemmEx(blas_, op_a, op_b, im, in, ik, &alpha, A, CUDA_R_32F, ilda, B, CUDA_R_32F, ildb,
                                  &beta, C, CUDA_R_32F, ildc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    OCC_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas_, op_a, op_b, im, in, ik, &alpha, A, CUDA_R_32F, ilda,
                                                stride_a, B, CUDA_R_32F, ildb, stride_b, &beta, C, CUDA_R_32F,
                                                ildc, stride_c, as_int(batch, "batch"), CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
  }
}

void CudaOps::gemm_16bit(Precision format, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (format != Precision::Bf16 && format != Precision::Fp16) throw_error("gemm_16bit: format must be bf16 or fp16");
  const cudaDataType ab = format == Precision::Bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // CUBLAS_COMPUTE_32F: products and sums in fp32 (not the 16-bit compute types).
  OCC_CUBLAS_CHECK(cublasGemmEx(blas_, op_a, op_b, as_int(m, "m"), as_int(n, "n"), as_int(k, "k"), &alpha, A, ab,
                                as_int(lda, "lda"), B, ab, as_int(ldb, "ldb"), &beta, C, CUDA_R_32F,
                                as_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

double CudaOps::read_double(const double* device_value) {
  double host = 0.0;
  // cudaMemcpy on the legacy stream waits for the kernels queued before it.
  OCC_CUDA_CHECK(cudaMemcpy(&host, device_value, sizeof(double), cudaMemcpyDeviceToHost));
  return host;
}

void CudaOps::copy(TensorRef dst, ConstTensorRef src, int64_t n) {
  if (n <= 0 || dst.data() == src.data()) return;
  if (dst.format() == src.format()) {
    OCC_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), element_bytes(src.format()) * size_t(n),
                                   cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  with_storage(dst.format(), [&](auto d) {
    using D = decltype(d);
    with_storage(src.format(), [&](auto s) {
      using S = decltype(s);
      convert_kernel<<<grid_for(n), kBlock, 0, stream_>>>(typed<D>(dst), typed<S>(src), n);
    });
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::fill(TensorRef dst, float value, int64_t n) {
  if (n <= 0) return;
  with_storage(dst.format(), [&](auto d) {
    using D = decltype(d);
    fill_kernel<<<grid_for(n), kBlock, 0, stream_>>>(typed<D>(dst), value, n);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::round_to_precision(float* x, int64_t n, Precision p) {
  if (n <= 0 || p == Precision::Fp32) return;
  round_kernel<<<grid_for(n), kBlock, 0, stream_>>>(x, n, p);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::upload_tokens(int32_t* dst, const int32_t* host_src, int64_t n) {
  if (n <= 0) return;
  // Through a page-locked slot, asynchronously: the step never waits for the
  // device here. A slot is reused once its previous copy has completed (its
  // event), which by then it long has: the ring holds several micro-batches.
  TokenSlot& slot = token_slots_[next_token_slot_];
  next_token_slot_ = (next_token_slot_ + 1) % kTokenSlots;
  if (slot.event) OCC_CUDA_CHECK(cudaEventSynchronize(slot.event));
  if (slot.capacity < n) {
    if (slot.host) OCC_CUDA_CHECK(cudaFreeHost(slot.host));
    slot.host = nullptr;
    OCC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&slot.host), sizeof(int32_t) * size_t(n)));
    slot.capacity = n;
  }
  if (!slot.event) OCC_CUDA_CHECK(cudaEventCreateWithFlags(&slot.event, cudaEventDisableTiming));
  std::memcpy(slot.host, host_src, sizeof(int32_t) * size_t(n));
  OCC_CUDA_CHECK(cudaMemcpyAsync(dst, slot.host, sizeof(int32_t) * size_t(n), cudaMemcpyHostToDevice, stream_));
  OCC_CUDA_CHECK(cudaEventRecord(slot.event, stream_));
}

}  // namespace cuda

CudaAttention parse_cuda_attention(const std::string& name) {
  if (name == "auto") return CudaAttention::Auto;
  if (name == "flash") return CudaAttention::Flash;
  if (name == "fused") return CudaAttention::Fused;
  if (name == "gemm") return CudaAttention::BatchedGemm;
  cuda::throw_error("'" + name + "' is not an attention implementation; use auto (the default), flash, fused or gemm");
}

CudaAttention default_cuda_attention() {
  const char* env = std::getenv("OCC_CUDA_ATTENTION");
  return env && *env ? parse_cuda_attention(env) : CudaAttention::Auto;
}

std::unique_ptr<Ops> make_cuda_ops(CudaAttention attention) { return std::make_unique<cuda::CudaOps>(attention); }

namespace {
cuda::CudaOps& the_cuda_ops() {
  // Created on first use (after the process picked its GPU) and deliberately
  // never destroyed: tearing cuBLAS down during static destruction can race
  // the CUDA runtime's own shutdown.
  static cuda::CudaOps* ops = new cuda::CudaOps(default_cuda_attention());
  return *ops;
}
}  // namespace

Ops& cuda_ops() { return the_cuda_ops(); }

void select_cuda_attention(CudaAttention a) { the_cuda_ops().set_attention(a); }

}  // namespace occ::kernels

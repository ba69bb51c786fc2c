// The CUDA twins of kernels/lowrank.cpp: PowerSGD's dense linear algebra on the
// GPU (tests/cuda compares them with the CPU's).
//   matmul: cuBLAS in fp32 (no TF32), the row-major problem transposed.
//   orthonormalize_columns: modified Gram-Schmidt in one block, each column
//     orthogonalised against the earlier ones twice ("twice is enough": the
//     second pass removes what rounding left of the first, so the columns are
//     orthonormal to float precision also when they were nearly dependent), dot
//     products and norms accumulated in double. A column with nothing left after
//     that (below 1e-6 of its norm before) is replaced by a unit vector made
//     orthogonal to the earlier ones, so there are always k orthonormal columns
//     (as LAPACK's QR gives), spanning what the input's independent columns did.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

namespace {

constexpr int kGsThreads = 1024;

// Sum of v over the block (every thread gets it). `red` holds kGsThreads / 32 doubles.
__device__ double block_sum(double v, double* red) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // red may still be read by the previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < kGsThreads / 32; ++w) t += red[w];  // the same order on every thread: the same bits
  return t;
}

// Orthogonalises column j of a against columns [0, j), twice; returns what is
// left of its squared norm (the same bits on every thread).
__device__ double orthogonalize_against_earlier(float* a, int64_t n, int k, int j, double* red) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < j; ++i) {
      double d = 0.0;
      for (int64_t r = threadIdx.x; r < n; r += kGsThreads) d += double(a[r * k + i]) * double(a[r * k + j]);
      d = block_sum(d, red);
      for (int64_t r = threadIdx.x; r < n; r += kGsThreads) a[r * k + j] -= float(d) * a[r * k + i];
      __syncthreads();
    }
  }
  double norm2 = 0.0;
  for (int64_t r = threadIdx.x; r < n; r += kGsThreads) norm2 += double(a[r * k + j]) * double(a[r * k + j]);
  return block_sum(norm2, red);
}

__global__ void __launch_bounds__(kGsThreads) gram_schmidt_kernel(float* a, int64_t n, int k) {
  __shared__ double red[kGsThreads / 32];
  for (int j = 0; j < k; ++j) {
    double before = 0.0;
    for (int64_t r = threadIdx.x; r < n; r += kGsThreads) before += double(a[r * k + j]) * double(a[r * k + j]);
    before = block_sum(before, red);
    double norm2 = orthogonalize_against_earlier(a, n, k, j, red);
    bool kept = norm2 > 0.0 && norm2 > 1e-12 * before;
    // Nothing left (zero, or spanned by the earlier columns): PowerSGD must still
    // get k orthonormal columns, as from LAPACK's QR (a zero column of P makes a
    // zero column of Q, which would warm-start every later step at zero). Take
    // the first unit vector e_(j+t mod n) with enough left after the earlier
    // columns (some has at least (n - j) / n): the same choice on every rank.
    for (int64_t t = 0; !kept && t < n; ++t) {
      for (int64_t r = threadIdx.x; r < n; r += kGsThreads) a[r * k + j] = r == (j + t) % n ? 1.0f : 0.0f;
      __syncthreads();
      norm2 = orthogonalize_against_earlier(a, n, k, j, red);
      kept = norm2 > 0.5 * double(n - j) / double(n);
    }
    const float inv = float(1.0 / sqrt(norm2));
    for (int64_t r = threadIdx.x; r < n; r += kGsThreads) a[r * k + j] *= inv;
    __syncthreads();
  }
}

__global__ void axpy_kernel(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] += alpha * x[i];
}

}  // namespace

void CudaOps::matmul(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                     bool trans_b) {
  // Row-major c[M, N] is column-major c^T[N, M] = op(b)^T op(a)^T: b and a swap
  // places, and each keeps its own transposition flag.
  gemm(trans_b, trans_a, N, M, K, 1.0f, b, trans_b ? K : N, a, trans_a ? M : K, 0.0f, c, N);
}

void CudaOps::orthonormalize_columns(float* a, int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) return;
  if (k > n) throw_error("orthonormalize_columns: more columns than rows");
  gram_schmidt_kernel<<<1, kGsThreads, 0, stream_>>>(a, n, int(k));
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::axpy(float* y, float alpha, const float* x, int64_t n) {
  if (n <= 0) return;
  axpy_kernel<<<grid_for(n), kBlock, 0, stream_>>>(y, alpha, x, n);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda

#pragma once
// Building blocks of the tensor-core attention kernels (tc_attention.cu,
// tc_attention_backward.cu): the 16-bit element types and their mma.sync,
// ldmatrix and cp.async wrappers, warp-level tile products, asynchronous row
// loads into padded shared memory, the dropout keep-bit tile, and the host
// checks shared by forward and backward. The index arithmetic lives in
// tc_attention_index.h, where the unit tests can reach it.
//
// Shared memory: every tile is row-major with rows of D + 8 elements. The
// 16-byte pad puts the eight 16-byte rows one ldmatrix phase reads into eight
// different 4-bank groups (row stride 144 or 272 bytes = 4 banks mod 32), so
// the loads are conflict-free without a swizzle, and every row stays 16-byte
// aligned for cp.async.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "core/precision.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tc_attention_index.h"

namespace occ::kernels::cuda::tc_impl {

constexpr float kLog2e = 1.4426950408889634f;
// Longest sequence tc_attention_supported() takes: the blocks of T fit gridDim.y.
constexpr int64_t kMaxT = int64_t(1) << 22;
constexpr unsigned kFullMask = 0xffffffffu;

// Shared-memory row stride (elements) of a tile with D columns: tc_attention_index.h's.
using tc::smem_stride;

// ---- 16-bit element types ---------------------------------------------------------------------
template <class Elem>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  // Two fp32 values rounded to nearest even; `lo` (the lower column) in the low half.
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    __nv_bfloat162 v;
    memcpy(&v, &u, 4);
    return __bfloat1622float2(v);
  }
  // c += a b (m16n8k16, A row-major, B column-major, fp32 accumulators).
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Mma<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    __half2 v;
    memcpy(&v, &u, 4);
    return __half22float2(v);
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Two consecutive elements (4-byte aligned) to and from global memory.
template <class Elem>
__device__ __forceinline__ void store_pair(Elem* p, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(p) = Mma<Elem>::pack(lo, hi);
}
template <class Elem>
__device__ __forceinline__ float2 load_pair(const Elem* p) {
  return Mma<Elem>::unpack(*reinterpret_cast<const uint32_t*>(p));
}

// ---- PTX wrappers -----------------------------------------------------------------------------
// volatile keeps the shared-memory reads and the cp.async bookkeeping in
// program order relative to each other and to __syncthreads().
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}
// 16 bytes global -> shared, bypassing L1; zeros when !valid (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

// 2^x in one MUFU instruction (relative error ~2^-22; results below 2^-126
// flush to 0, far below what a probability in fp32 accumulation can matter;
// ex2(-inf) = 0, which is how masked scores vanish).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- tiles in shared memory ----------------------------------------------------------------------
// Rows row0 .. row0 + kRows - 1 (D elements each, row stride ld in global memory)
// into a padded tile; rows at or past T are zero-filled (a zero key scores 0,
// a zero value or query contributes nothing, and no NaN pattern is left behind).
template <int kRows, int D, int kThreads, class Elem>
__device__ __forceinline__ void load_rows_async(Elem* tile, const Elem* src, int64_t ld, int64_t row0, int64_t T,
                                                int tid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert((kRows * kChunks) % kThreads == 0, "tile chunks must spread evenly over the threads");
#pragma unroll
  for (int i = 0; i < kRows * kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads, r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = row0 + r < T;
    cp_async_16(tile + r * smem_stride(D) + col, src + (valid ? row0 + r : 0) * ld + col, valid);
  }
}
// kRows floats from src[row0 ...] (zeros past T).
template <int kRows, int kThreads>
__device__ __forceinline__ void load_floats_async(float* dst, const float* src, int64_t row0, int64_t T, int tid) {
  for (int r = tid; r < kRows; r += kThreads) {
    const bool valid = row0 + r < T;
    cp_async_4(dst + r, src + (valid ? row0 + r : 0), valid);
  }
}

// ---- warp-level tile products ---------------------------------------------------------------------
// Each warp multiplies its own 16-row m-tiles; acc[mt][nt] is the mma
// accumulator of rows 16 mt .. 16 mt + 15 and columns 8 nt .. 8 nt + 7.

// A fragments of MT m-tiles x KT k-steps from a row-major tile (row 0 at sA).
template <int MT, int KT, class Elem>
__device__ __forceinline__ void load_a(uint32_t (&a)[MT][KT][4], const Elem* sA, int ld, int lane) {
  const Elem* p = sA + tc::ldsm_a_row(lane) * ld + tc::ldsm_a_col(lane);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) ldsm_x4(a[mt][kk], p + 16 * mt * ld + 16 * kk);
}

// acc += A B^T-stored: A in registers, B given as an [n][k] tile (e.g. K for Q K^T).
template <class Elem, int MT, int NT, int KT>
__device__ __forceinline__ void gemm_rA_Bnk(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][KT][4], const Elem* sB,
                                            int ld, int lane) {
  static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4)");
  const Elem* p = sB + tc::ldsm_bnk_row(lane) * ld + tc::ldsm_bnk_col(lane);
#pragma unroll
  for (int kk = 0; kk < KT; ++kk)
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4(b, p + 16 * np * ld + 16 * kk);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        Mma<Elem>::mma(acc[mt][2 * np], a[mt][kk], b[0], b[1]);
        Mma<Elem>::mma(acc[mt][2 * np + 1], a[mt][kk], b[2], b[3]);
      }
    }
}

// The same for one m-tile with A read from shared memory one k-step at a time
// (fewer live registers than holding the whole A operand).
template <class Elem, int NT, int KT>
__device__ __forceinline__ void gemm_sA_Bnk(float (&acc)[NT][4], const Elem* sA, const Elem* sB, int ld, int lane) {
  static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4)");
  const Elem* pa = sA + tc::ldsm_a_row(lane) * ld + tc::ldsm_a_col(lane);
  const Elem* pb = sB + tc::ldsm_bnk_row(lane) * ld + tc::ldsm_bnk_col(lane);
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    uint32_t a[4];
    ldsm_x4(a, pa + 16 * kk);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4(b, pb + 16 * np * ld + 16 * kk);
      Mma<Elem>::mma(acc[2 * np], a, b[0], b[1]);
      Mma<Elem>::mma(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc += A B: A in registers, B given as a [k][n] tile (e.g. V for P V), read transposed.
template <class Elem, int MT, int NT, int KT>
__device__ __forceinline__ void gemm_rA_Bkn(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][KT][4], const Elem* sB,
                                            int ld, int lane) {
  static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4)");
  const Elem* p = sB + tc::ldsm_bkn_row(lane) * ld + tc::ldsm_bkn_col(lane);
#pragma unroll
  for (int kk = 0; kk < KT; ++kk)
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4_trans(b, p + 16 * kk * ld + 16 * np);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        Mma<Elem>::mma(acc[mt][2 * np], a[mt][kk], b[0], b[1]);
        Mma<Elem>::mma(acc[mt][2 * np + 1], a[mt][kk], b[2], b[3]);
      }
    }
}

// Accumulators (16 x 8 n-tiles) -> A operand of the next product (16 x 16 k-steps),
// rounded to the 16-bit format: the FlashAttention-2 register reuse.
template <class Elem, int MT, int NT>
__device__ __forceinline__ void pack_a(uint32_t (&a)[MT][NT / 2][4], const float (&c)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk)
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const float(&src)[4] = c[mt][tc::a_from_c_tile(kk, reg)];
        a[mt][kk][reg] = Mma<Elem>::pack(src[tc::a_from_c_reg(reg, 0)], src[tc::a_from_c_reg(reg, 1)]);
      }
}

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
}

// ---- arguments ---------------------------------------------------------------------------------
struct TcArgs {
  AttentionShape s;  // where q, k and v lie in a qkv row (kernels.h), the groups of grouped-query attention
  int64_t T, H;
  int64_t head0;        // global index of local head 0 (dropout coordinates)
  int64_t sample_base;  // global sample of local sample 0
  uint64_t drop_key;
  float scale;           // 1 / sqrt(D)
  float scale_log2;      // scale * log2(e): scores go through exp2
  float keep_scale;      // 1 / (1 - p), as the CPU computes it
  float out_scale;       // keep_scale with dropout, else 1 (applied to sums over kept P)
  uint32_t keep_threshold;  // keep iff Philox word >= threshold (tc::dropout_keep_threshold)
  bool dropout;
};

// The keep bits of query rows q0 .. q0 + kRows - 1 x keys k0 .. k0 + 32 kWords - 1
// into mask[row * kWords + word], spread over the block's threads (one word,
// i.e. 8 or 9 Philox blocks, per thread and unit).
template <int kRows, int kWords, int kThreads>
__device__ __forceinline__ void fill_keep_mask(uint32_t* mask, const TcArgs& a, uint64_t sample, uint64_t head,
                                               int64_t q0, int64_t k0, int tid) {
  for (int u = tid; u < kRows * kWords; u += kThreads) {
    const int r = u / kWords, w = u % kWords;
    mask[u] = tc::dropout_keep_bits(a.drop_key, sample, head, a.T, q0 + r, k0 + 32 * w, a.keep_threshold);
  }
}

// ---- host side ---------------------------------------------------------------------------------
TcArgs make_args(const AttentionShape& s, const Dropout& d);
// Throws occ::Error naming the problem for an unsupported shape, dropout
// probability, format or a pointer that is not 16-byte aligned.
void check_call(const char* what, const AttentionShape& s, const Dropout& d, Precision format,
                std::initializer_list<const void*> aligned16);

// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) once per kernel and device
// (`done` is the kernel's own set of devices already configured). A device
// whose opt-in limit is below `bytes` gets a one-line error, not a failed launch.
template <class Kernel>
void allow_dynamic_smem(Kernel* kernel, size_t bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  OCC_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  int optin = 0;
  OCC_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attr{};
  OCC_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  if (bytes + attr.sharedSizeBytes > size_t(optin))
    throw_error("tensor-core attention: a block needs " + std::to_string(bytes + attr.sharedSizeBytes) +
                " bytes of shared memory, this GPU grants at most " + std::to_string(optin) +
                "; use --attention-backend fused");
  OCC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  done.fetch_or(bit, std::memory_order_release);
}

}  // namespace occ::kernels::cuda::tc_impl

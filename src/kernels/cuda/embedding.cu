// Token and position embeddings, forward and backward (kernels/elementwise.cpp
// conventions: vocab-parallel shard [v0, v0 + V), backward accumulates +=).
//
// The token-embedding gradient must not use atomics (repeated tokens would add
// in a different order each run). Instead the (row, position) pairs are sorted
// on the device, and one block per distinct row adds that row's positions in
// ascending order: the same additions in the same order as the CPU kernel, so
// the result is bit-identical to it.
//
// Storage: activations (out, dout) and the step's weights (wte, wpe) may each
// be fp32, bf16 or fp16 (the model embeds 16-bit weights into an fp32 sum);
// gradients are fp32. Values are added in fp32 and rounded once when stored,
// so fp32 results are what they were. With C a multiple of the pack and
// aligned tensors, threads move 16-byte packs (packs.cuh); else one value each.
#include "kernels/cuda/packs.cuh"

namespace occ::kernels::cuda {

namespace {

// Values per pack when a kernel reads A and writes B: 16 bytes of the narrower type.
template <class A, class B>
constexpr int kPackOf = kPack<A> > kPack<B> ? kPack<A> : kPack<B>;

// out[n, c..c+V) = wte[token - v0] (0 outside the shard), a pack of V per thread.
template <int V, class O, class W>
__global__ void embedding_forward_kernel(O* out, const int32_t* tokens, const W* wte, int64_t v0, int64_t Vs,
                                         int64_t N, int64_t C) {
  const int64_t row_packs = C / V;
  for (int64_t q = global_thread(); q < N * row_packs; q += grid_threads()) {
    const int64_t n = q / row_packs, c = (q % row_packs) * V;
    const int64_t row = int64_t(tokens[n]) - v0;
    float v[V];
    if (row >= 0 && row < Vs) {
      load_values<V>(wte + row * C + c, v);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = 0.0f;
    }
    store_values<V>(out + n * C + c, v);
  }
}

// Sort keys: (shard row << 32) | position, rows outside the shard as V (they sort
// last and are skipped); the padding up to a power of two is all ones.
__global__ void embedding_keys_kernel(uint64_t* keys, const int32_t* tokens, int64_t v0, int64_t V, int64_t N,
                                      int64_t M) {
  for (int64_t i = global_thread(); i < M; i += grid_threads()) {
    if (i < N) {
      const int64_t row = int64_t(tokens[i]) - v0;
      const uint64_t r = (row >= 0 && row < V) ? uint64_t(row) : uint64_t(V);
      keys[i] = (r << 32) | uint64_t(i);
    } else {
      keys[i] = ~uint64_t(0);
    }
  }
}

// Bitonic sort of M (a power of two) keys, ascending. Element i of the stage
// with block size k sorts ascending iff (i & k) == 0. Steps whose partner
// distance j is below the tile run in shared memory, several per launch.
constexpr int kSortTile = 1024;

__device__ __forceinline__ void compare_swap(uint64_t& a, uint64_t& b, bool ascending) {
  if ((a > b) == ascending) {
    const uint64_t t = a;
    a = b;
    b = t;
  }
}

// One global step (k, j) with j >= tile: thread i pairs with i ^ j.
__global__ void bitonic_global_step_kernel(uint64_t* keys, int64_t M, int64_t k, int64_t j) {
  for (int64_t i = global_thread(); i < M; i += grid_threads()) {
    const int64_t l = i ^ j;
    if (l > i) compare_swap(keys[i], keys[l], (i & k) == 0);
  }
}

// Within each tile of blockDim.x keys: for every stage k in [k_first, k_last]
// (powers of two), the steps j = min(k / 2, j_first) .. 1.
__global__ void bitonic_tile_kernel(uint64_t* keys, int64_t k_first, int64_t k_last, int64_t j_first) {
  __shared__ uint64_t tile[kSortTile];
  const int t = threadIdx.x;
  const int64_t base = int64_t(blockIdx.x) * blockDim.x;
  tile[t] = keys[base + t];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k <<= 1) {
    for (int64_t j = (k / 2 < j_first ? k / 2 : j_first); j > 0; j >>= 1) {
      const int l = t ^ int(j);
      if (l > t) compare_swap(tile[t], tile[l], ((base + t) & k) == 0);
      __syncthreads();
    }
  }
  keys[base + t] = tile[t];
}

// One block per sorted position; the first position of each shard row adds all
// of that row's dout rows, in position order, onto dwte (a pack of V columns per thread).
template <int V, class S>
__global__ void embedding_accumulate_kernel(float* dwte, const S* dout, const uint64_t* sorted, int64_t N,
                                            int64_t Vs, int64_t C) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const uint64_t row = sorted[i] >> 32;
    if (row >= uint64_t(Vs)) break;  // out-of-shard tokens: all later ones are too
    if (i > 0 && (sorted[i - 1] >> 32) == row) continue;
    for (int64_t c = int64_t(threadIdx.x) * V; c < C; c += int64_t(blockDim.x) * V) {
      float acc[V], g[V];
      load_values<V>(dwte + int64_t(row) * C + c, acc);
      for (int64_t j = i; j < N && (sorted[j] >> 32) == row; ++j) {
        load_values<V>(dout + int64_t(sorted[j] & 0xffffffffu) * C + c, g);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += g[k];
      }
      store_values<V>(dwte + int64_t(row) * C + c, acc);
    }
  }
}

// out[n] += wpe[n % T], rounded once to O.
template <int V, class O, class W>
__global__ void position_forward_kernel(O* out, const W* wpe, int64_t N, int64_t T, int64_t C) {
  const int64_t row_packs = C / V;
  for (int64_t q = global_thread(); q < N * row_packs; q += grid_threads()) {
    const int64_t n = q / row_packs, c = (q % row_packs) * V;
    float o[V], w[V];
    load_values<V>(out + n * C + c, o);
    load_values<V>(wpe + (n % T) * C + c, w);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] += w[j];
    store_values<V>(out + n * C + c, o);
  }
}

// One thread per pack of dwpe [T, C], adding rows t, t + T, ... in order (as the CPU).
template <int V, class S>
__global__ void position_backward_kernel(float* dwpe, const S* dout, int64_t N, int64_t T, int64_t C) {
  const int64_t row_packs = C / V;
  for (int64_t q = global_thread(); q < T * row_packs; q += grid_threads()) {
    const int64_t t = q / row_packs, c = (q % row_packs) * V;
    float acc[V], g[V];
    load_values<V>(dwpe + t * C + c, acc);
    for (int64_t n = t; n < N; n += T) {
      load_values<V>(dout + n * C + c, g);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += g[k];
    }
    store_values<V>(dwpe + t * C + c, acc);
  }
}

// Whether [*, C] tensors at these addresses can move packs of V values.
bool packs_fit(int64_t C, int V, std::initializer_list<const void*> tensors) {
  if (C % V != 0) return false;
  for (const void* t : tensors)
    if (!aligned16(t)) return false;
  return true;
}

}  // namespace

void CudaOps::embedding_forward(TensorRef out, const int32_t* tokens, ConstTensorRef wte, int64_t v0, int64_t V,
                                int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  with_storage(out.format(), [&](auto otag) {
    using O = decltype(otag);
    with_storage(wte.format(), [&](auto wtag) {
      using W = decltype(wtag);
      constexpr int P = kPackOf<O, W>;
      if (packs_fit(C, P, {out.data(), wte.data()}))
        embedding_forward_kernel<P><<<grid_for(N * (C / P)), kBlock, 0, stream_>>>(typed<O>(out), tokens,
                                                                                 typed<W>(wte), v0, V, N, C);
      else
        embedding_forward_kernel<1><<<grid_for(N * C), kBlock, 0, stream_>>>(typed<O>(out), tokens, typed<W>(wte),
                                                                           v0, V, N, C);
    });
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::embedding_backward(float* dwte, ConstTensorRef dout, const int32_t* tokens, int64_t v0, int64_t V,
                                 int64_t N, int64_t C) {
  if (N <= 0 || C <= 0 || V <= 0) return;
  if (N >= (int64_t(1) << 32) || V >= (int64_t(1) << 31))
    throw_error("CUDA embedding backward: " + std::to_string(N) + " tokens or a shard of " + std::to_string(V) +
                " rows exceeds the 32-bit sort key");
  int64_t M = 2;
  while (M < N) M <<= 1;
  uint64_t* keys = static_cast<uint64_t*>(scratch(sizeof(uint64_t) * size_t(M)));
  embedding_keys_kernel<<<grid_for(M), kBlock, 0, stream_>>>(keys, tokens, v0, V, N, M);
  OCC_CUDA_CHECK_LAUNCH();

  const int64_t tile = M < kSortTile ? M : kSortTile;
  const unsigned tiles = unsigned(M / tile);
  // Stages up to the tile size entirely in shared memory.
  bitonic_tile_kernel<<<tiles, unsigned(tile), 0, stream_>>>(keys, 2, tile, tile / 2);
  OCC_CUDA_CHECK_LAUNCH();
  for (int64_t k = 2 * tile; k <= M; k <<= 1) {
    for (int64_t j = k / 2; j >= tile; j >>= 1) {
      bitonic_global_step_kernel<<<grid_for(M), kBlock, 0, stream_>>>(keys, M, k, j);
      OCC_CUDA_CHECK_LAUNCH();
    }
    bitonic_tile_kernel<<<tiles, unsigned(tile), 0, stream_>>>(keys, k, k, tile / 2);
    OCC_CUDA_CHECK_LAUNCH();
  }

  const unsigned blocks = unsigned(N < 65535 ? N : 65535);
  with_storage(dout.format(), [&](auto tag) {
    using S = decltype(tag);
    constexpr int P = kPackOf<S, float>;
    if (packs_fit(C, P, {dwte, dout.data()}))
      embedding_accumulate_kernel<P><<<blocks, 128, 0, stream_>>>(dwte, typed<S>(dout), keys, N, V, C);
    else
      embedding_accumulate_kernel<1><<<blocks, 128, 0, stream_>>>(dwte, typed<S>(dout), keys, N, V, C);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::position_forward(TensorRef out, ConstTensorRef wpe, int64_t N, int64_t T, int64_t C) {
  if (N <= 0 || C <= 0) return;
  with_storage(out.format(), [&](auto otag) {
    using O = decltype(otag);
    with_storage(wpe.format(), [&](auto wtag) {
      using W = decltype(wtag);
      constexpr int P = kPackOf<O, W>;
      if (packs_fit(C, P, {out.data(), wpe.data()}))
        position_forward_kernel<P><<<grid_for(N * (C / P)), kBlock, 0, stream_>>>(typed<O>(out), typed<W>(wpe), N,
                                                                                T, C);
      else
        position_forward_kernel<1><<<grid_for(N * C), kBlock, 0, stream_>>>(typed<O>(out), typed<W>(wpe), N, T, C);
    });
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::position_backward(float* dwpe, ConstTensorRef dout, int64_t N, int64_t T, int64_t C) {
  if (N <= 0 || C <= 0 || T <= 0) return;
  with_storage(dout.format(), [&](auto tag) {
    using S = decltype(tag);
    constexpr int P = kPackOf<S, float>;
    if (packs_fit(C, P, {dwpe, dout.data()}))
      position_backward_kernel<P><<<grid_for(T * (C / P)), kBlock, 0, stream_>>>(dwpe, typed<S>(dout), N, T, C);
    else
      position_backward_kernel<1><<<grid_for(T * C), kBlock, 0, stream_>>>(dwpe, typed<S>(dout), N, T, C);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda

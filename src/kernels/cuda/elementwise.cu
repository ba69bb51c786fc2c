// GeLU (tanh approximation), bias-dropout-add and dropout, for fp32, bf16 and
// fp16 storage. Formulas follow kernels/elementwise.cpp (which uses a fast
// tanh; tanhf here agrees to ~1e-7); each element is computed in fp32 exactly
// as before, so fp32 results are bit-identical whichever path runs.
//
// Dropout masks are bit-identical to the CPU's: element (row n, column c) of a
// [N, C] activation with T rows per sample belongs to sample
// sample_base + (row0 + n) / T at index idx = ((row0 + n) % T) * C + c, and is kept iff
// bits_to_unit(Philox(key, sample, idx >> 2)[idx & 3]) > p.
//
// Fast path: a thread takes 16-byte packs (packs.cuh). With C a multiple of
// the pack (which makes idx of a pack's first element a multiple of 4), a
// pack is whole Philox blocks of one row, drawn as the CPU draws them. Other
// shapes, or unaligned tensors, take the scalar kernels: one element per
// thread, or for dropout an aligned group of four per thread (one Philox block).
#include "kernels/cuda/row_groups.cuh"

namespace occ::kernels::cuda {

namespace {

// ---- without rows: n values (launch_packed_map, packs.cuh) ----------------------------------
template <class S>
struct GeluForward {
  S* out;
  const S* inp;
  template <int V>
  __device__ __forceinline__ void apply(int64_t i) const {
    float x[V];
    load_values<V>(inp + i, x);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = gelu_value(x[j]);
    store_values<V>(out + i, x);
  }
};

template <class S>
struct GeluBackward {  // dinp = dout * gelu'(inp); dinp may be dout
  S* dinp;
  const S *inp, *dout;
  template <int V>
  __device__ __forceinline__ void apply(int64_t i) const {
    float x[V], g[V];
    load_values<V>(inp + i, x);
    load_values<V>(dout + i, g);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = g[j] * gelu_slope(x[j]);
    store_values<V>(dinp + i, g);
  }
};

// ---- [N, C] rows with a dropout mask ------------------------------------------------------
// The functors below take V values from element i (column c) with their
// dropout multipliers m (1 where dropout is off).

// Fast path: one pack per iteration; C is a multiple of V.
template <int V, class F>
__global__ void row_packs_kernel(F f, DropoutParams d, int64_t N, int64_t T, int64_t C) {
  const int64_t row_packs = C / V, packs = N * row_packs;
  for (int64_t q = global_thread(); q < packs; q += grid_threads()) {
    const int64_t n = q / row_packs, c = (q % row_packs) * V;
    float m[V];
    row_dropout_multipliers<V>(d, n, c, T, C, m);
    f.template apply<V>(n * C + c, c, m);
  }
}

// Scalar, with dropout: a sample's T * C elements are contiguous, and one
// thread takes an aligned group of four of them: the four uniforms of one
// Philox block, as the CPU draws them.
template <class F>
__global__ void dropout_map_kernel(F f, DropoutParams d, int64_t N, int64_t T, int64_t C) {
  // Samples are counted from the one holding row d.row0 (a sequence-parallel
  // shard may start inside a sample); elements outside [row0, row0 + N) are skipped.
  const int64_t per_sample = T * C, groups = (per_sample + 3) / 4;
  const int64_t s0 = d.row0 / T, samples = (d.row0 + N + T - 1) / T - s0;
  const int64_t first = d.row0 * C, total = N * C;  // the tensor's elements, counted from sample s0's first
  for (int64_t gid = global_thread(); gid < samples * groups; gid += grid_threads()) {
    const int64_t s = s0 + gid / groups, j = gid % groups;
    const PhiloxBlock b = Philox::block(d.key, uint64_t(d.sample_base + s), uint64_t(j));
    const int64_t base = s * per_sample - first;  // the sample's element 0, as an index into the tensor
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t idx = 4 * j + r;
      if (idx < per_sample && base + idx >= 0 && base + idx < total) {
        const float m[1] = {dropout_multiplier(b.v[r], d)};
        f.template apply<1>(base + idx, idx % C, m);
      }
    }
  }
}

// Scalar, without dropout.
template <class F>
__global__ void map_kernel(F f, int64_t total, int64_t C) {
  const float one[1] = {1.0f};
  for (int64_t i = global_thread(); i < total; i += grid_threads()) f.template apply<1>(i, i % C, one);
}

// Runs f over [N, C]: packs when `vector` (C a multiple of V, tensors aligned), else scalar.
template <int V, class F>
void launch_rows(cudaStream_t stream, F f, const Dropout& d, int64_t N, int64_t T, int64_t C, bool vector) {
  if (vector) {
    row_packs_kernel<V><<<grid_for(N * (C / V)), kBlock, 0, stream>>>(f, dropout_params(d), N, T, C);
  } else if (d.active()) {
    const int64_t samples = (d.row0 + N + T - 1) / T - d.row0 / T;  // as dropout_map_kernel counts them
    const int64_t groups = samples * ((T * C + 3) / 4);
    dropout_map_kernel<<<grid_for(groups), kBlock, 0, stream>>>(f, dropout_params(d), N, T, C);
  } else {
    map_kernel<<<grid_for(N * C), kBlock, 0, stream>>>(f, N * C, C);
  }
  OCC_CUDA_CHECK_LAUNCH();
}

// out = residual + (x + bias) * m with dropout, else residual + x + bias (the
// CPU's order of additions). X: S, or fp32 (a TP all-reduce's sum).
template <class S, class X>
struct BiasDropoutAdd {
  S* out;
  const S* residual;
  const X* x;
  const S* bias;  // nullptr: none
  bool dropout;
  template <int V>
  __device__ __forceinline__ void apply(int64_t i, int64_t c, const float (&m)[V]) const {
    float r[V], xv[V], b[V];
    load_values<V>(residual + i, r);
    load_values<V>(x + i, xv);
    if (bias) {
      load_values<V>(bias + c, b);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) b[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = dropout ? r[j] + (xv[j] + b[j]) * m[j] : r[j] + xv[j] + b[j];
    store_values<V>(out + i, r);
  }
};

template <class S>
struct ScaleInto {  // dst = src * m (dst may be src)
  S* dst;
  const S* src;
  template <int V>
  __device__ __forceinline__ void apply(int64_t i, int64_t, const float (&m)[V]) const {
    float v[V];
    load_values<V>(src + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= m[j];
    store_values<V>(dst + i, v);
  }
};

// ---- the dropout gradient with its bias gradient, one pass -----------------------------------
// dx = dropout'(dout) (dx may be dout) and the block's column sums of dx
// before rounding (the CPU sums its fp32 dx). Rows as row_groups.cuh's
// column-summing kernels: group `group` of block b takes a run of rows_per_group rows.
template <class S, int P>
__global__ void dropout_grad_rows_kernel(S* dx, float* partial, const S* dout, DropoutParams d, int64_t N, int64_t T,
                                         int64_t C, int64_t rows_per_group, int warps) {
  extern __shared__ float4 stage_words[];
  constexpr int V = kPack<S>;
  const GroupThread g = group_thread(warps);
  const int groups = int(blockDim.x) / g.size;
  const int64_t row_packs = C / V;
  float acc[1][P][V];
#pragma unroll
  for (int i = 0; i < P; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) acc[0][i][j] = 0.0f;
  const int64_t first = (int64_t(blockIdx.x) * groups + g.group) * rows_per_group;
  for (int64_t n = first; n < first + rows_per_group && n < N; ++n) {  // no barrier inside
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t pk = g.t + int64_t(i) * g.size;
      if (pk >= row_packs) continue;
      float v[V], m[V];
      load_values<V>(dout + n * C + pk * V, v);
      row_dropout_multipliers<V>(d, n, pk * V, T, C, m);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (d.active) v[j] *= m[j];  // else a copy
        acc[0][i][j] += v[j];
      }
      store_values<V>(dx + n * C + pk * V, v);
    }
  }
  store_block_column_partials<1, P, V>(partial, acc, g, C, groups, reinterpret_cast<float*>(stage_words));
}

// Simple path of the bias gradient: column sums of dout * m, the multiplier
// drawn per element (read before dx overwrites dout when they are the same).
template <class S>
struct DroppedRows {
  const S* dout;
  DropoutParams d;
  int64_t T, C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const {
    float m[1];
    row_dropout_multipliers<1>(d, n, c, T, C, m);
    v[0] = d.active ? widen(dout[n * C + c]) * m[0] : widen(dout[n * C + c]);
  }
};

template <class S>
bool dropout_grad_fast(CudaOps& ops, S* dx, float* dbias, const S* dout, const Dropout& d, int64_t N, int64_t T,
                       int64_t C) {
  if (!aligned16(dx) || !aligned16(dout)) return false;
  RowLaunch l;  // layout, grid and shared memory: row_launch.h
  if (!dropout_grad_launch(storage_of<S>(), N, C, kDropoutGradStaticBytes, l)) return false;
  float* partial = static_cast<float*>(ops.scratch(sizeof(float) * size_t(l.grid.blocks * C)));
  const auto launch = [&](auto packs) {
    constexpr auto kernel = &dropout_grad_rows_kernel<S, decltype(packs)::value>;
    check_row_launch(l, kernel_shared_memory<kernel>(kDropoutGradStaticBytes, "dropout_grad_rows_kernel"),
                     "dropout_grad_rows_kernel");
    kernel<<<unsigned(l.grid.blocks), unsigned(l.layout.threads()), l.dynamic_bytes, ops.stream()>>>(
        dx, partial, dout, dropout_params(d), N, T, C, l.grid.rows_per_group, l.layout.warps);
  };
  static_assert(kMaxGradPacks == 2, "the two instantiations below");
  if (l.layout.packs == 1)
    launch(std::integral_constant<int, 1>{});
  else
    launch(std::integral_constant<int, 2>{});
  OCC_CUDA_CHECK_LAUNCH();
  column_partials_finish<1>(ops.stream(), ColumnOutputs<1>{{dbias}}, partial, l.grid.blocks, C);
  return true;
}

}  // namespace

void CudaOps::gelu_forward(TensorRef out, ConstTensorRef inp, int64_t n) {
  if (n <= 0) return;
  require_format(inp.format(), {out}, "gelu_forward");
  with_storage(inp.format(), [&](auto tag) {
    using S = decltype(tag);
    launch_packed_map<kPack<S>>(stream_, GeluForward<S>{typed<S>(out), typed<S>(inp)}, n,
                         aligned16(out.data()) && aligned16(inp.data()));
  });
}

void CudaOps::gelu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t n) {
  if (n <= 0) return;
  require_format(inp.format(), {dinp, dout}, "gelu_backward");
  with_storage(inp.format(), [&](auto tag) {
    using S = decltype(tag);
    launch_packed_map<kPack<S>>(stream_, GeluBackward<S>{typed<S>(dinp), typed<S>(inp), typed<S>(dout)}, n,
                         aligned16(dinp.data()) && aligned16(inp.data()) && aligned16(dout.data()));
  });
}

void CudaOps::bias_dropout_add_forward(TensorRef out, ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                       const Dropout& d, int64_t N, int64_t T, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const Precision s = out.format();
  require_format(s, {residual, bias}, "bias_dropout_add_forward");
  if (x.format() != s) require_format(Precision::Fp32, {x}, "bias_dropout_add_forward (x)");
  with_storage(s, [&](auto tag) {
    using S = decltype(tag);
    constexpr int V = kPack<S>;
    const bool vector = C % V == 0 && aligned16(out.data()) && aligned16(residual.data()) && aligned16(x.data()) &&
                        aligned16(bias.data());
    const auto run = [&](auto xtag) {
      using X = decltype(xtag);
      launch_rows<V>(stream_,
                     BiasDropoutAdd<S, X>{typed<S>(out), typed<S>(residual), typed<X>(x), typed<S>(bias), d.active()},
                     d, N, T, C, vector);
    };
    if (x.format() == s)
      run(S{});
    else
      run(float{});
  });
}

void CudaOps::bias_dropout_add_backward(TensorRef dx, float* dbias, ConstTensorRef dout, const Dropout& d, int64_t N,
                                        int64_t T, int64_t C) {
  if (N <= 0 || C <= 0) return;
  require_format(dout.format(), {dx}, "bias_dropout_add_backward");
  with_storage(dout.format(), [&](auto tag) {
    using S = decltype(tag);
    constexpr int V = kPack<S>;
    if (dbias && dropout_grad_fast(*this, typed<S>(dx), dbias, typed<S>(dout), d, N, T, C)) return;
    // Bias gradient first: dx may overwrite dout.
    if (dbias)
      column_sums_add<1>(*this, ColumnOutputs<1>{{dbias}}, DroppedRows<S>{typed<S>(dout), dropout_params(d), T, C},
                         N, C);
    if (d.active())
      launch_rows<V>(stream_, ScaleInto<S>{typed<S>(dx), typed<S>(dout)}, d, N, T, C,
                     C % V == 0 && aligned16(dx.data()) && aligned16(dout.data()));
    else
      copy(dx, dout, N * C);
  });
}

void CudaOps::dropout_inplace(TensorRef x, const Dropout& d, int64_t N, int64_t T, int64_t C) {
  if (!d.active() || N <= 0 || C <= 0) return;
  with_storage(x.format(), [&](auto tag) {
    using S = decltype(tag);
    constexpr int V = kPack<S>;
    launch_rows<V>(stream_, ScaleInto<S>{typed<S>(x), typed<S>(x)}, d, N, T, C, C % V == 0 && aligned16(x.data()));
  });
}

}  // namespace occ::kernels::cuda

// LayerNorm, and the fused pairs around it (bias-dropout-add + LayerNorm
// forward; LayerNorm + dropout gradient backward), for fp32, bf16 and fp16
// storage. Formulas and accumulation conventions are kernels/layernorm.cpp's:
// two-pass mean/variance, dinp/dw/db accumulate (+=).
//
// The fast path (layernorm_rows.cuh) keeps each row in registers and moves
// 16-byte packs: one read of every input and one write of every output, the
// parameter gradients summed per block in a fixed order and finished by one
// small kernel. It needs C a multiple of the pack (8 values in 16 bits, 4 in
// fp32), 16-byte aligned tensors and C at most 16384 (16-bit) / 8192 (fp32)
// for the backward (twice that forward). Everything else takes the simple
// path: a warp per row striding through global memory, parameter gradients
// through reduce.cuh, and the fused ops as their parts with the rounding
// between them, which is their definition.
#include "kernels/cuda/layernorm_rows.cuh"

namespace occ::kernels::cuda {

namespace {

// ---- the simple path ----------------------------------------------------------------------
constexpr int kRowsPerBlock = kBlock / 32;

template <class S>
__global__ void layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp, const S* w, const S* b,
                                         int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warps leave together: no block-level barrier follows
  const S* x = inp + n * C;
  S* y = out + n * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += widen(x[c]);
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float dx = widen(x[c]) - m;
    var += dx * dx;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + eps);
  for (int64_t c = lane; c < C; c += 32) y[c] = narrow<S>((widen(x[c]) - m) * s * widen(w[c]) + widen(b[c]));
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class S>
__global__ void layernorm_backward_input_kernel(S* dinp, const S* dout, const S* inp, const S* w, const float* mean,
                                                const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const S* dy = dout + n * C;
  const S* x = inp + n * C;
  S* dx = dinp + n * C;
  const float m = mean[n], s = rstd[n];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = widen(dy[c]) * widen(w[c]);
    sum_g += g;
    sum_gx += g * (widen(x[c]) - m) * s;
  }
  sum_g = warp_sum(sum_g) / float(C);
  sum_gx = warp_sum(sum_gx) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float xhat = (widen(x[c]) - m) * s;
    dx[c] = narrow<S>(widen(dx[c]) + s * (widen(dy[c]) * widen(w[c]) - sum_g - xhat * sum_gx));
  }
}

// dw[c] += dy * xhat, db[c] += dy, as column sums.
template <class S>
struct LayerNormParamGrads {
  const S *dout, *inp;
  const float *mean, *rstd;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[2]) const {
    const float dy = widen(dout[n * C + c]);
    v[0] = dy * (widen(inp[n * C + c]) - mean[n]) * rstd[n];
    v[1] = dy;
  }
};

// ---- the fast path ------------------------------------------------------------------------
// Packs per thread: the forward keeps one row in registers; the backward two
// (dout, inp) and three column sums per value, so fewer packs and more threads.
constexpr int kMaxForwardPacks = 4, kMaxBackwardPacks = 2;

template <class S>
bool fast_rows(int64_t C, std::initializer_list<const void*> tensors) {
  if (C % kPack<S> != 0) return false;
  for (const void* t : tensors)
    if (t && !aligned16(t)) return false;
  return true;
}

// Calls f(std::integral_constant<int, P>{}) with P the layout's packs per thread (1 .. MaxP).
template <int MaxP, class F>
void with_packs(int packs, F&& f) {
  static_assert(MaxP >= 1 && MaxP <= 4);
  if (packs <= 1 || MaxP == 1) {
    f(std::integral_constant<int, 1>{});
  } else if (packs == 2 || MaxP == 2) {
    f(std::integral_constant<int, (MaxP >= 2 ? 2 : 1)>{});
  } else if (packs == 3 || MaxP == 3) {
    f(std::integral_constant<int, (MaxP >= 3 ? 3 : 1)>{});
  } else {
    f(std::integral_constant<int, (MaxP >= 4 ? 4 : 1)>{});
  }
}

// The forward fast path; false when the shape or alignment needs the simple one.
template <class S, class X>
bool layernorm_forward_fast(cudaStream_t stream, const LayerNormForwardArgs<S, X>& a) {
  if (!fast_rows<S>(a.C, {a.residual_out, a.out, a.inp, a.x, a.bias, a.w, a.b})) return false;
  RowLayout L;
  if (!choose_row_layout(a.C / kPack<S>, kMaxForwardPacks, kBlock, L)) return false;
  const int64_t blocks = std::min<int64_t>((a.N + L.groups - 1) / L.groups, int64_t(1) << 20);
  with_packs<kMaxForwardPacks>(L.packs, [&](auto packs) {
    layernorm_forward_rows_kernel<S, X, decltype(packs)::value>
        <<<unsigned(blocks), unsigned(L.threads()), 0, stream>>>(a, L.warps);
  });
  OCC_CUDA_CHECK_LAUNCH();
  return true;
}

// The backward fast path with K column sums (dw, db[, dbias]); false as above.
template <class S, int K>
bool layernorm_backward_fast(CudaOps& ops, LayerNormBackwardArgs<S> a, ColumnOutputs<K> outs) {
  if (!fast_rows<S>(a.C, {a.dinp, a.dx, a.dout, a.inp, a.w})) return false;
  RowLayout L;
  if (!choose_row_layout(a.C / kPack<S>, kMaxBackwardPacks, kBlock, L)) return false;
  bool params = false;
  for (float* o : outs.out) params = params || o;
  if (params) L.groups = staged_groups(L.groups, K, a.C);
  const ColumnGrid grid = column_grid(a.N, L.groups);
  a.rows_per_group = grid.rows_per_group;
  a.partial = params ? static_cast<float*>(ops.scratch(sizeof(float) * size_t(K * grid.blocks * a.C))) : nullptr;
  const size_t stage = params ? stage_bytes(L.groups, K, a.C) : 0;
  with_packs<kMaxBackwardPacks>(L.packs, [&](auto packs) {
    layernorm_backward_rows_kernel<S, decltype(packs)::value, K>
        <<<unsigned(grid.blocks), unsigned(L.threads()), stage, ops.stream()>>>(a, L.warps);
  });
  OCC_CUDA_CHECK_LAUNCH();
  if (params) column_partials_finish<K>(ops.stream(), outs, a.partial, grid.blocks, a.C);
  return true;
}

// Rounds an fp32 tensor of a --bf16 / --fp16 step to p (16-bit storage was rounded when stored).
void round_stored(CudaOps& ops, TensorRef t, int64_t n, Precision p) {
  if (t.is_fp32()) ops.round_to_precision(t.f32(), n, p);
}

}  // namespace

void CudaOps::layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                                ConstTensorRef b, int64_t N, int64_t C, float eps) {
  if (N <= 0 || C <= 0) return;
  require_format(inp.format(), {out, w, b}, "layernorm_forward");
  with_storage(inp.format(), [&](auto tag) {
    using S = decltype(tag);
    LayerNormForwardArgs<S, S> a{};
    a.out = typed<S>(out);
    a.mean = mean;
    a.rstd = rstd;
    a.inp = typed<S>(inp);
    a.w = typed<S>(w);
    a.b = typed<S>(b);
    a.N = N;
    a.T = 1;
    a.C = C;
    a.eps = eps;
    a.p = Precision::Fp32;  // 16-bit storage rounds; fp32 is rounded by the caller (ops.h)
    if (layernorm_forward_fast(stream_, a)) return;
    const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    layernorm_forward_kernel<<<unsigned(blocks), kBlock, 0, stream_>>>(typed<S>(out), mean, rstd, typed<S>(inp),
                                                                       typed<S>(w), typed<S>(b), N, C, eps);
    OCC_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::layernorm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                                 ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0 || (!dinp && !dw && !db)) return;
  require_format(dout.format(), {dinp, inp, w}, "layernorm_backward");
  with_storage(dout.format(), [&](auto tag) {
    using S = decltype(tag);
    LayerNormBackwardArgs<S> a{};
    a.dinp = typed<S>(dinp);
    a.dout = typed<S>(dout);
    a.inp = typed<S>(inp);
    a.w = typed<S>(w);
    a.mean = mean;
    a.rstd = rstd;
    a.N = N;
    a.T = 1;
    a.C = C;
    a.p = Precision::Fp32;
    if (layernorm_backward_fast<S, 2>(*this, a, ColumnOutputs<2>{{dw, db}})) return;
    if (dinp) {
      const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
      layernorm_backward_input_kernel<<<unsigned(blocks), kBlock, 0, stream_>>>(
          typed<S>(dinp), typed<S>(dout), typed<S>(inp), typed<S>(w), mean, rstd, N, C);
      OCC_CUDA_CHECK_LAUNCH();
    }
    if (dw || db)
      column_sums_add<2>(*this, ColumnOutputs<2>{{dw, db}},
                         LayerNormParamGrads<S>{typed<S>(dout), typed<S>(inp), mean, rstd, C}, N, C);
  });
}

void CudaOps::bias_dropout_add_layernorm_forward(TensorRef residual_out, TensorRef ln_out, float* mean, float* rstd,
                                                 ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                                 const Dropout& d, ConstTensorRef w, ConstTensorRef b, int64_t N,
                                                 int64_t T, int64_t C, float eps, Precision p) {
  if (N <= 0 || C <= 0) return;
  const Precision s = residual_out.format();
  require_format(s, {ln_out, residual, bias, w, b}, "bias_dropout_add_layernorm_forward");
  if (x.format() != s) require_format(Precision::Fp32, {x}, "bias_dropout_add_layernorm_forward (x)");
  const bool done = with_storage(s, [&](auto tag) {
    using S = decltype(tag);
    const auto fast = [&](auto xtag) {
      using X = decltype(xtag);
      LayerNormForwardArgs<S, X> a{};
      a.residual_out = typed<S>(residual_out);
      a.out = typed<S>(ln_out);
      a.mean = mean;
      a.rstd = rstd;
      a.inp = typed<S>(residual);
      a.x = typed<X>(x);
      a.bias = typed<S>(bias);
      a.w = typed<S>(w);
      a.b = typed<S>(b);
      a.d = dropout_params(d);
      a.N = N;
      a.T = T;
      a.C = C;
      a.eps = eps;
      a.p = p;
      return layernorm_forward_fast(stream_, a);
    };
    return x.format() == s ? fast(S{}) : fast(float{});
  });
  if (done) return;
  // The simple path: the two ops with the rounding between them.
  bias_dropout_add_forward(residual_out, residual, x, bias, d, N, T, C);
  round_stored(*this, residual_out, N * C, p);
  layernorm_forward(ln_out, mean, rstd, residual_out, w, b, N, C, eps);
  round_stored(*this, ln_out, N * C, p);
}

void CudaOps::layernorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                         ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w, const float* mean,
                                         const float* rstd, const Dropout& d, int64_t N, int64_t T, int64_t C,
                                         Precision p) {
  if (N <= 0 || C <= 0) return;
  require_format(dresid.format(), {dx, dout, inp, w}, "layernorm_dropout_backward");
  const bool done = with_storage(dresid.format(), [&](auto tag) {
    using S = decltype(tag);
    LayerNormBackwardArgs<S> a{};
    a.dinp = typed<S>(dresid);
    a.dx = typed<S>(dx);
    a.dout = typed<S>(dout);
    a.inp = typed<S>(inp);
    a.w = typed<S>(w);
    a.mean = mean;
    a.rstd = rstd;
    a.d = dropout_params(d);
    a.N = N;
    a.T = T;
    a.C = C;
    a.p = p;
    return layernorm_backward_fast<S, 3>(*this, a, ColumnOutputs<3>{{dw, db, dbias}});
  });
  if (done) return;
  layernorm_backward(dresid, dw, db, dout, inp, w, mean, rstd, N, C);
  round_stored(*this, dresid, N * C, p);
  bias_dropout_add_backward(dx, dbias, dresid, d, N, T, C);
  round_stored(*this, dx, N * C, p);
}

}  // namespace occ::kernels::cuda

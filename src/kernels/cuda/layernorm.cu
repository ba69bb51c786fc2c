// LayerNorm and RMSNorm, and the fused pairs around them (bias-dropout-add +
// norm forward; norm + dropout gradient backward), for fp32, bf16 and fp16
// storage. Formulas and accumulation conventions are kernels/layernorm.cpp's:
// two-pass mean/variance, dinp/dw/db accumulate (+=); RMSNorm is the same
// kernels with the mean and the bias left out (layernorm_rows.cuh's `rms`).
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

// b null: RMSNorm (mean null, m = 0, no bias).
template <class S>
__global__ void layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp, const S* w, const S* b,
                                         int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warps leave together: no block-level barrier follows
  const S* x = inp + n * C;
  S* y = out + n * C;
  float sum = 0.0f;
  if (b)
    for (int64_t c = lane; c < C; c += 32) sum += widen(x[c]);
  const float m = b ? warp_sum(sum) / float(C) : 0.0f;
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float dx = widen(x[c]) - m;
    var += dx * dx;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + eps);
  for (int64_t c = lane; c < C; c += 32)
    y[c] = b ? narrow<S>((widen(x[c]) - m) * s * widen(w[c]) + widen(b[c])) : narrow<S>(widen(x[c]) * s * widen(w[c]));
  if (lane == 0) {
    if (mean) mean[n] = m;
    rstd[n] = s;
  }
}

// mean null: RMSNorm (m = 0, no mean term).
template <class S>
__global__ void layernorm_backward_input_kernel(S* dinp, const S* dout, const S* inp, const S* w, const float* mean,
                                                const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const S* dy = dout + n * C;
  const S* x = inp + n * C;
  S* dx = dinp + n * C;
  const float m = mean ? mean[n] : 0.0f, s = rstd[n];
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
    const float gw = mean ? widen(dy[c]) * widen(w[c]) - sum_g : widen(dy[c]) * widen(w[c]);
    dx[c] = narrow<S>(widen(dx[c]) + s * (gw - xhat * sum_gx));
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
    v[0] = dy * (widen(inp[n * C + c]) - (mean ? mean[n] : 0.0f)) * rstd[n];  // (RMSNorm: no mean)
    v[1] = dy;
  }
};

// ---- the fast path ------------------------------------------------------------------------
// Layouts, grids and shared memory: row_launch.h (kMaxForwardPacks, kMaxBackwardPacks).

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
  RowLaunch l;
  if (!layernorm_forward_launch(storage_of<S>(), a.C, kLayerNormForwardStaticBytes, l)) return false;
  const RowLayout& L = l.layout;
  const int64_t blocks = std::min<int64_t>((a.N + L.groups - 1) / L.groups, int64_t(1) << 20);
  with_packs<kMaxForwardPacks>(L.packs, [&](auto packs) {
    constexpr auto kernel = &layernorm_forward_rows_kernel<S, X, decltype(packs)::value>;
    check_row_launch(l, kernel_shared_memory<kernel>(kLayerNormForwardStaticBytes, "layernorm_forward_rows_kernel"),
                     "layernorm_forward_rows_kernel");
    kernel<<<unsigned(blocks), unsigned(L.threads()), 0, stream>>>(a, L.warps);
  });
  OCC_CUDA_CHECK_LAUNCH();
  return true;
}

// The backward fast path with K column sums (dw, db[, dbias]); false as above.
template <class S, int K>
bool layernorm_backward_fast(CudaOps& ops, LayerNormBackwardArgs<S> a, ColumnOutputs<K> outs) {
  if (!fast_rows<S>(a.C, {a.dinp, a.dx, a.dout, a.inp, a.w})) return false;
  bool params = false;
  for (float* o : outs.out) params = params || o;
  RowLaunch l;
  if (!layernorm_backward_launch(storage_of<S>(), a.N, a.C, K, params, kLayerNormBackwardStaticBytes, l))
    return false;
  const RowLayout& L = l.layout;
  a.rows_per_group = l.grid.rows_per_group;
  a.partial =
      params ? static_cast<float*>(ops.scratch(sizeof(float) * size_t(K * l.grid.blocks * a.C))) : nullptr;
  with_packs<kMaxBackwardPacks>(L.packs, [&](auto packs) {
    constexpr auto kernel = &layernorm_backward_rows_kernel<S, decltype(packs)::value, K>;
    check_row_launch(l, kernel_shared_memory<kernel>(kLayerNormBackwardStaticBytes, "layernorm_backward_rows_kernel"),
                     "layernorm_backward_rows_kernel");
    kernel<<<unsigned(l.grid.blocks), unsigned(L.threads()), l.dynamic_bytes, ops.stream()>>>(a, L.warps);
  });
  OCC_CUDA_CHECK_LAUNCH();
  if (params) column_partials_finish<K>(ops.stream(), outs, a.partial, l.grid.blocks, a.C);
  return true;
}

// Rounds an fp32 tensor of a --bf16 / --fp16 step to p (16-bit storage was rounded when stored).
void round_stored(CudaOps& ops, TensorRef t, int64_t n, Precision p) {
  if (t.is_fp32()) ops.round_to_precision(t.f32(), n, p);
}

}  // namespace

namespace {

// The four entry points of each norm share these; `rms` selects RMSNorm (b, mean null).
void norm_forward(CudaOps& ops, TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                  ConstTensorRef b, int64_t N, int64_t C, float eps, bool rms, const char* op) {
  if (N <= 0 || C <= 0) return;
  require_format(inp.format(), {out, w, b}, op);
  with_storage(inp.format(), [&](auto tag) {
    using S = decltype(tag);
    LayerNormForwardArgs<S, S> a{};
    a.out = typed<S>(out);
    a.mean = rms ? nullptr : mean;
    a.rstd = rstd;
    a.inp = typed<S>(inp);
    a.w = typed<S>(w);
    a.b = rms ? nullptr : typed<S>(b);
    a.N = N;
    a.T = 1;
    a.C = C;
    a.eps = eps;
    a.p = Precision::Fp32;  // 16-bit storage rounds; fp32 is rounded by the caller (ops.h)
    a.rms = rms;
    if (layernorm_forward_fast(ops.stream(), a)) return;
    const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    layernorm_forward_kernel<<<unsigned(blocks), kBlock, 0, ops.stream()>>>(a.out, a.mean, rstd, a.inp, a.w, a.b, N,
                                                                            C, eps);
    OCC_CUDA_CHECK_LAUNCH();
  });
}

void norm_backward(CudaOps& ops, TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                   ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C, bool rms,
                   const char* op) {
  if (N <= 0 || C <= 0 || (!dinp && !dw && !db)) return;
  require_format(dout.format(), {dinp, inp, w}, op);
  if (rms) mean = nullptr, db = nullptr;
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
    a.rms = rms;
    if (layernorm_backward_fast<S, 2>(ops, a, ColumnOutputs<2>{{dw, db}})) return;
    if (dinp) {
      const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
      layernorm_backward_input_kernel<<<unsigned(blocks), kBlock, 0, ops.stream()>>>(
          typed<S>(dinp), typed<S>(dout), typed<S>(inp), typed<S>(w), mean, rstd, N, C);
      OCC_CUDA_CHECK_LAUNCH();
    }
    if (dw || db)
      column_sums_add<2>(ops, ColumnOutputs<2>{{dw, db}},
                         LayerNormParamGrads<S>{typed<S>(dout), typed<S>(inp), mean, rstd, C}, N, C);
  });
}

// The fast path of bias-dropout-add + norm; false when it does not apply.
bool add_norm_forward_fast(CudaOps& ops, TensorRef residual_out, TensorRef norm_out, float* mean, float* rstd,
                           ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias, const Dropout& d,
                           ConstTensorRef w, ConstTensorRef b, int64_t N, int64_t T, int64_t C, float eps,
                           Precision p, bool rms, const char* op) {
  const Precision s = residual_out.format();
  require_format(s, {norm_out, residual, bias, w, b}, op);
  if (x.format() != s) require_format(Precision::Fp32, {x}, op);
  return with_storage(s, [&](auto tag) {
    using S = decltype(tag);
    const auto fast = [&](auto xtag) {
      using X = decltype(xtag);
      LayerNormForwardArgs<S, X> a{};
      a.residual_out = typed<S>(residual_out);
      a.out = typed<S>(norm_out);
      a.mean = rms ? nullptr : mean;
      a.rstd = rstd;
      a.inp = typed<S>(residual);
      a.x = typed<X>(x);
      a.bias = typed<S>(bias);
      a.w = typed<S>(w);
      a.b = rms ? nullptr : typed<S>(b);
      a.d = dropout_params(d);
      a.N = N;
      a.T = T;
      a.C = C;
      a.eps = eps;
      a.p = p;
      a.rms = rms;
      return layernorm_forward_fast(ops.stream(), a);
    };
    return x.format() == s ? fast(S{}) : fast(float{});
  });
}

// The fast path of norm + dropout gradient; false when it does not apply.
bool norm_dropout_backward_fast(CudaOps& ops, TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w, const float* mean,
                                const float* rstd, const Dropout& d, int64_t N, int64_t T, int64_t C, Precision p,
                                bool rms, const char* op) {
  require_format(dresid.format(), {dx, dout, inp, w}, op);
  return with_storage(dresid.format(), [&](auto tag) {
    using S = decltype(tag);
    LayerNormBackwardArgs<S> a{};
    a.dinp = typed<S>(dresid);
    a.dx = typed<S>(dx);
    a.dout = typed<S>(dout);
    a.inp = typed<S>(inp);
    a.w = typed<S>(w);
    a.mean = rms ? nullptr : mean;
    a.rstd = rstd;
    a.d = dropout_params(d);
    a.N = N;
    a.T = T;
    a.C = C;
    a.p = p;
    a.rms = rms;
    return layernorm_backward_fast<S, 3>(ops, a, ColumnOutputs<3>{{dw, rms ? nullptr : db, dbias}});
  });
}

}  // namespace

void CudaOps::layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                                ConstTensorRef b, int64_t N, int64_t C, float eps) {
  norm_forward(*this, out, mean, rstd, inp, w, b, N, C, eps, false, "layernorm_forward");
}

void CudaOps::layernorm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                                 ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  norm_backward(*this, dinp, dw, db, dout, inp, w, mean, rstd, N, C, false, "layernorm_backward");
}

void CudaOps::rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef inp, ConstTensorRef w, int64_t N, int64_t C,
                              float eps) {
  norm_forward(*this, out, nullptr, rstd, inp, w, nullptr, N, C, eps, true, "rmsnorm_forward");
}

void CudaOps::rmsnorm_backward(TensorRef dinp, float* dw, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                               const float* rstd, int64_t N, int64_t C) {
  norm_backward(*this, dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N, C, true, "rmsnorm_backward");
}

void CudaOps::bias_dropout_add_layernorm_forward(TensorRef residual_out, TensorRef ln_out, float* mean, float* rstd,
                                                 ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                                 const Dropout& d, ConstTensorRef w, ConstTensorRef b, int64_t N,
                                                 int64_t T, int64_t C, float eps, Precision p) {
  if (N <= 0 || C <= 0) return;
  if (add_norm_forward_fast(*this, residual_out, ln_out, mean, rstd, residual, x, bias, d, w, b, N, T, C, eps, p,
                            false, "bias_dropout_add_layernorm_forward"))
    return;
  // The simple path: the two ops with the rounding between them.
  bias_dropout_add_forward(residual_out, residual, x, bias, d, N, T, C);
  round_stored(*this, residual_out, N * C, p);
  layernorm_forward(ln_out, mean, rstd, residual_out, w, b, N, C, eps);
  round_stored(*this, ln_out, N * C, p);
}

void CudaOps::bias_dropout_add_rmsnorm_forward(TensorRef residual_out, TensorRef norm_out, float* rstd,
                                               ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                               const Dropout& d, ConstTensorRef w, int64_t N, int64_t T, int64_t C,
                                               float eps, Precision p) {
  if (N <= 0 || C <= 0) return;
  if (add_norm_forward_fast(*this, residual_out, norm_out, nullptr, rstd, residual, x, bias, d, w, nullptr, N, T, C,
                            eps, p, true, "bias_dropout_add_rmsnorm_forward"))
    return;
  bias_dropout_add_forward(residual_out, residual, x, bias, d, N, T, C);
  round_stored(*this, residual_out, N * C, p);
  rmsnorm_forward(norm_out, rstd, residual_out, w, N, C, eps);
  round_stored(*this, norm_out, N * C, p);
}

void CudaOps::layernorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                         ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w, const float* mean,
                                         const float* rstd, const Dropout& d, int64_t N, int64_t T, int64_t C,
                                         Precision p) {
  if (N <= 0 || C <= 0) return;
  if (norm_dropout_backward_fast(*this, dresid, dx, dbias, dw, db, dout, inp, w, mean, rstd, d, N, T, C, p, false,
                                 "layernorm_dropout_backward"))
    return;
  layernorm_backward(dresid, dw, db, dout, inp, w, mean, rstd, N, C);
  round_stored(*this, dresid, N * C, p);
  bias_dropout_add_backward(dx, dbias, dresid, d, N, T, C);
  round_stored(*this, dx, N * C, p);
}

void CudaOps::rmsnorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, ConstTensorRef dout,
                                       ConstTensorRef inp, ConstTensorRef w, const float* rstd, const Dropout& d,
                                       int64_t N, int64_t T, int64_t C, Precision p) {
  if (N <= 0 || C <= 0) return;
  if (norm_dropout_backward_fast(*this, dresid, dx, dbias, dw, nullptr, dout, inp, w, nullptr, rstd, d, N, T, C, p,
                                 true, "rmsnorm_dropout_backward"))
    return;
  rmsnorm_backward(dresid, dw, dout, inp, w, rstd, N, C);
  round_stored(*this, dresid, N * C, p);
  bias_dropout_add_backward(dx, dbias, dresid, d, N, T, C);
  round_stored(*this, dx, N * C, p);
}

}  // namespace occ::kernels::cuda

// Causal self-attention, batched-GEMM version (the twin of the fused kernels in
// flash_attention.cu), and the dispatch between the tensor-core kernels of a
// 16-bit step (tc_attention.h), the fp32 fused kernels and these.
//
// Same algorithm and saved layout as the CPU backend (kernels/attention.cpp,
// cpu_ops.cpp): saved = probs [B, H, T, T] (softmax, zero above the diagonal),
// then, with dropout, the dropped probabilities [B, H, T, T]. The four
// products per (sample, head) go through cuBLAS strided-batched GEMMs; the
// causal softmax and its backward are one warp per row.
//
// qkv is [B*T, (H + 2G)*D] with features per query group [q of its heads | k |
// v][D] (kernels.h), so (sample, head) matrices are not evenly spaced along one
// index: the calls loop over samples and batch over heads (or the reverse when
// there are more samples than heads). With grouped-query attention (G < H)
// they loop over heads and batch over samples, and a k/v head's gradients add
// up over its group's query heads, in head order.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tc_attention.h"

namespace occ::kernels::cuda {

namespace {

constexpr int kWarpsPerBlock = kBlock / 32;

// Where the (sample, head) matrices of one outer step lie: element offsets
// between outer steps and between batch entries, and the sample/head each index maps to.
struct Batching {
  int64_t outer, inner;           // loop count, GEMM batch count
  int64_t qkv_outer, qkv_inner;   // in qkv / dqkv (samples outer: per sample; heads outer: unused)
  int64_t out_outer, out_inner;   // in out / dout [B*T, H*D]
  int64_t p_outer, p_inner;       // in probs [B, H, T, T]
  int64_t b_outer, b_inner, h_outer, h_inner;
  bool heads_outer;               // the loop runs over heads (q, k, v offsets from the shape)
  // q, k and v of outer step o's first batch entry.
  int64_t q(const AttentionShape& s, int64_t o) const { return heads_outer ? s.q_offset(o) : o * qkv_outer; }
  int64_t k(const AttentionShape& s, int64_t o) const {
    return heads_outer ? s.k_offset(s.group_of(o)) : o * qkv_outer + s.D;
  }
  int64_t v(const AttentionShape& s, int64_t o) const { return k(s, o) + s.D; }
  // The k/v gradients of outer step o overwrite (the group's first head) or add up (the others).
  float kv_beta(const AttentionShape& s, int64_t o) const { return heads_outer && o % s.group_size() ? 1.0f : 0.0f; }
};

Batching batching(const AttentionShape& s) {
  const int64_t T = s.T, H = s.H, D = s.D, ld = s.qkv_width(), TT = T * T;
  if (s.B <= s.H && s.group_size() == 1) return {s.B, H, T * ld, 3 * D, T * H * D, D, H * TT, TT, 1, 0, 0, 1, false};
  return {H, s.B, 0, T * ld, D, T * H * D, TT, H * TT, 0, 1, 1, 0, true};
}

// The rows handled by one launch: row r of the launch is query tq = r % T of
// batch entry i = r / T, which is sample b_base + i * b_step, local head
// h_base + i * h_step.
struct RowMap {
  int64_t T, H, rows;
  int64_t b_base, b_step, h_base, h_step;
  int64_t head0;  // global index of local head 0 (dropout coordinates)
  __device__ __forceinline__ void locate(int64_t r, int64_t& b, int64_t& h, int64_t& tq) const {
    const int64_t i = r / T;
    tq = r % T;
    b = b_base + i * b_step;
    h = h_base + i * h_step;
  }
};

// probs rows hold scale * q.k (from the GEMM); turn them into the causal softmax
// (zero above the diagonal) and, with dropout, write the dropped copy.
__global__ void causal_softmax_kernel(float* probs, float* dropped, RowMap map, DropoutParams d) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (r >= map.rows) return;
  const int lane = threadIdx.x & 31;
  int64_t b, h, tq;
  map.locate(r, b, h, tq);
  const int64_t T = map.T, off = ((b * map.H + h) * T + tq) * T;
  float* P = probs + off;
  float mx = -INFINITY;
  for (int64_t tk = lane; tk <= tq; tk += 32) mx = fmaxf(mx, P[tk]);
  mx = warp_reduce(mx, MaxOp{});
  float sum = 0.0f;
  for (int64_t tk = lane; tk <= tq; tk += 32) {
    const float e = expf(P[tk] - mx);
    P[tk] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  __syncwarp();  // every lane's exp is stored before lanes rescale other lanes' elements
  if (d.active) {
    float* Pd = dropped + off;
    const uint64_t idx0 = (uint64_t(map.head0 + h) * uint64_t(T) + uint64_t(tq)) * uint64_t(T);
    warp_for_dropout_row(d, uint64_t(d.sample_base + b), idx0, tq + 1, [&](int64_t tk, float m) {
      const float p = P[tk] * inv;
      P[tk] = p;
      Pd[tk] = p * m;
    });
    for (int64_t tk = tq + 1 + lane; tk < T; tk += 32) Pd[tk] = 0.0f;
  } else {
    for (int64_t tk = lane; tk <= tq; tk += 32) P[tk] *= inv;
  }
  for (int64_t tk = tq + 1 + lane; tk < T; tk += 32) P[tk] = 0.0f;
}

// dP rows (dY V^T of this launch's batch entries, contiguous [inner, T, T]) become
// dS = P * (dP' - sum(dP' * P)) * scale, dP' = dP through the dropout mask.
__global__ void causal_softmax_backward_kernel(float* dP, const float* probs, RowMap map, DropoutParams d,
                                               float scale) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (r >= map.rows) return;
  const int lane = threadIdx.x & 31;
  int64_t b, h, tq;
  map.locate(r, b, h, tq);
  const int64_t T = map.T;
  const float* P = probs + ((b * map.H + h) * T + tq) * T;
  float* g = dP + r * T;
  float dot = 0.0f;
  if (d.active) {
    const uint64_t idx0 = (uint64_t(map.head0 + h) * uint64_t(T) + uint64_t(tq)) * uint64_t(T);
    warp_for_dropout_row(d, uint64_t(d.sample_base + b), idx0, tq + 1, [&](int64_t tk, float m) {
      const float gk = g[tk] * m;
      g[tk] = gk;
      dot += gk * P[tk];
    });
  } else {
    for (int64_t tk = lane; tk <= tq; tk += 32) dot += g[tk] * P[tk];
  }
  dot = warp_sum(dot);
  __syncwarp();  // masked values stored by other lanes are visible below
  for (int64_t tk = lane; tk <= tq; tk += 32) g[tk] = P[tk] * (g[tk] - dot) * scale;
  for (int64_t tk = tq + 1 + lane; tk < T; tk += 32) g[tk] = 0.0f;
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

bool CudaOps::use_flash_attention(const AttentionShape& s, Precision storage) const {
  return storage != Precision::Fp32 && (attention_ == CudaAttention::Auto || attention_ == CudaAttention::Flash) &&
         tc_attention_supported(s);
}

bool CudaOps::use_fused_attention(const AttentionShape& s) const {
  return attention_ != CudaAttention::BatchedGemm && (s.D == 32 || s.D == 64 || s.D == 128);
}

int64_t CudaOps::attention_saved_floats(const AttentionShape& s, const Dropout& d, Precision storage) const {
  // Flash: log-sum-exp per row [B, H, T] (backward reads the output itself).
  if (use_flash_attention(s, storage)) return tc_attention_stats_floats(s);
  // Fused: log-sum-exp per row [B, H, T], then the output [B*T, H*D] (backward needs rowsum(dout * out)).
  if (use_fused_attention(s)) return s.B * s.H * s.T + s.B * s.T * s.H * s.D;
  return s.B * s.H * s.T * s.T * (d.active() ? 2 : 1);
}

std::string CudaOps::gemm_description(Precision p) const {
  return p == Precision::Fp32 ? "cuBLAS, fp32 products and sums (no TF32)"
                              : std::string("cuBLAS / cuBLASLt, ") + precision_name(p) +
                                    " operands on tensor cores, fp32 accumulation";
}

std::string CudaOps::attention_description(Precision p) const {
  const bool fused = attention_ != CudaAttention::BatchedGemm;
  const char* fp32 = fused ? "fused flash-style kernels, fp32 on CUDA cores (head dims 32, 64, 128; others: "
                             "batched fp32 GEMMs)"
                           : "batched fp32 GEMMs, probabilities kept for backward";
  if (p == Precision::Fp32) return fp32;
  if (attention_ == CudaAttention::Auto || attention_ == CudaAttention::Flash)
    return std::string("tensor-core flash kernels in ") + precision_name(p) +
           " with fp32 softmax statistics and in-kernel Philox dropout (head dims 64, 128; others: " + fp32 +
           ", on fp32 copies)";
  return std::string(fp32) + " (16-bit tensors widened to fp32 around it)";
}

void CudaOps::attention_forward(TensorRef out, float* saved, ConstTensorRef qkv, const AttentionShape& s,
                                const Dropout& d) {
  if (s.B <= 0 || s.T <= 0 || s.H <= 0 || s.D <= 0) return;
  if (use_flash_attention(s, qkv.format())) {
    require_format(qkv.format(), {out}, "attention_forward");
    tc_attention_forward(out.data(), saved, qkv.data(), s, d, qkv.format(), stream_);
    return;
  }
  const int64_t N = s.B * s.T, HD = s.H * s.D, W = s.qkv_width();
  float* out32 = out.is_fp32() ? out.f32() : nullptr;
  const float* qkv32 = qkv.is_fp32() ? qkv.f32() : nullptr;
  if (!qkv.is_fp32()) {
    // The fp32 kernels on widened copies; the output is rounded once when narrowed.
    float* wide = static_cast<float*>(operand_buffer(sizeof(float) * size_t(N * (W + HD))));
    copy(TensorRef(wide, Precision::Fp32), qkv, N * W);
    qkv32 = wide;
    out32 = wide + N * W;
  }
  if (use_fused_attention(s))
    attention_forward_fused(out32, saved, qkv32, s, d);
  else
    attention_forward_gemm(out32, saved, qkv32, s, d);
  if (!out.is_fp32()) copy(out, ConstTensorRef(out32, Precision::Fp32), N * HD);
}

void CudaOps::attention_backward(TensorRef dqkv, ConstTensorRef dout, ConstTensorRef qkv, ConstTensorRef out,
                                 const float* saved, const AttentionShape& s, const Dropout& d) {
  if (s.B <= 0 || s.T <= 0 || s.H <= 0 || s.D <= 0) return;
  if (use_flash_attention(s, qkv.format())) {
    require_format(qkv.format(), {dqkv, dout, out}, "attention_backward");
    void* delta = scratch(tc_attention_backward_scratch_bytes(s));
    tc_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), saved, delta, s, d, qkv.format(),
                          stream_);
    return;
  }
  const int64_t N = s.B * s.T, HD = s.H * s.D, W = s.qkv_width();
  float* dqkv32 = dqkv.is_fp32() ? dqkv.f32() : nullptr;
  const float* qkv32 = qkv.is_fp32() ? qkv.f32() : nullptr;
  const float* dout32 = dout.is_fp32() ? dout.f32() : nullptr;
  if (!qkv.is_fp32()) {
    float* wide = static_cast<float*>(operand_buffer(sizeof(float) * size_t(N * (2 * W + HD))));
    copy(TensorRef(wide, Precision::Fp32), qkv, N * W);
    copy(TensorRef(wide + N * W, Precision::Fp32), dout, N * HD);
    qkv32 = wide;
    dout32 = wide + N * W;
    dqkv32 = wide + N * (W + HD);
  }
  if (use_fused_attention(s))
    attention_backward_fused(dqkv32, dout32, qkv32, saved, s, d);
  else
    attention_backward_gemm(dqkv32, dout32, qkv32, saved, s, d);
  if (!dqkv.is_fp32()) copy(dqkv, ConstTensorRef(dqkv32, Precision::Fp32), N * W);
}

void CudaOps::attention_forward_gemm(float* out, float* saved, const float* qkv, const AttentionShape& s,
                                     const Dropout& d) {
  const int64_t T = s.T, D = s.D, ld = s.qkv_width(), HD = s.H * D;
  const float scale = 1.0f / std::sqrt(float(D));
  const Batching bt = batching(s);
  float* probs = saved;
  float* dropped = d.active() ? saved + s.B * s.H * T * T : nullptr;
  const DropoutParams dp = dropout_params(d);
  for (int64_t o = 0; o < bt.outer; ++o) {
    const float* q = qkv + bt.q(s, o);
    const float* k = qkv + bt.k(s, o);
    const float* v = qkv + bt.v(s, o);
    float* P = probs + o * bt.p_outer;
    // S = scale * Q K^T  ->  S^T = scale * K Q^T
    gemm(true, false, T, T, D, scale, k, ld, q, ld, 0.0f, P, T, bt.inner, bt.qkv_inner, bt.qkv_inner, bt.p_inner);
    const RowMap map{T, s.H, bt.inner * T, o * bt.b_outer, bt.b_inner, o * bt.h_outer, bt.h_inner, s.head0};
    causal_softmax_kernel<<<row_blocks(map.rows), kBlock, 0, stream_>>>(probs, dropped, map, dp);
    OCC_CUDA_CHECK_LAUNCH();
    // out = Pd V  ->  out^T = V^T Pd^T
    const float* Pd = d.active() ? dropped + o * bt.p_outer : P;
    gemm(false, false, D, T, T, 1.0f, v, ld, Pd, T, 0.0f, out + o * bt.out_outer, HD, bt.inner, bt.qkv_inner,
         bt.p_inner, bt.out_inner);
  }
}

void CudaOps::attention_backward_gemm(float* dqkv, const float* dout, const float* qkv, const float* saved,
                                      const AttentionShape& s, const Dropout& d) {
  const int64_t T = s.T, D = s.D, ld = s.qkv_width(), HD = s.H * D, TT = T * T;
  const float scale = 1.0f / std::sqrt(float(D));
  const Batching bt = batching(s);
  const float* probs = saved;
  const float* dropped = d.active() ? saved + s.B * s.H * TT : saved;
  const DropoutParams dp = dropout_params(d);
  // dP / dS of one outer step's batch entries.
  float* dP = static_cast<float*>(scratch(sizeof(float) * size_t(bt.inner * TT)));
  for (int64_t o = 0; o < bt.outer; ++o) {
    const float* q = qkv + bt.q(s, o);
    const float* k = qkv + bt.k(s, o);
    const float* v = qkv + bt.v(s, o);
    float* dq = dqkv + bt.q(s, o);
    float* dk = dqkv + bt.k(s, o);
    float* dv = dqkv + bt.v(s, o);
    const float beta = bt.kv_beta(s, o);  // GQA: the group's later heads add onto dK, dV
    const float* dy = dout + o * bt.out_outer;
    const float* Pd = dropped + o * bt.p_outer;
    // dPd = dY V^T  ->  dPd^T = V dY^T
    gemm(true, false, T, T, D, 1.0f, v, ld, dy, HD, 0.0f, dP, T, bt.inner, bt.qkv_inner, bt.out_inner, TT);
    // dV (+)= Pd^T dY  ->  dV^T = dY^T Pd
    gemm(false, true, D, T, T, 1.0f, dy, HD, Pd, T, beta, dv, ld, bt.inner, bt.out_inner, bt.p_inner, bt.qkv_inner);
    const RowMap map{T, s.H, bt.inner * T, o * bt.b_outer, bt.b_inner, o * bt.h_outer, bt.h_inner, s.head0};
    causal_softmax_backward_kernel<<<row_blocks(map.rows), kBlock, 0, stream_>>>(dP, probs, map, dp, scale);
    OCC_CUDA_CHECK_LAUNCH();
    // dQ = dS K  ->  dQ^T = K^T dS^T
    gemm(false, false, D, T, T, 1.0f, k, ld, dP, T, 0.0f, dq, ld, bt.inner, bt.qkv_inner, TT, bt.qkv_inner);
    // dK (+)= dS^T Q  ->  dK^T = Q^T dS
    gemm(false, true, D, T, T, 1.0f, q, ld, dP, T, beta, dk, ld, bt.inner, bt.qkv_inner, TT, bt.qkv_inner);
  }
}

}  // namespace occ::kernels::cuda

// Rotary position embeddings on the q and k heads of a fused QKV activation,
// in place, for fp32, bf16 and fp16 storage: kernels/attention.cpp's
// rope_forward / rope_backward (rotate-half pairs (i, i + r/2) of each head's
// first r = rotary_dim features, angles from the same fp32 table), one thread
// per pair. Each value is read and written once, rounded once to the storage.
#include "kernels/cuda/common.cuh"

namespace occ::kernels::cuda {

namespace {

template <class S>
__global__ void rope_kernel(S* qkv, const float* table, int64_t table_T, AttentionShape s, int64_t half,
                            float sign) {
  const int64_t r = s.group_size(), heads = s.kv_heads() * (r + 1);  // rotated heads per row: q's and k's
  const int64_t total = s.B * s.T * heads * half;
  for (int64_t q = global_thread(); q < total; q += grid_threads()) {
    const int64_t i = q % half, hh = (q / half) % heads, n = q / (half * heads);
    const int64_t g = hh / (r + 1), j = hh % (r + 1);  // group g's query head j (j = r: its k head)
    S* x = qkv + n * s.qkv_width() + s.q_offset(g * r) + j * s.D;
    const int64_t t = n % s.T;
    const float c = table[t * half + i], si = sign * table[table_T * half + t * half + i];
    const float x1 = widen(x[i]), x2 = widen(x[i + half]);
    x[i] = narrow<S>(x1 * c - x2 * si);
    x[i + half] = narrow<S>(x2 * c + x1 * si);
  }
}

void rope(cudaStream_t stream, TensorRef qkv, const float* table, int64_t table_T, const AttentionShape& s,
          int64_t rotary_dim, float sign) {
  const int64_t half = rotary_dim / 2;
  const int64_t total = s.B * s.T * s.kv_heads() * (s.group_size() + 1) * half;
  if (total <= 0) return;
  if (s.T > table_T) throw_error("rope: " + std::to_string(s.T) + " positions, the table has " + std::to_string(table_T));
  with_storage(qkv.format(), [&](auto tag) {
    using S = decltype(tag);
    rope_kernel<S><<<grid_for(total), kBlock, 0, stream>>>(typed<S>(qkv), table, table_T, s, half, sign);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaOps::rope_forward(TensorRef qkv, const float* table, int64_t table_T, const AttentionShape& s,
                           int64_t rotary_dim) {
  rope(stream_, qkv, table, table_T, s, rotary_dim, 1.0f);
}

void CudaOps::rope_backward(TensorRef dqkv, const float* table, int64_t table_T, const AttentionShape& s,
                            int64_t rotary_dim) {
  rope(stream_, dqkv, table, table_T, s, rotary_dim, -1.0f);
}

}  // namespace occ::kernels::cuda

#include <cmath>

#include "kernels/fast_math.h"
#include "kernels/kernels.h"

namespace occ::kernels {

void row_max(float* out, const float* logits, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
    out[n] = mx;
  }
}

void row_sum_exp(float* out, const float* logits, const float* max, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    const float mx = max[n];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) sum += fast_exp(row[v] - mx);
    out[n] = sum;
  }
}

void target_logit(float* out, const float* logits, const int32_t* labels, int64_t v0, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    int64_t v = int64_t(labels[n]) - v0;
    out[n] = (v >= 0 && v < V) ? logits[n * V + v] : 0.0f;
  }
}

void cross_entropy_backward_inplace(float* logits, const float* max, const float* sum_exp, const int32_t* labels,
                                    int64_t v0, float scale, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = logits + n * V;
    const float mx = max[n], k = scale / sum_exp[n];
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) row[v] = fast_exp(row[v] - mx) * k;
    int64_t t = int64_t(labels[n]) - v0;
    if (t >= 0 && t < V) row[t] -= scale;
  }
}

double cross_entropy_fused(float* logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V) {
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int64_t n = 0; n < N; ++n) {
    float* row = logits + n * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) sum += fast_exp(row[v] - mx);
    const int32_t t = labels[n];
    total += double(std::log(sum) + mx - row[t]);
    if (grad_scale != 0.0f) {
      const float k = grad_scale / sum;
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) row[v] = fast_exp(row[v] - mx) * k;
      row[t] -= grad_scale;
    }
  }
  return total;
}

}  // namespace occ::kernels

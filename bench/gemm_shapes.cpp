// oneDNN's matmul alone at GPT-2 small's linear-layer shapes (B4 T256: 1024 tokens), fp32 and
// bf16 (dense bf16 operands, fp32 accumulation), in the three layouts a linear layer uses:
// forward (NT), input gradient (NN), weight gradient (TN, accumulating). It measures what the
// engine's products could reach with no conversion and nothing around them, the ceiling the
// op profile (`optimus-cc bench --op-profile 1`) is read against (docs/results/cpu-step-gpt2.md).
// Not part of the build (it links libdnnl, which the engine only opens at run time):
//   g++ -O2 -fopenmp bench/gemm_shapes.cpp -ldnnl -o /tmp/gemm_shapes && OMP_NUM_THREADS=2 /tmp/gemm_shapes
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using dnnl::memory;

// GFLOP/s of the best of `reps` runs of C[M,N] (+)= op(A) op(B); A stored [M,K] or [K,M] (ta),
// B stored [K,N] or [N,K] (tb).
double best_gflops(long M, long N, long K, bool ta, bool tb, bool bf16, bool accumulate, int reps,
                   std::string* impl) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const memory::data_type t = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a({M, K}, t, ta ? memory::dims{1, M} : memory::dims{K, 1});
  const memory::desc b({K, N}, t, tb ? memory::dims{1, K} : memory::dims{N, 1});
  const memory::desc c({M, N}, memory::data_type::f32, memory::dims{N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, eng);
  *impl = pd.impl_info_str();
  // 0x3f00 is bf16 0.5 and the top half of fp32 0.5f: the same bytes read either way are finite.
  std::vector<float> A(size_t(M * K), 0.5f), B(size_t(K * N), 0.25f), C(size_t(M * N), 0.0f);
  std::vector<unsigned char> pad(pd.scratchpad_desc().get_size());
  memory ma(a, eng, A.data()), mb(b, eng, B.data()), mc(c, eng, C.data()), mp(pd.scratchpad_desc(), eng, pad.data());
  const dnnl::matmul product(pd);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    product.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, mp}});
    s.wait();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(M) * double(N) * double(K) / best * 1e-9;
}

struct Shape {
  const char* what;
  long M, N, K;
  bool ta, tb, accumulate;
};

}  // namespace

int main() {
  const Shape shapes[] = {
      {"QKV forward (NT)", 1024, 2304, 768, false, true, false},
      {"MLP up forward (NT)", 1024, 3072, 768, false, true, false},
      {"MLP down forward (NT)", 1024, 768, 3072, false, true, false},
      {"MLP up input gradient (NN)", 1024, 768, 3072, false, false, false},
      {"MLP up weight gradient (TN, +=)", 3072, 768, 1024, true, false, true},
      {"LM head forward (NT)", 1024, 50304, 768, false, true, false},
      {"LM head input gradient (NN)", 1024, 768, 50304, false, false, false},
      {"LM head weight gradient (TN, +=)", 50304, 768, 1024, true, false, true},
  };
  std::printf("| product | M x N x K | fp32 GFLOP/s | bf16 GFLOP/s | bf16 / fp32 | oneDNN's kernels |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Shape& p : shapes) {
    std::string impl32, impl16;
    const double f32 = best_gflops(p.M, p.N, p.K, p.ta, p.tb, false, p.accumulate, 8, &impl32);
    const double b16 = best_gflops(p.M, p.N, p.K, p.ta, p.tb, true, p.accumulate, 8, &impl16);
    std::printf("| %s | %ld x %ld x %ld | %.1f | %.1f | %.2fx | %s, %s |\n", p.what, p.M, p.N, p.K, f32, b16,
                b16 / f32, impl32.c_str(), impl16.c_str());
  }
  return 0;
}

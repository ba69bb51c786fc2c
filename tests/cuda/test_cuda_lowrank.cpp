// PowerSGD's linear algebra on the GPU (kernels/cuda/lowrank.cu) against the
// CPU's (kernels/lowrank.cpp): matmul in every transposition, the Gram-Schmidt
// orthonormalisation against LAPACK's QR (the same span, so the same P P^T, and
// k orthonormal columns also with nearly and exactly dependent or zero columns), axpy.
#include "cuda_twin.h"

namespace occ::kernels {
namespace {

TEST_F(CudaOpsTest, MatmulEveryTransposition) {
  const int64_t M = 37, N = 19, K = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      FTwin a(random_values(M * K, 200)), b(random_values(K * N, 201)), c(filled(M * N, 7.0f));
      cpu().matmul(c.c(), a.c(), b.c(), M, N, K, ta, tb);
      gpu().matmul(c.g(), a.g(), b.g(), M, N, K, ta, tb);
      expect_close(c, 1e-5, "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
}

// p[n, k] -> p p^T m for a random m[n, c]: what PowerSGD's reconstruction sees of P.
std::vector<float> project(Ops& ops, const float* p, const float* m, int64_t n, int64_t k, int64_t c, Device d) {
  DeviceBuffer<float> t(d, size_t(k * c)), out(d, size_t(n * c));
  ops.matmul(t.data(), p, m, k, c, n, true, false);   // p^T m
  ops.matmul(out.data(), p, t.data(), n, c, k, false, false);  // p (p^T m)
  return out.to_host();
}

void expect_orthonormal(const std::vector<float>& p, int64_t n, int64_t k, const std::string& what) {
  double worst = 0.0;
  for (int64_t a = 0; a < k; ++a)
    for (int64_t b = 0; b < k; ++b) {
      double dot = 0.0;
      for (int64_t i = 0; i < n; ++i) dot += double(p[size_t(i * k + a)]) * double(p[size_t(i * k + b)]);
      worst = std::max(worst, std::fabs(dot - (a == b ? 1.0 : 0.0)));
    }
  EXPECT_LE(worst, 1e-5) << what << ": columns not orthonormal";
}

TEST_F(CudaOpsTest, OrthonormalizeColumnsSpansWhatQrSpans) {
  const int64_t c = 9;
  for (int64_t n : {int64_t(16), int64_t(1000), int64_t(8192)})
    for (int64_t k : {int64_t(1), int64_t(4), int64_t(16)}) {
      std::vector<float> a0 = random_values(size_t(n * k), 210 + n + k);
      if (k >= 4) {  // column 2 nearly a copy of column 0; column 3 exactly column 1; k = 16: column 5 zero
        for (int64_t i = 0; i < n; ++i) {
          a0[size_t(i * k + 2)] = a0[size_t(i * k)] + 1e-2f * a0[size_t(i * k + 2)];
          a0[size_t(i * k + 3)] = a0[size_t(i * k + 1)];
          if (k == 16) a0[size_t(i * k + 5)] = 0.0f;
        }
      }
      FTwin a(a0), m(random_values(size_t(n * c), 220));
      cpu().orthonormalize_columns(a.c(), n, k);
      gpu().orthonormalize_columns(a.g(), n, k);
      const std::string tag = "n=" + std::to_string(n) + " k=" + std::to_string(k);
      expect_orthonormal(a.gpu(), n, k, tag);  // k columns also where the input had fewer independent ones
      if (k >= 4) {
        // The span of the input's independent columns is what both keep; how each
        // completes the basis for the dependent one is its own, so compare on the others.
        std::vector<float> cpu_sub, gpu_sub;
        const std::vector<float> g = a.gpu();
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < 3; ++j) {
            cpu_sub.push_back(a.cpu[size_t(i * k + j)]);
            gpu_sub.push_back(g[size_t(i * k + j)]);
          }
        FTwin cs(cpu_sub), gs(gpu_sub);
        expect_close(project(gpu(), gs.g(), m.g(), n, 3, c, Device::Cuda), project(cpu(), cs.c(), m.c(), n, 3, c, Device::Cpu),
                     1e-4, "P P^T m (first 3 columns) " + tag);
      } else {
        expect_close(project(gpu(), a.g(), m.g(), n, k, c, Device::Cuda), project(cpu(), a.c(), m.c(), n, k, c, Device::Cpu),
                     1e-4, "P P^T m " + tag);
      }
    }
}

TEST_F(CudaOpsTest, Axpy) {
  for (float alpha : {1.0f, -1.0f, 0.5f}) {
    FTwin y(random_values(100003, 230)), x(random_values(100003, 231));
    cpu().axpy(y.c(), alpha, x.c(), 100003);
    gpu().axpy(y.g(), alpha, x.g(), 100003);
    EXPECT_EQ(y.gpu(), y.cpu) << "axpy alpha=" << alpha;  // products by +-1 and 1/2 are exact
  }
}

}  // namespace
}  // namespace occ::kernels

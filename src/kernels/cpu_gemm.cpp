// The CPU's GEMM dispatch (cpu_gemm.h): OCC_CPU_GEMM, the CPU's bf16 support, and
// the OpenBLAS twin. oneDNN's side is onednn_gemm.cpp.
#include "kernels/cpu_gemm.h"

#include <cblas.h>
#include <cpuid.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace occ::kernels {

void gemm_openblas(const Gemm& g) {
  if (g.M <= 0 || g.N <= 0) return;
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, int(g.M),
              int(g.N), int(g.K), g.alpha, g.A, int(g.lda), g.B, int(g.ldb), g.beta, g.C, int(g.ldc));
}

bool cpu_has_avx512_bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    const bool bf16 = (a >> 5) & 1u;  // CPUID.(EAX=7,ECX=1):EAX[5] AVX512_BF16
    __builtin_cpu_init();
    return bf16 && __builtin_cpu_supports("avx512f");  // avx512f also checks the OS saves zmm state
  }();
  return has;
}

CpuGemmPath cpu_gemm_path() {
  static const CpuGemmPath path = [] {
    const char* env = std::getenv("OCC_CPU_GEMM");
    const std::string v = env ? env : "auto";
    if (v == "openblas") return CpuGemmPath::OpenBlas;
    if (v == "onednn") {
      std::string why;
      if (!onednn_available(&why))
        fail("OCC_CPU_GEMM=onednn: cannot load oneDNN ({}); install libdnnl2 or use OCC_CPU_GEMM=openblas", why);
      return CpuGemmPath::OneDnn;
    }
    if (v != "auto" && !v.empty())
      fail("OCC_CPU_GEMM={}: choose auto, openblas or onednn (the CPU's matrix-product library)", v);
    // auto: oneDNN where it loads (faster than OpenBLAS's Haswell sgemm at every shape measured here:
    // docs/benchmarks.md), quietly OpenBLAS where not.
    return onednn_available() ? CpuGemmPath::OneDnn : CpuGemmPath::OpenBlas;
  }();
  return path;
}

bool cpu_gemm_uses_bf16() { return cpu_gemm_path() == CpuGemmPath::OneDnn && cpu_has_avx512_bf16(); }

void gemm(const Gemm& g, Precision operands) {
  if (cpu_gemm_path() == CpuGemmPath::OpenBlas) return gemm_openblas(g);
  gemm_onednn(g, operands == Precision::Bf16 && cpu_has_avx512_bf16() ? Precision::Bf16 : Precision::Fp32);
}

void gemm_pair_sharing_a(const Gemm& g1, const Gemm& g2, Precision operands) {
  if (operands == Precision::Bf16 && cpu_gemm_uses_bf16()) return gemm_onednn_bf16_sharing_a(g1, g2);
  gemm(g1, operands);
  gemm(g2, operands);
}

std::string cpu_gemm_description(Precision step) {
  const char* env = std::getenv("OCC_CPU_GEMM");
  if (cpu_gemm_path() == CpuGemmPath::OpenBlas) {
    std::string why;
    if (env && std::string(env) == "openblas") return "openblas (OCC_CPU_GEMM=openblas)";
    onednn_available(&why);
    return "openblas (oneDNN not loaded: " + why + ")";
  }
  std::string s = "onednn " + onednn_version() + " (fp32 " + onednn_impl(256, 256, 256, false);
  if (step == Precision::Bf16)
    s += cpu_has_avx512_bf16() ? "; bf16 operands, fp32 accumulation: " + onednn_impl(256, 256, 256, true)
                               : "; bf16 operands in fp32: the CPU has no AVX512_BF16";
  return s + ")";
}

}  // namespace occ::kernels

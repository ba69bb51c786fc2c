// oneDNN's matmul for the CPU's GEMMs (cpu_gemm.h), loaded at first use with
// dlopen: the binary does not link libdnnl (40 MB), so a machine without it, or
// the GPU bundle that leaves it out, runs on OpenBLAS. The C API's declarations
// come from <oneapi/dnnl/dnnl.h> (libdnnl-dev), so the compiler checks every
// signature; a build without the header has the OpenBLAS path only.
//
// One primitive per problem (shape, transpositions, leading dimensions, alpha,
// beta, operand type), created on first use and kept. Primitives run with a
// user scratchpad (a buffer per thread), so attention's GEMMs may run them from
// several OpenMP threads at once; inside a parallel region oneDNN runs on the
// calling thread alone (as OpenBLAS does), outside it on the run's threads.
#include <omp.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu_gemm.h"
#include "core/shared_library.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#define OCC_HAVE_DNNL_HEADER 1
#endif

namespace occ::kernels {

#if defined(OCC_HAVE_DNNL_HEADER)
namespace {

struct Dnnl {
#define OCC_DNNL_FN(name) decltype(&::name) name = nullptr;
  OCC_DNNL_FN(dnnl_version)
  OCC_DNNL_FN(dnnl_engine_create)
  OCC_DNNL_FN(dnnl_stream_create)
  OCC_DNNL_FN(dnnl_stream_wait)
  OCC_DNNL_FN(dnnl_memory_desc_init_by_strides)
  OCC_DNNL_FN(dnnl_memory_desc_get_size)
  OCC_DNNL_FN(dnnl_matmul_desc_init)
  OCC_DNNL_FN(dnnl_primitive_attr_create)
  OCC_DNNL_FN(dnnl_primitive_attr_destroy)
  OCC_DNNL_FN(dnnl_primitive_attr_set_scratchpad_mode)
  OCC_DNNL_FN(dnnl_primitive_attr_set_output_scales)
  OCC_DNNL_FN(dnnl_primitive_attr_set_post_ops)
  OCC_DNNL_FN(dnnl_post_ops_create)
  OCC_DNNL_FN(dnnl_post_ops_destroy)
  OCC_DNNL_FN(dnnl_post_ops_append_sum)
  OCC_DNNL_FN(dnnl_primitive_desc_create)
  OCC_DNNL_FN(dnnl_primitive_desc_destroy)
  OCC_DNNL_FN(dnnl_primitive_desc_query)
  OCC_DNNL_FN(dnnl_primitive_desc_query_md)
  OCC_DNNL_FN(dnnl_primitive_create)
  OCC_DNNL_FN(dnnl_primitive_execute)
  OCC_DNNL_FN(dnnl_memory_create)
  OCC_DNNL_FN(dnnl_memory_destroy)
#undef OCC_DNNL_FN
  dnnl_engine_t engine = nullptr;
  std::string why_not;  // empty when loaded
};

const Dnnl& dnnl() {
  static Dnnl d;
  static std::once_flag once;
  std::call_once(once, [] {
    // OCC_ONEDNN_LIBRARY names the library to load instead (e.g. another build of oneDNN 2.x).
    const char* path = std::getenv("OCC_ONEDNN_LIBRARY");
    const LoadedLibrary lib = open_first_library(
        path && *path ? std::vector<std::string>{path} : std::vector<std::string>{"libdnnl.so.2", "libdnnl.so"});
    if (!lib.handle) {
      d.why_not = lib.why_not;
      return;
    }
    bool ok = true;
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib.handle, name));
      if (!fn) ok = false, d.why_not += std::string(d.why_not.empty() ? "" : ", ") + "no " + name;
    };
#define OCC_DNNL_LOAD(name) load(d.name, #name);
    OCC_DNNL_LOAD(dnnl_version)
    OCC_DNNL_LOAD(dnnl_engine_create)
    OCC_DNNL_LOAD(dnnl_stream_create)
    OCC_DNNL_LOAD(dnnl_stream_wait)
    OCC_DNNL_LOAD(dnnl_memory_desc_init_by_strides)
    OCC_DNNL_LOAD(dnnl_memory_desc_get_size)
    OCC_DNNL_LOAD(dnnl_matmul_desc_init)
    OCC_DNNL_LOAD(dnnl_primitive_attr_create)
    OCC_DNNL_LOAD(dnnl_primitive_attr_destroy)
    OCC_DNNL_LOAD(dnnl_primitive_attr_set_scratchpad_mode)
    OCC_DNNL_LOAD(dnnl_primitive_attr_set_output_scales)
    OCC_DNNL_LOAD(dnnl_primitive_attr_set_post_ops)
    OCC_DNNL_LOAD(dnnl_post_ops_create)
    OCC_DNNL_LOAD(dnnl_post_ops_destroy)
    OCC_DNNL_LOAD(dnnl_post_ops_append_sum)
    OCC_DNNL_LOAD(dnnl_primitive_desc_create)
    OCC_DNNL_LOAD(dnnl_primitive_desc_destroy)
    OCC_DNNL_LOAD(dnnl_primitive_desc_query)
    OCC_DNNL_LOAD(dnnl_primitive_desc_query_md)
    OCC_DNNL_LOAD(dnnl_primitive_create)
    OCC_DNNL_LOAD(dnnl_primitive_execute)
    OCC_DNNL_LOAD(dnnl_memory_create)
    OCC_DNNL_LOAD(dnnl_memory_destroy)
#undef OCC_DNNL_LOAD
    // The 2.x C API (matmul descriptors, output scales): 3.x changed it.
    if (ok && d.dnnl_version()->major != 2)
      ok = false, d.why_not = "oneDNN " + std::to_string(d.dnnl_version()->major) + ".x; the 2.x API is needed";
    if (ok && d.dnnl_engine_create(&d.engine, dnnl_cpu, 0) != dnnl_success)
      ok = false, d.why_not = "no CPU engine";
    if (!ok) d.engine = nullptr;
  });
  return d;
}

void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success) fail("internal: oneDNN {} failed (status {})", what, int(s));
}

struct Key {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  bool bf16;
  auto tie() const { return std::tie(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, bf16); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Matmul {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t a{}, b{}, c{}, scratch{};
  size_t scratch_bytes = 0;
  std::string impl;
};

dnnl_memory_desc_t plain(const Dnnl& d, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                         dnnl_data_type_t t) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {rows, cols}, strides = {row_stride, col_stride};
  check(d.dnnl_memory_desc_init_by_strides(&md, 2, dims, t, strides), "memory descriptor");
  return md;
}

Matmul create(const Dnnl& d, const Key& k) {
  const dnnl_data_type_t t = k.bf16 ? dnnl_bf16 : dnnl_f32;
  Matmul m;
  // op(A)[M, K]: A stored [M, K] (row stride lda) or [K, M] (column stride lda).
  m.a = k.ta ? plain(d, k.M, k.K, 1, k.lda, t) : plain(d, k.M, k.K, k.lda, 1, t);
  m.b = k.tb ? plain(d, k.K, k.N, 1, k.ldb, t) : plain(d, k.K, k.N, k.ldb, 1, t);
  m.c = plain(d, k.M, k.N, k.ldc, 1, dnnl_f32);
  dnnl_matmul_desc_t desc;
  check(d.dnnl_matmul_desc_init(&desc, &m.a, &m.b, nullptr, &m.c), "matmul descriptor");
  dnnl_primitive_attr_t attr;
  check(d.dnnl_primitive_attr_create(&attr), "attributes");
  check(d.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
  if (k.alpha != 1.0f) check(d.dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k.alpha), "output scale");
  if (k.beta != 0.0f) {
    dnnl_post_ops_t po;
    check(d.dnnl_post_ops_create(&po), "post-ops");
    check(d.dnnl_post_ops_append_sum(po, k.beta), "sum post-op");
    check(d.dnnl_primitive_attr_set_post_ops(attr, po), "post-ops");
    d.dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd;
  const dnnl_status_t s = d.dnnl_primitive_desc_create(&pd, &desc, attr, d.engine, nullptr);
  d.dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success)
    fail("internal: oneDNN has no matmul for {}x{}x{} ({}; status {}); run with OCC_CPU_GEMM=openblas", k.M, k.N,
         k.K, k.bf16 ? "bf16" : "fp32", int(s));
  const char* impl = nullptr;
  if (d.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) m.impl = impl;
  m.scratch = *d.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  m.scratch_bytes = d.dnnl_memory_desc_get_size(&m.scratch);
  check(d.dnnl_primitive_create(&m.prim, pd), "primitive");
  d.dnnl_primitive_desc_destroy(pd);
  return m;
}

std::mutex cache_mutex;
std::map<Key, Matmul> cache;  // never freed: a run has a few dozen shapes

const Matmul& matmul_for(const Dnnl& d, const Key& k) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, create(d, k)).first;
  return it->second;
}

// Rows of src (row stride ld) packed densely in bf16, nearest-even (exact for bf16 values).
void pack_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && rows * cols >= (int64_t(1) << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* o = dst + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] = bf16_bits(s[c]);
  }
}

struct ThreadScratch {
  std::vector<uint16_t> a, b;  // dense bf16 copies of A and B
  std::vector<unsigned char> pad;
  dnnl_stream_t stream = nullptr;  // a stream per thread: streams are not shared between threads
};

}  // namespace

bool onednn_available(std::string* why_not) {
  const Dnnl& d = dnnl();
  if (why_not) *why_not = d.why_not;
  return d.engine != nullptr;
}

std::string onednn_version() {
  if (!onednn_available()) return "";
  const dnnl_version_t* v = dnnl().dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string onednn_impl(int64_t M, int64_t N, int64_t K, bool bf16) {
  if (!onednn_available()) return "";
  return matmul_for(dnnl(), Key{false, true, M, N, K, K, K, N, 1.0f, 0.0f, bf16}).impl;
}

namespace {

// The rows x columns of A or B as stored (before any transposition).
struct Stored {
  int64_t rows, cols;
};
Stored stored_a(const Gemm& g) { return g.trans_a ? Stored{g.K, g.M} : Stored{g.M, g.K}; }
Stored stored_b(const Gemm& g) { return g.trans_b ? Stored{g.N, g.K} : Stored{g.K, g.N}; }

ThreadScratch& thread_scratch(const Dnnl& d) {
  thread_local ThreadScratch ts;
  if (!ts.stream) check(d.dnnl_stream_create(&ts.stream, d.engine, dnnl_stream_default_flags), "stream");
  return ts;
}

const Dnnl& loaded_dnnl(bool bf16) {
  const Dnnl& d = dnnl();
  if (!d.engine) fail("OCC_CPU_GEMM=onednn: cannot load oneDNN ({}); install libdnnl2 or use OCC_CPU_GEMM=openblas",
                      d.why_not);
  if (bf16 && !cpu_has_avx512_bf16()) fail("internal: a bf16 oneDNN GEMM on a CPU without AVX512_BF16");
  return d;
}

// g's product with A and B at a and b (bf16: dense copies in g's orientation).
void run_matmul(const Dnnl& d, ThreadScratch& ts, const Gemm& g, bool bf16, const void* a, int64_t lda,
                const void* b, int64_t ldb) {
  const Matmul& m = matmul_for(d, Key{g.trans_a, g.trans_b, g.M, g.N, g.K, lda, ldb, g.ldc, g.alpha, g.beta, bf16});
  if (ts.pad.size() < m.scratch_bytes) ts.pad.resize(m.scratch_bytes);
  dnnl_memory_t mem[4] = {};
  check(d.dnnl_memory_create(&mem[0], &m.a, d.engine, const_cast<void*>(a)), "memory");
  check(d.dnnl_memory_create(&mem[1], &m.b, d.engine, const_cast<void*>(b)), "memory");
  check(d.dnnl_memory_create(&mem[2], &m.c, d.engine, g.C), "memory");
  check(d.dnnl_memory_create(&mem[3], &m.scratch, d.engine, ts.pad.data()), "memory");
  const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                                   {DNNL_ARG_WEIGHTS, mem[1]},
                                   {DNNL_ARG_DST, mem[2]},
                                   {DNNL_ARG_SCRATCHPAD, mem[3]}};
  check(d.dnnl_primitive_execute(m.prim, ts.stream, 4, args), "matmul");
  check(d.dnnl_stream_wait(ts.stream), "stream wait");
  for (dnnl_memory_t x : mem) d.dnnl_memory_destroy(x);
}

// B packed into ts.b (dense bf16), then the product with A's dense bf16 copy a16
// (ts.a: run_bf16_with_packed_a leaves it alone, so two products may share it).
void run_bf16_with_packed_a(const Dnnl& d, ThreadScratch& ts, const Gemm& g, const uint16_t* a16) {
  const Stored sb = stored_b(g);
  ts.b.resize(size_t(sb.rows * sb.cols));
  pack_bf16(ts.b.data(), g.B, sb.rows, sb.cols, g.ldb);
  run_matmul(d, ts, g, true, a16, stored_a(g).cols, ts.b.data(), sb.cols);
}

}  // namespace

void gemm_onednn(const Gemm& g, Precision operands) {
  const bool bf16 = operands == Precision::Bf16;
  const Dnnl& d = loaded_dnnl(bf16);
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) return gemm_openblas(g);  // C = beta C
  ThreadScratch& ts = thread_scratch(d);
  if (!bf16) return run_matmul(d, ts, g, false, g.A, g.lda, g.B, g.ldb);
  const Stored sa = stored_a(g);  // dense bf16 copies in the same orientation
  ts.a.resize(size_t(sa.rows * sa.cols));
  pack_bf16(ts.a.data(), g.A, sa.rows, sa.cols, g.lda);
  run_bf16_with_packed_a(d, ts, g, ts.a.data());
}

void gemm_onednn_bf16_sharing_a(const Gemm& g1, const Gemm& g2) {
  const Stored s1 = stored_a(g1), s2 = stored_a(g2);
  OCC_CHECK(g1.A == g2.A && g1.lda == g2.lda && s1.rows == s2.rows && s1.cols == s2.cols,
            "internal: two GEMMs said to share A read different matrices");
  const Dnnl& d = loaded_dnnl(true);
  ThreadScratch& ts = thread_scratch(d);
  const bool run1 = g1.M > 0 && g1.N > 0, run2 = g2.M > 0 && g2.N > 0;
  if (g1.K <= 0 || g2.K <= 0 || !(run1 && run2)) {  // nothing to share
    gemm_onednn(g1, Precision::Bf16);
    gemm_onednn(g2, Precision::Bf16);
    return;
  }
  ts.a.resize(size_t(s1.rows * s1.cols));
  pack_bf16(ts.a.data(), g1.A, s1.rows, s1.cols, g1.lda);
  run_bf16_with_packed_a(d, ts, g1, ts.a.data());
  run_bf16_with_packed_a(d, ts, g2, ts.a.data());
}

#else  // no <oneapi/dnnl/dnnl.h> at build time: OpenBLAS only

bool onednn_available(std::string* why_not) {
  if (why_not) *why_not = "built without oneDNN's header (libdnnl-dev)";
  return false;
}
std::string onednn_version() { return ""; }
std::string onednn_impl(int64_t, int64_t, int64_t, bool) { return ""; }
void gemm_onednn(const Gemm&, Precision) {
  fail("OCC_CPU_GEMM=onednn: this binary was built without oneDNN (install libdnnl-dev and rebuild)");
}
void gemm_onednn_bf16_sharing_a(const Gemm&, const Gemm&) {
  fail("OCC_CPU_GEMM=onednn: this binary was built without oneDNN (install libdnnl-dev and rebuild)");
}

#endif

}  // namespace occ::kernels

// The pipeline's compressors on the GPU against the same compressors on the CPU:
//   * PowerSGD (CB): over several warm-started messages the GPU's
//     reconstruction P Q^T equals the CPU's (the factors themselves may differ
//     in sign: Gram-Schmidt vs QR), and so does the receiver's decode;
//   * error feedback (LEP) around it: the residual follows the CPU's;
//   * the byte methods (int8, fp8, top-k in both formats, sign), packed by the
//     GPU's kernels: the wire and the decoded values are the CPU's bit for bit,
//     also on zero rows, NaN, outliers and ties;
//   * the block methods (mxfp4, nvfp4, int4, int3), rounding to nearest and
//     stochastically, with and without error feedback, on row lengths their
//     blocks do not divide: the wire and the decoded values are the CPU's bit
//     for bit, also on zero rows, subnormals, NaN / infinities (decoded as NaN)
//     and outliers;
//   * state saved on the GPU loads on the CPU and continues there (checkpoints
//     resume across backends).
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "compress/compressor_factory.h"
#include "compress/error_feedback.h"
#include "compress/powersgd.h"
#include "core/tensor_file.h"
#include "cuda_twin.h"

namespace occ::kernels {
namespace {

constexpr int64_t kRows = 96, kCols = 64;

std::unique_ptr<MatrixCompressor> build(const CompressorSpec& spec, Ops& ops, bool lep) {
  auto c = make_compressor(spec, kRows, kCols, 5, 9, CompressorPlacement{&ops});
  if (lep) c = std::make_unique<ErrorFeedback>(std::move(c), ops);
  return c;
}

// Encodes `steps` messages on both backends; returns the last decoded ones (gpu, cpu).
std::pair<std::vector<float>, std::vector<float>> run_both(MatrixCompressor& on_gpu, MatrixCompressor& on_cpu,
                                                           int steps, uint64_t seed, double tol,
                                                           const std::string& what) {
  std::vector<float> gpu_out, cpu_out;
  for (int s = 0; s < steps; ++s) {
    FTwin m(random_values(size_t(kRows * kCols), seed + uint64_t(s)));
    FTwin wire(filled(on_cpu.wire_floats())), out(filled(kRows * kCols));
    on_cpu.encode(m.c(), wire.c());
    on_gpu.encode(m.g(), wire.g());
    on_cpu.decode(wire.c(), out.c());
    on_gpu.decode(wire.g(), out.g());
    expect_close(out, tol, what + " step " + std::to_string(s));
    gpu_out = out.gpu();
    cpu_out = out.cpu;
  }
  return {gpu_out, cpu_out};
}

TEST_F(CudaOpsTest, PowerSgdLinkMatchesTheCpu) {
  const CompressorSpec spec{CompressionMethod::PowerSgd, 4, 0.1};
  auto g = build(spec, gpu(), false), c = build(spec, cpu(), false);
  run_both(*g, *c, 4, 300, 1e-4, "powersgd rank 4");
}

TEST_F(CudaOpsTest, PowerSgdWithLepMatchesTheCpu) {
  const CompressorSpec spec{CompressionMethod::PowerSgd, 4, 0.1};
  auto g = build(spec, gpu(), true), c = build(spec, cpu(), true);
  run_both(*g, *c, 4, 310, 1e-4, "powersgd rank 4 + LEP");
  const auto* gf = dynamic_cast<ErrorFeedback*>(g.get());
  const auto* cf = dynamic_cast<ErrorFeedback*>(c.get());
  ASSERT_TRUE(gf && cf);
  expect_close(gf->residual().to_host(), cf->residual().to_host(), 1e-4, "LEP residual");
}

TEST_F(CudaOpsTest, ByteMethodsOnTheGpuSendTheCpuWire) {
  std::vector<CompressorSpec> specs;
  for (CompressionMethod method : all_methods())
    if (method != CompressionMethod::PowerSgd) specs.push_back({method, 4, 0.25});
  specs.push_back({CompressionMethod::Topk, 4, 0.02});  // k = 1: the indices format (0.25 sends bitmaps)
  for (const CompressorSpec& spec : specs) {
    const std::string name = describe(spec);
    auto g = build(spec, gpu(), true), c = build(spec, cpu(), true);
    for (int s = 0; s < 3; ++s) {
      FTwin m(random_values(size_t(kRows * kCols), 400 + uint64_t(s))), out(filled(kRows * kCols));
      // The edge cases: a row of zeros (scale 0), a row of equal magnitudes
      // (top-k's ties go to the lower column), a NaN entry and an outlier.
      for (int64_t j = 0; j < kCols; ++j) m.cpu[size_t(5 * kCols + j)] = 0.0f;
      for (int64_t j = 0; j < kCols; ++j) m.cpu[size_t(6 * kCols + j)] = (j % 3 ? 0.5f : -0.5f);
      // (Not for top-k, which sends a NaN as it is: under error feedback the
      // GPU's arithmetic gives NaN its canonical bits, the CPU keeps the input's.)
      if (spec.method != CompressionMethod::Topk) m.cpu[size_t(7 * kCols + 3)] = std::nanf("");
      m.cpu[size_t(9 * kCols + 1)] = 1e30f;
      m.dev.assign_from_host(m.cpu);
      // The GPU's wire filled with junk first: its padding must be written too.
      FTwin wire(std::vector<float>(size_t(c->wire_floats()), 7.0f));
      c->encode(m.c(), wire.c());
      g->encode(m.g(), wire.g());
      const std::vector<float> gpu_wire = wire.gpu();
      // Bits, not floats: a wire word of packed bytes may read as a NaN.
      EXPECT_EQ(std::memcmp(gpu_wire.data(), wire.cpu.data(), gpu_wire.size() * sizeof(float)), 0)
          << name << " wire, step " << s;
      c->decode(wire.c(), out.c());
      g->decode(wire.g(), out.g());
      const std::vector<float> got = out.gpu();
      EXPECT_EQ(std::memcmp(got.data(), out.cpu.data(), got.size() * sizeof(float)), 0)
          << name << " decoded, step " << s;
    }
  }
}

TEST_F(CudaOpsTest, BlockMethodsOnTheGpuSendTheCpuWire) {
  const std::pair<int64_t, int64_t> shapes[] = {{96, 64}, {5, 70}, {3, 1}, {33, 17}, {2, 1000}};
  for (CompressionMethod method : all_methods()) {
    if (!method_is_block(method)) continue;
    for (bool stochastic : {false, true})
      for (bool ef : {false, true})
        for (auto [rows, cols] : shapes) {
          const CompressorSpec spec{method, 4, 0.25, stochastic};
          const std::string name = describe(spec) + (ef ? " + EF " : " ") + std::to_string(rows) + "x" +
                                   std::to_string(cols);
          auto make = [&](Ops& ops) {
            auto c = make_compressor(spec, rows, cols, 5, 9, CompressorPlacement{&ops});
            if (ef) c = std::make_unique<ErrorFeedback>(std::move(c), ops);
            return c;
          };
          auto g = make(gpu()), c = make(cpu());
          for (int s = 0; s < 3; ++s) {
            FTwin m(random_values(size_t(rows * cols), 700 + uint64_t(s))), out(filled(rows * cols));
            for (size_t p = 0; p < m.cpu.size(); ++p) m.cpu[p] *= std::pow(10.0f, float(p % 7) - 3.0f);
            if (rows > 4) {
              for (int64_t j = 0; j < cols; ++j) m.cpu[size_t(1 * cols + j)] = 0.0f;                    // zero row
              for (int64_t j = 0; j < cols; ++j) m.cpu[size_t(2 * cols + j)] = float(j % 3) * 1e-41f;  // subnormal
              m.cpu[size_t(3 * cols)] = 3e37f;                                                        // outlier
              if (!ef) {  // (under EF the residual of a NaN is NaN: the codes still agree, checked below)
                m.cpu[size_t(4 * cols)] = std::nanf("");
                m.cpu[size_t(4 * cols + cols / 2)] = -std::numeric_limits<float>::infinity();
              }
            }
            m.dev.assign_from_host(m.cpu);
            FTwin wire(std::vector<float>(size_t(c->wire_floats()), 7.0f));
            c->encode(m.c(), wire.c());
            g->encode(m.g(), wire.g());
            const std::vector<float> gpu_wire = wire.gpu();
            EXPECT_EQ(std::memcmp(gpu_wire.data(), wire.cpu.data(), gpu_wire.size() * sizeof(float)), 0)
                << name << " wire, step " << s;
            c->decode(wire.c(), out.c());
            g->decode(wire.g(), out.g());
            const std::vector<float> got = out.gpu();
            EXPECT_EQ(std::memcmp(got.data(), out.cpu.data(), got.size() * sizeof(float)), 0)
                << name << " decoded, step " << s;
          }
          if (ef) {
            const auto* gf = dynamic_cast<ErrorFeedback*>(g.get());
            const auto* cf = dynamic_cast<ErrorFeedback*>(c.get());
            ASSERT_TRUE(gf && cf);
            const auto gr = gf->residual().to_host(), cr = cf->residual().to_host();
            EXPECT_EQ(std::memcmp(gr.data(), cr.data(), gr.size() * sizeof(float)), 0) << name << " residual";
          }
        }
  }
}

TEST_F(CudaOpsTest, HadamardRotationOnTheGpuIsTheCpus) {
  const std::pair<int64_t, int64_t> shapes[] = {{96, 64}, {5, 200}, {3, 1}, {33, 17}, {2, 1000}};
  for (int block : {2, 32, 128, 256})
    for (auto [rows, cols] : shapes)
      for (bool inverse : {false, true}) {
        const std::string name = std::to_string(rows) + "x" + std::to_string(cols) + " block " + std::to_string(block) +
                                 (inverse ? " inverse" : " forward");
        FTwin m(random_values(size_t(rows * cols), 900 + uint64_t(block))), out(filled(rows * cols));
        m.cpu[0] = 1e30f;  // an outlier spread over its piece
        m.dev.assign_from_host(m.cpu);
        cpu().rotate_rows(m.c(), out.c(), rows, cols, block, 77, inverse);
        gpu().rotate_rows(m.g(), out.g(), rows, cols, block, 77, inverse);
        const std::vector<float> got = out.gpu();
        EXPECT_EQ(std::memcmp(got.data(), out.cpu.data(), got.size() * sizeof(float)), 0) << name;
      }
  for (CompressionMethod method : {CompressionMethod::Mxfp4, CompressionMethod::LloydMax2, CompressionMethod::LloydMax3,
                                   CompressionMethod::Int2})
    for (bool ef : {false, true}) {
      const CompressorSpec spec{method, 4, 0.25, false, 64};
      const std::string name = describe(spec) + (ef ? " + EF" : "");
      auto make = [&](Ops& ops) {
        auto c = make_compressor(spec, 33, 200, 5, 9, CompressorPlacement{&ops});
        if (ef) c = std::make_unique<ErrorFeedback>(std::move(c), ops);
        return c;
      };
      auto g = make(gpu()), c = make(cpu());
      for (int s = 0; s < 3; ++s) {
        g->set_message_key(uint64_t(s));
        c->set_message_key(uint64_t(s));
        FTwin m(random_values(size_t(33 * 200), 950 + uint64_t(s))), out(filled(33 * 200));
        FTwin wire(std::vector<float>(size_t(c->wire_floats()), 7.0f));
        c->encode(m.c(), wire.c());
        g->encode(m.g(), wire.g());
        const std::vector<float> gpu_wire = wire.gpu();
        EXPECT_EQ(std::memcmp(gpu_wire.data(), wire.cpu.data(), gpu_wire.size() * sizeof(float)), 0)
            << name << " wire, step " << s;
        c->decode(wire.c(), out.c());
        g->decode(wire.g(), out.g());
        const std::vector<float> got = out.gpu();
        EXPECT_EQ(std::memcmp(got.data(), out.cpu.data(), got.size() * sizeof(float)), 0)
            << name << " decoded, step " << s;
      }
    }
}

TEST_F(CudaOpsTest, CompressorStateSavedOnTheGpuContinuesOnTheCpu) {
  const CompressorSpec spec{CompressionMethod::PowerSgd, 4, 0.1};
  auto g = build(spec, gpu(), true), c = build(spec, cpu(), true);
  run_both(*g, *c, 2, 500, 1e-4, "before saving");
  TensorFileWriter w;
  g->save_state(w, "cb/");
  const std::string path = ::testing::TempDir() + "/gpu_compressor_state.occt";
  w.write(path);
  auto resumed = build(spec, cpu(), true);
  ASSERT_TRUE(resumed->load_state(TensorFileReader::open(path), "cb/"));
  // The resumed CPU compressor continues as the GPU one does.
  run_both(*g, *resumed, 2, 600, 1e-4, "after loading on the CPU");
}

}  // namespace
}  // namespace occ::kernels

// Compression / decompression throughput of every compression method
// (PowerSGD: paper Fig. 14): GB/s of uncompressed input, best and median over repeats.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "train/output_paths.h"
#include "apps/commands/train_flags.h"
#include "compress/compressor_factory.h"
#include "compress/powersgd.h"
#include "core/rng.h"
#include "core/timer.h"

namespace occ::cmd {

int bench_compress(int argc, char** argv) {
  CLI::App app{"Compression and decompression throughput of every method (PowerSGD at several ranks; int8, fp8, "
               "topk, sign). Default shape: the paper's GPT-2.5B activation gradient (seq 1024 x micro-batch 8 rows, "
               "hidden 1920 columns)",
               "bench-compress"};
  int64_t rows = 1024 * 8, cols = 1920;
  std::string ranks_text = "8,16,24,32,40", methods_text = "powersgd,int8,fp8-e4m3,fp8-e5m2,topk,sign";
  double topk_fraction = 0.1;
  int repeats = 5;
  std::string json_path;
  app.add_option("--rows", rows, "matrix rows (tokens of a micro-batch / TP)")->capture_default_str();
  app.add_option("--cols", cols, "matrix columns (hidden size)")->capture_default_str();
  app.add_option("--methods", methods_text, "comma-separated compression methods")->capture_default_str();
  app.add_option("--ranks", ranks_text, "comma-separated PowerSGD ranks")->capture_default_str();
  app.add_option("--topk-fraction", topk_fraction, "topk: the share of each row's entries sent")->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--json", json_path, "also write the results as JSON");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  if (!json_path.empty()) {  // now, not after the measurements; not over a file the command line read (--config)
    OutputPaths outputs;
    outputs.file("--json", json_path);
    outputs.check();
  }
  OCC_CHECK(rows >= 1 && cols >= 1 && repeats >= 1, "--rows, --cols and --repeats must be >= 1");
  OCC_CHECK(topk_fraction > 0 && topk_fraction <= 1, "--topk-fraction must be in (0, 1] (got {})", topk_fraction);
  std::vector<int64_t> ranks;
  std::stringstream ss(ranks_text);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      ranks.push_back(std::stoll(item));
    } catch (const std::exception&) {
      fail("--ranks '{}' is not a comma-separated list of integers", ranks_text);
    }
    OCC_CHECK(ranks.back() >= 1, "--ranks entries must be >= 1");
  }
  // Every (method, parameter) to measure, in the order given.
  std::vector<CompressorSpec> specs;
  std::stringstream ms(methods_text);
  for (std::string item; std::getline(ms, item, ',');) {
    const CompressionMethod m = parse_method(item, "--methods", all_methods());
    if (m == CompressionMethod::PowerSgd)
      for (int64_t r : ranks) specs.push_back({m, int(r), topk_fraction});
    else
      specs.push_back({m, 0, topk_fraction});
  }

  // A gradient-like matrix: low-rank structure plus noise.
  std::vector<float> m(size_t(rows * cols)), out(size_t(rows * cols));
  const uint64_t key = make_key(42, 0xB3ull);
  for (int64_t i = 0; i < rows * cols; ++i) m[size_t(i)] = normal_at(key, 0, uint64_t(i));
  const double gb = double(rows) * double(cols) * 4.0 / 1e9;
  nlohmann::json results = nlohmann::json::array();
  std::printf("matrix %lld x %lld (%.1f MB); GB/s of uncompressed input, best / median of %d\n", (long long)rows,
              (long long)cols, gb * 1e3, repeats);
  // The ratio against the uncompressed wire of an fp32 run (4 bytes a value) and of a --bf16 /
  // --fp16 run (2: core/wire_format.h); throughput is of fp32 input.
  std::printf("%-18s %16s %22s %22s\n", "method", "vs fp32 / bf16", "compress GB/s", "decompress GB/s");
  for (const CompressorSpec& spec : specs) {
    auto c = make_compressor(spec, rows, cols, 1234, 7);
    std::vector<float> wire(size_t(c->wire_floats()));
    std::vector<double> enc, dec;
    c->encode(m.data(), wire.data());  // warm-up
    for (int i = 0; i < repeats; ++i) {
      double t0 = now_seconds();
      c->encode(m.data(), wire.data());
      double t1 = now_seconds();
      c->decode(wire.data(), out.data());
      double t2 = now_seconds();
      enc.push_back(gb / (t1 - t0));
      dec.push_back(gb / (t2 - t1));
    }
    auto best = [](std::vector<double> v) { return *std::max_element(v.begin(), v.end()); };
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double ratio = double(rows * cols) / double(c->wire_floats());  // fp32 values per wire word
    const double ratio_bf16 = ratio / 2;
    // PowerSGD's rank is capped at min(rows, cols): say the one used.
    CompressorSpec used = spec;
    if (spec.method == CompressionMethod::PowerSgd) used.rank = int(powersgd::effective_rank(rows, cols, spec.rank));
    std::printf("%-18s %7.1fx / %5.2fx %10.2f / %8.2f %10.2f / %8.2f\n", describe(used).c_str(), ratio, ratio_bf16,
                best(enc), median(enc), best(dec), median(dec));
    nlohmann::json row = {{"method", method_name(spec.method)},
                          {"compression_ratio", ratio},  // against an fp32 wire
                          {"compression_ratio_bf16", ratio_bf16},
                          {"wire_bytes", 4 * c->wire_floats()},
                          {"compress_gbps_best", best(enc)},
                          {"compress_gbps_median", median(enc)},
                          {"decompress_gbps_best", best(dec)},
                          {"decompress_gbps_median", median(dec)}};
    if (spec.method == CompressionMethod::PowerSgd) row["rank"] = used.rank;
    if (spec.method == CompressionMethod::Topk) row["topk_fraction"] = spec.topk_fraction;
    results.push_back(row);
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    OCC_CHECK(f.good(), "cannot write --json file {}", json_path);
    f << nlohmann::json{{"rows", rows}, {"cols", cols}, {"results", results}}.dump(2) << "\n";
  }
  return 0;
}

}  // namespace occ::cmd

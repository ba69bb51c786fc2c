#include "compress/compressor_factory.h"

#include <algorithm>

#include <fmt/format.h>

#include "compress/fp8_compressor.h"
#include "compress/host_staged_compressor.h"
#include "compress/int8_compressor.h"
#include "compress/powersgd.h"
#include "compress/sign_compressor.h"
#include "compress/topk_compressor.h"
#include "core/error.h"

namespace occ {

const char* method_name(CompressionMethod m) {
  switch (m) {
    case CompressionMethod::PowerSgd: return "powersgd";
    case CompressionMethod::Int8: return "int8";
    case CompressionMethod::Fp8E4m3: return "fp8-e4m3";
    case CompressionMethod::Fp8E5m2: return "fp8-e5m2";
    case CompressionMethod::Topk: return "topk";
    case CompressionMethod::Sign: return "sign";
  }
  return "?";
}

const std::vector<CompressionMethod>& all_methods() {
  static const std::vector<CompressionMethod> all{CompressionMethod::PowerSgd, CompressionMethod::Int8,
                                                  CompressionMethod::Fp8E4m3,  CompressionMethod::Fp8E5m2,
                                                  CompressionMethod::Topk,     CompressionMethod::Sign};
  return all;
}

CompressionMethod parse_method(const std::string& value, const std::string& flag,
                               const std::vector<CompressionMethod>& allowed, const std::string& also) {
  std::string names = also;
  for (CompressionMethod m : allowed) {
    if (value == method_name(m)) return m;
    if (!names.empty()) names += '|';
    names += method_name(m);
  }
  const bool known = std::any_of(all_methods().begin(), all_methods().end(),
                                 [&](CompressionMethod m) { return value == method_name(m); });
  throw UsageError(fmt::format("{} '{}' {}; use one of {}", flag, value,
                               known ? "is not offered on this link" : "is not a compression method", names));
}

std::string describe(const CompressorSpec& spec) {
  switch (spec.method) {
    case CompressionMethod::PowerSgd: return fmt::format("powersgd rank {}", spec.rank);
    case CompressionMethod::Topk: return fmt::format("topk {:g}%", 100.0 * spec.topk_fraction);
    default: return method_name(spec.method);
  }
}

namespace {

// The methods that pack on the host (top-k's selection, sign's bit string).
std::unique_ptr<MatrixCompressor> make_host_compressor(const CompressorSpec& spec, int64_t rows, int64_t cols) {
  switch (spec.method) {
    case CompressionMethod::Topk: return std::make_unique<TopkCompressor>(rows, cols, spec.topk_fraction);
    case CompressionMethod::Sign: return std::make_unique<SignCompressor>(rows, cols);
    default: break;
  }
  throw Error("unknown compression method");
}

}  // namespace

std::unique_ptr<MatrixCompressor> make_compressor(const CompressorSpec& spec, int64_t rows, int64_t cols,
                                                  uint64_t seed, uint64_t key, CompressorPlacement where) {
  // PowerSGD, int8 and fp8 compute on the placement's device.
  switch (spec.method) {
    case CompressionMethod::PowerSgd:
      return std::make_unique<PowerSgdCompressor>(rows, cols, spec.rank, seed, key, *where.ops);
    case CompressionMethod::Int8: return std::make_unique<Int8Compressor>(rows, cols, *where.ops);
    case CompressionMethod::Fp8E4m3: return std::make_unique<Fp8Compressor>(rows, cols, Fp8Format::E4M3, *where.ops);
    case CompressionMethod::Fp8E5m2: return std::make_unique<Fp8Compressor>(rows, cols, Fp8Format::E5M2, *where.ops);
    default: break;
  }
  auto host = make_host_compressor(spec, rows, cols);
  if (where.device() == Device::Cpu && !where.stage_host_methods) return host;
  return std::make_unique<HostStagedCompressor>(std::move(host), where.device());
}

int64_t compressed_wire_floats(const CompressorSpec& spec, int64_t rows, int64_t cols) {
  switch (spec.method) {
    case CompressionMethod::PowerSgd: return powersgd::effective_rank(rows, cols, spec.rank) * (rows + cols);
    case CompressionMethod::Int8: return wire::words_for_bytes(Int8Compressor::wire_bytes(rows, cols));
    case CompressionMethod::Fp8E4m3:
    case CompressionMethod::Fp8E5m2: return wire::words_for_bytes(Fp8Compressor::wire_bytes(rows, cols));
    case CompressionMethod::Topk: {
      const int64_t k = TopkCompressor::k_for(cols, spec.topk_fraction);
      return std::min(wire::words_for_bytes(TopkCompressor::indices_bytes(rows, cols, k)),
                      wire::words_for_bytes(TopkCompressor::bitmap_bytes(rows, cols, k)));
    }
    case CompressionMethod::Sign: return wire::words_for_bytes(SignCompressor::wire_bytes(rows, cols));
  }
  throw Error("unknown compression method");
}

}  // namespace occ

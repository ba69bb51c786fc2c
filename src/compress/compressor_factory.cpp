#include "compress/compressor_factory.h"

#include <algorithm>

#include <fmt/format.h>

#include "compress/adaptive_codec.h"
#include "compress/block_compressor.h"
#include "compress/fp8_compressor.h"
#include "compress/int8_compressor.h"
#include "compress/powersgd.h"
#include "compress/rotated_compressor.h"
#include "compress/sign_compressor.h"
#include "compress/topk2_compressor.h"
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
    case CompressionMethod::Mxfp4: return "mxfp4";
    case CompressionMethod::Nvfp4: return "nvfp4";
    case CompressionMethod::Int4: return "int4";
    case CompressionMethod::Int3: return "int3";
    case CompressionMethod::Int2: return "int2";
    case CompressionMethod::LloydMax2: return "lloydmax2";
    case CompressionMethod::LloydMax3: return "lloydmax3";
    case CompressionMethod::Topk2: return "topk2";
    case CompressionMethod::Adaptive: return "adaptive";
  }
  return "?";
}

const std::vector<CompressionMethod>& all_methods() {
  static const std::vector<CompressionMethod> all{CompressionMethod::PowerSgd, CompressionMethod::Int8,
                                                  CompressionMethod::Fp8E4m3,  CompressionMethod::Fp8E5m2,
                                                  CompressionMethod::Topk,     CompressionMethod::Sign,
                                                  CompressionMethod::Mxfp4,    CompressionMethod::Nvfp4,
                                                  CompressionMethod::Int4,     CompressionMethod::Int3,
                                                  CompressionMethod::Int2,     CompressionMethod::LloydMax2,
                                                  CompressionMethod::LloydMax3, CompressionMethod::Adaptive,
                                                  CompressionMethod::Topk2};
  return all;
}

const std::vector<CompressionMethod>& pipeline_grad_methods() {
  static const std::vector<CompressionMethod> methods = [] {
    std::vector<CompressionMethod> m;
    for (CompressionMethod x : all_methods())
      if (x != CompressionMethod::Topk2) m.push_back(x);
    return m;
  }();
  return methods;
}

kernels::BlockCode block_code_of(CompressionMethod m) {
  switch (m) {
    case CompressionMethod::Mxfp4: return kernels::BlockCode::Mxfp4;
    case CompressionMethod::Nvfp4: return kernels::BlockCode::Nvfp4;
    case CompressionMethod::Int4: return kernels::BlockCode::Int4;
    case CompressionMethod::Int3: return kernels::BlockCode::Int3;
    case CompressionMethod::Int2: return kernels::BlockCode::Int2;
    case CompressionMethod::LloydMax2: return kernels::BlockCode::Lm2;
    case CompressionMethod::LloydMax3: return kernels::BlockCode::Lm3;
    default: throw Error(fmt::format("internal: {} is not a block method", method_name(m)));
  }
}

bool parse_rounding(const std::string& value, const std::string& flag) {
  if (value == "nearest") return false;
  if (value == "stochastic") return true;
  throw UsageError(fmt::format("{} '{}' is not a rounding; use nearest|stochastic", flag, value));
}

std::string block_method_names() {
  std::string names;
  for (CompressionMethod m : all_methods())
    if (method_is_block(m)) names += (names.empty() ? "" : "|") + std::string(method_name(m));
  return names;
}

std::string block_option_method_names() { return block_method_names() + "|adaptive"; }

double parse_high_fraction(const std::string& value, const std::string& flag) {
  size_t used = 0;
  double f = -1.0;
  try {
    f = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !(f >= 0.0 && f <= 1.0))
    throw UsageError(fmt::format("{} '{}' must be a number in [0, 1] (the share of tiles coded at 4 bits); use e.g. {:g}",
                                 flag, value, kDefaultHighFraction));
  return f;
}

int parse_rotation(const std::string& value, const std::string& flag) {
  if (value == "none") return 0;
  if (value == "hadamard") return kDefaultRotationBlock;
  const std::string prefix = "hadamard:";
  if (value.rfind(prefix, 0) == 0) {
    const std::string digits = value.substr(prefix.size());
    const bool numeric = !digits.empty() && digits.size() <= 4 &&
                         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int block = numeric ? std::stoi(digits) : 0;
    if (kernels::rotation_block_ok(block)) return block;
    throw UsageError(fmt::format("{} '{}': the block must be a power of two from 2 to {}; use e.g. hadamard:{}", flag,
                                 value, kernels::kMaxRotationBlock, kDefaultRotationBlock));
  }
  throw UsageError(fmt::format("{} '{}' is not a rotation; use none|hadamard|hadamard:BLOCK (BLOCK a power of two "
                               "from 2 to {})",
                               flag, value, kernels::kMaxRotationBlock));
}

std::string rotation_name(int block) { return block > 0 ? fmt::format("hadamard:{}", block) : "none"; }

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
    case CompressionMethod::Topk2: return fmt::format("topk2 {:g}%", 100.0 * spec.topk_density);
    default: {
      std::string s = method_name(spec.method);
      if (method_is_adaptive(spec.method)) s += fmt::format(" {:g}% high", 100.0 * spec.high_fraction);
      if (method_takes_block_options(spec.method) && spec.rotation > 0) s += fmt::format(" rotated {}", spec.rotation);
      if (method_takes_block_options(spec.method) && spec.stochastic) s += " stochastic";
      return s;
    }
  }
}

std::unique_ptr<MatrixCompressor> make_compressor(const CompressorSpec& spec, int64_t rows, int64_t cols,
                                                  uint64_t seed, uint64_t key, CompressorPlacement where) {
  kernels::Ops& ops = *where.ops;
  switch (spec.method) {
    case CompressionMethod::PowerSgd: return std::make_unique<PowerSgdCompressor>(rows, cols, spec.rank, seed, key, ops);
    case CompressionMethod::Int8: return std::make_unique<Int8Compressor>(rows, cols, ops);
    case CompressionMethod::Fp8E4m3: return std::make_unique<Fp8Compressor>(rows, cols, Fp8Format::E4M3, ops);
    case CompressionMethod::Fp8E5m2: return std::make_unique<Fp8Compressor>(rows, cols, Fp8Format::E5M2, ops);
    case CompressionMethod::Topk: return std::make_unique<TopkCompressor>(rows, cols, spec.topk_fraction, ops);
    case CompressionMethod::Sign: return std::make_unique<SignCompressor>(rows, cols, ops);
    case CompressionMethod::Topk2: return std::make_unique<Topk2Compressor>(rows, cols, spec.topk_density, ops);
    case CompressionMethod::Mxfp4:
    case CompressionMethod::Nvfp4:
    case CompressionMethod::Int4:
    case CompressionMethod::Int3:
    case CompressionMethod::Int2:
    case CompressionMethod::LloydMax2:
    case CompressionMethod::LloydMax3: {
      std::unique_ptr<MatrixCompressor> block =
          std::make_unique<BlockCompressor>(rows, cols, block_code_of(spec.method), spec.stochastic, seed, key, ops);
      if (spec.rotation == 0) return block;
      return std::make_unique<RotatedCompressor>(std::move(block), spec.rotation, seed, key, ops);
    }
    case CompressionMethod::Adaptive: {
      std::unique_ptr<MatrixCompressor> adaptive =
          std::make_unique<AdaptiveCompressor>(rows, cols, spec.high_fraction, spec.stochastic, seed, key, ops);
      if (spec.rotation == 0) return adaptive;
      return std::make_unique<RotatedCompressor>(std::move(adaptive), spec.rotation, seed, key, ops);
    }
  }
  throw Error("unknown compression method");
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
    case CompressionMethod::Topk2:
      return wire::words_for_bytes(Topk2Compressor::wire_bytes(rows, cols, spec.topk_density));
    case CompressionMethod::Mxfp4:
    case CompressionMethod::Nvfp4:
    case CompressionMethod::Int4:
    case CompressionMethod::Int3:
    case CompressionMethod::Int2:
    case CompressionMethod::LloydMax2:
    case CompressionMethod::LloydMax3:
      return wire::words_for_bytes(BlockCompressor::wire_bytes(block_code_of(spec.method), rows, cols));
    case CompressionMethod::Adaptive: return wire::words_for_bytes(adaptive::wire_bytes(rows, cols, spec.high_fraction));
  }
  throw Error("unknown compression method");
}

}  // namespace occ

#pragma once
// The compression methods a user can put on a link (--inter-grad-comp-method,
// --grad-comp-method, --activation-comp-method), parsed in one place and built
// in one place, so every link class, the planner and the tests agree on
// names, parameters and wire sizes.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compress/compressor.h"
#include "kernels/ops.h"

namespace occ {

enum class CompressionMethod { PowerSgd, Int8, Fp8E4m3, Fp8E5m2, Topk, Sign, Mxfp4, Nvfp4, Int4, Int3, Int2, LloydMax2, LloydMax3,
                               Adaptive, Topk2 };

// The flag spelling: powersgd, int8, fp8-e4m3, fp8-e5m2, topk, sign, mxfp4, nvfp4, int4, int3, int2,
// lloydmax2, lloydmax3, adaptive, topk2.
const char* method_name(CompressionMethod m);
// Parses a flag value; throws occ::UsageError naming `flag` and `allowed` on
// anything else. `also`: other values the flag accepts, listed first (e.g. "none").
CompressionMethod parse_method(const std::string& value, const std::string& flag,
                               const std::vector<CompressionMethod>& allowed, const std::string& also = "");
// Every method, in the order above.
const std::vector<CompressionMethod>& all_methods();
// The methods of the pipeline's backward link (--inter-grad-comp-method): all
// but topk2, a DP method (its density flag is on the DP and DiLoCo links only).
const std::vector<CompressionMethod>& pipeline_grad_methods();
// Does the method keep state between messages (checkpointed)? Only PowerSGD's warm start.
inline bool method_is_stateful(CompressionMethod m) { return m == CompressionMethod::PowerSgd; }
// Can the wire be summed as floats (all-reduced)? Only PowerSGD's P and Q;
// the byte wires (int8, fp8, topk, sign) can only be copied.
inline bool method_is_summable(CompressionMethod m) { return m == CompressionMethod::PowerSgd; }
// The block-scaled 2/3/4-bit codes (compress/block_compressor.h): the methods
// that round, to nearest or stochastically, and take a rotation.
inline bool method_is_block(CompressionMethod m) {
  return m == CompressionMethod::Mxfp4 || m == CompressionMethod::Nvfp4 || m == CompressionMethod::Int4 ||
         m == CompressionMethod::Int3 || m == CompressionMethod::Int2 || m == CompressionMethod::LloydMax2 ||
         m == CompressionMethod::LloydMax3;
}
// The adaptive codec (compress/adaptive_codec.h): int4 on the most energetic
// tiles, lloydmax2 on the rest, with its bit map on the wire.
inline bool method_is_adaptive(CompressionMethod m) { return m == CompressionMethod::Adaptive; }
// The methods that take the block methods' options (--*-comp-rounding,
// --*-comp-rotation, --*-comp-lossless): the block methods and adaptive.
inline bool method_takes_block_options(CompressionMethod m) { return method_is_block(m) || method_is_adaptive(m); }
// "mxfp4|nvfp4|int4|int3|int2|lloydmax2|lloydmax3", for messages.
std::string block_method_names();
// The same with "|adaptive": the methods that take the block options.
std::string block_option_method_names();
// The adaptive codec's high fraction (--*-comp-adaptive-high-fraction): a
// number in [0, 1]; throws occ::UsageError naming `flag` on anything else.
double parse_high_fraction(const std::string& value, const std::string& flag);
constexpr double kDefaultHighFraction = 0.125;
// The block code of a block method (kernels/block_codes.h).
kernels::BlockCode block_code_of(CompressionMethod m);
// The rounding flag's values (--*-comp-rounding): nearest (default) | stochastic.
bool parse_rounding(const std::string& value, const std::string& flag);
// The rotation flag's values (--*-comp-rotation): none (0) | hadamard (the
// default block, kDefaultRotationBlock) | hadamard:B (B a power of two in
// [2, 256]); returns the block size. Throws occ::UsageError naming `flag`.
constexpr int kDefaultRotationBlock = 128;
int parse_rotation(const std::string& value, const std::string& flag);
// "hadamard:128", or "none" for 0.
std::string rotation_name(int block);

// One link's compressor: the method and its parameter.
struct CompressorSpec {
  CompressionMethod method = CompressionMethod::PowerSgd;
  int rank = 16;                 // powersgd
  double topk_fraction = 0.1;    // topk
  bool stochastic = false;       // block methods: stochastic rounding (else to nearest, ties to even)
  int rotation = 0;              // block methods: the Hadamard rotation's block (0: none; rotated_compressor.h)
  double topk_density = 0.02;    // topk2: the share of each chunk's values sent (topk2_compressor.h)
  double high_fraction = kDefaultHighFraction;  // adaptive: the share of tiles at 4 bits
  bool operator==(const CompressorSpec&) const = default;
};
// "powersgd rank 16", "int8", "topk 10%", "topk2 2%", "mxfp4 stochastic" ...
std::string describe(const CompressorSpec& spec);

// Where a compressor runs: the device of `ops`, whose memory holds the
// matrices and wires it is given. Every method (and error feedback) computes
// there.
struct CompressorPlacement {
  kernels::Ops* ops = &kernels::cpu_ops();
  Device device() const { return ops->device(); }
};
// Builds the compressor of a rows x cols matrix. seed and key fix PowerSGD's
// initial Q (ends of a link, or ranks of a group, pass the same key) and the
// block methods' stochastic rounding bits; the other methods ignore them.
std::unique_ptr<MatrixCompressor> make_compressor(const CompressorSpec& spec, int64_t rows, int64_t cols,
                                                  uint64_t seed, uint64_t key, CompressorPlacement where = {});
// wire_floats() of that compressor, without building it (the planner's sizes).
int64_t compressed_wire_floats(const CompressorSpec& spec, int64_t rows, int64_t cols);

}  // namespace occ

#include "train/diloco_config.h"

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

const std::vector<CompressionMethod>& DilocoConfig::outer_methods() {
  static const std::vector<CompressionMethod> methods{CompressionMethod::Int8, CompressionMethod::Fp8E4m3,
                                                      CompressionMethod::Fp8E5m2, CompressionMethod::Topk,
                                                      CompressionMethod::Sign, CompressionMethod::Mxfp4,
                                                      CompressionMethod::Nvfp4, CompressionMethod::Int4,
                                                      CompressionMethod::Int3, CompressionMethod::Int2,
                                                      CompressionMethod::LloydMax2, CompressionMethod::LloydMax3,
                                                      CompressionMethod::Topk2};
  return methods;
}

void DilocoConfig::validate(int num_layers, bool grad_comp, bool emb_comm_opt, bool distributed_optimizer) const {
  OCC_CHECK(inner_steps >= 0, "--diloco-inner-steps must be >= 1 (0: off; got {})", inner_steps);
  if (!enabled()) return;
  const int H = inner_steps;
  OCC_CHECK(outer_lr > 0, "--diloco-outer-lr must be > 0 (got {})", outer_lr);
  OCC_CHECK(outer_momentum >= 0 && outer_momentum < 1, "--diloco-outer-momentum must be in [0, 1) (got {})",
            outer_momentum);
  OCC_CHECK(fragments >= 1 && fragments <= num_layers,
            "--diloco-fragments {} must be between 1 and the model's {} layers (a fragment is every F-th layer)",
            fragments, num_layers);
  OCC_CHECK(fragments <= H,
            "--diloco-fragments {} exceeds --diloco-inner-steps {}: fragments sync at distinct steps of each round "
            "of H; use at most {} fragments or more inner steps",
            fragments, H, H);
  OCC_CHECK(overlap_steps >= 0 && overlap_steps < H,
            "--diloco-overlap-steps must be in [0, --diloco-inner-steps) = [0, {}) (got {}): an update must land "
            "before its fragment's next sync starts",
            H, overlap_steps);
  OCC_CHECK(mixing >= 0 && mixing <= 1, "--diloco-mixing must be in [0, 1] (got {})", mixing);
  OCC_CHECK(outer_topk_fraction > 0 && outer_topk_fraction <= 1,
            "--diloco-outer-comp-topk-fraction must be in (0, 1] (got {})", outer_topk_fraction);
  OCC_CHECK(outer_topk_density > 0 && outer_topk_density <= 0.25,
            "--diloco-outer-comp-topk-density must be in (0, 0.25] (got {}); e.g. 0.02 sends 2 % of the values",
            outer_topk_density);
  OCC_CHECK(!outer_error_feedback || outer_comp,
            "--diloco-outer-comp-error-feedback keeps what the outer gradients' codec drops, and they are sent "
            "uncompressed; drop it or add --diloco-outer-comp-method (e.g. topk2)");
  OCC_CHECK(!grad_comp,
            "--grad-comp compresses the per-step data-parallel all-reduce, which DiLoCo (--diloco-inner-steps) does "
            "not run; drop --grad-comp, or compress DiLoCo's outer gradients with --diloco-outer-comp-method");
  OCC_CHECK(!emb_comm_opt,
            "--emb-comm-opt (FE) sums the word embedding's gradient over the data-parallel replicas every step, "
            "which DiLoCo's replicas do not share; drop --emb-comm-opt (the embedding syncs once per round with its "
            "fragment)");
  OCC_CHECK(!distributed_optimizer,
            "--use-distributed-optimizer shards Adam's state over data-parallel ranks that hold the same "
            "parameters, but each DiLoCo replica keeps its own inner AdamW state; drop one of "
            "--use-distributed-optimizer and --diloco-inner-steps");
}

std::string DilocoConfig::describe() const {
  if (!enabled()) return "off";
  std::string s = fmt::format("DiLoCo H {}, outer lr {:g} momentum {:g}", inner_steps, outer_lr, outer_momentum);
  if (fragments > 1) s += fmt::format(", {} fragments", fragments);
  if (overlap_steps > 0) s += fmt::format(", overlap {} (mixing {:g})", overlap_steps, mixing);
  if (outer_comp) s += ", outer gradients " + occ::describe(outer_spec()) + (outer_error_feedback ? " + EF" : "");
  return s;
}

nlohmann::json DilocoConfig::to_json() const {
  if (!enabled()) return nullptr;
  return {{"inner_steps", inner_steps},
          {"outer_lr", outer_lr},
          {"outer_momentum", outer_momentum},
          {"fragments", fragments},
          {"overlap_steps", overlap_steps},
          {"mixing", mixing},
          {"outer_comp_method", outer_comp ? method_name(*outer_comp) : "none"},
          {"outer_comp_topk_fraction", outer_topk_fraction},
          {"outer_comp_topk_density", outer_topk_density},
          {"outer_comp_rounding", outer_stochastic ? "stochastic" : "nearest"},
          {"outer_comp_rotation", rotation_name(outer_rotation)},
          {"outer_comp_error_feedback", outer_error_feedback}};
}

}  // namespace occ

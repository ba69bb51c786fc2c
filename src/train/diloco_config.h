#pragma once
// DiLoCo's settings (--diloco-*), kept apart from the runtime (train/diloco.h)
// so that the options, the planner and the command lines share one struct.
// The conventions (outer step, fragments, schedule, mixing) are in
// docs/diloco.md and train/diloco.h.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compress/compressor_factory.h"
#include "core/layout.h"

namespace occ {

struct DilocoConfig {
  int inner_steps = 0;          // --diloco-inner-steps H (0: DiLoCo off, per-step data parallelism)
  float outer_lr = 0.7f;        // --diloco-outer-lr
  float outer_momentum = 0.9f;  // --diloco-outer-momentum (Nesterov, as torch.optim.SGD(nesterov=True))
  int fragments = 1;            // --diloco-fragments F (Streaming DiLoCo: strided layer fragments)
  int overlap_steps = 0;        // --diloco-overlap-steps tau: inner steps between a sync's start and its landing
  float mixing = 0.5f;          // --diloco-mixing alpha: local share kept where an overlapped update lands
  // --diloco-outer-comp-method: the outer gradients as a byte wire (int8, fp8, ...); nullopt: fp32 all-reduce.
  std::optional<CompressionMethod> outer_comp;
  double outer_topk_fraction = 0.01;  // --diloco-outer-comp-topk-fraction (with topk)
  double outer_topk_density = 0.02;   // --diloco-outer-comp-topk-density (with topk2)
  bool outer_stochastic = false;      // --diloco-outer-comp-rounding stochastic (block methods)
  int outer_rotation = 0;             // --diloco-outer-comp-rotation hadamard:B (block methods; 0: none)
  // --diloco-outer-comp-error-feedback: each replica keeps what its codec dropped from its
  // outer gradient (fp32, per parameter) and adds it to the next one before encoding.
  bool outer_error_feedback = false;

  bool enabled() const { return inner_steps > 0; }
  // The methods an outer gradient may be sent with: the byte wires (they are all-gathered).
  static const std::vector<CompressionMethod>& outer_methods();
  CompressorSpec outer_spec() const {
    return {outer_comp.value_or(CompressionMethod::Int8), 16, outer_topk_fraction, outer_stochastic, outer_rotation,
            outer_topk_density};
  }
  // Checks the settings, and what else the run asks for that DiLoCo replaces or
  // cannot do (one-line errors naming the fix).
  void validate(int num_layers, bool grad_comp, bool emb_comm_opt, bool distributed_optimizer) const;
  // "DiLoCo H 8, outer lr 0.7 momentum 0.9" ... (one line, for logs and plans).
  std::string describe() const;
  nlohmann::json to_json() const;
};

}  // namespace occ

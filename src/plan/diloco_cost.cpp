#include "plan/diloco_cost.h"

#include <algorithm>

#include "compress/compressor_factory.h"
#include "train/diloco.h"

namespace occ::plan {

double DilocoCost::per_round(double inner) const {
  if (!on || stages.empty()) return 0.0;
  double total = 0;
  for (size_t f = 0; f < stages.front().size(); ++f) {
    double worst = 0;  // the stages sync fragment f at one iteration: the slowest one holds the pipeline
    for (const auto& stage : stages) {
      const DilocoFragmentCost& c = stage[f];
      const double link = overlap == 0 ? c.link_seconds : std::max(0.0, c.link_seconds - overlap * inner);
      worst = std::max(worst, c.main_seconds + link);
    }
    total += worst;
  }
  return total;
}

double DilocoCost::bytes_per_iteration(int stage) const {
  if (!on) return 0.0;
  double b = 0;
  for (const DilocoFragmentCost& c : stages[size_t(stage)]) b += c.bytes;
  return b / inner_steps;
}

std::vector<DilocoFragmentCost> diloco_stage_cost(const DilocoConfig& cfg, const ParamLayout& layout, int num_layers,
                                                  int D, const LinkSpec& link, int sharing,
                                                  const std::function<double(double, double)>& kernel) {
  std::vector<DilocoFragmentCost> out(size_t(cfg.fragments));
  std::vector<double> words(out.size(), 0.0), tied(out.size(), 0.0);
  for (const ParamTensor& t : layout.tensors()) {
    const size_t f = size_t(diloco_fragment_of(t.name, num_layers, cfg.fragments));
    out[f].elements += double(t.numel);
    if (t.word_embedding) tied[f] += double(t.numel);
    const int64_t rows = t.shape.size() == 1 ? 1 : t.shape[0];
    if (cfg.outer_comp) words[f] += double(compressed_wire_floats(cfg.outer_spec(), rows, t.numel / rows));
  }
  const double ring = D > 1 ? 2.0 * (D - 1) / D : 0.0;
  // The engine sends no empty message (a fragment without tensors on this stage, or without the tied copy).
  auto allreduce = [&](double bytes) { return bytes > 0 ? ring_allreduce_seconds(bytes, D, link, sharing) : 0.0; };
  for (size_t f = 0; f < out.size(); ++f) {
    DilocoFragmentCost& c = out[f];
    const double n = c.elements;
    if (n == 0) continue;
    // The outer step reads theta, v, the mean and Delta and writes theta and v;
    // the merge reads and writes the parameters: ~9 fp32 passes.
    c.main_seconds = kernel(8.0 * n, 36.0 * n);
    if (!cfg.outer_comp) {
      // The tied embedding's copy is a message of its own (the engine's rule).
      c.link_seconds = allreduce(4.0 * tied[f]) + allreduce(4.0 * (n - tied[f]));
      c.bytes = ring * 4.0 * n;
    } else {
      const double w = 4.0 * words[f];
      c.link_seconds = ring_allgather_seconds(w * D, D, link, sharing);
      c.bytes = D > 1 ? (D - 1.0) * w : 0.0;
      // Encode: Delta_i and a few passes (as DP's byte methods); decode and sum D wires.
      c.main_seconds += kernel(4.0 * n, 16.0 * n + w) + kernel(2.0 * n * D, 4.0 * n * (1 + 2.0 * D) + w * D);
      // Error feedback: the residual added before encoding, the own wire decoded and the new residual kept.
      if (cfg.outer_error_feedback) c.main_seconds += kernel(3.0 * n, 16.0 * n + w);
    }
    if (D <= 1) c.link_seconds = 0, c.bytes = 0;
  }
  return out;
}

}  // namespace occ::plan

#include "compress/lep_probe.h"

#include <cmath>

namespace occ {

void LepProbe::observe(const std::vector<float>& e, const float* x, const float* grad, PhaseTimers& timers) {
  const size_t n = e.size();
  if (prev_input_.size() == n) {
    double dot = 0, ee = 0, dd = 0, gg = 0, xx = 0, esum = 0, dsum = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = double(x[i]) - prev_input_[i], ei = e[i];
      dot += ei * d;
      ee += ei * ei;
      dd += d * d;
      gg += double(grad[i]) * grad[i];
      xx += double(x[i]) * x[i];
      esum += ei;
      dsum += d;
    }
    timers.count("lep_samples", 1);
    timers.count("lep_cosine", ee > 0 && dd > 0 ? dot / std::sqrt(ee * dd) : 0.0);
    timers.count("lep_error_mean", esum / double(n));
    timers.count("lep_delta_mean", dsum / double(n));
    // LEP's premises, as ratios: a residual small next to the gradient it joins,
    // and activations that micro-batches share (delta small next to x).
    timers.count("lep_error_ratio", gg > 0 ? std::sqrt(ee / gg) : 0.0);
    timers.count("lep_delta_ratio", xx > 0 ? std::sqrt(dd / xx) : 0.0);
  }
  prev_input_.assign(x, x + n);
}

}  // namespace occ

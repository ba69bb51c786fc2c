#pragma once
// --check-lep: measures lazy error propagation's premises on a backward link
// (paper Fig. 11). The LEP residual left by micro-batch k-1 joins micro-batch
// k's gradient; that is sound when the residual is small next to the gradient
// and when consecutive micro-batches' inputs barely differ. Each observation
// adds to the iteration's counters: lep_samples, lep_cosine (residual vs input
// change), lep_error_mean, lep_delta_mean, lep_error_ratio, lep_delta_ratio.
#include <vector>

#include "core/timer.h"

namespace occ {

class LepProbe {
 public:
  // residual: the link's LEP residual before micro-batch k is encoded (n
  // floats); x: micro-batch k's input activations, grad: its fresh gradient
  // (both the slices of n floats that the link carries).
  void observe(const std::vector<float>& residual, const float* x, const float* grad, PhaseTimers& timers);

 private:
  std::vector<float> prev_input_;  // micro-batch k-1's input slice
};

}  // namespace occ

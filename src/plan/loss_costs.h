#pragma once
// Measured loss costs of compression (python3 -m occtools compressors's
// compressors.json), for `plan --auto --max-loss-increase`: what each method
// cost in final validation loss, per link class (pp_fwd, pp_bwd, dp), and
// what the measured combinations cost together.
//
// A plan's expected loss cost, in % of the baseline's final validation loss:
//   1. a measured variant with exactly the plan's compression on all three
//      links: its cost ("measured");
//   2. otherwise the sum of each compressed link's single-link cost
//      ("sum of per-link measurements"; an assumption that the costs add,
//      stated with every plan).
// DiLoCo is a setting of the dp link (method "diloco"), measured by
// python3 -m occtools diloco-quality into a file of the same schema that load_more()
// adds (docs/results/diloco-quality.json).
// Each cost is the worst seed's (max over seeds), clamped at 0 (a method that
// happened to beat the baseline is not counted as a gain). EC and SC only
// compress a subset of what the method compresses without them, so a
// measurement without EC / SC stands for a plan with them (an upper bound); a
// link whose setting was never measured makes the plan's cost unknown, and
// --auto does not choose it.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "plan/model_cost.h"

namespace occ::plan {

// One link's compression as the sweep records it.
struct LinkSetting {
  std::string method;  // powersgd, int8, ...
  int rank = 0;        // powersgd
  double fraction = 0; // topk; topk2's density (the sweep's "density", or "fraction" in older files)
  bool stochastic = false;  // block methods (mxfp4, nvfp4, int4, int3): stochastic rounding
  int rotation = 0;  // block methods: the Hadamard rotation's block (the sweep's "hadamard[:B]"; 0: none)
  double high_fraction = kDefaultHighFraction;  // adaptive: the share of tiles at 4 bits
  // The pipeline links' lossless stage ("rans"): the same training (the sweep checks its losses
  // bit for bit), so it does not enter the cost's match; a plan keeps it when it was measured.
  std::string lossless;
  bool error_feedback = false, lep = false, ec = false;
  double lep_decay = 1.0;  // LEP's decay (--inter-grad-comp-lep-decay; 1: the paper's LEP)
  int sc = 0;          // --selective-grad-comp-way K (0: every stage)
  double warmup = 0;   // --grad-comp-warm-up
  // method "diloco" (dp only): DiLoCo instead of per-step DP averaging (train/diloco_config.h).
  int inner_steps = 0, fragments = 1, overlap = 0;
  double mixing = 0.5, outer_lr = 0.7, outer_momentum = 0.9;  // mixing counts only with overlap > 0
  std::string outer_comp;  // the outer gradients' byte method ("": fp32)
  bool outer_stochastic = false;  // ... with stochastic rounding (block methods)
  int outer_rotation = 0;         // ... behind a Hadamard rotation of this block (0: none)
  double outer_fraction = 0;      // ... topk's fraction or topk2's density (0: the engine's default)
  bool outer_error_feedback = false;  // --diloco-outer-comp-error-feedback
  bool diloco() const { return method == "diloco"; }
  std::string describe() const;
};

enum class LinkClass { Forward = 0, Backward = 1, DataParallel = 2 };
inline const char* link_class_name(LinkClass c) {
  return c == LinkClass::Forward ? "pp_fwd" : c == LinkClass::Backward ? "pp_bwd" : "dp";
}

struct MeasuredCost {
  std::array<std::optional<LinkSetting>, 3> links;  // by LinkClass; nullopt: uncompressed
  std::string variant;
  double max_pct = 0, mean_pct = 0;  // final validation loss vs baseline, %
};

struct LossEstimate {
  bool known = false;
  double pct = 0;    // expected loss cost, % (>= 0)
  std::string how;   // "measured as VARIANT" or "sum of per-link measurements: ..."
};

class LossCostTable {
 public:
  // Reads compressors.json; throws occ::UsageError naming the file and the problem.
  static LossCostTable load(const std::string& path);
  // Adds another file's measurements (e.g. the DiLoCo experiment's); throws like load().
  void load_more(const std::string& path);
  const std::vector<std::string>& paths() const { return paths_; }
  // The single-link measurements of one link class (complete variants only).
  const std::vector<MeasuredCost>& singles(LinkClass c) const { return singles_[size_t(c)]; }
  // Every setting measured on link class c, alone or in a measured combination (a method the
  // sweep ran only in combinations, such as the block codecs on both pipeline links, is still
  // a candidate: estimate() costs it by its combination), each once.
  std::vector<LinkSetting> measured_settings(LinkClass c) const;
  // The plan's compression on each link, as LinkSettings.
  static std::array<std::optional<LinkSetting>, 3> settings_of(const PlanConfig& cfg);
  LossEstimate estimate(const PlanConfig& cfg) const;
  const std::string& path() const { return path_; }

 private:
  struct Source {
    const char* flag;  // the option naming the file
    const char* file;  // its usual name
    const char* command, *report;  // what writes it; what rebuilds it from its json
  };
  void read(const std::string& path, const Source& source);
  std::string path_;
  std::vector<std::string> paths_;
  std::array<std::vector<MeasuredCost>, 3> singles_;
  std::vector<MeasuredCost> variants_;  // every complete variant, for exact matches
};

// Does measurement `m` stand for plan setting `p` (same method and parameter,
// same error feedback / LEP; m's EC / SC no more selective than p's; DiLoCo:
// every setting the same)?
bool covers(const LinkSetting& m, const LinkSetting& p);
// Does it equal it exactly?
bool same_setting(const LinkSetting& a, const LinkSetting& b);

}  // namespace occ::plan

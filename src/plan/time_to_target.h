#pragma once
// Measured iterations to a target loss (python3 -m occtools race's
// time-to-target.json), for `plan --auto --objective time-to-target`: a
// plan's quality cost is the iterations it needs to reach the baseline's
// validation loss at iteration N, taken from the race's measured curves; its
// predicted time to target is the planner's time per iteration times those
// iterations.
//
// The file (schema "occ-time-to-target/1") holds regimes; each has a target
// and variants, each variant its compression flags (train_flags) and one
// iterations_to_target per seed (null: not reached by 2N). Other fields
// (bytes, measured times, the decomposition check) are for the report and
// are not read here.
//
// A plan's iterations, by the rules of compressors.json (loss_costs.h):
//   1. a variant with exactly the plan's compression on all three links
//      ("measured as variant X");
//   2. otherwise a variant whose settings cover the plan's (the same methods,
//      the plan adding EC / SC: it compresses a subset of what the variant
//      compressed, so the variant's iterations bound the plan's from above;
//      "bounded by variant X");
//   3. otherwise unknown: the plan is not eligible (the per-link sum of
//      compressors.json has no counterpart: iterations do not add).
// FE is lossless and matches either way. The iterations are the median over
// seeds; a variant that missed the target on any seed is "not reached" and
// the plan is not eligible.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "plan/loss_costs.h"

namespace occ::plan {

inline constexpr const char* kTimeToTargetSchema = "occ-time-to-target/1";

// A variant's compression (parsed from its train_flags by the caller).
struct PlanCompression {
  ActivationCompressionConfig activation;
  CompressedBackpropConfig cb;
  GradCompressionConfig grad;
  bool emb_comm_opt = false;
  DilocoConfig diloco;
  // `base` with this compression (and nothing else changed).
  PlanConfig applied_to(const PlanConfig& base) const;
};

struct TargetVariant {
  std::string name;
  std::vector<std::string> train_flags;               // compression flags only
  std::vector<std::optional<double>> iterations;      // per seed; nullopt: not reached by 2N
  // Set by the caller, who parses train_flags the way train does (the apps
  // layer): the variant's compression on each link class, on the plan's layout.
  PlanCompression compression;
  std::array<std::optional<LinkSetting>, 3> links;
  bool links_set = false;
  // Sets compression and, on `layout`'s T, P, D, the links it compresses.
  void set_compression(const PlanCompression& c, const PlanConfig& layout);
  bool reached() const;
  double median_iterations() const;  // over seeds (only when reached())
};

struct TargetRegime {
  std::string name, real_setting;
  double baseline_iteration = 0;  // N: where the baseline's validation loss is the target
  double target_loss = 0;
  std::vector<TargetVariant> variants;
};

struct IterationsEstimate {
  bool known = false;    // a variant measures or bounds it
  bool reached = false;  // ... and it reached the target on every seed
  double iterations = 0; // median over seeds
  std::string how;       // "measured as variant X (seeds ...)", "bounded by ...", or why unknown
};

class TimeToTargetTable {
 public:
  // Reads the file; throws occ::UsageError (one line naming the file, the
  // problem and the fix) when it cannot be opened or is not of the schema.
  static TimeToTargetTable load(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<TargetRegime>& regimes() const { return regimes_; }
  std::vector<TargetRegime>& regimes() { return regimes_; }
  // The regime named `name`; with an empty name the only one, or nullptr when
  // the file holds several. Throws UsageError for a name the file lacks.
  const TargetRegime* select(const std::string& name) const;
  std::string names() const;  // "a, b, c"

 private:
  std::string path_;
  std::vector<TargetRegime> regimes_;
};

// The iterations the plan with compression `want` (LossCostTable::settings_of)
// needs, from the regime's variants (whose links must be set).
IterationsEstimate iterations_to_target(const TargetRegime& regime,
                                        const std::array<std::optional<LinkSetting>, 3>& want);

// The objective's choice among candidates: each with a predicted time per
// iteration and its iterations. The eligible one (known and reached) with the
// lowest predicted time to target; among those within `tolerance` of it, the
// fewest iterations (the least lossy), then the lowest time. Returns the index,
// or -1 when none is eligible.
struct TargetCandidate {
  double seconds_per_iteration = 0;
  IterationsEstimate iterations;
  bool eligible() const { return iterations.known && iterations.reached; }
  double time_to_target() const { return seconds_per_iteration * iterations.iterations; }
};
int choose_by_time_to_target(const std::vector<TargetCandidate>& candidates, double tolerance);

}  // namespace occ::plan

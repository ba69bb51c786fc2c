#pragma once
// `plan --auto --objective ...`: which objective chooses the plan, and the
// time-to-target objective's input (time-to-target.json, beside
// compressors.json) and output. plan.cpp calls these.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "plan/auto_plan.h"
#include "plan/time_to_target.h"
#include "train/options.h"

namespace occ::cmd {

enum class PlanObjective { Time, LossBudget, TimeToTarget };
const char* objective_name(PlanObjective o);

struct ObjectiveFlags {
  std::string objective;          // --objective ("" : the default)
  std::string time_to_target_json;  // --time-to-target-json ("" : beside --compressors-json)
  std::string regime;             // --regime
};
void add_objective_flags(CLI::App& app, ObjectiveFlags& f);

// time-to-target.json beside compressors.json (the same directory), unless given.
std::string time_to_target_path(const ObjectiveFlags& f, const std::string& compressors_json);

struct ObjectiveChoice {
  PlanObjective objective = PlanObjective::Time;
  std::unique_ptr<plan::TimeToTargetTable> table;  // time-to-target: the file, its variants' compression set
  const plan::TargetRegime* regime = nullptr;
  std::string note;  // why the default fell back to another objective ("" : none)
};

// Resolves the objective (UsageError, one line, for an unknown name, a
// conflict, an unreadable or ill-formed file, a regime the file lacks):
//   --objective given: that one;
//   else --max-loss-increase given: loss-budget (as before);
//   else a time-to-target.json found (given, or beside compressors.json) and
//   its regime determined (--regime, or the file's only one): time-to-target;
//   else time (today's time-only search), with a note when a file was found
//   but its regime was not.
// `base` is the plan (its layout decides the links a variant's flags
// compress); `opt` its train options (the variants' flags are parsed over them
// the way train parses its own).
ObjectiveChoice resolve_objective(const CLI::App& app, const ObjectiveFlags& f, bool auto_mode, bool budget_given,
                                  const std::string& compressors_json, const TrainOptions& opt,
                                  const plan::PlanConfig& base);

// The time-to-target choice and the numbers behind it.
void print_time_to_target(const ObjectiveChoice& c, const plan::AutoResult& a, double tolerance);

}  // namespace occ::cmd

#include "apps/commands/diloco_flags.h"

#include <fmt/format.h>

#include "core/error.h"

namespace occ::cmd {

void add_diloco_flags(CLI::App& app, TrainOptions& o) {
  DilocoConfig& d = o.diloco;
  app.add_option("--diloco-inner-steps", d.inner_steps,
                 "DiLoCo: each data-parallel replica takes H inner steps with its own AdamW and no gradient "
                 "all-reduce, then the outer step averages the replicas' parameter change (0: off)")
      ->capture_default_str();
  app.add_option("--diloco-outer-lr", d.outer_lr, "DiLoCo: the outer SGD's learning rate")->capture_default_str();
  app.add_option("--diloco-outer-momentum", d.outer_momentum, "DiLoCo: the outer SGD's Nesterov momentum")
      ->capture_default_str();
  app.add_option("--diloco-fragments", d.fragments,
                 "Streaming DiLoCo: F fragments of every F-th layer, each synced every H steps at its own offset")
      ->capture_default_str();
  app.add_option("--diloco-overlap-steps", d.overlap_steps,
                 "Streaming DiLoCo: a fragment's outer update lands this many inner steps after its all-reduce "
                 "starts, which runs beside them")
      ->capture_default_str();
  app.add_option("--diloco-mixing", d.mixing,
                 "Streaming DiLoCo with overlap: the local share alpha where an update lands (local <- alpha local "
                 "+ (1 - alpha) outer)")
      ->capture_default_str();
  app.add_option_function<std::string>(
      "--diloco-outer-comp-method",
      [&d](const std::string& v) {
        if (v == "none")
          d.outer_comp.reset();
        else
          d.outer_comp = parse_method(v, "--diloco-outer-comp-method", DilocoConfig::outer_methods(), "none");
      },
      "DiLoCo: send the outer gradients as none (fp32 all-reduce, default) | int8 | fp8-e4m3 | fp8-e5m2 | topk | "
      "sign | mxfp4 | nvfp4 | int4 | int3 | int2 | lloydmax2 | lloydmax3 | topk2 (all-gathered, decoded and summed in "
      "fp32)");
  app.add_option("--diloco-outer-comp-topk-fraction", d.outer_topk_fraction,
                 "DiLoCo outer gradients with topk: the share of each row's entries sent")
      ->capture_default_str();
  app.add_option("--diloco-outer-comp-topk-density", d.outer_topk_density,
                 "DiLoCo outer gradients with topk2: the share of each chunk's values sent, in (0, 0.25]")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--diloco-outer-comp-rounding",
         [&d](const std::string& v) { d.outer_stochastic = parse_rounding(v, "--diloco-outer-comp-rounding"); },
         "DiLoCo outer gradients with a block method: nearest (ties to even) | stochastic")
      ->default_str("nearest");
  app.add_option_function<std::string>(
         "--diloco-outer-comp-rotation",
         [&d](const std::string& v) { d.outer_rotation = parse_rotation(v, "--diloco-outer-comp-rotation"); },
         "DiLoCo outer gradients with a block method: none | hadamard | hadamard:BLOCK (a randomized Hadamard "
         "rotation, keyed by the outer step, before the code)")
      ->default_str("none");
  app.add_flag("--diloco-outer-comp-error-feedback,!--no-diloco-outer-comp-error-feedback", d.outer_error_feedback,
               "DiLoCo outer gradients with a method: each replica keeps what the codec dropped from its outer "
               "gradient (fp32) and adds it to the next one before encoding (the bytes sent are unchanged; off by "
               "default: docs/diloco.md has the measurement)");
  app.add_option("--debug-diloco-dump", o.debug_diloco_dump,
                 "test only: write every outer step's inputs and results to this directory")
      ->group("");  // hidden
}

void refuse_inapplicable_diloco_flags(const CLI::App& app, const TrainOptions& o) {
  auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  auto refuse = [](const char* flag, const char* why, const char* fix) {
    throw UsageError(fmt::format("{} {}; drop it or {}", flag, why, fix));
  };
  if (!o.diloco.enabled()) {
    for (const char* f : {"--diloco-outer-lr", "--diloco-outer-momentum", "--diloco-fragments", "--diloco-overlap-steps",
                          "--diloco-mixing", "--diloco-outer-comp-method", "--diloco-outer-comp-topk-fraction",
                          "--diloco-outer-comp-topk-density",
                          "--diloco-outer-comp-rounding", "--diloco-outer-comp-rotation",
                          "--diloco-outer-comp-error-feedback", "--debug-diloco-dump"})
      if (given(f)) refuse(f, "has no effect without --diloco-inner-steps", "add --diloco-inner-steps H");
    return;
  }
  if (given("--diloco-mixing") && o.diloco.overlap_steps == 0)
    refuse("--diloco-mixing",
           "merges an update that lands after overlapped inner steps, and --diloco-overlap-steps is 0 (the replicas "
           "restart from the outer parameters)",
           "add --diloco-overlap-steps");
  if (given("--diloco-outer-comp-topk-fraction") && o.diloco.outer_comp != CompressionMethod::Topk)
    refuse("--diloco-outer-comp-topk-fraction", "applies only to --diloco-outer-comp-method topk",
           "use --diloco-outer-comp-method topk");
  if (given("--diloco-outer-comp-topk-density") && o.diloco.outer_comp != CompressionMethod::Topk2)
    refuse("--diloco-outer-comp-topk-density", "applies only to --diloco-outer-comp-method topk2",
           "use --diloco-outer-comp-method topk2");
  if (given("--diloco-outer-comp-error-feedback") && !o.diloco.outer_comp)
    refuse("--diloco-outer-comp-error-feedback",
           "keeps what the outer gradients' codec drops, and they are sent uncompressed",
           "add --diloco-outer-comp-method (e.g. topk2)");
  for (const char* f : {"--diloco-outer-comp-rounding", "--diloco-outer-comp-rotation"})
    if (given(f) && !(o.diloco.outer_comp && method_is_block(*o.diloco.outer_comp)))
      throw UsageError(fmt::format("{} applies only to --diloco-outer-comp-method {}; drop it or use one of those "
                                   "methods",
                                   f, block_method_names()));
}

}  // namespace occ::cmd

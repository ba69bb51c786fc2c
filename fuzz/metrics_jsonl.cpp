// Fuzzes the metrics JSONL reader of `plan --calibrate` (metrics_layout and
// calibrate: per-rank timers, layout, link fits). The model and batch are those
// of the seed corpus' run (fuzz/make-seeds.sh): layers 4, hidden 64, heads 4,
// seq 32, vocabulary 512, micro-batch 2, global batch 16.
#include "fuzz/fuzz_util.h"
#include "plan/calibrate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  const std::string path = fuzz::scratch_dir() + "/metrics.jsonl";
  fuzz::write_file(path, fuzz::as_view(data, size));
  fuzz::parse_or_refuse([&] {
    int tp = 0, pp = 0, dp = 0;
    plan::metrics_layout(path, tp, pp, dp);
    plan::PlanConfig cfg;
    cfg.model.num_layers = 4;
    cfg.model.hidden_size = 64;
    cfg.model.num_attention_heads = 4;
    cfg.model.seq_length = cfg.model.max_position_embeddings = 32;
    cfg.model.vocab_size = 512;
    cfg.micro_batch_size = 2;
    cfg.global_batch_size = 16;
    cfg.cluster.nodes = tp * pp * dp;
    const plan::Calibration c = plan::calibrate(path, cfg, /*inter_from_flags=*/false, /*intra_from_flags=*/false);
    (void)c.report.size();
  });
  return 0;
}

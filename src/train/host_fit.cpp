#include "train/host_fit.h"

#include "core/error.h"
#include "core/host_memory.h"

namespace occ {

void check_fits_host(const TrainOptions& o, const ParallelLayout& l) {
  const double memory = host_memory_bytes();
  if (memory <= 0) return;
  const GptConfig& m = o.model;
  const double C = m.hidden_size, V = m.padded_vocab_size(), F = m.ffn_hidden_size();
  const double per_layer = C * m.qkv_size() + C * C + (m.swiglu ? 3.0 : 2.0) * C * F + 6.0 * C;
  const double params = V * C * (m.tied_embeddings() ? 1.0 : 2.0) + double(m.max_position_embeddings) * C +
                        double(m.num_layers) * per_layer;
  const double state = params / (double(l.tp_size) * l.pp_size) * 4.0 * (o.diloco.enabled() ? 6.0 : 4.0);
  const double gib = double(1 << 30);
  OCC_CHECK(state <= memory,
            "the model's {:.3g} parameters (--num-layers {}, --hidden-size {}, vocabulary {}) need at least {:.1f} GiB "
            "per rank for weights, gradients and Adam's moments over tensor {} x pipeline {} ranks, more than this "
            "machine's {:.1f} GiB; use a smaller model, or more --tensor-model-parallel-size / "
            "--pipeline-model-parallel-size",
            params, m.num_layers, m.hidden_size, m.padded_vocab_size(), state / gib, l.tp_size, l.pp_size,
            memory / gib);
  const double activations = double(o.micro_batch_size) * m.seq_length * C * 4.0 * (m.num_layers / l.pp_size) /
                             (o.sequence_parallel ? l.tp_size : 1);
  OCC_CHECK(activations <= memory,
            "a micro-batch of --micro-batch-size {} x --seq-length {} at --hidden-size {} needs at least {:.1f} GiB "
            "of activations for the {} layers of a stage, more than this machine's {:.1f} GiB; lower "
            "--micro-batch-size",
            o.micro_batch_size, m.seq_length, m.hidden_size, activations / gib, m.num_layers / l.pp_size,
            memory / gib);
}

}  // namespace occ

#include "compress/compression_state.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "core/tensor_file.h"

namespace occ {

std::string CompressionState::file_name(int dp_rank) { return fmt::format("compress_dp_{:03d}.bin", dp_rank); }

TensorFileWriter CompressionState::state(const nlohmann::json& meta) const {
  TensorFileWriter w(meta);
  for (const CompressedBackprop* link : cb_) link->save_state(w);
  if (dp_) dp_->save_state(w);
  return w;
}

void CompressionState::save(const std::string& path, const nlohmann::json& meta) const { state(meta).write(path); }

CompressionNotice CompressionState::load(const std::string& path) {
  const bool saved = std::filesystem::exists(path);
  const bool wanted = !empty();
  if (saved && !wanted) return CompressionNotice::Unused;
  if (!saved && wanted) return CompressionNotice::Missing;
  if (!saved || !wanted) return CompressionNotice::None;
  TensorFileReader r = TensorFileReader::open(path);
  bool complete = true;
  for (CompressedBackprop* link : cb_) complete &= link->load_state(r);
  if (dp_) complete &= dp_->load_state(r);
  return complete ? CompressionNotice::None : CompressionNotice::Partial;
}

void CompressionState::announce(MpiCommunicator& world, CompressionNotice notice, bool print) {
  // Which situations occurred on any rank (one sum per notice).
  double flags[3] = {notice == CompressionNotice::Unused ? 1.0 : 0.0, notice == CompressionNotice::Missing ? 1.0 : 0.0,
                     notice == CompressionNotice::Partial ? 1.0 : 0.0};
  world.allreduce_sum(flags, 3, Traffic::Other);
  if (!print) return;
  if (flags[0] > 0) std::printf("notice: checkpoint holds compressor state that this run does not use (no compression, or stateless "
                "methods only)\n");
  if (flags[1] > 0)
    std::printf("notice: checkpoint has no compressor state; LEP errors, DP error feedback and warm starts start "
                "fresh\n");
  if (flags[2] > 0)
    std::printf("notice: part of the checkpoint's compressor state does not fit this run's compression (other "
                "technique, method or rank); that part starts fresh\n");
}

}  // namespace occ

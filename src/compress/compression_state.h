#pragma once
// The compressor state a rank saves with a checkpoint, so a resumed run
// continues bit-exactly: CB's outgoing links (warm start, LEP residual; one
// per model chunk under the interleaved schedule) and DP
// compression (warm starts, error feedback). Forward activation compression
// is stateless. One file per rank, since DP ranks'
// errors differ; where it goes in the checkpoint is the caller's business.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/mpi_communicator.h"
#include "compress/compressed_backprop.h"
#include "compress/dp_compressor.h"
#include "core/tensor_file.h"

namespace occ {

// What loading found, reported once every rank has loaded (see announce).
enum class CompressionNotice {
  None = 0,
  Unused = 1,   // the checkpoint holds state this uncompressed run ignores
  Missing = 2,  // this run compresses but the checkpoint holds no state
  Partial = 3,  // part of the saved state does not fit this run's compression
};

class CompressionState {
 public:
  // Links may be null and dp may be null (that technique is off on this
  // rank, or the chunk sends nothing); not owned. Stateless compressors hold
  // nothing to save and are dropped here.
  CompressionState(const std::vector<CompressedBackprop*>& cb_links_out, DataParallelCompressor* dp)
      : dp_(dp && dp->stateful() ? dp : nullptr) {
    for (CompressedBackprop* link : cb_links_out)
      if (link && link->stateful()) cb_.push_back(link);
  }

  // Nothing to save or load on this rank.
  bool empty() const { return cb_.empty() && !dp_; }
  // The file's name inside the rank's checkpoint shard directory.
  static std::string file_name(int dp_rank);
  // Writes the state to `path` with `meta` as the file's metadata.
  void save(const std::string& path, const nlohmann::json& meta) const;
  // What save() writes, in memory.
  TensorFileWriter state(const nlohmann::json& meta) const;
  // Loads what fits from `path` (which may be absent); the rest starts fresh.
  CompressionNotice load(const std::string& path);
  // Collective over `world`: prints (where `print`) one line per kind of
  // notice any rank had, so a job reports each situation once.
  static void announce(MpiCommunicator& world, CompressionNotice notice, bool print);

 private:
  std::vector<CompressedBackprop*> cb_;
  DataParallelCompressor* dp_;
};

}  // namespace occ

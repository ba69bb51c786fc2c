#include "compress/dp_compressor.h"

#include "compress/dp_gather_compression.h"
#include "compress/dp_powersgd.h"

namespace occ {

std::unique_ptr<DataParallelCompressor> make_dp_compressor(const GradCompressionConfig& cfg,
                                                           std::vector<TensorDesc> tensors, uint64_t seed,
                                                           kernels::Ops& ops) {
  if (cfg.method == CompressionMethod::PowerSgd)
    return std::make_unique<DataParallelPowerSgd>(cfg, std::move(tensors), seed, ops);
  return std::make_unique<DataParallelGatherCompression>(cfg, std::move(tensors), seed, ops);
}

}  // namespace occ

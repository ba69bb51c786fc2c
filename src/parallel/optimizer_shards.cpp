#include "parallel/optimizer_shards.h"

#include <algorithm>

#include "core/error.h"

namespace occ {

OptimizerShards::OptimizerShards(std::vector<BufferSpan> regions, int64_t total, MpiCommunicator& dp)
    : regions_(std::move(regions)), total_(total), dp_(dp) {
  std::sort(regions_.begin(), regions_.end(), [](const BufferSpan& a, const BufferSpan& b) { return a.offset < b.offset; });
  int64_t at = 0;
  for (const BufferSpan& r : regions_) {
    OCC_CHECK(r.offset == at && r.numel >= 0, "internal: optimizer shard regions do not tile the buffer at {}", at);
    at += r.numel;
    const MpiCommunicator::Chunk c = dp_.owned_chunk(size_t(r.numel));
    owned_.push_back({r.offset + int64_t(c.lo), int64_t(c.len)});
    owned_numel_ += int64_t(c.len);
  }
  OCC_CHECK(at == total, "internal: optimizer shard regions cover {} of {} parameters", at, total);
}

void allgather_owned_chunks(MpiCommunicator& comm, float* region, size_t n, Precision wire,
                            std::vector<uint16_t>& scratch, Traffic traffic) {
  if (wire == Precision::Fp32) {
    comm.allgather_chunks(region, n, traffic);
    return;
  }
  if (comm.size() == 1 || n == 0) return;
  scratch.resize(n);
  const MpiCommunicator::Chunk own = comm.owned_chunk(n);
  for (size_t i = own.lo; i < own.lo + own.len; ++i) scratch[i] = sixteen_bits(wire, region[i]);
  comm.allgather_chunks(TensorRef(scratch.data(), wire), n, traffic);
  for (size_t i = 0; i < n; ++i)
    if (i < own.lo || i >= own.lo + own.len) region[i] = sixteen_value(wire, scratch[i]);
}

void OptimizerShards::allgather(float* buffer, Traffic traffic, Precision wire) const {
  for (const BufferSpan& r : regions_)
    allgather_owned_chunks(dp_, buffer + r.offset, size_t(r.numel), wire, wire_, traffic);
}

std::vector<float> OptimizerShards::gather_full(const std::vector<float>& compact, Traffic traffic, bool keep) const {
  OCC_CHECK(int64_t(compact.size()) == owned_numel_, "internal: {} owned values, expected {}", compact.size(),
            owned_numel_);
  std::vector<float> full(keep ? size_t(total_) : 0), region;
  int64_t at = 0;  // position in compact
  for (size_t i = 0; i < regions_.size(); ++i) {
    const BufferSpan& r = regions_[i];
    const BufferSpan& o = owned_[i];
    region.assign(size_t(r.numel), 0.0f);
    std::copy_n(compact.begin() + at, o.numel, region.begin() + (o.offset - r.offset));
    at += o.numel;
    dp_.allgather_chunks(region.data(), region.size(), traffic);
    if (keep) std::copy(region.begin(), region.end(), full.begin() + r.offset);
  }
  return full;
}

std::vector<float> OptimizerShards::take_owned(const std::vector<float>& full) const {
  OCC_CHECK(int64_t(full.size()) == total_, "internal: {} values, expected {}", full.size(), total_);
  std::vector<float> compact;
  compact.reserve(size_t(owned_numel_));
  for (const BufferSpan& o : owned_) compact.insert(compact.end(), full.begin() + o.offset, full.begin() + o.offset + o.numel);
  return compact;
}

}  // namespace occ

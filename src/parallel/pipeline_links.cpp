#include "parallel/pipeline_links.h"

#include <fmt/format.h>

#include <deque>
#include <utility>
#include <vector>

#include "comm/nccl_communicator.h"
#include "core/buffer.h"
#include "core/error.h"

namespace occ {

namespace {

// Over MPI: the pair's own communicator, where one tag keeps the messages in order.
class MpiLink final : public PipelineLink {
 public:
  explicit MpiLink(std::unique_ptr<MpiCommunicator> pair) : pair_(std::move(pair)) {}
  uint64_t send_async(const void* data, size_t bytes, Traffic traffic, const char* what) override {
    pending_.push_back(pair_->isend(data, bytes, peer(), kTag, traffic, what));
    return issued_++;
  }
  uint64_t sends_done() override {
    while (!pending_.empty() && pair_->test(pending_.front())) {
      pending_.pop_front();
      ++done_;
    }
    return done_;
  }
  void wait_sends() override {
    for (auto& r : pending_) pair_->wait(r);
    pending_.clear();
    done_ = issued_;
  }
  void recv(void* data, size_t bytes, const char* what) override {
    auto r = pair_->irecv(data, bytes, peer(), kTag, what);
    // MPI delivers a shorter message without complaint; NCCL would wait for
    // ever on it. Both ends must agree on every size, so the CPU runs check.
    const size_t got = pair_->wait_received(r);
    OCC_CHECK(got == bytes,
              "internal: the pipeline link delivered {} bytes of {} where {} were expected: the two stages disagree on "
              "the message's size",
              got, what, bytes);
  }
  size_t recv_upto(void* data, size_t capacity, const char* what) override {
    auto r = pair_->irecv(data, capacity, peer(), kTag, what);
    return pair_->wait_received(r);
  }

 private:
  static constexpr int kTag = 0;
  int peer() const { return 1 - pair_->rank(); }
  std::unique_ptr<MpiCommunicator> pair_;
  std::deque<MpiCommunicator::Request> pending_;
  uint64_t issued_ = 0, done_ = 0;
};

// Over NCCL: device memory, on the group's own stream.
class NcclLink final : public PipelineLink {
 public:
  explicit NcclLink(std::unique_ptr<NcclCommunicator> pair) : pair_(std::move(pair)) {}
  uint64_t send_async(const void* data, size_t bytes, Traffic traffic, const char*) override {
    return pair_->send_async(data, bytes, 1 - pair_->rank(), traffic);
  }
  uint64_t sends_done() override { return pair_->sends_done(); }
  void wait_sends() override { pair_->wait_sends(); }
  void recv(void* data, size_t bytes, const char*) override { pair_->recv(data, bytes, 1 - pair_->rank()); }
  size_t recv_upto(void*, size_t, const char* what) override {
    throw Error(fmt::format("the {} vary in size (a lossless stage), which NCCL pipeline links cannot receive; drop "
                            "the --*-comp-lossless flag",
                            what));
  }

 private:
  std::unique_ptr<NcclCommunicator> pair_;
};

// Link l of a kind joins stage l and stage l + 1 (mod P). Forward: l sends.
// Backward: l + 1 sends.
struct LinkEnds {
  int sender, receiver;
};
LinkEnds link_ends(int l, bool forward, int P) {
  const int lower = l, upper = (l + 1) % P;
  return forward ? LinkEnds{lower, upper} : LinkEnds{upper, lower};
}

}  // namespace

PipelineLinks PipelineLinks::create(MpiCommunicator& pp, bool ring, bool nccl, double timeout_s, std::string* why) {
  PipelineLinks links;
  links.on_device = nccl;
  const int P = pp.size(), me = pp.rank();
  const int num_links = P < 2 ? 0 : ring ? P : P - 1;
  MPI_Group all;
  MPI_Comm_group(pp.handle(), &all);
  std::vector<std::pair<PipelineLink*, bool>> formed;  // this rank's links in order, and does it send
  for (int l = 0; l < num_links; ++l) {
    for (bool forward : {true, false}) {
      const LinkEnds ends = link_ends(l, forward, P);
      if (me != ends.sender && me != ends.receiver) continue;
      const bool sends = me == ends.sender;
      PipelineLink*& slot = forward ? (sends ? links.forward_out : links.forward_in)
                                    : (sends ? links.backward_out : links.backward_in);
      // The pair's own MPI group, ranks ordered sender first; collective over the two only.
      const int members[2] = {ends.sender, ends.receiver};
      MPI_Group pair;
      MPI_Group_incl(all, 2, members, &pair);
      MPI_Comm pair_comm = MPI_COMM_NULL;
      MPI_Comm_create_group(pp.handle(), pair, 2 * l + (forward ? 0 : 1), &pair_comm);
      MPI_Group_free(&pair);
      auto group = std::make_unique<MpiCommunicator>(
          pair_comm, pp.counters(), timeout_s,
          fmt::format("{} ({} {}>{})", pp.name(), forward ? "activations" : "gradients", ends.sender, ends.receiver));
      if (!nccl) {
        slot = links.owned_.emplace_back(std::make_unique<MpiLink>(std::move(group))).get();
        continue;
      }
      std::string reason;
      if (auto formed_nccl = NcclCommunicator::create(*group, timeout_s, &reason))
        slot = links.owned_.emplace_back(std::make_unique<NcclLink>(std::move(formed_nccl))).get();
      else if (why && why->empty())
        *why = reason;
      if (slot) formed.push_back({slot, sends});
    }
  }
  MPI_Group_free(&all);
  // NCCL connects a link on its first message: one byte each, in the same order.
  std::unique_ptr<DeviceBuffer<float>> byte_buffer;
  for (auto [link, sends] : formed) {
    if (!byte_buffer) byte_buffer = std::make_unique<DeviceBuffer<float>>(Device::Cuda, 1);
    if (sends) {
      link->send_async(byte_buffer->data(), 1, Traffic::Other, "a link's first byte");
      link->wait_sends();
    } else {
      link->recv(byte_buffer->data(), 1, "a link's first byte");
    }
  }
  return links;
}

PipelineLinks& PipelineLinks::operator=(PipelineLinks&& other) noexcept {
  if (this == &other) return *this;
  close();
  forward_out = std::exchange(other.forward_out, nullptr);
  forward_in = std::exchange(other.forward_in, nullptr);
  backward_out = std::exchange(other.backward_out, nullptr);
  backward_in = std::exchange(other.backward_in, nullptr);
  on_device = std::exchange(other.on_device, false);
  owned_ = std::move(other.owned_);
  other.owned_.clear();
  return *this;
}

void PipelineLinks::close() {
  forward_out = forward_in = backward_out = backward_in = nullptr;
  for (auto& link : owned_) link.reset();
  owned_.clear();
}

bool PipelineLinks::complete(int stage, int num_stages, bool ring) const {
  if (num_stages < 2) return true;
  const bool first = stage == 0 && !ring, last = stage == num_stages - 1 && !ring;
  return (first || (forward_in && backward_out)) && (last || (forward_out && backward_in));
}

}  // namespace occ

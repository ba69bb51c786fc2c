#include "parallel/pipeline_links.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "core/buffer.h"

namespace occ {

namespace {

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

PipelineLinks PipelineLinks::create(MpiCommunicator& pp, bool ring, double timeout_s, std::string* why) {
  PipelineLinks links;
  const int P = pp.size(), me = pp.rank();
  const int num_links = P < 2 ? 0 : ring ? P : P - 1;
  MPI_Group all;
  MPI_Comm_group(pp.handle(), &all);
  std::vector<std::pair<std::unique_ptr<NcclCommunicator>*, bool>> order;  // this rank's links, and is it the sender
  for (int l = 0; l < num_links; ++l) {
    for (bool forward : {true, false}) {
      const LinkEnds ends = link_ends(l, forward, P);
      if (me != ends.sender && me != ends.receiver) continue;
      const bool sends = me == ends.sender;
      std::unique_ptr<NcclCommunicator>& slot = forward ? (sends ? links.forward_out : links.forward_in)
                                                        : (sends ? links.backward_out : links.backward_in);
      // The pair's own MPI group, ranks ordered sender first; collective over the two only.
      const int members[2] = {ends.sender, ends.receiver};
      MPI_Group pair;
      MPI_Group_incl(all, 2, members, &pair);
      MPI_Comm pair_comm = MPI_COMM_NULL;
      MPI_Comm_create_group(pp.handle(), pair, 2 * l + (forward ? 0 : 1), &pair_comm);
      MPI_Group_free(&pair);
      MpiCommunicator group(pair_comm, pp.counters(), timeout_s,
                            fmt::format("{} ({} {}>{})", pp.name(), forward ? "activations" : "gradients",
                                        ends.sender, ends.receiver));
      std::string reason;
      slot = NcclCommunicator::create(group, timeout_s, &reason);
      if (!slot && why && why->empty()) *why = reason;
      order.push_back({&slot, sends});
    }
  }
  MPI_Group_free(&all);
  // NCCL connects a link on its first message: one byte each, in the same order.
  std::unique_ptr<DeviceBuffer<float>> byte_buffer;
  for (auto [slot, sends] : order) {
    if (!*slot) continue;
    NcclCommunicator& link = **slot;
    if (!byte_buffer) byte_buffer = std::make_unique<DeviceBuffer<float>>(Device::Cuda, 1);
    float* byte = byte_buffer->data();
    if (sends) {
      link.send_async(byte, 1, 1, Traffic::Other);
      link.wait_sends();
    } else {
      link.recv(byte, 1, 0);
    }
  }
  return links;
}

bool PipelineLinks::complete(int stage, int num_stages, bool ring) const {
  if (num_stages < 2) return true;
  const bool first = stage == 0 && !ring, last = stage == num_stages - 1 && !ring;
  return (first || (forward_in && backward_out)) && (last || (forward_out && backward_in));
}

}  // namespace occ

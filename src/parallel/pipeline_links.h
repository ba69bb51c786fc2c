#pragma once
// The pipeline's transfers: one link per pair of neighbouring stages and kind
// of message (activations forward, activation gradients backward), each a
// two-rank group of its own, the sender its rank 0 and the receiver its rank 1.
// A link's sends are queued without waiting (the exchange's sends are
// nonblocking) and arrive in the order they were sent, which the schedule
// guarantees (pipeline_schedule.h: pipeline_transfers, checked for every
// schedule by tests/unit/test_pipeline_schedule.cpp); so a message carries no
// name, as NCCL's cannot.
//
// Over NCCL (a job whose ranks each have a GPU) a link sends device memory on
// a stream of its own. Why a group per link and direction: a queued NCCL send
// occupies its group's stream until the peer receives it, and a receive from
// the same group behind it would wait for it, so two neighbours could wait on
// each other; a group that carries one kind of message one way never holds a
// receive behind a send. (Why not Megatron's way, each send in one NCCL group
// with the next receive, waited for as a whole: with our interleaved order and
// more micro-batches than stages, neighbours would wait on each other; the
// same test shows it.) Over MPI a link sends host memory (the CPU's, or a
// GPU's page-locked copies): the same groups, so every CPU run exercises the
// links' set-up, their order and the exchange's use of them.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/mpi_communicator.h"

namespace occ {

// One direction of one link, as its sender or its receiver sees it.
class PipelineLink {
 public:
  virtual ~PipelineLink() = default;
  // Queues `bytes` to the peer and returns the send's number on this link (0,
  // 1, ...). The buffer must stay untouched until sends_done() exceeds that
  // number, or wait_sends() returns. what: the message, for errors ("activations").
  virtual uint64_t send_async(const void* data, size_t bytes, Traffic traffic, const char* what) = 0;
  // How many of this link's sends are done with their buffers (a prefix: they
  // complete in order). Never waits.
  virtual uint64_t sends_done() = 0;
  // Returns when every queued send is done.
  virtual void wait_sends() = 0;
  // Returns when the link's next message is in data.
  virtual void recv(void* data, size_t bytes, const char* what) = 0;
  // The same for a message of at most `capacity` bytes (a variable-size
  // codec's, parallel/message_codec.h); returns its bytes. MPI links only: an
  // NCCL receive must know the size (throws occ::Error).
  virtual size_t recv_upto(void* data, size_t capacity, const char* what) = 0;
};

struct PipelineLinks {
  // This rank's links; null where it has none (the first stage receives no
  // activations unless the ranks form a ring).
  PipelineLink *forward_out = nullptr, *forward_in = nullptr, *backward_out = nullptr, *backward_in = nullptr;
  bool on_device = false;  // NCCL: messages in device memory; MPI: in host memory

  PipelineLinks() = default;
  PipelineLinks(PipelineLinks&& other) noexcept { *this = std::move(other); }
  PipelineLinks& operator=(PipelineLinks&& other) noexcept;
  // Closes the links in the order they were created, as every rank does (an
  // NCCL group's finalize may wait for its peer).
  ~PipelineLinks() { close(); }
  void close();

  // Collective over pp, in one order on every rank (the links sorted by their
  // lower stage), so the two-rank set-ups cannot wait on each other in a
  // cycle. ring: the last stage also sends activations to the first (and the
  // first gradients to the last), as with interleaving. nccl: links over NCCL
  // on this rank's GPU; where one cannot form, its two ranks get null (and
  // *why), and the caller agrees on a fallback across the job; the links that
  // formed move one message each, in the same order, so NCCL connects their
  // peers before training. Otherwise over MPI (they always form).
  static PipelineLinks create(MpiCommunicator& pp, bool ring, bool nccl, double timeout_s, std::string* why);
  // Has this rank every link its place in the pipeline needs?
  bool complete(int stage, int num_stages, bool ring) const;

 private:
  std::vector<std::unique_ptr<PipelineLink>> owned_;  // in creation order
};

}  // namespace occ

#pragma once
// The pipeline's transfers over NCCL (a job whose ranks each have a GPU): one
// two-rank NCCL group per link, that is per pair of neighbouring stages and
// kind of message (activations forward, activation gradients backward), the
// sender its rank 0 and the receiver its rank 1, each on a stream of its own.
// Why one group per link: a link's sends are queued without waiting
// (PipelineExchange's sends are nonblocking, as MPI's isend), and a queued
// NCCL send occupies its group's stream until the peer receives it; a receive
// from the same group behind it would wait for it, and two neighbours could
// each wait for the other. A group that carries one kind of message one way
// never holds a receive behind a send. NCCL matches a link's messages in the
// order they are sent, which the schedule guarantees (pipeline_schedule.h:
// pipeline_transfers; tests/unit/test_pipeline_schedule.cpp), and which the MPI
// exchange uses too, so every CPU run tests it. (Why not Megatron's way, each
// send in one NCCL group with the next receive, waited for as a whole: with
// our interleaved order and more micro-batches than stages, neighbours would
// wait on each other; the same test shows it.)
#include <memory>
#include <string>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"

namespace occ {

struct PipelineLinks {
  // This rank's links; null where it has none (the first stage receives no
  // activations unless the ranks form a ring).
  std::unique_ptr<NcclCommunicator> forward_out, forward_in, backward_out, backward_in;

  // Collective over pp, in one order on every rank (the links sorted by their
  // lower stage), so the two-rank set-ups cannot wait on each other in a
  // cycle. ring: the last stage also sends activations to the first (and the
  // first gradients to the last), as with interleaving. Where a link cannot
  // form, its two ranks get null (and *why); the caller agrees on a fallback
  // across the job. Then every link moves one message, in the same order, so
  // NCCL connects its peers before training.
  static PipelineLinks create(MpiCommunicator& pp, bool ring, double timeout_s, std::string* why);
  // Has this rank every link its place in the pipeline needs?
  bool complete(int stage, int num_stages, bool ring) const;
};

}  // namespace occ

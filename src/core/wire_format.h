#pragma once
// The formats values travel in between ranks where no compressor encodes them
// (issue 40). A --bf16 / --fp16 step rounds its activations, activation
// gradients and the weights it computes with to the 16-bit format, so those
// travel in 16 bits, losslessly, as Megatron sends them: pipeline messages,
// the TP / SP all-gathers, the distributed optimizer's parameter all-gather.
// Sums of activations over TP (the all-reduce after a row-parallel layer,
// sequence parallelism's reduce-scatter, the vocabulary-parallel embedding's
// sum) are reduced in the 16-bit format, as Megatron and NCCL do: every hop of
// the ring widens both operands, adds in fp32 and rounds the partial sum to
// the format (comm/mpi_communicator.cpp); --tp-reduce-in-fp32 keeps fp32
// partial sums, rounded once. Parameter gradients (the DP buckets, the tied
// word embedding's sync, sequence parallelism's replicated-parameter
// gradients) travel in fp32 as Megatron's --bf16 reduces them (its main_grad,
// `accumulate_allreduce_grads_in_fp32`); --grad-reduce-in-bf16 halves them.
// Statistics (the cross-entropy's row max, sum and target logit, norms, the
// loss) stay fp32, as Megatron's.
//
// Compressed messages are whatever their codec sends; what compression "saves"
// is counted against the run's own uncompressed wire: value_bytes() of the
// class's format.
#include <cstddef>
#include <string>

#include "core/precision.h"
#include "core/tensor_ref.h"

namespace occ {

struct WireFormats {
  Precision activations = Precision::Fp32;      // pipeline messages, TP / SP all-gathers of activations
  Precision activation_sums = Precision::Fp32;  // TP all-reduce / SP reduce-scatter of activation partial sums
  Precision parameters = Precision::Fp32;       // the distributed optimizer's parameter all-gather
  Precision gradients = Precision::Fp32;        // DP gradients, the tied embedding's sync, SP's parameter gradients

  // A run's formats: `step` its precision; tp_reduce_in_fp32 (--tp-reduce-in-fp32);
  // grad_reduce_in_bf16 (--grad-reduce-in-bf16: bf16 gradients, also in an fp16
  // step, whose range would overflow on large sums); fp32_wire
  // (--debug-fp32-wire: every class in fp32, the wire before issue 40).
  static WireFormats for_run(Precision step, bool tp_reduce_in_fp32, bool grad_reduce_in_bf16, bool fp32_wire) {
    WireFormats w;
    if (fp32_wire) return w;
    w.activations = w.parameters = step;
    w.activation_sums = tp_reduce_in_fp32 ? Precision::Fp32 : step;
    w.gradients = grad_reduce_in_bf16 && step != Precision::Fp32 ? Precision::Bf16 : Precision::Fp32;
    return w;
  }
};

// Bytes one uncompressed value of format p takes on the wire (4 or 2).
inline size_t wire_value_bytes(Precision p) { return element_bytes(p); }

}  // namespace occ

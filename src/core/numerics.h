#pragma once
// The engine's numerics version. It changes whenever the same command, seed and
// data can give different numbers: another order of sums, another rounding, a
// kernel with other arithmetic. Results of different versions are never pooled
// (the paper-regime experiment records it with every run and refuses to mix
// them: python3 -m occtools regime). `optimus-cc --version` prints it.
//   1: the engine up to 0cc336b.
//   2: 16-bit storage of a --bf16 / --fp16 step (issue 29): a received pipeline
//      message and a TP all-reduce's sum are rounded to the training precision;
//      the MLP's GeLU reads its unrounded pre-activation and the GeLU's gradient
//      is rounded once; the classifier runs in chunks (the LM head's weight
//      gradient is summed chunk by chunk, in forward); on the GPU, tensor-core
//      attention and cuBLASLt GEMMs (another order of sums).
//   3: the wire in the step's format (issue 40): in a --bf16 / --fp16 run the
//      TP all-reduce and sequence parallelism's reduce-scatter of activations
//      are reduced in the 16-bit format, rounded at every step of the ring
//      (comm/communicator.h): the same bits as before at TP = 2, other sums at
//      TP >= 3 (--tp-reduce-in-fp32 keeps version 2's); --grad-reduce-in-bf16
//      reduces the gradients in bf16. fp32 runs, pipeline messages, all-gathers
//      and the distributed optimizer's parameters are unchanged.
//   4: Megatron-core's data order (issue 45): the samples of a run, their order
//      and each evaluation's samples are Megatron's GPTDataset / BlendedDataset
//      ones (data/megatron_indices.h), no longer per-epoch Philox shuffles.
//   5: stochastic rounding on the pipeline links keyed by link, seed, iteration
//      and micro-batch (issue 48; it was seed 0, key 0 for every message), and
//      MXFP4's code 0x8 decoded as -0 (OCP MX v1.0) where it was NaN. Runs without
//      --*-comp-rounding stochastic give the same numbers as version 4.
//   6: the CPU's matrix products through oneDNN where libdnnl loads (issue 51,
//      kernels/cpu_gemm.h; OCC_CPU_GEMM=auto): another order of sums, and in a
//      --bf16 step on CPUs with AVX512_BF16 bf16 products with fp32 sums. The
//      run's start line names the path ("matrix products: ..."). With
//      OCC_CPU_GEMM=openblas, or where libdnnl is absent, the numbers are version
//      5's, bit for bit; the GPU's are unchanged.
//   7: attention's QK^T and dY V^T in bf16 products (fp32 sums) in a --bf16 step
//      where the CPU's products are bf16 (oneDNN with AVX512_BF16): another order
//      of sums there. fp32 runs, OpenBLAS runs and the GPU's are version 6's.
namespace occ {
constexpr int kNumericsVersion = 7;
}  // namespace occ

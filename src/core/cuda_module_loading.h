#pragma once
// When CUDA loads a process's kernels. Under lazy loading (CUDA's default
// since 12.2) a kernel is loaded on its first launch, and loading it waits for
// the work queued on the GPU to drain. In a job whose ranks exchange NCCL
// transfers, that work includes NCCL kernels spinning until a peer joins: a
// rank loading a kernel in its first iteration (the first backward, the first
// compressed step) can then wait on a neighbour that waits on it, and the job
// stalls until --comm-timeout (tests/unit/test_pipeline_schedule.cpp,
// WhyNcclJobsLoadKernelsEagerly: such a wait in the steady state of the
// interleaved schedule deadlocks it). CUDA's documented remedy is eager loading
// (CUDA_MODULE_LOADING=EAGER: every kernel loaded when the context is
// created), which must be chosen before CUDA starts. A multi-rank job therefore
// chooses it when it expects NCCL, from what it can read without CUDA; once
// CUDA runs, the driver says what is in force.
#include <string>
#include <vector>

namespace occ {

// The devices a CUDA_VISIBLE_DEVICES value makes visible, in order: integer
// indices (>= 0), GPU-<uuid> and MIG-<...> names, up to the first entry CUDA
// would take as invalid (a negative or malformed index, an empty entry).
std::vector<std::string> cuda_visible_device_entries(const std::string& value);

// Pure: a name for the GPU that local rank `local_rank` will compute on
// (core/device.h use_cuda_device: GPU local_rank mod visible GPUs), from
// CUDA_VISIBLE_DEVICES (null: unset) or else the driver's GPU count
// (negative: unknown). Ranks with equal names will share a GPU; "" means no
// GPU can be told apart before CUDA starts.
std::string gpu_name_before_cuda(int local_rank, const char* visible_devices, int driver_gpus);

// The GPUs the NVIDIA driver lists (/proc/driver/nvidia/gpus); -1 without one.
int driver_gpu_count();

// Sets CUDA_MODULE_LOADING=EAGER unless the user has set it; returns whether
// it did. Only before the process's first CUDA call does it take effect.
bool prefer_eager_cuda_modules();

// After CUDA has started: "eager" or "lazy" as the driver reports it, "" when
// it cannot be asked (no GPU, a build without CUDA).
std::string cuda_module_loading();

// For a job whose transfers run over NCCL: one line saying how kernels load,
// a warning with the fix when lazily, "" when unknown.
std::string cuda_module_loading_line();

}  // namespace occ

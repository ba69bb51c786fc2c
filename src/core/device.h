#pragma once
// Where tensors live and compute runs: the CPU (the reference backend) or a
// CUDA GPU. Raw memory management per device; typed ownership is DeviceBuffer
// (core/buffer.h). The CUDA side exists when the build found nvcc
// (OCC_WITH_CUDA); without it, asking for CUDA is a clear error.
#include <cstddef>
#include <string>

namespace occ {

enum class Device { Cpu, Cuda };

const char* device_name(Device d);
// "cpu" | "cuda"; anything else throws occ::Error naming the choices.
Device parse_device(const std::string& name);

bool cuda_built();          // compiled with the CUDA backend
int cuda_device_count();    // visible GPUs (0 when not built or no driver)
// The PCI address of the GPU this process computes on ("0000:3b:00.0"): the
// same physical GPU has the same address in every process, whatever index its
// CUDA_VISIBLE_DEVICES gives it. Empty where there is none.
std::string cuda_device_pci_id();
// --device's default: cuda when built with CUDA and a GPU is visible, else cpu.
Device default_device();
// Throws occ::Error saying why when `d` cannot be used in this process.
void require_device(Device d);
// One line describing the device, e.g. "cuda (NVIDIA H200, sm_90, 139 GiB)".
std::string describe_device(Device d);

// Raw memory. Allocations are zero-filled; copies may cross devices.
void* device_alloc(Device d, size_t bytes);
void device_free(Device d, void* p) noexcept;
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
void device_zero(Device d, void* p, size_t bytes);
// Holds back the GPU's frees while in scope (scopes nest; any thread's frees
// wait). Why: cudaFree waits for every stream of the device, the pipeline's
// queued NCCL sends included, and such a send waits for its peer to receive
// it, while the peer may be waiting for this rank (a free of its own, say):
// both would hang. The frees run when the outermost scope ends (the executor's
// iteration, once its sends have gone). CPU frees are never held back. A
// scope left by an exception frees nothing (its sends may still be queued, and
// the error must reach the user): the frees wait for the next scope's end.
class DeferredDeviceFrees {
 public:
  DeferredDeviceFrees();
  ~DeferredDeviceFrees();
  DeferredDeviceFrees(const DeferredDeviceFrees&) = delete;
  DeferredDeviceFrees& operator=(const DeferredDeviceFrees&) = delete;

 private:
  int exceptions_at_start_;
};
// GPU frees held back right now.
size_t device_frees_deferred();
// Peak bytes allocated through device_alloc on `d` (since start or the last reset).
size_t device_peak_bytes(Device d);
void device_reset_peak(Device d);

// A point in the work the calling thread has queued on the device (the legacy
// default stream, where every kernel runs): another thread's copies and
// collectives can wait for the work before it alone, not for everything queued
// since. It is how a gradient bucket's all-reduce starts while the rest of the
// backward still runs. Record it again to move it. The CPU queues nothing: no-ops.
class DeviceMark {
 public:
  explicit DeviceMark(Device d);
  ~DeviceMark();
  DeviceMark(DeviceMark&& other) noexcept;
  DeviceMark& operator=(DeviceMark&&) = delete;
  DeviceMark(const DeviceMark&) = delete;
  void record();
  void* handle() const { return event_; }  // the cudaEvent_t (null on the CPU)

 private:
  void* event_ = nullptr;
};

// A queue of copies beside the compute (a non-blocking CUDA stream, never
// ordered after the legacy stream's kernels): what it copies after
// wait_for(mark) runs once the mark's work is done, while later kernels still
// run. On the CPU a copy is done when the call returns.
class CopyQueue {
 public:
  explicit CopyQueue(Device d);
  ~CopyQueue();
  CopyQueue(const CopyQueue&) = delete;
  CopyQueue& operator=(const CopyQueue&) = delete;
  // Copies queued from now on start after the work before `mark`.
  void wait_for(const DeviceMark& mark);
  // Queues a copy (host memory should be page-locked for it to run asynchronously).
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
  // Until every queued copy is done.
  void synchronize();

 private:
  void* stream_ = nullptr;  // cudaStream_t (null on the CPU)
};

// Which GPU this process (and every thread it starts) computes on: GPU `index`
// of the visible ones. Call before the first allocation; a thread other than the
// one that called it runs bind_thread_to_device() before its first CUDA call.
void use_cuda_device(int index);
void bind_thread_to_device(Device d);

// Host memory that a GPU copies to and from at full speed (page-locked when the
// CUDA backend is built and a GPU is visible; plain aligned memory otherwise).
// Zero-filled. For the buffers that stage transfers between the GPU and MPI.
void* pinned_host_alloc(size_t bytes);
void pinned_host_free(void* p) noexcept;

}  // namespace occ

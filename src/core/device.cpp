#include "core/device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/host_allocator.h"

#if defined(OCC_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace occ {

namespace {
// Bytes currently allocated and the peak, per device.
std::atomic<size_t> g_live[2], g_peak[2];

void note_alloc(Device d, size_t bytes) {
  const size_t live = g_live[int(d)].fetch_add(bytes) + bytes;
  size_t peak = g_peak[int(d)].load();
  while (live > peak && !g_peak[int(d)].compare_exchange_weak(peak, live)) {
  }
}

#if defined(OCC_WITH_CUDA)
// A page-locked block's header (keeps the payload 64-byte aligned).
constexpr size_t kHeader = 64;
#endif

#if defined(OCC_WITH_CUDA)
// Sizes of live GPU allocations, for the live/peak count.
std::mutex g_cuda_mu;
std::unordered_map<void*, size_t> g_cuda_sizes;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// DeferredDeviceFrees: the open scopes and the frees they hold back.
std::mutex g_defer_mu;
int g_defer_depth = 0;
std::vector<std::pair<void*, size_t>> g_deferred;  // a block and its bytes (still counted as live)
#endif
}  // namespace

DeferredDeviceFrees::DeferredDeviceFrees() : exceptions_at_start_(std::uncaught_exceptions()) {
#if defined(OCC_WITH_CUDA)
  std::lock_guard<std::mutex> lock(g_defer_mu);
  ++g_defer_depth;
#endif
}

DeferredDeviceFrees::~DeferredDeviceFrees() {
#if defined(OCC_WITH_CUDA)
  std::vector<std::pair<void*, size_t>> held;
  {
    std::lock_guard<std::mutex> lock(g_defer_mu);
    const bool unwinding = std::uncaught_exceptions() > exceptions_at_start_;
    if (--g_defer_depth == 0 && !unwinding) held.swap(g_deferred);
  }
  for (auto [p, bytes] : held) {
    cudaFree(p);
    g_live[1].fetch_sub(bytes);
  }
#endif
}

size_t device_frees_deferred() {
#if defined(OCC_WITH_CUDA)
  std::lock_guard<std::mutex> lock(g_defer_mu);
  return g_deferred.size();
#else
  return 0;
#endif
}

const char* device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  fail("--device {} is not a device; use --device cpu or --device cuda", name);
}

bool cuda_built() {
#if defined(OCC_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(OCC_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

Device default_device() { return cuda_device_count() > 0 ? Device::Cuda : Device::Cpu; }

void require_device(Device d) {
  if (d == Device::Cpu) return;
  OCC_CHECK(cuda_built(),
            "--device cuda: this binary was built without the CUDA backend (nvcc was not found at build time); "
            "rebuild with CUDA under /usr/local/cuda or use --device cpu");
  OCC_CHECK(cuda_device_count() > 0, "--device cuda: no CUDA GPU is visible to this process; use --device cpu");
}

std::string cuda_device_pci_id() {
#if defined(OCC_WITH_CUDA)
  int dev = 0;
  char id[32] = {};
  if (cuda_device_count() > 0 && cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetPCIBusId(id, int(sizeof(id)), dev) == cudaSuccess)
    return id;
  cudaGetLastError();
#endif
  return "";
}

std::string describe_device(Device d) {
  if (d == Device::Cpu) return "cpu";
#if defined(OCC_WITH_CUDA)
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    return fmt::format("cuda ({}, sm_{}{}, {:.0f} GiB)", p.name, p.major, p.minor, double(p.totalGlobalMem) / (1 << 30));
#endif
  return "cuda";
}

void* device_alloc(Device d, size_t bytes) {
  if (d == Device::Cpu) {
    void* p = HostAllocator::allocate(bytes);  // zero-filled (by the kernel for big blocks)
    note_alloc(d, bytes);
    return p;
  }
#if defined(OCC_WITH_CUDA)
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  OCC_CHECK(e == cudaSuccess, "out of GPU memory allocating {:.1f} MiB ({}); use a smaller --micro-batch-size or "
            "--recompute-activations", double(bytes) / (1 << 20), cudaGetErrorString(e));
  cuda_check(cudaMemset(p, 0, bytes), "cudaMemset");
  note_alloc(d, bytes);
  std::lock_guard<std::mutex> lock(g_cuda_mu);
  g_cuda_sizes[p] = bytes;
  return p;
#else
  require_device(d);
  return nullptr;
#endif
}

void device_free(Device d, void* p) noexcept {
  if (!p) return;
  if (d == Device::Cpu) {
    g_live[0].fetch_sub(HostAllocator::size_of(p));
    HostAllocator::release(p);
    return;
  }
#if defined(OCC_WITH_CUDA)
  size_t bytes = 0;  // counted live until it is really freed
  {
    std::lock_guard<std::mutex> lock(g_cuda_mu);
    auto it = g_cuda_sizes.find(p);
    if (it != g_cuda_sizes.end()) {
      bytes = it->second;
      g_cuda_sizes.erase(it);
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_defer_mu);
    if (g_defer_depth > 0) {
      g_deferred.push_back({p, bytes});
      return;
    }
  }
  cudaFree(p);
  g_live[1].fetch_sub(bytes);
#endif
}

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::Cpu && src_dev == Device::Cpu) {
    std::memmove(dst, src, bytes);
    return;
  }
#if defined(OCC_WITH_CUDA)
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
#else
  require_device(Device::Cuda);
#endif
}

void device_zero(Device d, void* p, size_t bytes) {
  if (d == Device::Cpu) {
    std::memset(p, 0, bytes);
    return;
  }
#if defined(OCC_WITH_CUDA)
  cuda_check(cudaMemset(p, 0, bytes), "cudaMemset");
#endif
}

namespace {
std::atomic<int> g_cuda_device{0};
}

void use_cuda_device(int index) {
  g_cuda_device.store(index);
#if defined(OCC_WITH_CUDA)
  cuda_check(cudaSetDevice(index), "cudaSetDevice");
#endif
}

void bind_thread_to_device(Device d) {
#if defined(OCC_WITH_CUDA)
  if (d == Device::Cuda) cuda_check(cudaSetDevice(g_cuda_device.load()), "cudaSetDevice");
#endif
}

DeviceMark::DeviceMark([[maybe_unused]] Device d) {
#if defined(OCC_WITH_CUDA)
  if (d == Device::Cuda) {
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    event_ = e;
  }
#endif
}

DeviceMark::DeviceMark(DeviceMark&& other) noexcept : event_(other.event_) {
  other.event_ = nullptr;
}

DeviceMark::~DeviceMark() {
#if defined(OCC_WITH_CUDA)
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
#endif
}

void DeviceMark::record() {
#if defined(OCC_WITH_CUDA)
  if (event_) cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(event_), cudaStreamLegacy), "cudaEventRecord");
#endif
}

CopyQueue::CopyQueue([[maybe_unused]] Device d) {
#if defined(OCC_WITH_CUDA)
  if (d == Device::Cuda) {
    // Non-blocking: the legacy stream's later kernels neither wait for these copies nor hold them back.
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = s;
  }
#endif
}

CopyQueue::~CopyQueue() {
#if defined(OCC_WITH_CUDA)
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

void CopyQueue::wait_for(const DeviceMark& mark) {
#if defined(OCC_WITH_CUDA)
  if (stream_ && mark.handle())
    cuda_check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(mark.handle()), 0),
               "cudaStreamWaitEvent");
#else
  (void)mark;
#endif
}

void CopyQueue::copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
#if defined(OCC_WITH_CUDA)
  if (stream_) {
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream_)),
               "cudaMemcpyAsync");
    return;
  }
#endif
  device_copy(dst, dst_dev, src, src_dev, bytes);
}

void CopyQueue::synchronize() {
#if defined(OCC_WITH_CUDA)
  if (stream_) cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
#endif
}

// Page-locked blocks carry a header of their own before the block (its first
// word is never HostAllocator's mark); the others are HostAllocator's.
void* pinned_host_alloc(size_t bytes) {
#if defined(OCC_WITH_CUDA)
  const size_t total = kHeader + (bytes + 63) / 64 * 64;
  void* p = nullptr;
  if (cuda_device_count() > 0 && cudaMallocHost(&p, total) == cudaSuccess) {
    std::memset(p, 0, total);
    *static_cast<size_t*>(p) = 1;
    return static_cast<char*>(p) + kHeader;
  }
  cudaGetLastError();
#endif
  return HostAllocator::allocate(bytes);
}

void pinned_host_free(void* p) noexcept {
  if (!p) return;
  if (HostAllocator::owns(p)) {
    HostAllocator::release(p);
    return;
  }
#if defined(OCC_WITH_CUDA)
  cudaFreeHost(static_cast<char*>(p) - kHeader);
#endif
}

size_t device_peak_bytes(Device d) { return g_peak[int(d)].load(); }
void device_reset_peak(Device d) { g_peak[int(d)].store(g_live[int(d)].load()); }

}  // namespace occ

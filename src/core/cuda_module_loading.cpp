#include "core/cuda_module_loading.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>

#if defined(OCC_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace occ {

namespace {

bool is_index(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

std::vector<std::string> cuda_visible_device_entries(const std::string& value) {
  std::vector<std::string> entries;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    std::string_view entry(value.data() + start, comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    const bool named = (starts_with(entry, "GPU-") || starts_with(entry, "MIG-")) && entry.size() > 4;
    if (!is_index(entry) && !named) break;  // CUDA stops at the first invalid entry
    entries.emplace_back(entry);
    start = comma + 1;
  }
  return entries;
}

std::string gpu_name_before_cuda(int local_rank, const char* visible_devices, int driver_gpus) {
  if (visible_devices) {
    const std::vector<std::string> visible = cuda_visible_device_entries(visible_devices);
    if (visible.empty()) return "";
    return "visible " + visible[size_t(local_rank) % visible.size()];
  }
  if (driver_gpus <= 0) return "";
  return "driver " + std::to_string(local_rank % driver_gpus);
}

int driver_gpu_count() {
  DIR* dir = opendir("/proc/driver/nvidia/gpus");
  if (!dir) return -1;
  int n = 0;
  while (const dirent* e = readdir(dir))
    if (e->d_name[0] != '.') ++n;  // one folder per GPU, named by its PCI address
  closedir(dir);
  return n;
}

bool prefer_eager_cuda_modules() {
  if (std::getenv("CUDA_MODULE_LOADING")) return false;  // the user's choice stands
  return setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0;
}

std::string cuda_module_loading() {
#if defined(OCC_WITH_CUDA)
  // The driver's cuModuleGetLoadingMode, through the runtime (the binary does
  // not link libcuda): CUmoduleLoadingMode is 1 eager, 2 lazy.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess && fn) {
    int mode = 0;
    if (reinterpret_cast<int (*)(int*)>(fn)(&mode) == 0) return mode == 1 ? "eager" : mode == 2 ? "lazy" : "";
  }
  cudaGetLastError();
#endif
  return "";
}

std::string cuda_module_loading_line() {
  const std::string mode = cuda_module_loading();
  if (mode == "eager")
    return "cuda modules: loaded eagerly (no kernel's first launch waits behind queued NCCL transfers)";
  if (mode == "lazy")
    return "warning: CUDA loads kernels lazily here: a kernel's first launch waits for the GPU's queued work, NCCL "
           "transfers included, which can stall neighbouring ranks until --comm-timeout; export "
           "CUDA_MODULE_LOADING=EAGER";
  return "";
}

}  // namespace occ

// How a multi-rank job picks CUDA's module loading before CUDA starts
// (core/cuda_module_loading.h): the GPUs its ranks will use are told apart
// from CUDA_VISIBLE_DEVICES or the driver's count, and the job chooses eager
// loading exactly where --comm-backend auto would choose NCCL.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/comm_backend.h"
#include "comm/node_ranks.h"
#include "core/cuda_module_loading.h"

namespace occ {
namespace {

using Entries = std::vector<std::string>;

TEST(CudaModuleLoading, VisibleDevicesAreReadAsCudaReadsThem) {
  EXPECT_EQ(cuda_visible_device_entries("0,1,2,3"), (Entries{"0", "1", "2", "3"}));
  EXPECT_EQ(cuda_visible_device_entries("3"), (Entries{"3"}));
  EXPECT_EQ(cuda_visible_device_entries("GPU-8932f937,MIG-GPU-8932f937/1/2"),
            (Entries{"GPU-8932f937", "MIG-GPU-8932f937/1/2"}));
  EXPECT_EQ(cuda_visible_device_entries(" 1, 0"), (Entries{"1", "0"}));
  // CUDA stops at the first invalid entry: devices before it stay visible.
  EXPECT_EQ(cuda_visible_device_entries("0,2,-1,1"), (Entries{"0", "2"}));
  EXPECT_EQ(cuda_visible_device_entries(""), Entries{});            // set but empty: no GPU
  EXPECT_EQ(cuda_visible_device_entries("NoDevFiles"), Entries{});  // Slurm without GPUs
  EXPECT_EQ(cuda_visible_device_entries("0,,1"), (Entries{"0"}));
  EXPECT_EQ(cuda_visible_device_entries("GPU-"), Entries{});
}

// The names of a node's ranks' GPUs, counted as gpus_in_use_on_node counts them.
int gpus_of(int local_size, const std::vector<const char*>& visible, int driver_gpus) {
  std::vector<std::string> names;
  for (int r = 0; r < local_size; ++r)
    names.push_back(gpu_name_before_cuda(r, visible.empty() ? nullptr : visible[size_t(r) % visible.size()], driver_gpus));
  return distinct_gpus(names);
}

bool eager(int world, int local_size, const std::vector<const char*>& visible, int driver_gpus) {
  return choose_comm_backend(CommBackend::Auto, Device::Cuda, world, local_size,
                             gpus_of(local_size, visible, driver_gpus))
             .backend == CommBackend::Nccl;
}

TEST(CudaModuleLoading, EagerExactlyWhereEveryRankWillHaveItsOwnGpu) {
  // 8 ranks on an 8-GPU node (driver count, nothing set): NCCL, so eager.
  EXPECT_TRUE(eager(8, 8, {}, 8));
  // Two nodes of 4 ranks each with 4 GPUs.
  EXPECT_TRUE(eager(8, 4, {}, 4));
  // 4 ranks sharing the one GPU (the test machines): MPI, CUDA left alone.
  EXPECT_FALSE(eager(4, 4, {}, 1));
  EXPECT_FALSE(eager(3, 3, {}, 2));
  // Slurm's GPU binding: each rank sees only its own GPU, by index or name.
  EXPECT_TRUE(eager(4, 4, {"0", "1", "2", "3"}, 8));
  EXPECT_TRUE(eager(2, 2, {"GPU-aaaa", "GPU-bbbb"}, 8));
  // Every rank told to use the same GPU: shared.
  EXPECT_FALSE(eager(2, 2, {"0", "0"}, 8));
  // One list for all ranks: rank r takes entry r mod its length.
  EXPECT_TRUE(eager(2, 2, {"2,5"}, 8));
  EXPECT_FALSE(eager(4, 4, {"2,5"}, 8));
  // No GPU, or no driver to ask: nothing to choose.
  EXPECT_FALSE(eager(2, 2, {}, -1));
  EXPECT_FALSE(eager(2, 2, {}, 0));
  EXPECT_FALSE(eager(2, 2, {""}, 8));
}

TEST(CudaModuleLoading, TheUsersOwnSettingStands) {
  const char* saved = std::getenv("CUDA_MODULE_LOADING");
  const std::string keep = saved ? saved : "";
  setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  EXPECT_FALSE(prefer_eager_cuda_modules());
  EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "LAZY");
  unsetenv("CUDA_MODULE_LOADING");
  EXPECT_TRUE(prefer_eager_cuda_modules());
  EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "EAGER");
  if (saved)
    setenv("CUDA_MODULE_LOADING", keep.c_str(), 1);
  else
    unsetenv("CUDA_MODULE_LOADING");
}

}  // namespace
}  // namespace occ

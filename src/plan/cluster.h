#pragma once
// The hardware a plan runs on, and the alpha-beta cost of the collectives our
// engine uses (its own ring algorithms, see comm/): a message of B bytes takes
// latency + B / bandwidth. Inter-node bandwidth is per node (one NIC shared by
// the node's ranks that talk across nodes at the same time: `sharing`);
// intra-node bandwidth is per device (NVLink/NVSwitch-like, no sharing).
#include <algorithm>

namespace occ::plan {

struct LinkSpec {
  double bandwidth = 25e9;  // bytes/s
  double latency = 5e-6;    // s per message (per ring step)
  // Fixed cost of one message sent by the main thread: a nonblocking
  // point-to-point transfer, or one step of a scalar all-reduce (grad norm,
  // loss); < 0: `latency`. Calibration fits it apart from `latency`, which it
  // fits on the DP reducer thread's bucket all-reduces (see plan/calibrate.h).
  double p2p_latency = -1.0;
  double message_latency() const { return p2p_latency >= 0 ? p2p_latency : latency; }
};

struct ClusterSpec {
  int nodes = 1, devices_per_node = 1;
  double device_flops = 312e12;  // peak of one device (A100 dense FP16 tensor core)
  double efficiency = 0.45;      // achieved fraction of peak in the model's GEMMs
  double memory_bandwidth = 1.555e12;  // bytes/s of one device (optimizer, memory-bound kernels)
  // PowerSGD kernels (thin GEMMs, QR) reach this fraction of the model's achieved FLOP/s.
  double compress_efficiency = 0.5;
  LinkSpec intra{230e9, 5e-6}, inter{25e9, 5e-6};
  bool free_comm = false;  // every transfer and collective costs nothing (upper bound)

  double achieved_flops() const { return device_flops * efficiency; }
  int world() const { return nodes * devices_per_node; }
  int node_of(int rank) const { return rank / devices_per_node; }
};

// One message: its occupancy of the link.
inline double transfer_seconds(double bytes, const LinkSpec& link, int sharing = 1) {
  return link.message_latency() + bytes * double(std::max(sharing, 1)) / link.bandwidth;
}
// Ring all-reduce of `bytes` per rank over `group` ranks: 2(G-1) steps of bytes/G.
inline double ring_allreduce_seconds(double bytes, int group, const LinkSpec& link, int sharing = 1) {
  if (group <= 1) return 0.0;
  const double g = group;
  return 2.0 * (g - 1.0) * link.latency + 2.0 * (g - 1.0) / g * bytes * double(std::max(sharing, 1)) / link.bandwidth;
}
// Ring all-gather of a `bytes` result (each rank contributes bytes/G): G-1 steps.
inline double ring_allgather_seconds(double bytes, int group, const LinkSpec& link, int sharing = 1) {
  if (group <= 1) return 0.0;
  const double g = group;
  return (g - 1.0) * link.latency + (g - 1.0) / g * bytes * double(std::max(sharing, 1)) / link.bandwidth;
}

}  // namespace occ::plan

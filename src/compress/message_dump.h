#pragma once
// Measurement only (the hidden train flag --debug-dump-messages DIR): the last
// messages a sender encodes on a pipeline link, kept for offline analysis
// (python3 -m occtools entropy-report: the bits per value lossless coding of the block
// codes would reach on real messages). Each record is one tensor file
// DIR/LINK_K.occt (K = message count mod kKeep, so the files end up holding
// the run's last kKeep messages) with the message as it reached the codec
// ("message", fp32 [rows, cols]; a host copy) and the wire each block method
// sends for it ("wire/METHOD", its bytes padded to a whole word; encoded by the
// engine's CPU kernels, rounding to nearest, without error feedback).
#include <cstdint>
#include <string>

#include "core/device.h"

namespace occ {

class MessageDump {
 public:
  static constexpr int64_t kKeep = 8;
  // link: the file name's stem (e.g. "pp_fwd_pp0_tp0_dp0"); the message lives on `device`.
  MessageDump(std::string dir, std::string link, int64_t rows, int64_t cols, Device device);
  void record(const float* message);

 private:
  std::string dir_, link_;
  int64_t rows_, cols_;
  Device device_;
  int64_t count_ = 0;
};

}  // namespace occ

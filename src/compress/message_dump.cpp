#include "compress/message_dump.h"

#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "compress/compressor_factory.h"
#include "core/tensor_file.h"

namespace occ {

MessageDump::MessageDump(std::string dir, std::string link, int64_t rows, int64_t cols, Device device)
    : dir_(std::move(dir)), link_(std::move(link)), rows_(rows), cols_(cols), device_(device) {
  std::filesystem::create_directories(dir_);
}

void MessageDump::record(const float* message) {
  std::vector<float> host(size_t(rows_ * cols_));
  device_copy(host.data(), Device::Cpu, message, device_, host.size() * sizeof(float));
  TensorFileWriter w({{"link", link_}, {"rows", rows_}, {"cols", cols_}, {"index", count_}});
  w.add("message", host.data(), {rows_, cols_});
  for (CompressionMethod m : all_methods()) {
    if (!method_is_block(m)) continue;
    auto codec = make_compressor({m}, rows_, cols_, 0, 0);
    std::vector<float> wire(size_t(codec->wire_floats()));
    codec->encode(host.data(), wire.data());
    // The whole wire, with the zero padding to a whole word (the formulas: block_compressor.h).
    w.add(fmt::format("wire/{}", method_name(m)), reinterpret_cast<const uint8_t*>(wire.data()),
          {int64_t(wire.size()) * 4});
  }
  w.write(fmt::format("{}/{}_{}.occt", dir_, link_, count_ % kKeep));
  ++count_;
}

}  // namespace occ

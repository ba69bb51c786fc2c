#pragma once
// Byte-oriented wire formats inside the float wire of MatrixCompressor.
//
// The transport moves 32-bit words (wire_floats() of them). A compressor whose
// message is a byte string (int8/fp8 codes, bitmaps, int32 indices) writes its
// bytes into the float buffer through an unsigned char view and pads the last
// word with zero bytes, so the message is bitwise deterministic (the packing
// itself is in kernels/row_codes.h, for both backends). Such a wire
// holds arbitrary bit patterns (some are NaNs as floats): it may only be
// copied (send/recv/broadcast/gather), never reduced or converted as floats.
//
// All multi-byte fields (fp32 scales, int32 indices) are in host byte order;
// every rank of a job runs on the same architecture.
#include <cstdint>
#include <string>

#include "compress/compressor.h"
#include "core/error.h"
#include "kernels/row_codes.h"

namespace occ::wire {

// Words (4 bytes) holding `bytes` bytes: the byte count padded to a multiple of 4.
using kernels::words_for_bytes;
// The shape checks every compressor's constructor makes.
inline void check_shape(const char* method, int64_t rows, int64_t cols) {
  OCC_CHECK(rows >= 1 && cols >= 1, "{} compressor needs a matrix of positive size (got {} x {}); pass rows, cols >= 1",
            method, rows, cols);
  OCC_CHECK(cols <= INT32_MAX, "{} compressor: {} columns do not fit the int32 column indices; split the matrix",
            method, cols);
}

}  // namespace occ::wire

namespace occ {

// Base of the compressors that keep no state between messages: nothing to
// checkpoint, and a fresh one continues any run exactly.
class StatelessCompressor : public MatrixCompressor {
 public:
  StatelessCompressor(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {}
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  bool stateful() const override { return false; }
  void save_state(TensorFileWriter&, const std::string&) const override {}
  bool load_state(const TensorFileReader&, const std::string&) override { return true; }

 protected:
  int64_t rows_, cols_;
};

}  // namespace occ

#pragma once
// A pointer to tensor values on one device together with the format they are
// stored in: fp32, or a 16-bit format (bf16 / fp16, core/precision.h).
//
// Why: in a --bf16 / --fp16 step the GPU keeps activations, activation
// gradients and the step's weight copy in 2 bytes per value (half the bytes
// every kernel moves), while the CPU, the reference, keeps them as fp32 values
// rounded to the format (bit-identical values, since core/precision.h defines
// the rounding). The kernels of kernels/ops.h take such references; a plain
// float* converts implicitly to an fp32 reference, so fp32 code reads as before.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/precision.h"

namespace occ {

// Bytes of one value stored in `format`.
inline size_t element_bytes(Precision format) { return format == Precision::Fp32 ? 4 : 2; }

template <class Void>
class BasicTensorRef {
 public:
  BasicTensorRef() = default;
  BasicTensorRef(std::nullptr_t) {}
  BasicTensorRef(Void* data, Precision format) : data_(data), format_(format) {}
  // fp32 arrays, implicitly: existing fp32 call sites need no change.
  template <class F, class = decltype(static_cast<Void*>(static_cast<F*>(nullptr))),
            class = std::enable_if_t<std::is_same_v<std::remove_const_t<F>, float>>>
  BasicTensorRef(F* data) : data_(data), format_(Precision::Fp32) {}
  // A mutable reference reads as a const one.
  template <class Other, class = std::enable_if_t<std::is_const_v<Void> && !std::is_const_v<Other>>>
  BasicTensorRef(const BasicTensorRef<Other>& other) : data_(other.data()), format_(other.format()) {}

  Void* data() const { return data_; }
  Precision format() const { return format_; }
  explicit operator bool() const { return data_ != nullptr; }
  bool is_fp32() const { return format_ == Precision::Fp32; }

  // The reference `elements` values further on (null stays null).
  BasicTensorRef operator+(int64_t elements) const {
    if (!data_) return {};
    using Byte = std::conditional_t<std::is_const_v<Void>, const char, char>;
    return {static_cast<Byte*>(data_) + elements * int64_t(element_bytes(format_)), format_};
  }

  // The values as fp32: only for an fp32 reference (the CPU backend's tensors
  // always are). Anything else is an internal error, not a user's.
  auto f32() const {
    using F = std::conditional_t<std::is_const_v<Void>, const float, float>;
    if (data_ && format_ != Precision::Fp32) wrong_format();
    return static_cast<F*>(data_);
  }

 private:
  [[noreturn]] void wrong_format() const;
  Void* data_ = nullptr;
  Precision format_ = Precision::Fp32;
};

using TensorRef = BasicTensorRef<void>;
using ConstTensorRef = BasicTensorRef<const void>;

[[noreturn]] void fail_tensor_format(Precision format);
template <class Void>
void BasicTensorRef<Void>::wrong_format() const {
  fail_tensor_format(format_);
}

}  // namespace occ

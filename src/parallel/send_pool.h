#pragma once
// Buffers for pipeline messages in flight. A buffer a link is still sending is
// not handed out again; once the link has sent it (PipelineLink::sends_done,
// which never waits) it is reused. So a rank holds as many message buffers as
// it has messages actually in flight, not one per message of the iteration
// (V M of them, each a full activation, which on a GPU would cost gigabytes).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "parallel/pipeline_links.h"

namespace occ {

template <class Buffer>  // DeviceBuffer<float> or PinnedBuffer: data() gives its floats
class SendPool {
 public:
  // make(n): a new buffer of at least n floats.
  explicit SendPool(std::function<std::unique_ptr<Buffer>(size_t)> make) : make_(std::move(make)) {}

  // A buffer of at least `floats` that no queued send reads, until it is
  // given back or sent.
  float* take(size_t floats) {
    Slot* spare = nullptr;
    for (Slot& s : slots_) {
      if (!is_free(s)) continue;
      if (s.floats >= floats) return hand_out(s);
      if (!spare) spare = &s;
    }
    if (!spare) spare = &slots_.emplace_back();
    spare->buffer = make_(floats);  // replaces a smaller one
    spare->floats = floats;
    return hand_out(*spare);
  }
  // The buffer holding p is read by send number `ticket` of `link` until the
  // link has sent it. (p not from take: the caller keeps it alive; nothing to do.)
  void sending(const float* p, PipelineLink* link, uint64_t ticket) {
    if (Slot* s = find(p)) *s = Slot{std::move(s->buffer), s->floats, State::Sending, link, ticket};
  }
  // The buffer holding p is not needed any more (its message was encoded or copied out).
  void give_back(const float* p) {
    if (Slot* s = find(p)) s->state = State::Free;
  }
  // Every send has gone (after the links' wait_sends): every buffer is free.
  void all_sent() {
    for (Slot& s : slots_) s.state = State::Free;
  }
  size_t buffers() const { return slots_.size(); }

 private:
  enum class State { Free, Taken, Sending };
  struct Slot {
    std::unique_ptr<Buffer> buffer;
    size_t floats = 0;
    State state = State::Free;
    PipelineLink* link = nullptr;
    uint64_t ticket = 0;
  };
  bool is_free(Slot& s) {
    if (s.state == State::Sending && s.link->sends_done() > s.ticket) s.state = State::Free;
    return s.state == State::Free;
  }
  float* hand_out(Slot& s) {
    s.state = State::Taken;
    return s.buffer->data();
  }
  // The slot whose buffer holds p (a message may be a slice of it: TP's).
  Slot* find(const float* p) {
    for (Slot& s : slots_)
      if (s.buffer && p >= s.buffer->data() && p < s.buffer->data() + s.floats) return &s;
    return nullptr;
  }

  std::function<std::unique_ptr<Buffer>(size_t)> make_;
  std::vector<Slot> slots_;
};

}  // namespace occ

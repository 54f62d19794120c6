// The event references one enqueue takes and drops while it holds buffer
// locks, summed per event and handed to the host once per event when the
// locks are about to go (Host::retain/release with a count). A kernel with 64
// buffer arguments takes its own event and drops its predecessor's hundreds
// of times; a host's retain/release may cost a lock each.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "memlayer/engine/host.hpp"

namespace memlayer::engine {

class RefBatch {
 public:
  /// Counts from now on, for `host`. Why deferring is safe: every event
  /// counted meanwhile is kept alive by a reference the locked buffers hold
  /// (a retain only copies one of those), and a deferred release only keeps
  /// an event alive longer.
  void begin(Host& host) noexcept { host_ = &host; }
  /// Applies the net count of every event and counts no more.
  void flush() noexcept {
    for (const Entry& x : entries_) {
      apply(*host_, x.event, x.delta);
      slots_[x.slot] = 0;
    }
    entries_.clear();
    recent_ = {};
    host_ = nullptr;
  }
  [[nodiscard]] bool active() const noexcept { return host_ != nullptr; }

  /// One reference more (+1) or less (-1) to `e`. Only while active.
  /// O(1): most often one of the two events counted last (the command's
  /// own, its predecessor: pruning in between drops many others once), else
  /// a hash probe.
  void count(Event e, int delta) noexcept {
    if (const std::uint16_t r = recent_[0]; r != 0 && entries_[r - 1].event == e) {
      entries_[r - 1].delta += delta;
      return;
    }
    if (const std::uint16_t r = recent_[1]; r != 0 && entries_[r - 1].event == e) {
      entries_[r - 1].delta += delta;
      std::swap(recent_[0], recent_[1]);
      return;
    }
    count_new(e, delta);
  }

  static void apply(Host& host, Event e, int delta) noexcept {
    if (delta > 0) host.retain(e, static_cast<std::uint32_t>(delta));
    else if (delta < 0) host.release(e, static_cast<std::uint32_t>(-delta));
  }

 private:
  // Open addressing over entry indices + 1 (0: empty), at most half full.
  static constexpr unsigned kSlotBits = 9;
  static constexpr std::size_t kSlots = std::size_t{1} << kSlotBits;
  static constexpr std::size_t kMaxEntries = kSlots / 2;
  struct Entry {
    Event event;
    int delta;
    std::uint16_t slot;
  };

  // An event other than the two last counted: a hash probe.
  [[gnu::noinline]] void count_new(Event e, int delta) noexcept {
    std::size_t h = (reinterpret_cast<std::uintptr_t>(e) >> 4) * 0x9E3779B97F4A7C15ull >> (64 - kSlotBits);
    for (;; h = (h + 1) & (kSlots - 1)) {
      const std::uint16_t s = slots_[h];
      if (s == 0) break;
      if (entries_[s - 1].event == e) {
        entries_[s - 1].delta += delta;
        return touch(s);
      }
    }
    // An event with no entry yet has no deferred count, so applying this
    // one at once (table full, no memory) is always correct.
    if (entries_.size() >= kMaxEntries) return apply(*host_, e, delta);
    try {
      entries_.push_back({e, delta, static_cast<std::uint16_t>(h)});
    } catch (...) {
      return apply(*host_, e, delta);
    }
    slots_[h] = static_cast<std::uint16_t>(entries_.size());
    touch(slots_[h]);
  }

  void touch(std::uint16_t entry) noexcept {
    recent_[1] = recent_[0];
    recent_[0] = entry;
  }

  Host* host_ = nullptr;
  std::vector<Entry> entries_;
  std::array<std::uint16_t, 2> recent_{};  // entries_ index + 1 of the two last counted
  std::array<std::uint16_t, kSlots> slots_{};
};

}  // namespace memlayer::engine

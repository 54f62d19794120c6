// memlayer/migration/ref_batch.hpp — event references summed per event and
// handed to the runtime once per event.
//
// A runtime whose retain/release cost a lock each (PoCL's cl_event, the
// runtime's EventState) plans many buffers per command under their locks: a
// kernel with 64 buffer arguments takes its own event and drops its
// predecessor's a few hundred times. While a RefBatch is set in an EventOps
// (EventOps::batch), EventOps::hold()/drop() add to it inline instead of
// calling retain/release, and flush() hands the runtime one net count per
// event.
//
// Why deferring is safe: the runtime flushes before it lets go of whatever
// keeps the counted events alive meanwhile (the buffers' records it holds
// locked: a retain only copies one of their references), and a deferred
// release only keeps an event alive longer.
//
// Thread-safety: none; one batch per thread, used by whoever holds the
// locks of the records it counts for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace memlayer::migration {

using Event = void*;  ///< as event.hpp: nullptr means "no event"

class RefBatch {
 public:
  /// How a net count reaches the runtime: `delta` (never 0) references more
  /// (> 0) or fewer (< 0) to `e`.
  using Apply = void (*)(void* context, Event e, int delta) noexcept;

  RefBatch() = default;
  RefBatch(const RefBatch&) = delete;
  RefBatch& operator=(const RefBatch&) = delete;
  /// Applies what is still counted. O(events counted).
  ~RefBatch() { flush(); }

  /// Counts from now on, applying through `apply(context, …)`. O(1).
  void begin(void* context, Apply apply) noexcept {
    context_ = context;
    apply_ = apply;
    memo_ = {};
  }
  /// Applies the net count of every event counted since begin(), in the
  /// order each was first counted, and counts no more. O(events counted).
  void flush() noexcept {
    for (const Entry& x : entries_) {
      if (x.delta != 0) apply_(context_, x.event, x.delta);
      slots_[x.slot] = 0;
    }
    entries_.clear();
    recent_ = {};
    memo_ = {};
    apply_ = nullptr;
  }
  [[nodiscard]] bool active() const noexcept { return apply_ != nullptr; }

  /// `delta` references more (> 0) or fewer (< 0) to `e` (not nullptr).
  /// Only while active. O(1): most often one of the two events counted last
  /// (the command's own, its predecessor), else a hash probe. Allocates
  /// nothing once warm; out of table room or memory, the count of an event
  /// not yet counted is applied at once (always correct: it has no deferred
  /// count to keep ahead of).
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

  /// The status (EventOps::status's raw value) last looked up for `e`
  /// since begin(), if one of the last two: the events a command's buffers
  /// ask about are mostly the same few (its predecessor, the oldest
  /// unfinished writer), and status lookups may cost a call each. An
  /// answer remembered during one enqueue is one the runtime gave during
  /// it: deciding on it is deciding as at that moment, and the counted
  /// references keep `e` from being freed and its address reused meanwhile.
  /// O(1).
  [[nodiscard]] bool recall(Event e, int& status) const noexcept {
    for (const Memo& m : memo_) {
      if (m.event == e) {
        status = m.status;
        return true;
      }
    }
    return false;
  }
  void remember(Event e, int status) noexcept {
    memo_[1] = memo_[0];
    memo_[0] = {e, status};
  }

 private:
  struct Memo {
    Event event = nullptr;
    int status = 0;
  };
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
    if (entries_.size() >= kMaxEntries) return apply_(context_, e, delta);
    try {
      entries_.push_back({e, delta, static_cast<std::uint16_t>(h)});
    } catch (...) {
      return apply_(context_, e, delta);
    }
    slots_[h] = static_cast<std::uint16_t>(entries_.size());
    touch(slots_[h]);
  }

  void touch(std::uint16_t entry) noexcept {
    recent_[1] = recent_[0];
    recent_[0] = entry;
  }

  void* context_ = nullptr;
  Apply apply_ = nullptr;
  std::vector<Entry> entries_;
  std::array<std::uint16_t, 2> recent_{};  // entries_ index + 1 of the two last counted
  std::array<Memo, 2> memo_{};             // the two last statuses looked up, newest first
  std::array<std::uint16_t, kSlots> slots_{};
};

}  // namespace memlayer::migration

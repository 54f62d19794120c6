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

  RefBatch() { used_.reserve(kMaxEntries); }
  RefBatch(const RefBatch&) = delete;
  RefBatch& operator=(const RefBatch&) = delete;
  /// Applies what is still counted. O(events counted).
  ~RefBatch() { flush(); }

  /// Counts from now on, applying through `apply(context, …)`. O(1).
  void begin(void* context, Apply apply) noexcept {
    context_ = context;
    apply_ = apply;
    forget_statuses();
  }
  /// Applies the net count of every event counted since begin(), in the
  /// order each was first counted, and counts no more. O(events counted).
  void flush() noexcept {
    for (const std::uint16_t i : used_) {
      Slot& x = slots_[i];
      if (x.delta != 0) apply_(context_, x.event, x.delta);
      x = Slot{};
    }
    used_.clear();
    recent_ = {&none_, &none_};
    forget_statuses();
    apply_ = nullptr;
  }
  [[nodiscard]] bool active() const noexcept { return apply_ != nullptr; }

  /// `delta` references more (> 0) or fewer (< 0) to `e` (not nullptr).
  /// Only while active. O(1): most often one of the two events counted last
  /// (the command's own, its predecessor), else a hash probe. Allocates
  /// nothing; out of table room, the count of an event not yet counted is
  /// applied at once (always correct: it has no deferred count to keep
  /// ahead of).
  void count(Event e, int delta) noexcept {
    if (recent_[0]->event == e) {
      recent_[0]->delta += delta;
      return;
    }
    if (recent_[1]->event == e) {
      recent_[1]->delta += delta;
      std::swap(recent_[0], recent_[1]);
      return;
    }
    count_new(e, delta);
  }

  /// The status (EventOps::status's raw value) looked up for `e` since
  /// begin(), if still remembered (a small direct-mapped table: the last of
  /// the events hashing alike). The events a command's buffers ask about
  /// are mostly the same few (its predecessor, the oldest unfinished
  /// writers), and status lookups may cost a call each. An answer
  /// remembered during one enqueue is one the runtime gave during it:
  /// deciding on it is deciding as at that moment, and the counted
  /// references keep `e` from being freed and its address reused meanwhile.
  /// O(1).
  [[nodiscard]] bool recall(Event e, int& status) const noexcept {
    // Most often the one looked up last (a command's buffers share their
    // last writer).
    if (e == last_.event) {
      status = last_.status;
      return true;
    }
    const Memo& m = memo_[memo_slot(e)];
    if (m.event != e || m.generation != generation_) return false;
    status = m.status;
    return true;
  }
  void remember(Event e, int status) noexcept {
    memo_[memo_slot(e)] = {e, generation_, status};
    last_ = {e, status};
  }

 private:
  struct Memo {
    Event event = nullptr;
    std::uint32_t generation = 0;  // valid while it is generation_
    int status = 0;
  };
  static constexpr unsigned kMemoBits = 9;
  static std::size_t memo_slot(Event e) noexcept {
    // Every bit counts: an event may be a pointer (its low bits zero) or a
    // name whose low bits are a slot index (engine/src/command_table.hpp).
    return reinterpret_cast<std::uintptr_t>(e) * 0x9E3779B97F4A7C15ull >> (64 - kMemoBits);
  }
  // Forgets every remembered status: O(1), the table is cleared only when
  // the generation wraps.
  void forget_statuses() noexcept {
    last_.event = &last_;
    if (++generation_ == 0) {
      memo_ = {};
      generation_ = 1;
    }
  }
  // Open addressing over the counts themselves, at most half full.
  static constexpr unsigned kSlotBits = 9;
  static constexpr std::size_t kSlots = std::size_t{1} << kSlotBits;
  static constexpr std::size_t kMaxEntries = kSlots / 2;
  struct Slot {
    Event event = nullptr;  // nullptr: empty
    int delta = 0;
  };

  // An event other than the two last counted: a hash probe.
  [[gnu::noinline]] void count_new(Event e, int delta) noexcept {
    std::size_t h = (reinterpret_cast<std::uintptr_t>(e) >> 4) * 0x9E3779B97F4A7C15ull >> (64 - kSlotBits);
    for (;; h = (h + 1) & (kSlots - 1)) {
      Slot& x = slots_[h];
      if (x.event == e) {
        x.delta += delta;
        return touch(x);
      }
      if (x.event == nullptr) break;
    }
    if (used_.size() >= kMaxEntries) {  // reserved: never allocates
      // A release applied now may free `e`, and a copy made later in this
      // enqueue may get its address: its remembered status goes with it.
      if (delta < 0 && memo_[memo_slot(e)].event == e) memo_[memo_slot(e)].event = nullptr;
      if (delta < 0 && last_.event == e) last_.event = &last_;
      return apply_(context_, e, delta);
    }
    used_.push_back(static_cast<std::uint16_t>(h));
    slots_[h] = Slot{e, delta};
    touch(slots_[h]);
  }

  void touch(Slot& x) noexcept {
    recent_[1] = recent_[0];
    recent_[0] = &x;
  }

  void* context_ = nullptr;
  Apply apply_ = nullptr;
  std::vector<std::uint16_t> used_;  // the slots counted in, in first-counted order
  std::array<Slot, kSlots> slots_{};
  Slot none_;                               // stands for "no event" in recent_
  std::array<Slot*, 2> recent_{&none_, &none_};  // the two last counted
  std::uint32_t generation_ = 1;
  std::array<Memo, std::size_t{1} << kMemoBits> memo_{};  // statuses looked up, by memo_slot()
  // The status remembered last, also in memo_. While none is, its event
  // is its own address, which no event (nor nullptr) equals: recall()
  // needs no second compare.
  struct Last {
    Event event = this;
    int status = 0;
  } last_;
};

}  // namespace memlayer::migration

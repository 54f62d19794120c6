// memlayer/engine/detail/buffer_lock.hpp — the lock of one engine Buffer.
//
// A kernel enqueue takes and releases one per buffer argument, almost never
// contended (two commands on the same buffer at the same instant), so the
// uncontended path is what counts: one compare-exchange to lock and one
// plain store to unlock. std::mutex costs a call into pthreads each way
// (about 110 instructions a pair, measured with callgrind on
// memlayer-bench-pocl-migration) and 40 bytes; an unlock that is an
// exchange (a locked instruction, which waits for every store before it)
// makes a pair cost 1.4-1.8 times as much (memlayer-bench-enqueue:
// BM_BufferLockPair, BM_ExchangeUnlockPair; doc/performance.md, the
// buffer's unlock a store).
//
// A waiter spins a little, then sleeps in the kernel (a futex) for at most
// kNap at a time, counted in sleepers_ meanwhile; an unlock that sees a
// sleeper wakes one. An unlock reads sleepers_ just before its store, with
// no fence, so it may miss one that has just started sleeping; that one
// then wakes when its nap ends and takes the lock: a missed wake-up costs
// at most kNap, never a hang. Meets the Lockable requirements, so
// std::lock_guard and std::unique_lock take it. Not fair: a waiter may be
// overtaken. The runtime takes it too where a lock is as short and as
// rarely contended (lib/src/event_state.hpp: an event's anchor).
#pragma once

#include <atomic>
#include <chrono>

namespace memlayer::engine::detail {

class BufferLock {
 public:
  /// At most this long asleep before a waiter looks again.
  static constexpr std::chrono::microseconds kNap{200};

  void lock() noexcept {
    if (!try_lock()) lock_contended();
  }
  [[nodiscard]] bool try_lock() noexcept {
    int expected = 0;
    return locked_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  /// Waiters asleep or about to be: a diagnostic (tests). O(1).
  [[nodiscard]] int sleepers() const noexcept { return sleepers_.load(std::memory_order_relaxed); }
  void unlock() noexcept {
    // Nothing of the lock is read once it is let go: the next holder may
    // destroy it at once (~Buffer takes its buffer's lock last). So whether
    // to wake is read before, and the wake-up needs only the address.
    const bool wake = sleepers_.load(std::memory_order_relaxed) != 0;
    std::atomic<int>* const word = &locked_;
    word->store(0, std::memory_order_release);
    if (wake) [[unlikely]]
      wake_one(word);
  }

 private:
  void lock_contended() noexcept;  // engine/src/buffer_lock.cpp
  // Wakes one sleeper on `word` (a futex wake: a system call with the
  // address, no access to the memory, which may be gone by then).
  static void wake_one(std::atomic<int>* word) noexcept;

  std::atomic<int> locked_{0};    // 1: held
  std::atomic<int> sleepers_{0};  // waiters asleep, or about to be
};

}  // namespace memlayer::engine::detail

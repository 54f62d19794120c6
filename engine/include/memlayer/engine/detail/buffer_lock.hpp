// memlayer/engine/detail/buffer_lock.hpp — the lock of one engine Buffer.
//
// A kernel enqueue takes and releases one per buffer argument, almost never
// contended (two commands on the same buffer at the same instant), so the
// uncontended path is what counts: one compare-exchange to lock, one
// exchange to unlock, where std::mutex costs a call into pthreads each way
// (about 110 instructions a pair, measured with callgrind on
// memlayer-bench-pocl-migration) and 40 bytes. A waiter sleeps in the kernel
// (std::atomic::wait: a futex on Linux), it does not spin. Meets the
// Lockable requirements, so std::lock_guard and std::unique_lock take it.
// The runtime takes it too where a lock is as short and as rarely
// contended (lib/src/event_state.hpp: an event's anchor).
#pragma once

#include <atomic>

namespace memlayer::engine::detail {

class BufferLock {
 public:
  void lock() noexcept {
    int expected = kFree;
    if (!state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire, std::memory_order_relaxed))
      lock_contended();
  }
  [[nodiscard]] bool try_lock() noexcept {
    int expected = kFree;
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kWaiters) state_.notify_one();
  }

 private:
  static constexpr int kFree = 0, kLocked = 1, kWaiters = 2;  // kWaiters: locked, someone may sleep

  void lock_contended() noexcept {
    // Marking kWaiters before sleeping makes the holder's unlock wake one.
    while (state_.exchange(kWaiters, std::memory_order_acquire) != kFree) state_.wait(kWaiters, std::memory_order_relaxed);
  }

  std::atomic<int> state_{kFree};
};

}  // namespace memlayer::engine::detail

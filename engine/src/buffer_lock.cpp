#include "memlayer/engine/detail/buffer_lock.hpp"

#include <thread>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

namespace memlayer::engine::detail {

namespace {

// A holder keeps a buffer's lock for a few hundred instructions on the
// fast path: a short spin often outlasts it without a sleep.
constexpr int kSpins = 64;

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

#ifdef __linux__
static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free,
              "the futex is the atomic's int");

int* futex_word(std::atomic<int>& a) noexcept { return reinterpret_cast<int*>(&a); }
#endif

}  // namespace

void BufferLock::lock_contended() noexcept {
  for (int i = 0; i < kSpins; ++i) {
    relax();
    if (locked_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (!try_lock()) {
#ifdef __linux__
    // Sleeps only while the lock is still held (the kernel compares), until
    // woken or the nap ends (BufferLock: a missed wake-up).
    constexpr long kNapNs = std::chrono::nanoseconds(kNap).count();
    const timespec nap{0, kNapNs};
    syscall(SYS_futex, futex_word(locked_), FUTEX_WAIT_PRIVATE, 1, &nap, nullptr, 0);
#else
    std::this_thread::sleep_for(kNap);
#endif
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

void BufferLock::wake_one(std::atomic<int>* word) noexcept {
#ifdef __linux__
  // Should the memory be gone or reused, the wake finds no sleeper, or wakes
  // one early: every futex sleeper here looks again when woken.
  syscall(SYS_futex, futex_word(*word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
#else
  (void)word;
#endif
}

}  // namespace memlayer::engine::detail

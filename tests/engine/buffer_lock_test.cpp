// BufferLock (memlayer/engine/detail/buffer_lock.hpp): mutual exclusion with
// a store for an unlock, waiters that spin, then sleep, and are woken (or
// wake at the end of a nap), never hang.
#include "memlayer/engine/detail/buffer_lock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using memlayer::engine::detail::BufferLock;

TEST(EngineBufferLock, TryLockFailsWhileHeldAndSucceedsOnceReleased) {
  BufferLock l;
  ASSERT_TRUE(l.try_lock());
  EXPECT_FALSE(l.try_lock());
  std::thread other([&] { EXPECT_FALSE(l.try_lock()); });
  other.join();
  l.unlock();
  EXPECT_TRUE(l.try_lock());
  l.unlock();
}

// Four threads add to a plain counter under the lock; one of them now and
// then holds it across a sleep, so that the others go to sleep in the
// kernel rather than only spin. No increment is lost, and no two threads
// are ever inside at once.
TEST(EngineBufferLock, ExcludesUnderContentionWithSleepingWaiters) {
  BufferLock l;
  std::uint64_t counter = 0;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  constexpr int kThreads = 4, kRounds = 20'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard g(l);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ++counter;
        if (t == 0 && i % 2'000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        inside.fetch_sub(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(counter, std::uint64_t{kThreads} * kRounds);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(l.sleepers(), 0);
}

// A waiter that has gone to sleep (counted) takes the lock once it is let
// go, and is no longer counted after.
TEST(EngineBufferLock, ASleepingWaiterTakesTheLockOnceReleased) {
  BufferLock l;
  l.lock();
  std::atomic<bool> took{false};
  std::thread waiter([&] {
    l.lock();
    took = true;
    l.unlock();
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (l.sleepers() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(l.sleepers(), 1) << "the waiter never went to sleep";
  EXPECT_FALSE(took.load());
  l.unlock();
  waiter.join();
  EXPECT_TRUE(took.load());
  EXPECT_EQ(l.sleepers(), 0);
}

// The thread that takes the lock next may destroy it at once (~Buffer
// takes its buffer's lock last, then frees it): the unlock that let it go
// reads nothing of it after. (ThreadSanitizer reports the read as a race
// with the delete when an unlock looks for sleepers after its store.)
TEST(EngineBufferLock, MayBeDestroyedByTheNextHolderAtOnce) {
  for (int i = 0; i < 200; ++i) {
    auto owned = std::make_unique<BufferLock>();
    BufferLock* const l = owned.get();
    l->lock();
    std::thread next([owned = std::move(owned)]() mutable {
      owned->lock();
      owned->unlock();
      owned.reset();
    });
    if (i % 2 == 0) {  // half the time with the next one asleep
      while (l->sleepers() == 0) std::this_thread::yield();
    }
    l->unlock();
    next.join();
  }
}

}  // namespace

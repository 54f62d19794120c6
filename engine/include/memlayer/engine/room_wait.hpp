// memlayer/engine/room_wait.hpp — how a host waits for room after an
// enqueue failed with EnqueueError::Code::device_busy, before enqueuing it
// again.
//
// Both of the engine's hosts (memlayer's runtime, lib/src/context_state.cpp,
// and PoCL's core, drivers/pocl/core/pocl_memlayer_migration.cpp) wait this
// one way:
//   - until ANY ONE of the events the failure named (Submission::waits) has
//     finished, not all of them. A device's deferred frees are named
//     together, and some may be held by commands gated on a user event the
//     application sets only after this enqueue returns, while the room the
//     others hold is enough (waiting for all of them failed every run of
//     issue 33's oversubscribed PoCL workload: tests/pocl/
//     pocl_oversubscribed_test.cpp). A try that finds too little room names
//     what is left;
//   - with no event named, not at all beyond a yield: the buffers that
//     eviction could take were held by other threads' enqueues at that
//     instant (never waited for: eviction only try-locks), which let go of
//     them within microseconds;
//   - for at most `limit` in all, counted from the first wait, whatever the
//     number of tries: a write-back that failed is made again at the next
//     try (engine.hpp), so a limit per try, or on the number of tries, would
//     either never end the tries of a device whose transfers keep failing,
//     or end them while room is still coming. The named events belong to
//     commands already enqueued, which finish by themselves unless each
//     waits, directly or not, for something this thread does only after
//     the enqueue returns (a user event it sets): the limit turns that
//     deadlock into the enqueue's allocation failure.
#pragma once

#include <chrono>
#include <span>

#include "memlayer/engine/host.hpp"

namespace memlayer::engine {

/// One enqueue's wait for room, over all its tries. Not thread-safe: one
/// per enqueue, on the enqueuing thread.
class RoomWait {
 public:
  /// `host` must outlive it.
  explicit RoomWait(const Host& host) noexcept : host_(host) {}

  /// Waits, holding no lock of the engine's (call it between enqueues,
  /// after the failed one released everything), until one of `events` has
  /// finished (Host::finished) — at once, after a yield, when there is
  /// none — and returns true: enqueue again. False once `limit` has passed
  /// since the first wait: report the failure. `limit` is read at the
  /// first wait only (a host may read it from its configuration then:
  /// only an enqueue that must wait pays for that). The limit is checked before
  /// the events, so tries that keep finding one more event finished end
  /// too. Hosts offer no timed wait for any of several events, so this
  /// polls Host::status, backing off from 20 µs to 1 ms: only an enqueue
  /// that found its device full pays for it. Never throws.
  bool wait(std::span<const Event> events, std::chrono::milliseconds limit) noexcept;

 private:
  const Host& host_;
  bool started_ = false;
  std::chrono::steady_clock::time_point deadline_{};
};

}  // namespace memlayer::engine

// The engine's fast path (Engine::enqueue): a command whose buffers are all
// in the steady state is checked whole, then recorded, without the general
// pipeline (transaction.cpp): no groups, no plans, no copies, no placement.
// doc/engine.md ("The fast path") has its conditions and cost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "memlayer/engine/engine.hpp"

namespace memlayer::engine {

class RefBatch;
class WaitList;

class FastPath {
 public:
  /// Engine::enqueue() with the fast path on, on `out` as the engine hands
  /// it over (cleared, its host and table set). When every buffer of the
  /// command is in the steady state (engine.hpp: the fast path), records
  /// the command and fills `out` as the general pipeline would, or, out of
  /// host memory, fails as the general pipeline would, with nothing of the
  /// command recorded. Else (a miss: a condition not met, or a buffer
  /// another thread holds where waiting for it could break the lock order)
  /// it records nothing (a check may have dropped records of completed
  /// writers, which changes no content) and hands the command to the
  /// general pipeline (Engine::pipeline), which starts from the same state.
  /// O(uses), plus RangeVersions::fast_prepare's cost per buffer, on a hit.
  /// Inlined into Engine::enqueue, which fast_path.cpp defines beside it.
  [[gnu::always_inline]] static std::optional<EnqueueError> enqueue(Engine& engine, std::span<const BufferUse> uses,
                                                                    Location at, Event command, Submission& out);

 private:
  using Storage = Buffer::Storage;
  // Locks each buffer of `uses` in turn, remembering statuses in `memo`
  // (maybe nullptr), and checks it, making the room the commit needs;
  // `locked` counts the buffers locked as it goes (all, or up to the first
  // that misses or that it must not wait for). How many waits the commit
  // may add, or nullopt on a miss. Changes no content. Throws
  // std::bad_alloc (`locked` says what to unlock).
  static std::optional<std::size_t> lock_and_check(std::span<const BufferUse> uses, Location at, RefBatch* memo,
                                                   std::size_t& locked);
  // One buffer's check, under its lock; adds to `waits` how many the
  // commit may add for it.
  static bool check(const BufferUse& u, Location at, Event& unfailed, std::size_t& waits);
  // Records the command in every buffer, which it then unlocks, and
  // writes each use's storage into out.storage_ (sized to the uses before
  // the checks), in order.
  static void commit_and_unlock(std::span<const BufferUse> uses, Location at, Event name, std::uint64_t stamp,
                                WaitList& waits, Submission& out) noexcept;
  static void unlock(Buffer& b) noexcept;
};

}  // namespace memlayer::engine

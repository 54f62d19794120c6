// The shared state behind an Event, and the command graph's node.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "memlayer/migration/event.hpp"
#include "memlayer/runtime/event.hpp"

namespace memlayer::runtime::detail {

class DeviceState;
struct CommandNode;

std::uint64_t now_ns();

class EventState : public std::enable_shared_from_this<EventState> {
 public:
  explicit EventState(bool user) : user_(user) { profile_.queued_ns = now_ns(); }

  bool user() const { return user_; }
  /// Lock-free: the migration engine asks it at every enqueue.
  int status() const { return status_.load(std::memory_order_acquire); }
  /// The engine's view (migration/event.hpp): a failure is `failed` when
  /// the command had started, `cancelled` when it never ran.
  migration::EventStatus outcome() const;
  std::string message() const;
  ProfilingInfo profiling() const;
  int wait();
  /// Waits until the event has ended or `deadline` has passed; whether it ended.
  bool wait_until(std::chrono::steady_clock::time_point deadline);
  /// A node waiting for this event; `propagate`: this event's failure fails it.
  struct Waiter {
    std::shared_ptr<CommandNode> node;
    bool propagate;
  };
  /// Adds `node` as a waiter unless this event has ended; returns the final
  /// status if it has (so the caller resolves the dependency itself).
  std::optional<int> add_waiter(const std::shared_ptr<CommandNode>& node, bool propagate);
  void add_callback(std::function<void(int)> cb);
  void mark(int status);  // submitted / running, with timestamps
  /// Its work failed before it changed anything (Status::changed_nothing):
  /// outcome() says `cancelled`, as if it never ran. Before finish().
  void changed_nothing() { started_.store(false, std::memory_order_relaxed); }  // published by finish()

  /// Ends the event; returns false if it had ended already. Waiters and
  /// callbacks are handed to the caller to run outside the lock.
  bool finish(int status, std::string message, std::vector<Waiter>& waiters,
              std::vector<std::function<void(int)>>& callbacks);

  // The migration planner's references (EventOps): while it holds any, the
  // event keeps itself alive through `anchor_`.
  void planner_retain(std::uint32_t count);
  void planner_release(std::uint32_t count);

 private:
  mutable std::mutex mutex_;
  std::condition_variable ended_;
  std::atomic<int> status_{cl::kQueued};  // written under mutex_
  std::atomic<bool> started_{false};      // it reached kRunning; set before status_ ends
  std::string message_;
  const bool user_;
  ProfilingInfo profile_;
  std::vector<Waiter> waiters_;
  std::vector<std::function<void(int)>> callbacks_;
  int planner_refs_ = 0;
  std::shared_ptr<EventState> anchor_;
};

/// A command (or migration) in the dependency graph.
struct CommandNode {
  std::shared_ptr<EventState> event;
  std::function<Status()> work;   // empty for markers and barriers
  DeviceState* device = nullptr;  // whose workers run `work`
  std::atomic<int> pending{1};    // unresolved dependencies, plus one while being wired
  std::atomic<bool> ended{false};
  std::vector<std::shared_ptr<void>> keep_alive;  // buffers it touches outlive it
};

}  // namespace memlayer::runtime::detail

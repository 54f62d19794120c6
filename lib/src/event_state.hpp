// The shared state behind an Event, and the command graph's node.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memlayer/engine/detail/buffer_lock.hpp"
#include "memlayer/migration/access.hpp"
#include "memlayer/migration/event.hpp"
#include "memlayer/runtime/device_driver.hpp"
#include "memlayer/runtime/event.hpp"

namespace memlayer::engine {
class Engine;
enum class CommandName : std::uintptr_t;
}  // namespace memlayer::engine

namespace memlayer::runtime::detail {

class BufferState;
class ContextState;
class DeviceState;
class EventState;
struct CommandNode;

std::uint64_t now_ns();

/// A command's work, given where each of its buffer uses starts in the
/// command's device (a host pointer on host-memory devices), in order;
/// empty for copies.
using Work = std::function<Status(std::span<const DeviceAddress>)>;

/// One dependency of a node, threaded on the dependency's list of waiters
/// once wired. A node's links are made before the engine commits its
/// command (scheduler.hpp: reserve_deps), so that wiring, finishing and
/// failing it allocate nothing: an enqueue cannot run out of memory half-way.
struct WaitLink {
  std::shared_ptr<EventState> dep;    // until wired: keeps the dependency alive
  std::shared_ptr<CommandNode> node;  // while linked: the event keeps its waiter alive
  WaitLink* next = nullptr;
  bool propagate = false;  // the dependency's failure fails the node
};

class EventState : public std::enable_shared_from_this<EventState> {
 public:
  explicit EventState(bool user) : user_(user) { profile_.queued_ns = now_ns(); }
  /// An event dropped before it ended lets go of its waiters.
  ~EventState();
  EventState(const EventState&) = delete;
  EventState& operator=(const EventState&) = delete;

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
  /// Links `node` as a waiter through `link` (one of node's own) unless this
  /// event has ended; returns the final status if it has (so the caller
  /// resolves the dependency itself). Allocates nothing.
  std::optional<int> add_waiter(WaitLink& link, const std::shared_ptr<CommandNode>& node) noexcept;
  void add_callback(std::function<void(int)> cb);
  void mark(int status);  // submitted / running, with timestamps
  /// Its work failed before it changed anything (Status::changed_nothing):
  /// outcome() says `cancelled`, as if it never ran. Before finish().
  void changed_nothing() { started_.store(false, std::memory_order_relaxed); }  // published by finish()

  /// Ends the event; returns false if it had ended already. Waiters (a list
  /// through WaitLink::next) and callbacks are handed to the caller to run
  /// outside the lock. Allocates nothing.
  bool finish(int status, std::string message, WaitLink*& waiters,
              std::vector<std::function<void(int)>>& callbacks) noexcept;

  // The migration planner's references (EventOps): while it holds any, the
  // event keeps itself alive through `anchor_`. Lock-free but when the count
  // leaves or reaches 0 (engines take and drop them at every enqueue).
  void planner_retain(std::uint32_t count);
  void planner_release(std::uint32_t count);
  // The first of them, for a command's event no other thread can reach yet
  // (engine::Host::retain_unshared): neither the lock nor a
  // read-modify-write of the count.
  void planner_retain_unshared();

 private:
  mutable std::mutex mutex_;
  std::condition_variable ended_;
  std::atomic<int> status_{cl::kQueued};  // written under mutex_
  std::atomic<bool> started_{false};      // it reached kRunning; set before status_ ends
  std::string message_;
  const bool user_;
  ProfilingInfo profile_;
  WaitLink* waiters_ = nullptr;  // first to resolve
  WaitLink* last_waiter_ = nullptr;
  std::vector<std::function<void(int)>> callbacks_;
  // Counted lock-free; anchor_ is set and cleared under anchor_lock_, each
  // time checking the count again: a retain from 0 and a release to 0 that
  // race leave the anchor as the count says. A retain from 0 comes only
  // from a caller that keeps the event alive otherwise (the command's own
  // queue). Every command's event goes from 0 and back once (the engine's
  // command table holds one reference per command), so the lock is the
  // engine's small one (a compare-exchange each way), not mutex_ (a call
  // into pthreads each way).
  std::atomic<std::int64_t> planner_refs_{0};
  engine::detail::BufferLock anchor_lock_;
  std::shared_ptr<EventState> anchor_;
};

/// A command (or migration) in the dependency graph.
struct CommandNode {
  std::shared_ptr<EventState> event;
  Work work;                      // empty for markers and barriers
  std::vector<DeviceAddress> targets;  // what `work` is given: one per buffer use
  DeviceState* device = nullptr;  // whose workers run `work`
  std::atomic<int> pending{1};    // unresolved dependencies, plus one while being wired
  std::atomic<bool> ended{false};
  // What its work needs alive until it has run. A command's context (its
  // devices, its engine), once per command: the engine frees a buffer the
  // application releases only after the commands that use its storage at
  // a device (engine.hpp: ~Buffer), so those need no hold on it. The
  // buffers whose host copy the work reads or writes (a command at the
  // host location, a copy), which is the buffer's own memory.
  std::shared_ptr<ContextState> context;
  std::vector<std::shared_ptr<BufferState>> held;
  /// Its dependencies; never reallocated once one is wired (their links
  /// are threaded on the dependencies' events).
  std::vector<WaitLink> deps;
  std::shared_ptr<CommandNode> next_ready;   // its device's queue of ready nodes
  std::shared_ptr<CommandNode> next_failed;  // finish()'s nodes to fail
  std::shared_ptr<EventState> failed_by;     // with next_failed: the dependency that failed
  // The migration engine that recorded it, and its name there
  // (engine.hpp: Submission::command()): told how it ended, once
  // (scheduler.hpp: tell_engine()).
  engine::Engine* engine = nullptr;
  engine::CommandName engine_name{};
};

}  // namespace memlayer::runtime::detail

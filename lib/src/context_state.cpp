#include "context_state.hpp"

#include <algorithm>
#include <string>

#include "scheduler.hpp"

namespace memlayer::runtime::detail {

namespace {

using migration::kHost;
using migration::Location;
using EventPtr = std::shared_ptr<EventState>;

void append(std::vector<EventPtr>& to, const std::vector<EventPtr>& from) { to.insert(to.end(), from.begin(), from.end()); }

Status to_status(const engine::EnqueueError& e) {
  switch (e.code) {
    case engine::EnqueueError::Code::device_full:
    case engine::EnqueueError::Code::device_busy: return Status::error(cl::kMemObjectAllocationFailure, e.message);
    case engine::EnqueueError::Code::host_out_of_memory: return Status::error(cl::kOutOfHostMemory, e.message);
    case engine::EnqueueError::Code::host_failed: break;
  }
  return Status::error(cl::kMemObjectAllocationFailure, e.message);
}

// Queue order is order only: a command that failed does not fail the next
// one in its queue (only its wait list, and the bytes it was to write).
void order_in_queue(QueueState& q, bool barrier, const EventPtr& event, std::vector<EventPtr>& deps) {
  if (!q.out_of_order) {
    if (q.last) deps.push_back(q.last);
    q.last = event;
  } else if (barrier) {
    append(deps, q.since_barrier);
    if (q.barrier) deps.push_back(q.barrier);
    q.barrier = event;
    q.since_barrier.clear();
  } else {
    if (q.barrier) deps.push_back(q.barrier);
    q.since_barrier.push_back(event);
  }
  if (q.outstanding.size() >= q.prune_outstanding_at) {
    std::erase_if(q.outstanding, [](const EventPtr& e) { return e->status() <= cl::kComplete; });
    q.prune_outstanding_at = std::max<std::size_t>(64, 2 * q.outstanding.size());
  }
  q.outstanding.push_back(event);
}

// Per thread, so an enqueue allocates nothing once warm.
struct Scratch {
  std::vector<engine::BufferUse> uses;
  std::vector<Target> targets;
  engine::Submission submission;
};
thread_local Scratch t_scratch;

}  // namespace

ContextState::ContextState(std::vector<std::unique_ptr<DeviceDriver>> drivers, const ContextOptions& options)
    : room_wait(options.room_wait) {
  by_location.push_back(nullptr);  // the host copy
  for (auto& driver : drivers) {
    const bool shared = driver->info().shares_host_memory;
    const Location loc = shared ? kHost : static_cast<Location>(by_location.size());
    const LinkCost host_link = driver->host_link();
    devices.push_back(std::make_unique<DeviceState>(std::move(driver), loc, options.device_heap));
    if (!shared) {
      by_location.push_back(devices.back().get());
      cost.set_host_link(loc, host_link);
    }
  }
  for (DeviceState* src : by_location) {
    for (DeviceState* dst : by_location) {
      if (src == nullptr || dst == nullptr || src == dst) continue;
      if (auto link = dst->driver().peer_link(src->driver())) cost.set_direct(src->location(), dst->location(), *link);
    }
  }
}

std::string ContextState::location_name(Location at) const {
  return at == kHost ? std::string("the host") : by_location[at]->info().name;
}

ContextState::~ContextState() {
  for (auto& device : devices) device->stop();
}

// A full device makes room by evicting; a buffer with bytes valid nowhere
// else is evicted only once they are written back (engine.hpp), so the
// enqueue waits for those write-backs (device_busy) and tries again, at
// most kRoomTries times: a write-back that keeps failing (its bytes stay
// where they are) or waits too long (ContextOptions::room_wait) fails the
// enqueue instead.
constexpr int kRoomTries = 8;

Result<Event> ContextState::enqueue(QueueState& queue, CommandSpec spec, std::span<const Event> wait) {
  for (const Event& e : wait) {
    if (!e.valid()) return Status::error(cl::kInvalidEventWaitList, "the wait list holds an empty event");
  }
  auto node = make_node(spec.device, nullptr);
  std::vector<EventPtr> deps;
  for (const Event& e : wait) deps.push_back(e.state());
  const auto deadline = std::chrono::steady_clock::now() + room_wait;
  for (int attempt = 1;; ++attempt) {
    if (auto done = try_enqueue(queue, spec, node, deps, attempt == kRoomTries)) return std::move(*done);
    engine::Submission& sub = t_scratch.submission;
    bool came = true;
    for (engine::Event e : sub.waits()) came = came && static_cast<EventState*>(e)->wait_until(deadline);
    sub.clear();
    if (!came) {
      return Status::error(cl::kMemObjectAllocationFailure,
                           location_name(spec.at) + ": no room for the command's buffers: the write-backs of the "
                           "buffers evicted for them did not finish within " + std::to_string(room_wait.count()) +
                           " ms (their queued commands may wait for this thread)");
    }
  }
}

std::optional<Result<Event>> ContextState::try_enqueue(QueueState& queue, const CommandSpec& spec,
                                                       const std::shared_ptr<CommandNode>& node,
                                                       std::vector<EventPtr> deps, bool last_try) {
  std::vector<EventPtr> order;
  Scratch& sc = t_scratch;
  {
    // Queue order and buffer-version order must agree, or two threads on
    // one queue could each wait for the other: the queue lock comes first.
    std::lock_guard queue_lock(queue.mutex);
    if (!spec.uses.empty()) {
      sc.uses.clear();
      for (const BufferUse& u : spec.uses) sc.uses.push_back({&u.parent->tracked, u.use});
      if (auto failed = engine.enqueue(sc.uses, spec.at, node->event.get(), sc.submission)) {
        if (failed->code == engine::EnqueueError::Code::device_busy && !last_try) return std::nullopt;
        sc.submission.clear();
        return Result<Event>(to_status(*failed));
      }
      for (engine::Event e : sc.submission.waits()) deps.push_back(static_cast<EventState*>(e)->shared_from_this());
      sc.targets.clear();
      for (std::size_t i = 0; i < spec.uses.size(); ++i) {
        Target t;
        t.address = sc.submission.storage()[i] + spec.uses[i].use.offset;
        if (spec.at == kHost) t.host = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(t.address));
        sc.targets.push_back(t);
        node->keep_alive.push_back(spec.uses[i].parent);
      }
      if (spec.make_work) node->work = spec.make_work(sc.targets);
    }
    order_in_queue(queue, spec.barrier, node->event, order);
  }
  sc.submission.clear();
  // Submitting may run work-less nodes and user callbacks on this thread:
  // never under a memlayer lock.
  submit(node, deps, order);
  return Result<Event>(Event(node->event));
}

}  // namespace memlayer::runtime::detail

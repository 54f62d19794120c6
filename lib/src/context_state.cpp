#include "context_state.hpp"

#include <algorithm>
#include <new>
#include <string>

#include "memlayer/engine/room_wait.hpp"
#include "scheduler.hpp"

namespace memlayer::runtime::detail {

namespace {

using migration::kHost;
using migration::Location;
using EventPtr = std::shared_ptr<EventState>;

// Room for one more element: grows geometrically (one element at a time
// would copy the list at every enqueue).
template <class T>
void room_for_one(std::vector<T>& v) {
  if (v.size() == v.capacity()) v.reserve(std::max<std::size_t>(8, 2 * v.size()));
}

Status to_status(const engine::EnqueueError& e) {
  switch (e.code) {
    case engine::EnqueueError::Code::device_full:
    case engine::EnqueueError::Code::device_busy: return Status::error(cl::kMemObjectAllocationFailure, e.message);
    case engine::EnqueueError::Code::host_out_of_memory: return Status::error(cl::kOutOfHostMemory, e.message);
    case engine::EnqueueError::Code::host_failed: break;
  }
  return Status::error(cl::kMemObjectAllocationFailure, e.message);
}

// How many events queue order makes the next command wait for.
std::size_t order_count(const QueueState& q, bool barrier) {
  if (!q.out_of_order) return q.last ? 1 : 0;
  return (q.barrier ? 1 : 0) + (barrier ? q.since_barrier.size() : 0);
}

// The room order_in_queue() needs, and `engine_waits` for the engine's
// waits: made before the engine commits.
void make_room_in_queue(QueueState& q, bool barrier, CommandNode& node, std::size_t engine_waits) {
  reserve_deps(node, order_count(q, barrier) + engine_waits);
  if (q.out_of_order && !barrier) room_for_one(q.since_barrier);
  room_for_one(q.outstanding);
}

// Queue order is order only: a command that failed does not fail the next
// one in its queue (only its wait list, and the bytes it was to write).
// Allocates nothing: make_room_in_queue() made the room.
void order_in_queue(QueueState& q, bool barrier, CommandNode& node) noexcept {
  const EventPtr& event = node.event;
  if (!q.out_of_order) {
    add_dep(node, q.last, false);
    q.last = event;
  } else if (barrier) {
    for (const EventPtr& e : q.since_barrier) add_dep(node, e, false);
    add_dep(node, q.barrier, false);
    q.barrier = event;
    q.since_barrier.clear();
  } else {
    add_dep(node, q.barrier, false);
    q.since_barrier.push_back(event);
  }
  // The ended go once the list has doubled since: each enqueue pays O(1).
  if (q.outstanding.size() >= q.prune_outstanding_at) {
    std::erase_if(q.outstanding, [](const EventPtr& e) { return e->status() <= cl::kComplete; });
    q.prune_outstanding_at = std::max<std::size_t>(64, 2 * q.outstanding.size());
  }
  q.outstanding.push_back(event);
}

// The engine's waits, once it has committed the command: enqueue() made
// room for about one per use; a longer list takes more room now, and
// without memory for it the command cannot be wired: false.
bool add_engine_waits(CommandNode& node, std::span<const engine::Event> waits, std::size_t order) noexcept {
  if (deps_room(node) < waits.size() + order) {
    try {
      reserve_deps(node, waits.size() + order);
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  for (engine::Event e : waits) add_dep(node, static_cast<EventState*>(e)->shared_from_this(), true);
  return true;
}

// Per thread, so an enqueue allocates nothing in it once warm.
struct Scratch {
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

// Room, beyond the wait list and queue order, for the engine's waits: one
// per use (its last writer or copy) and a few more (fences, readers). A
// longer list is made room for after the commit (add_engine_waits).
constexpr std::size_t kSpareDeps = 2;

Result<Event> ContextState::enqueue(QueueState& queue, CommandSpec spec, std::span<const Event> wait) noexcept {
  try {
    return enqueue_or_throw(queue, std::move(spec), wait);
  } catch (const std::bad_alloc&) {
    return out_of_host_memory("enqueue");  // thrown before the engine committed anything
  }
}

Result<Event> ContextState::enqueue_or_throw(QueueState& queue, CommandSpec spec, std::span<const Event> wait) {
  for (const Event& e : wait) {
    if (!e.valid()) return Status::error(cl::kInvalidEventWaitList, "the wait list holds an empty event");
  }
  auto node = make_node(spec.device, std::move(spec.work));
  node->targets.resize(spec.uses.size());
  node->context = queue.context;
  // At the host location the work uses the buffers' own memory (their host
  // copies): it holds them (CommandNode::held).
  if (spec.at == kHost) {
    node->held.reserve(spec.uses.size());
    for (const engine::BufferUse& u : spec.uses)
      node->held.push_back(static_cast<BufferState*>(u.buffer->cookie())->shared_from_this());
  }
  // Queue order adds one more (in-order) or a few: try_enqueue() sees.
  reserve_deps(*node, wait.size() + spec.uses.size() + kSpareDeps + 1);
  for (const Event& e : wait) add_dep(*node, e.state(), true);
  // A full device makes room by evicting; storage still in use, or a
  // buffer whose bytes valid nowhere else are being written back, is room
  // only once that work has finished (device_busy): wait as
  // engine/room_wait.hpp says, and try again.
  engine::RoomWait room(engine.host());
  std::string busy;
  for (;;) {
    if (auto done = try_enqueue(queue, spec, node, busy)) return std::move(*done);
    engine::Submission& sub = t_scratch.submission;
    const bool again = room.wait(sub.waits(), room_wait);
    sub.clear();
    if (!again) {
      return Status::error(cl::kMemObjectAllocationFailure,
                           busy + " (waited " + std::to_string(room_wait.count()) +
                               " ms for room: the queued commands holding it may wait for this thread)");
    }
  }
}

std::optional<Result<Event>> ContextState::try_enqueue(QueueState& queue, CommandSpec& spec,
                                                       const std::shared_ptr<CommandNode>& node, std::string& busy) {
  Scratch& sc = t_scratch;
  bool wired = true;
  {
    // Queue order and buffer-version order must agree, or two threads on
    // one queue could each wait for the other: the queue lock comes first.
    std::lock_guard queue_lock(queue.mutex);
    make_room_in_queue(queue, spec.barrier, *node, spec.uses.size() + kSpareDeps);
    if (!spec.uses.empty()) {
      if (auto failed = engine.enqueue(spec.uses, spec.at, node->event.get(), sc.submission)) {
        if (failed->code == engine::EnqueueError::Code::device_busy) {
          busy = std::move(failed->message);
          return std::nullopt;
        }
        sc.submission.clear();
        return Result<Event>(to_status(*failed));
      }
      // Committed: the command is a writer or reader of its ranges and a
      // user of its storage. Nothing below allocates (the room was made
      // above and in enqueue()) but a long list of waits.
      node->engine = &engine;
      node->engine_name = sc.submission.command();
      wired = add_engine_waits(*node, sc.submission.waits(), order_count(queue, spec.barrier));
      if (wired) {
        for (std::size_t i = 0; i < spec.uses.size(); ++i)
          node->targets[i] = sc.submission.storage()[i] + spec.uses[i].use.offset;
      }
    }
    if (wired) order_in_queue(queue, spec.barrier, *node);
  }
  sc.submission.clear();
  if (!wired) {
    // It cannot run without all its waits: it fails without having started
    // (the engine undoes a command that failed so: doc/engine.md), and
    // whatever waits for it fails or goes on as for any failed command.
    const char* what = "enqueue: wiring the command after the engine placed it";
    Status s = out_of_host_memory(what);
    tell_engine(*node, engine::EventStatus::cancelled);
    finish(node->event, s.code, std::move(s.message));
    return Result<Event>(out_of_host_memory(what));
  }
  // Submitting may run work-less nodes and user callbacks on this thread:
  // never under a memlayer lock.
  submit(node);
  return Result<Event>(Event(node->event));
}

}  // namespace memlayer::runtime::detail

#include "scheduler.hpp"

#include <cassert>
#include <chrono>
#include <new>
#include <string>

#include "device_state.hpp"
#include "memlayer/engine/engine.hpp"

namespace memlayer::runtime::detail {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

Status out_of_host_memory(const char* what) noexcept {
  Status s;
  s.code = cl::kOutOfHostMemory;
  try {
    s.message = std::string(what) + ": out of host memory";
  } catch (const std::bad_alloc&) {
    // An empty message would say nothing: this one fits the string's own storage.
    s.message = "no host memory";
  }
  return s;
}

namespace {

// A node whose dependencies are all resolved: run it, or queue it on its
// device. Markers and barriers have no work and complete right here.
void release(const std::shared_ptr<CommandNode>& node) noexcept {
  if (node->ended.load()) return;  // failed early through a dependency
  node->event->mark(cl::kSubmitted);
  if (node->work && node->device != nullptr) {
    node->device->push(node);
  } else {
    run(node);
  }
}

void resolve(const std::shared_ptr<CommandNode>& node) noexcept {
  if (node->pending.fetch_sub(1) == 1) release(node);
}

// The message of a node failed by its dependency `dep`; empty when there is
// no memory for it (EventState::message() then says so).
std::string failed_dependency_message(const EventState& dep) noexcept {
  try {
    return "a command it depends on failed: " + dep.message();
  } catch (const std::bad_alloc&) {
    return {};
  }
}

// Ends `event` and resolves its waiters; those its failure fails are pushed
// on `to_fail` (through CommandNode::next_failed) for finish() to end.
void end(const std::shared_ptr<EventState>& event, int status, std::string message,
         std::shared_ptr<CommandNode>& to_fail) noexcept {
  WaitLink* waiters = nullptr;
  std::vector<std::function<void(int)>> callbacks;
  if (!event->finish(status, std::move(message), waiters, callbacks)) return;
  for (auto& cb : callbacks) cb(status);
  while (waiters != nullptr) {
    WaitLink& link = *waiters;
    std::shared_ptr<CommandNode> w = std::move(link.node);  // the link lives in w: hold it
    waiters = link.next;
    if (status < 0 && link.propagate) {
      if (!w->ended.exchange(true)) {
        w->failed_by = event;
        w->next_failed = std::move(to_fail);
        to_fail = w;
      }
      w->pending.fetch_sub(1);
    } else {
      resolve(w);
    }
  }
}

}  // namespace

std::shared_ptr<CommandNode> make_node(DeviceState* device, Work work) {
  auto node = std::make_shared<CommandNode>();
  node->event = std::make_shared<EventState>(false);
  node->device = device;
  node->work = std::move(work);
  return node;
}

void reserve_deps(CommandNode& node, std::size_t more) { node.deps.reserve(node.deps.size() + more); }

std::size_t deps_room(const CommandNode& node) noexcept { return node.deps.capacity() - node.deps.size(); }

void add_dep(CommandNode& node, std::shared_ptr<EventState> dep, bool propagate) noexcept {
  if (!dep || dep == node.event) return;
  assert(deps_room(node) > 0 && "reserve_deps() first: a reallocation would move wired links");
  node.deps.push_back(WaitLink{std::move(dep), nullptr, nullptr, propagate});  // within capacity: no allocation
}

void tell_engine(CommandNode& node, engine::EventStatus status) noexcept {
  if (node.engine == nullptr) return;
  node.engine->ended(node.engine_name, status);
  node.engine = nullptr;
}

void submit(const std::shared_ptr<CommandNode>& node) noexcept {
  for (WaitLink& link : node->deps) {
    const std::shared_ptr<EventState> dep = std::move(link.dep);
    node->pending.fetch_add(1);
    // Once linked, the link is the dependency's to use (it may end now, on
    // another thread): only `dep`, held here, is read after.
    if (auto ended = dep->add_waiter(link, node)) {
      if (link.propagate && *ended < 0 && !node->ended.exchange(true)) {
        tell_engine(*node, engine::EventStatus::cancelled);
        finish(node->event, cl::kExecStatusErrorForEventsInWaitList, failed_dependency_message(*dep));
      }
      node->pending.fetch_sub(1);
    }
  }
  resolve(node);  // the wiring reference
}

void finish(const std::shared_ptr<EventState>& event, int status, std::string message) noexcept {
  std::shared_ptr<CommandNode> to_fail;
  end(event, status, std::move(message), to_fail);
  while (to_fail) {
    const std::shared_ptr<CommandNode> node = std::move(to_fail);
    to_fail = std::move(node->next_failed);
    const std::shared_ptr<EventState> cause = std::move(node->failed_by);
    tell_engine(*node, engine::EventStatus::cancelled);
    end(node->event, cl::kExecStatusErrorForEventsInWaitList, failed_dependency_message(*cause), to_fail);
  }
}

void run(const std::shared_ptr<CommandNode>& node) noexcept {
  if (node->ended.exchange(true)) return;
  // Until it has ended: its engine hears of it, and its dependents, which
  // hold the context as well, are handed on.
  const std::shared_ptr<ContextState> context = std::move(node->context);
  node->event->mark(cl::kRunning);
  Status s;
  if (node->work) {
    try {
      s = node->work(node->targets);
    } catch (const std::bad_alloc&) {
      s = out_of_host_memory("the command's work");
    }
  }
  // The engine hears how it ended here: the work is done, so nothing need
  // wait for it.
  tell_engine(*node, s.ok()                ? engine::EventStatus::completed
                     : s.changed_nothing ? engine::EventStatus::cancelled
                                         : engine::EventStatus::failed);
  node->work = nullptr;  // drop captured buffers as soon as the work is done
  // Before the event completes: a buffer the application released is freed
  // by the time a wait on its last command returns, so its memory is
  // available to whatever the application enqueues next (a buffer no node
  // holds went when it was released, its storage fenced by its users).
  node->held.clear();
  if (!s.ok() && s.changed_nothing) node->event->changed_nothing();
  finish(node->event, s.ok() ? cl::kComplete : (s.code < 0 ? s.code : cl::kOutOfResources), std::move(s.message));
}

}  // namespace memlayer::runtime::detail

#include "scheduler.hpp"

#include <chrono>

#include "device_state.hpp"

namespace memlayer::runtime::detail {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

namespace {

// A node whose dependencies are all resolved: run it, or queue it on its
// device. Markers and barriers have no work and complete right here.
void release(const std::shared_ptr<CommandNode>& node) {
  if (node->ended.load()) return;  // failed early through a dependency
  node->event->mark(cl::kSubmitted);
  if (node->work && node->device != nullptr) {
    node->device->push(node);
  } else {
    run(node);
  }
}

void resolve(const std::shared_ptr<CommandNode>& node) {
  if (node->pending.fetch_sub(1) == 1) release(node);
}

}  // namespace

std::shared_ptr<CommandNode> make_node(DeviceState* device, std::function<Status()> work) {
  auto node = std::make_shared<CommandNode>();
  node->event = std::make_shared<EventState>(false);
  node->device = device;
  node->work = std::move(work);
  return node;
}

void submit(const std::shared_ptr<CommandNode>& node, std::span<const std::shared_ptr<EventState>> deps,
            std::span<const std::shared_ptr<EventState>> order) {
  auto wire = [&](const std::shared_ptr<EventState>& dep, bool propagate) {
    if (!dep || dep == node->event) return;
    node->pending.fetch_add(1);
    if (auto ended = dep->add_waiter(node, propagate)) {
      if (propagate && *ended < 0 && !node->ended.exchange(true)) {
        finish(node->event, cl::kExecStatusErrorForEventsInWaitList,
               "a command it depends on failed: " + dep->message());
      }
      node->pending.fetch_sub(1);
    }
  };
  for (const auto& dep : deps) wire(dep, true);
  for (const auto& dep : order) wire(dep, false);
  resolve(node);  // the wiring reference
}

void finish(const std::shared_ptr<EventState>& event, int status, std::string message) {
  struct Pending {
    std::shared_ptr<EventState> event;
    int status;
    std::string message;
  };
  std::vector<Pending> todo{{event, status, std::move(message)}};
  while (!todo.empty()) {
    Pending p = std::move(todo.back());
    todo.pop_back();
    std::vector<EventState::Waiter> waiters;
    std::vector<std::function<void(int)>> callbacks;
    if (!p.event->finish(p.status, p.message, waiters, callbacks)) continue;
    for (auto& cb : callbacks) cb(p.status);
    for (auto& [w, propagate] : waiters) {
      if (p.status < 0 && propagate) {
        if (!w->ended.exchange(true)) {
          todo.push_back({w->event, cl::kExecStatusErrorForEventsInWaitList,
                          "a command it depends on failed: " + p.message});
        }
        w->pending.fetch_sub(1);
      } else {
        resolve(w);
      }
    }
  }
}

void run(const std::shared_ptr<CommandNode>& node) {
  if (node->ended.exchange(true)) return;
  node->event->mark(cl::kRunning);
  Status s = node->work ? node->work() : Status{};
  node->work = nullptr;  // drop captured buffers as soon as the work is done
  // Before the event completes: a buffer the application released is freed
  // by the time a wait on its last command returns, so its memory is
  // available to whatever the application enqueues next.
  node->keep_alive.clear();
  if (!s.ok() && s.changed_nothing) node->event->changed_nothing();
  finish(node->event, s.ok() ? cl::kComplete : (s.code < 0 ? s.code : cl::kOutOfResources), std::move(s.message));
}

}  // namespace memlayer::runtime::detail

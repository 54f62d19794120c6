#include "event_state.hpp"

#include <utility>

#include "scheduler.hpp"

namespace memlayer::runtime::detail {

migration::EventStatus EventState::outcome() const {
  const int s = status();
  if (s > cl::kComplete) return migration::EventStatus::running;
  if (s == cl::kComplete) return migration::EventStatus::completed;
  return started_.load(std::memory_order_relaxed) ? migration::EventStatus::failed
                                                   : migration::EventStatus::cancelled;
}

EventState::~EventState() {
  // Only an event nothing can end any more has waiters here: they never run.
  for (WaitLink* link = waiters_; link != nullptr;) {
    WaitLink* next = link->next;  // the link goes with its node
    link->node.reset();
    link = next;
  }
}

std::string EventState::message() const {
  std::lock_guard lock(mutex_);
  // finish() had no memory to say which dependency failed.
  if (message_.empty() && status_ == cl::kExecStatusErrorForEventsInWaitList)
    return "a command it depends on failed (no host memory was left to say which)";
  return message_;
}

ProfilingInfo EventState::profiling() const {
  std::lock_guard lock(mutex_);
  return profile_;
}

int EventState::wait() {
  std::unique_lock lock(mutex_);
  ended_.wait(lock, [&] { return status_ <= cl::kComplete; });
  return status_.load();
}

bool EventState::wait_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return ended_.wait_until(lock, deadline, [&] { return status_ <= cl::kComplete; });
}

std::optional<int> EventState::add_waiter(WaitLink& link, const std::shared_ptr<CommandNode>& node) noexcept {
  std::lock_guard lock(mutex_);
  if (status_ <= cl::kComplete) return status_.load();
  link.node = node;
  link.next = nullptr;
  (last_waiter_ != nullptr ? last_waiter_->next : waiters_) = &link;
  last_waiter_ = &link;
  return std::nullopt;
}

void EventState::add_callback(std::function<void(int)> cb) {
  int ended_with;
  {
    std::lock_guard lock(mutex_);
    if (status_ > cl::kComplete) {
      callbacks_.push_back(std::move(cb));
      return;
    }
    ended_with = status_.load();
  }
  cb(ended_with);
}

void EventState::mark(int status) {
  std::lock_guard lock(mutex_);
  if (status_ <= cl::kComplete || status >= status_) return;
  if (status == cl::kRunning) started_.store(true, std::memory_order_relaxed);  // published by status_
  status_.store(status, std::memory_order_release);
  (status == cl::kSubmitted ? profile_.submitted_ns : profile_.started_ns) = now_ns();
}

bool EventState::finish(int status, std::string message, WaitLink*& waiters,
                        std::vector<std::function<void(int)>>& callbacks) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (status_ <= cl::kComplete) return false;
    status_.store(status, std::memory_order_release);
    message_ = std::move(message);
    const auto t = now_ns();
    if (profile_.submitted_ns == 0) profile_.submitted_ns = t;
    if (profile_.started_ns == 0) profile_.started_ns = t;
    profile_.ended_ns = t;
    waiters = std::exchange(waiters_, nullptr);
    last_waiter_ = nullptr;
    callbacks.swap(callbacks_);
  }
  ended_.notify_all();
  return true;
}

void EventState::planner_retain(std::uint32_t count) {
  if (planner_refs_.fetch_add(count, std::memory_order_acq_rel) != 0) return;
  std::lock_guard lock(anchor_lock_);
  if (planner_refs_.load(std::memory_order_acquire) > 0 && !anchor_) anchor_ = shared_from_this();
}

void EventState::planner_retain_unshared() {
  if (planner_refs_.load(std::memory_order_relaxed) != 0) return planner_retain(1);
  anchor_ = shared_from_this();
  planner_refs_.store(1, std::memory_order_release);  // after the anchor: a release that reads 1 finds it
}

void EventState::planner_release(std::uint32_t count) {
  if (planner_refs_.fetch_sub(count, std::memory_order_acq_rel) != count) return;
  std::shared_ptr<EventState> last;  // destroyed after the lock is released
  std::lock_guard lock(anchor_lock_);
  if (planner_refs_.load(std::memory_order_acquire) == 0) last = std::move(anchor_);
}

}  // namespace memlayer::runtime::detail

namespace memlayer::runtime {

int Event::status() const { return state_ ? state_->status() : cl::kInvalidEvent; }
std::string Event::error_message() const { return state_ ? state_->message() : "invalid event"; }
int Event::wait() const { return state_ ? state_->wait() : cl::kInvalidEvent; }
void Event::on_complete(std::function<void(int)> callback) const {
  if (state_) state_->add_callback(std::move(callback));
}
ProfilingInfo Event::profiling() const { return state_ ? state_->profiling() : ProfilingInfo{}; }

Status Event::set_user_status(int status) const {
  if (!state_ || !state_->user()) return Status::error(cl::kInvalidEvent, "set_user_status: not a user event");
  if (status > cl::kComplete)
    return Status::error(cl::kInvalidValue, "set_user_status: the status must be complete (0) or an error (< 0)");
  if (state_->status() <= cl::kComplete)
    return Status::error(cl::kInvalidOperation, "set_user_status: the user event was set already");
  detail::finish(state_, status, status < 0 ? "user event failed with " + std::to_string(status) : "");
  return {};
}

}  // namespace memlayer::runtime

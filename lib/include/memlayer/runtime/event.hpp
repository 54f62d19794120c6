// memlayer/runtime/event.hpp — the state of one command, or a user event.
//
// An Event goes queued -> submitted -> running -> complete (cl::kComplete),
// or ends with a negative OpenCL error code. A command whose dependency
// fails, fails too (cl::kExecStatusErrorForEventsInWaitList), whether the
// dependency failed before or after the command was enqueued, and whether it
// was a command the user listed or a migration memlayer inserted.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "memlayer/runtime/status.hpp"

namespace memlayer::runtime {

namespace detail {
class EventState;
}

struct ProfilingInfo {
  std::uint64_t queued_ns = 0;  ///< steady-clock nanoseconds
  std::uint64_t submitted_ns = 0;
  std::uint64_t started_ns = 0;
  std::uint64_t ended_ns = 0;
};

class Event {
 public:
  Event() = default;  ///< an empty handle; valid() is false
  explicit Event(std::shared_ptr<detail::EventState> state) : state_(std::move(state)) {}

  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  /// cl::kQueued, kSubmitted, kRunning, kComplete, or a negative error code.
  [[nodiscard]] int status() const;
  /// The failure's message; empty while not failed.
  [[nodiscard]] std::string error_message() const;
  /// Blocks until the event is complete or failed; returns its final status.
  int wait() const;
  /// Runs `callback(final_status)` once the event completes or fails (at
  /// once, on this thread, if it already has); otherwise on the thread that
  /// finishes it, with no memlayer lock held.
  void on_complete(std::function<void(int)> callback) const;
  [[nodiscard]] ProfilingInfo profiling() const;

  /// User events only: complete it (cl::kComplete) or fail it (< 0), once.
  /// Errors: kInvalidEvent for a command's event, kInvalidOperation if set
  /// already, kInvalidValue for a status that is neither.
  Status set_user_status(int status) const;

  [[nodiscard]] const std::shared_ptr<detail::EventState>& state() const noexcept { return state_; }
  friend bool operator==(const Event&, const Event&) = default;

 private:
  std::shared_ptr<detail::EventState> state_;
};

}  // namespace memlayer::runtime

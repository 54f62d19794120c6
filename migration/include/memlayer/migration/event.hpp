// memlayer/migration/event.hpp — how the planner refers to commands.
//
// The planner records which command last wrote a range, which commands read
// it since, and which command made each copy valid, and turns those into
// wait lists. It never runs, waits for or inspects commands itself: an Event
// is the runtime's opaque handle (a cl_event in PoCL, an event object in
// memlayer's runtime), and EventOps is how the planner keeps it alive while
// it holds it and learns when it has finished, so finished events are
// dropped from the lists instead of piling up.
#pragma once

namespace memlayer::migration {

using Event = void*;  ///< nullptr means "no event"

struct EventOps {
  void* context = nullptr;
  /// Take / drop one reference. May be null when events need no counting.
  void (*retain)(void* context, Event e) = nullptr;
  void (*release)(void* context, Event e) = nullptr;
  /// Nonzero once e has finished (completed or failed) and nothing new can
  /// depend on it meaningfully. May be null: then nothing is pruned early.
  /// (int, not bool: the struct matches the C API's ml_event_ops, so a C
  /// runtime's callbacks are called directly, with no adapter between.)
  int (*finished)(void* context, Event e) = nullptr;

  void hold(Event e) const {
    if (e != nullptr && retain != nullptr) retain(context, e);
  }
  void drop(Event e) const {
    if (e != nullptr && release != nullptr) release(context, e);
  }
  [[nodiscard]] bool done(Event e) const { return e == nullptr || (finished != nullptr && finished(context, e) != 0); }
};

}  // namespace memlayer::migration

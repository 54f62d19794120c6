// memlayer/migration/event.hpp — how the planner refers to commands.
//
// The planner records which command last wrote a range, which commands read
// it since, and which command made each copy valid, and turns those into
// wait lists. It never runs, waits for or inspects commands itself: an Event
// is the runtime's opaque handle (a cl_event in PoCL, an event object in
// memlayer's runtime), and EventOps is how the planner keeps it alive while
// it holds it and learns how it ended: finished events are dropped from the
// lists instead of piling up, and a failed one is undone (range_versions.hpp:
// failures).
#pragma once

#include "memlayer/migration/ref_batch.hpp"

namespace memlayer::migration {

using Event = void*;  ///< nullptr means "no event"

/// How an event stands, as EventOps::status reports it. The values are the
/// C API's (memlayer/migration.h: ML_EVENT_*), so a C runtime's callback is
/// called directly.
enum class EventStatus : int {
  running = 0,    ///< not finished (queued, submitted or running)
  completed = 1,  ///< finished and did everything it was asked to
  /// Failed without starting (a dependency failed, or it was cancelled): it
  /// wrote nothing.
  cancelled = -1,
  /// Failed after it started: bytes it was to write may be partly written
  /// where it ran.
  failed = -2,
};

struct EventOps {
  void* context = nullptr;
  /// Take / drop one reference. May be null when events need no counting.
  void (*retain)(void* context, Event e) = nullptr;
  void (*release)(void* context, Event e) = nullptr;
  /// An EventStatus as int (any other positive value: completed; any other
  /// negative one: failed). Once not `running` it never changes. A runtime
  /// that cannot tell `cancelled` from `failed` reports `failed` (the safe
  /// side: the planner then trusts nothing the command may have touched).
  /// Must be cheap (a lock-free load, say): the planner asks it for the
  /// events it holds at every plan. May be null: then nothing ever finishes
  /// early (nothing is pruned and no failure is undone). (int, not
  /// EventStatus: the struct matches the C API's ml_event_ops.)
  int (*status)(void* context, Event e) = nullptr;
  /// Told of an event the planner knows has completed without asking
  /// status (every writer before a completed writer of the same bytes:
  /// range_versions.hpp), which it stops naming: a runtime that keeps
  /// per-event state can settle it now rather than find out later. Maybe
  /// more than once per event. May be null. (Not in ml_event_ops.)
  void (*completed)(void* context, Event e) = nullptr;
  /// While not null, hold() and drop() count in it (inline, no call) and
  /// the runtime hands the sums to retain/release later (ref_batch.hpp),
  /// and status() answers are remembered there. Set and cleared by the
  /// runtime while it holds the records' lock. (Not in ml_event_ops: C
  /// runtimes never batch.)
  RefBatch* batch = nullptr;

  /// `n` references more / fewer to `e` (nothing for nullptr, nor when
  /// events need no counting: `retain` null, whatever `batch`). O(1).
  void hold(Event e, int n = 1) const {
    // Events that need no counting first: one test, not two (the engine's).
    if (retain == nullptr || e == nullptr) return;
    if (batch != nullptr) return batch->count(e, n);
    for (int i = 0; i < n; ++i) retain(context, e);
  }
  void drop(Event e, int n = 1) const {
    if (release == nullptr || e == nullptr) return;
    if (batch != nullptr) return batch->count(e, -n);
    for (int i = 0; i < n; ++i) release(context, e);
  }
  /// nullptr counts as a command that completed long ago.
  /// While `batch` is set, the last statuses looked up are remembered there
  /// (RefBatch::recall).
  [[nodiscard, gnu::always_inline]] EventStatus state(Event e) const {
    if (e == nullptr) return EventStatus::completed;
    int s = 0;
    if (batch == nullptr || !batch->recall(e, s)) {
      s = status == nullptr ? 0 : status(context, e);
      if (batch != nullptr) batch->remember(e, s);
    }
    if (s == 0) return EventStatus::running;
    if (s > 0) return EventStatus::completed;
    return s == -1 ? EventStatus::cancelled : EventStatus::failed;
  }
  [[nodiscard, gnu::always_inline]] bool done(Event e) const { return state(e) != EventStatus::running; }
  [[nodiscard, gnu::always_inline]] bool failed(Event e) const {
    const EventStatus s = state(e);
    return s == EventStatus::cancelled || s == EventStatus::failed;
  }
};

}  // namespace memlayer::migration

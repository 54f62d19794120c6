// memlayer/migration/plan.hpp — what the planner decides for one command.
#pragma once

#include <cstdint>
#include <vector>

#include "memlayer/migration/event.hpp"
#include "memlayer/migration/location.hpp"

namespace memlayer::migration {

/// One migration command: copy [offset, offset + size) of the buffer from
/// the copy at `src` to the copy at `dst`.
struct Copy {
  Location src = kHost;
  Location dst = kHost;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  /// Events it must wait for (what made the source valid). Held by the
  /// planner's state, valid until commit.
  std::vector<Event> wait;
  /// Index of an earlier copy in the same plan it must also wait for (the
  /// device-to-host leg of a copy staged through the host), or -1.
  int after = -1;
  /// Other locations that held every byte of the range, complete, when the
  /// copy was planned, each with a direct path to `dst`: a runtime whose
  /// transfer from `src` keeps failing may read from one of them instead.
  /// Their content stays what it was until the copy ends: the copy counts
  /// as a reader of the range, so later writers wait for it, and so does
  /// eviction of any copy of it (RangeVersions::plan_evict).
  LocationSet also;
  /// A write-back of content an unfinished writer's undo record holds only
  /// at `src` (what that writer's failure goes back to), not of the current
  /// version: RangeVersions::plan_undo_write_backs().
  bool undo = false;
};

/// The planner's decision for one command's use of one buffer: the copies to
/// run first (in this order; independent copies may run in parallel), and what
/// the command itself must wait for besides those copies.
struct Plan {
  std::vector<Copy> copies;
  std::vector<Event> wait;

  void clear() {
    copies.clear();
    wait.clear();
  }
  /// Bytes the copies move (a staged copy counts twice: it moves twice).
  [[nodiscard]] std::uint64_t bytes_moved() const {
    std::uint64_t n = 0;
    for (const Copy& c : copies) n += c.size;
    return n;
  }
};

}  // namespace memlayer::migration

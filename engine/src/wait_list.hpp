// What one enqueue hands its caller to wait for (Submission::waits): the
// host's events behind the names the planner and the engine list, each
// once, leased from the command table (CommandTable::lease_host), not
// counted. The general pipeline (transaction.cpp) and the fast path
// (fast_path.cpp) both fill one.
#pragma once

#include <cassert>
#include <cstddef>

#include "command_table.hpp"
#include "memlayer/engine/engine.hpp"
#include "memlayer/migration/detail/reserve.hpp"

namespace memlayer::engine {

class WaitList {
 public:
  /// Adds to `out`'s waits (emptied by the caller: Submission::clear).
  WaitList(CommandTable& table, Submission& out) noexcept : table_(table), out_(out) {}
  WaitList(const WaitList&) = delete;
  WaitList& operator=(const WaitList&) = delete;

  /// Room for `n` waits more, so that add() allocates nothing and cannot
  /// fail between a lease and its place in the list. Throws std::bad_alloc.
  void reserve(std::size_t n) {
    migration::detail::reserve_more(out_.waits_, n);
    migration::detail::reserve_more(out_.leases_, n);
  }
  /// Adds the command `name` names (never nullptr: RangeVersions::
  /// fast_commit() reports none), unless it is `self` (the enqueue's own
  /// command), the name added last (a command's buffers share their last
  /// writer: that look is inline) or completed. Within reserve()'s room.
  /// O(1) amortised: a short list is searched, a long one (a writer after
  /// many queued readers) is sorted once by dedupe().
  void add(Event name, Event self) {
    assert(name != nullptr);
    if (name == self || name == last_) return;
    add_new(name);
  }
  /// Drops what add() left twice in a long list. O(waits log waits) then,
  /// else O(1).
  void dedupe() noexcept {
    if (unsearched_) [[unlikely]]
      sort_out();
  }

 private:
  void add_new(Event name);
  void sort_out() noexcept;

  CommandTable& table_;
  Submission& out_;
  Event last_ = nullptr;     // the name add_new() saw last
  bool unsearched_ = false;  // out_.waits_ may hold an event twice: dedupe() sorts it out
};

}  // namespace memlayer::engine

// memlayer/bufalloc/linear_region.hpp — the local-space allocator.
//
// A kernel launch needs its __local buffers and scratch laid out in the
// device's local memory, all released together when the launch ends. A stack
// does exactly that: allocate() bumps a top pointer (O(1), with alignment),
// mark()/rollback() release everything allocated after a mark (e.g. one
// launch's scratch inside a longer-lived layout), and reset() empties the
// space. No per-block records, so no per-block cost.
//
// Like Region, it only does arithmetic on addresses: it never touches the
// space. Thread-safety: not synchronised; a LinearRegion belongs to the one
// thread that prepares a launch (typically one per compute unit).
#pragma once

#include <cstdint>

#include "memlayer/bufalloc/error.hpp"
#include "memlayer/bufalloc/stats.hpp"

namespace memlayer::bufalloc {

class LinearRegion {
 public:
  /// A point to roll back to. Valid for the LinearRegion that made it, until
  /// reset() or a rollback() to an earlier mark.
  struct Mark {
    Size top = 0;
    std::uint64_t owner = 0;  ///< which LinearRegion and which reset epoch
  };

  /// Manages [base, base + size). Errors: region_empty (size 0), region_wraps
  /// (base + size > 2^64-1). Complexity O(1).
  static Result<LinearRegion> create(Address base, Size size);

  /// The next `size` bytes at a multiple of `alignment` (0 = 1; else a power
  /// of two). Errors: zero_size, alignment_not_power_of_two, out_of_memory
  /// (also for sizes beyond 64 bits; free_bytes and largest_free are the bytes
  /// above the top). A failed call changes nothing but the counter.
  /// Complexity O(1).
  Result<Address> allocate(Size size, Size alignment = 0);

  /// The current top, to roll back to. O(1).
  [[nodiscard]] Mark mark() const noexcept { return Mark{top_, owner_}; }

  /// Releases everything allocated since `m`. Errors: stale_mark (from another
  /// LinearRegion, from before a reset(), or above the current top because a
  /// rollback to an earlier mark already happened). O(1).
  Result<void> rollback(Mark m);

  /// Releases everything and invalidates every mark. O(1).
  void reset() noexcept;

  [[nodiscard]] LinearStats stats() const noexcept;
  [[nodiscard]] Address base() const noexcept { return base_; }
  [[nodiscard]] Size size() const noexcept { return size_; }

 private:
  LinearRegion(Address base, Size size) noexcept;
  Address base_;
  Size size_;
  Size top_ = 0;  // offset from base_
  Size peak_ = 0;
  std::uint64_t owner_;  // unique per instance and reset epoch
  std::uint64_t allocations_ = 0;
  std::uint64_t failed_ = 0;
};

}  // namespace memlayer::bufalloc

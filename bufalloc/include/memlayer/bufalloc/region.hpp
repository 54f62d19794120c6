// memlayer/bufalloc/region.hpp — the global-space allocator.
//
// A Region hands out address ranges of one contiguous space [base, base+size):
// a device's global memory, typically. It is bookkeeping only. It never reads
// or writes the space it manages, which may be device memory the host cannot
// touch, so every block record lives on the host, outside the managed space.
//
// How it works (doc/bufalloc.md has the long version):
//  * Free blocks sit in a two-level segregated-fit index (TLSF): 64 first-level
//    classes by power of two, each split into 32 second-level classes, with a
//    bitmap per level. allocate() rounds the request up to the next class
//    boundary and takes the head of the first non-empty class at or above it:
//    two find-first-set instructions, no loop over blocks. Any block found that
//    way fits, alignment padding included.
//  * When that finds nothing, allocate() looks harder before failing: it scans
//    the classes that may hold a block big enough (the request's own class and
//    the ones between it and the rounded class) for the best fit, taking the
//    real alignment padding of each candidate into account. So a Region never
//    reports out_of_memory while a free block that fits exists.
//  * Blocks are physically linked in address order; free() coalesces with free
//    neighbours in O(1), so no two free blocks are ever adjacent.
//  * free() finds its block by address through a hash index that grows
//    incrementally (a few slots move per operation), so no single call pays
//    for rehashing. Block records come from a pool whose pages double in size:
//    there is no limit on live blocks (PoCL's bufalloc stops at 1024) and a
//    record never moves once made.
//
// Complexity: allocate() and free() are O(1) in the number of live blocks,
// except allocate()'s fallback search (only when the O(1) search fails), which
// is O(free blocks in the scanned classes). Bookkeeping growth is amortised
// O(1) and incremental.
//
// Thread-safety: Region is NOT synchronised; one thread at a time (or your
// own lock). LockedRegion (locked_region.hpp) is the synchronised variant.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "memlayer/bufalloc/error.hpp"
#include "memlayer/bufalloc/stats.hpp"

namespace memlayer::bufalloc {

namespace detail {
class RegionCore;
}

/// How a Region is set up.
struct RegionOptions {
  /// Every block address and size is a multiple of this (a power of two; the
  /// device's base-address alignment, e.g. 64 or 128 bytes). base must be a
  /// multiple of it, and the usable size is size rounded down to it. Requests
  /// with a smaller alignment get this one for free.
  Size granularity = 64;
};

/// One block as seen by Region::walk(), in address order.
struct BlockInfo {
  Address address = 0;
  Size size = 0;
  bool free = false;
};

class Region {
 public:
  /// Makes a region managing [base, base + size).
  /// Errors: granularity_not_power_of_two, misaligned_base (base % granularity
  /// != 0), region_wraps (base + size > 2^64-1), region_empty (size <
  /// granularity). Complexity O(1).
  static Result<Region> create(Address base, Size size, RegionOptions options = {});

  Region(Region&&) noexcept;
  Region& operator=(Region&&) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  /// Reserves `size` bytes at an address that is a multiple of `alignment`.
  /// size is rounded up to the granularity. alignment 0 means the
  /// granularity; any power of two is accepted, also ones larger than the
  /// granularity (the padding in front stays free and usable).
  /// Errors: zero_size, size_overflow, alignment_not_power_of_two,
  /// alignment_overflow, out_of_memory (with free_bytes and largest_free).
  /// A failed call changes nothing but the failed-request counter.
  /// Complexity O(1); O(free blocks in the request's classes) when the O(1)
  /// search fails and the fallback runs.
  Result<Address> allocate(Size size, Size alignment = 0);

  /// Returns the block that starts at `address` to the free space, merging it
  /// with free neighbours.
  /// Errors (nothing changes): address_outside_region; not_block_start (the
  /// address lies inside a live block); double_free (it lies in free space:
  /// freed already, or never handed out). Complexity O(1) on success; the
  /// error path walks the blocks, O(blocks), to name the problem exactly.
  Result<void> free(Address address);

  /// Frees every block at once; marks from before stay meaningless. Statistics
  /// keep peak_used_bytes and failed_requests. Complexity O(blocks).
  void reset();

  /// Counters and figures, see stats.hpp. Complexity O(1), except that the
  /// first call after the largest free block was split or merged rescans the
  /// single top size class to find the new largest block.
  [[nodiscard]] RegionStats stats() const;

  /// Calls `visit` for every block, free and used, in ascending address order.
  /// The blocks tile [base, base + usable size) exactly. The callback must not
  /// modify the region. Complexity O(blocks).
  void walk(const std::function<void(const BlockInfo&)>& visit) const;

  /// Verifies every invariant: blocks tile the space with no overlap and no
  /// gap; no two free blocks are adjacent; every free block is in the right
  /// size-class list and bitmap bits match the lists; counters match the
  /// blocks; the address index holds exactly the live blocks. Returns
  /// invariant_violation with `*what` (if given) set to the first broken rule.
  /// For tests and debugging. Complexity O(blocks + index capacity).
  Result<void> check(std::string* what = nullptr) const;

  [[nodiscard]] Address base() const noexcept;
  /// The usable size: the size given to create(), rounded down to granularity.
  [[nodiscard]] Size size() const noexcept;
  [[nodiscard]] Size granularity() const noexcept;

 private:
  explicit Region(std::unique_ptr<detail::RegionCore> core) noexcept;
  std::unique_ptr<detail::RegionCore> core_;
};

}  // namespace memlayer::bufalloc

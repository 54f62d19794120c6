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
//  * Blocks are linked in address order; free() coalesces with free
//    neighbours in O(1), so no two free blocks are ever adjacent.
//  * Each block has a 32-byte record in a pool addressed by 32-bit index
//    (neighbours and free-list links are indices too). allocate() returns a
//    BlockHandle naming the record, and free(handle) goes straight to it: no
//    lookup. A generation in the record and the handle catches a handle whose
//    block is gone (stale_handle); a region id catches another region's
//    handle (foreign_handle). There is no limit on live blocks but the 2^32-1
//    record indices (PoCL's bufalloc stops at 1024).
//  * free(address), for callers that keep only the address, needs an address
//    index (a hash that grows incrementally). The region builds it at the
//    first such call and from then on keeps it up to date on every allocate
//    and free: callers who free only by handle never pay for it.
//
// Complexity: allocate() and free() are O(1) in the number of live blocks,
// except allocate()'s fallback search (only when the O(1) search fails), which
// is O(free blocks in the scanned classes), and the first free(address),
// which builds the address index in O(blocks). Bookkeeping growth is
// amortised O(1): the record array doubles (copying the records) when full,
// which a region in steady state never is; the address index grows
// incrementally, a few slots per call.
//
// Thread-safety: Region is NOT synchronised; one thread at a time (or your
// own lock). LockedRegion (locked_region.hpp) is the synchronised variant.
// A BlockHandle is a plain value: any thread may hold or pass one, and the
// region's lock (or LockedRegion's) is all free(handle) needs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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

/// A live block as allocate() hands it out, and what free() takes back: the
/// block's address plus the name of its record. A plain value: copy it,
/// store it, compare it. Only the region that issued it can free it, once.
/// A zero-initialised handle is never valid (region id 0 is never issued).
struct BlockHandle {
  Address address = 0;           ///< the block's first byte
  std::uint32_t index = 0;       ///< its record in the region's pool
  std::uint32_t generation = 0;  ///< the record's use count when the block was made
  std::uint32_t region = 0;      ///< Region::id() of the issuing region
  friend bool operator==(const BlockHandle&, const BlockHandle&) = default;
};

/// One block as seen by Region::walk(), in address order.
struct BlockInfo {
  Address address = 0;
  Size size = 0;
  bool free = false;
};

/// What Region::cheapest_hole() found: a run of adjacent blocks, free and
/// live, that would hold the request once its live blocks were freed.
struct Hole {
  Address address = 0;            ///< the run's first byte
  Size size = 0;                  ///< bytes the run spans, free and live
  Size live_bytes = 0;            ///< bytes of its live blocks: what freeing them gives up
  std::uint64_t live_blocks = 0;  ///< how many live blocks it holds (0: allocate() would succeed)
  std::uint64_t weight = 0;       ///< the sum of their weights (cheapest_hole()'s `evictable`)
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

  /// Reserves `size` bytes at an address that is a multiple of `alignment`
  /// and returns its handle (the address is handle.address).
  /// size is rounded up to the granularity. alignment 0 means the
  /// granularity; any power of two is accepted, also ones larger than the
  /// granularity (the padding in front stays free and usable).
  /// Errors: zero_size, size_overflow, alignment_not_power_of_two,
  /// alignment_overflow, out_of_memory (with free_bytes and largest_free).
  /// A failed call changes nothing but the failed-request counter. Throws
  /// std::bad_alloc only when the host cannot grow the bookkeeping.
  /// Complexity O(1); O(free blocks in the request's classes) when the O(1)
  /// search fails and the fallback runs; plus one hash insert once
  /// free(address) has been used on this region.
  Result<BlockHandle> allocate(Size size, Size alignment = 0);

  /// Returns the handle's block to the free space, merging it with free
  /// neighbours. The fast way to free: no lookup, the handle names the record.
  /// Errors (nothing changes; `address` in the error is the handle's):
  /// foreign_handle (not issued by this region: another region's, zeroed, or
  /// altered), double_free (its block was freed already and its record not
  /// given to another live block since), stale_handle (its block was freed
  /// and its record now serves, or has served, another live block; never
  /// mistaken for that block). Complexity O(1), errors included; plus one hash
  /// erase once free(address) has been used on this region.
  Result<void> free(BlockHandle block);

  /// Returns the block that starts at `address` to the free space, merging it
  /// with free neighbours: for callers that keep only addresses. The first
  /// call builds an address index over the live blocks (O(blocks), host
  /// memory of 43-85 bytes per live block); from then on every allocate() and
  /// free() keeps it up to date, one hash operation each (the index stays
  /// until the region goes). Blocks may be freed by address or by handle in
  /// any mix.
  /// Errors (nothing changes): address_outside_region; not_block_start (the
  /// address lies inside a live block); double_free (it lies in free space:
  /// freed already, or never handed out). Complexity O(1) expected after the
  /// first call; the error path walks the blocks, O(blocks), to name the
  /// problem exactly.
  Result<void> free(Address address);

  /// Whether free(address) has been called, so the address index exists and
  /// allocate()/free() maintain it. O(1).
  [[nodiscard]] bool indexes_addresses() const noexcept;

  /// Frees every block at once; marks from before stay meaningless, and every
  /// handle from before is stale (free(handle) says stale_handle or
  /// double_free, never frees a new block). Statistics keep peak_used_bytes
  /// and failed_requests. Complexity O(records made: the most blocks and
  /// holes there ever were at once).
  void reset();

  /// Counters and figures, see stats.hpp. Complexity O(1), except that the
  /// first call after the largest free block was split or merged rescans the
  /// single top size class to find the new largest block.
  [[nodiscard]] RegionStats stats() const;

  /// Calls `visit` for every block, free and used, in ascending address order.
  /// The blocks tile [base, base + usable size) exactly. The callback must not
  /// modify the region. Complexity O(blocks).
  void walk(const std::function<void(const BlockInfo&)>& visit) const;

  /// Which live blocks to free so that a request of `size` bytes aligned to
  /// `alignment` (as allocate() takes them) fits, when allocate() says
  /// out_of_memory although enough bytes are free: they are cut into holes
  /// too small. Finds the run of adjacent blocks that would hold the request
  /// once its live blocks were freed, among the runs whose every live block
  /// `evictable` accepts, with the fewest live bytes (ties: the fewest live
  /// blocks, then the lowest sum of weights, then the run found first in
  /// address order); calls `visit` for each live block of that run in
  /// address order, and returns the run. `evictable(block)` says nullopt for
  /// a block the caller cannot free, else the block's weight: what the
  /// caller would rather keep weighs more (e.g. when it was last used, for
  /// least recently used first among equal runs); a run's weights must sum
  /// within 64 bits. A run holds the request when the request, its
  /// alignment padding included, lies within it: the padding and what is
  /// left at its ends stay free. `evictable` is called at most twice per
  /// live block (as the run reaches it and as it leaves), each time in
  /// address order, and must answer alike; neither callback may modify the
  /// region.
  /// Bookkeeping only, like everything here: nothing is freed, nothing
  /// changes.
  /// Errors (nothing visited): zero_size, size_overflow,
  /// alignment_not_power_of_two, alignment_overflow (as allocate()); no_hole
  /// (with free_bytes and largest_free) when no run can hold the request:
  /// it is larger than the region, or every run that would hold it has a
  /// live block `evictable` refused. Complexity O(blocks), one pass in
  /// address order with two cursors (it is for eviction, which is rare;
  /// allocate() stays O(1)), plus the callbacks; allocates nothing.
  Result<Hole> cheapest_hole(Size size, Size alignment, const std::function<std::optional<std::uint64_t>(const BlockInfo&)>& evictable,
                             const std::function<void(const BlockInfo&)>& visit) const;

  /// Verifies every invariant: blocks tile the space with no overlap and no
  /// gap; no two free blocks are adjacent; every free block is in the right
  /// size-class list and bitmap bits match the lists; counters match the
  /// blocks; every record is a block or spare, exactly once; the address
  /// index, if built, holds exactly the live blocks. Returns
  /// invariant_violation with `*what` (if given) set to the first broken rule.
  /// For tests and debugging. Complexity O(blocks + index capacity).
  Result<void> check(std::string* what = nullptr) const;

  [[nodiscard]] Address base() const noexcept;
  /// The usable size: the size given to create(), rounded down to granularity.
  [[nodiscard]] Size size() const noexcept;
  [[nodiscard]] Size granularity() const noexcept;
  /// The id in this region's handles: unique among the regions of the
  /// process (from a process-wide counter; it would repeat only after 2^32-1
  /// regions), kept when the Region is moved. O(1).
  [[nodiscard]] std::uint32_t id() const noexcept;

 private:
  explicit Region(std::unique_ptr<detail::RegionCore> core) noexcept;
  std::unique_ptr<detail::RegionCore> core_;
};

}  // namespace memlayer::bufalloc

// One block of a Region's managed space, as the host keeps it: 32 bytes, two
// to a cache line. doc/bufalloc.md ("Records and handles") explains the layout.
//
// Records are named by 32-bit index into the region's RecordPool
// (record_pool.hpp), never by pointer: the links are half the size, and a
// handle (region.hpp's BlockHandle) names a record without trusting the
// caller with a pointer.
//
// The size is kept in 32 bits, in granules (16 TiB blocks at 4 KiB
// granularity, 256 GiB at 64 B). A block too big for that says so
// (kSizeFromNext), and its size is the next block's address minus its own:
// the sentinel's address is the end of the space, so that always works. Only
// a few giant free blocks ever take that path; every common one reads its
// size without touching a neighbour.
#pragma once

#include <cstdint>

namespace memlayer::bufalloc::detail {

using RecordIndex = std::uint32_t;

/// Record 0 is the sentinel: it stands before the first block and after the
/// last (the address-order list is a ring through it), its address is the end
/// of the space, and it is never free (so merging stops at both ends). As a
/// free-list or spare-chain link, 0 means "none". No handle ever names it.
/// Its own free-list links (prev_free, next_free) are never read: where a
/// free-list neighbour is "none", the hot path writes that neighbour's link
/// into the sentinel instead of branching on it (region_core.cpp's
/// insert_free(), unlink_free(), carve_head()).
inline constexpr RecordIndex kSentinel = 0;

enum class RecordKind : std::uint32_t {
  unused = 0,  ///< in the pool's chain of spare records
  free = 1,    ///< a hole, filed in its size class
  live = 2,    ///< handed out
  sentinel = 3,
};

/// BlockRecord::size of a block of 2^32 - 1 granules or more.
inline constexpr std::uint32_t kSizeFromNext = ~std::uint32_t{0};

/// Handle generations are 30 bits: they wrap after 2^30 live blocks in one
/// record, the one case in which a stale handle could match again.
inline constexpr std::uint32_t kGenerationMask = (std::uint32_t{1} << 30) - 1;

struct BlockRecord {
  /// The block's first byte, absolute: a handle's address is compared with
  /// it and handed out as it is, with no base or granularity arithmetic.
  std::uint64_t address;
  std::uint32_t size;    ///< granules, or kSizeFromNext
  /// generation << 2 | kind. The generation goes up each time the record
  /// becomes a live block, so a handle to an earlier block in this record no
  /// longer matches (region_core.cpp's RegionCore::free(BlockHandle)).
  std::uint32_t tag;
  RecordIndex prev_phys;  ///< neighbours in address order (kSentinel at the ends)
  RecordIndex next_phys;
  /// Size-class list links while free (kSentinel: none). A list head's
  /// prev_free is left as it was, never read: the head is the one heads_
  /// names, and popping it then writes nothing into the record after it (at
  /// 10^5 live blocks, a cache miss saved per allocate()). It still names a
  /// record made (RecordPool::acquire() starts a new record with kSentinel,
  /// and every later value is a link), so that unlink_free() may form the
  /// address of the record it names.
  RecordIndex prev_free;
  RecordIndex next_free;  ///< ... and the pool's spare chain while unused

  [[nodiscard]] RecordKind kind() const noexcept { return static_cast<RecordKind>(tag & 3u); }
  void set_kind(RecordKind k) noexcept { tag = (tag & ~3u) | static_cast<std::uint32_t>(k); }
  [[nodiscard]] std::uint32_t generation() const noexcept { return tag >> 2; }
  void next_generation() noexcept { tag += 4u; }  // wraps modulo 2^30 by construction
  /// set_kind(to) for a record known to be of kind `from`: one add on the
  /// hot path instead of a mask and an or.
  template <RecordKind from, RecordKind to>
  void change_kind() noexcept {
    tag += static_cast<std::uint32_t>(to) - static_cast<std::uint32_t>(from);
  }
  /// What the tag of the live block with this generation is. 64 bits wide so
  /// that a generation with bits above the 30 kept never matches.
  static constexpr std::uint64_t live_tag(std::uint32_t generation) noexcept {
    return std::uint64_t{generation} << 2 | static_cast<std::uint32_t>(RecordKind::live);
  }
};

static_assert(sizeof(BlockRecord) == 32, "two records per 64-byte cache line");

}  // namespace memlayer::bufalloc::detail

// One block of a Region's managed space, as the host keeps it: 32 bytes, two
// to a cache line. doc/bufalloc.md ("Records") explains the layout.
//
// Records are named by 32-bit index into the region's RecordPool
// (record_pool.hpp), never by pointer: the links are half the size, and a
// handle (region.hpp's BlockHandle) can name a record without trusting the
// caller with a pointer.
//
// A record stores where its block starts, not how long it is: the size is
// the next block's offset minus its own. Every operation that needs a size
// touches the next record anyway (to link a split's tail in front of it, or
// to see whether it is free and merge), and dropping the 8-byte size is what
// lets the generation fit in 32 bytes.
#pragma once

#include <cstdint>

namespace memlayer::bufalloc::detail {

using RecordIndex = std::uint32_t;

/// Record 0 is the sentinel: it stands before the first block and after the
/// last (the address-order list is a ring through it), its offset is the end
/// of the space (so the last block's size needs no special case), and it is
/// never free (so merging stops at both ends). As a free-list link, 0 means
/// "none". No handle ever names it.
inline constexpr RecordIndex kSentinel = 0;

enum class RecordKind : std::uint8_t {
  unused = 0,  ///< in the pool's chain of spare records
  free = 1,    ///< a hole, filed in the size class `size_class`
  live = 2,    ///< handed out
  sentinel = 3,
};

struct BlockRecord {
  std::uint64_t offset;  ///< granules from the region's base
  RecordIndex prev_phys;  ///< neighbours in address order (kSentinel at the ends)
  RecordIndex next_phys;
  RecordIndex prev_free;  ///< size-class list links while free (kSentinel: none)
  RecordIndex next_free;  ///< ... and the pool's spare chain while unused
  /// Bumped each time the record becomes a live block, so a handle to an
  /// earlier block in this record no longer matches (region_core.cpp's
  /// handle_error()). Wraps after 2^32 live blocks in one record.
  std::uint32_t generation;
  std::uint16_t size_class;  ///< fl * kSlCount + sl, while free
  RecordKind kind;
  std::uint8_t reserved;
};

static_assert(sizeof(BlockRecord) == 32, "two records per 64-byte cache line");

}  // namespace memlayer::bufalloc::detail

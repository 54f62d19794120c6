// memlayer/bufalloc/stats.hpp — what a Region and a LinearRegion report about
// themselves. Plain values: take a copy, compare, print.
#pragma once

#include <cstdint>

#include "memlayer/bufalloc/error.hpp"

namespace memlayer::bufalloc {

struct RegionStats {
  Size total_bytes = 0;        ///< usable size of the region
  Size used_bytes = 0;         ///< bytes in live blocks (sizes rounded to the granularity)
  Size free_bytes = 0;         ///< total_bytes - used_bytes
  Size largest_free = 0;       ///< size of the largest free block
  Size peak_used_bytes = 0;    ///< highest used_bytes since create()
  std::uint64_t live_blocks = 0;     ///< blocks handed out and not yet freed
  std::uint64_t free_blocks = 0;     ///< free blocks (holes), after coalescing
  std::uint64_t failed_requests = 0; ///< allocate() calls that returned out_of_memory
  std::uint64_t slow_searches = 0;   ///< allocate() calls that needed the fallback search

  /// 1 - largest_free / free_bytes: 0 when all free space is one block, near 1
  /// when it is shattered into many small ones. 0 when nothing is free.
  [[nodiscard]] double fragmentation() const noexcept {
    return free_bytes == 0 ? 0.0
                           : 1.0 - static_cast<double>(largest_free) /
                                       static_cast<double>(free_bytes);
  }
};

struct LinearStats {
  Size total_bytes = 0;   ///< size of the space
  Size used_bytes = 0;    ///< bytes from base to the current top (padding included)
  Size peak_used_bytes = 0;
  std::uint64_t allocations = 0;     ///< successful allocate() calls since create()
  std::uint64_t failed_requests = 0; ///< allocate() calls that returned out_of_memory
};

}  // namespace memlayer::bufalloc

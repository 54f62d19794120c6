// memlayer/bufalloc/block_cache.hpp — reused blocks for allocations a
// runtime makes again and again at the same site.
//
// Two cases from the field: a compiler runtime that needs a per-launch
// stack or scratch block (GCC's nvptx offloading), and a program whose loop
// allocates the same buffers every iteration (Futhark). Both ask for about
// the same size under the same tag each time. A BlockCache keeps the blocks
// such a site gave back, per tag, and hands one out again when it fits —
// at least the request and at most twice it, so a large block does not
// serve a small request for long.
//
// Bounds: per tag at most `blocks_per_tag` idle blocks, and at most
// `capacity_bytes` idle in all; a block given back beyond them is freed.
// Several threads acquiring under one tag at once each get a block of
// their own (an idle one, else a new allocation) — nobody waits for
// another's block; the cache only keeps a few of them afterwards.
// acquire() frees every idle block and retries once before it fails, and
// flush() does the same for a pressure handler (DeviceHeap's step 3).
//
// Thread-safety: every member function may be called from any thread; one
// mutex, never held while the heap allocates or frees.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "memlayer/bufalloc/device_heap.hpp"

namespace memlayer::bufalloc {

struct CacheOptions {
  unsigned blocks_per_tag = 4;
  Size capacity_bytes = Size{64} << 20;
};

/// A block handed out by a BlockCache: give it back with release().
struct CachedBlock {
  BlockHandle handle;  ///< the heap's handle (DeviceHeap::allocate)
  Size size = 0;       ///< the block's real size (at least the request)
  [[nodiscard]] Address address() const noexcept { return handle.address; }
};

struct CacheStats {
  std::uint64_t hits = 0;        ///< acquires served by an idle block
  std::uint64_t misses = 0;      ///< acquires that allocated
  std::uint64_t failures = 0;    ///< acquires that failed even after a flush
  std::uint64_t dropped = 0;     ///< blocks freed at release (a bound was full)
  std::uint64_t flushes = 0;     ///< flush() calls and acquire's own flushes
  std::uint64_t idle_blocks = 0;
  Size idle_bytes = 0;
  std::uint64_t out_blocks = 0;  ///< handed out, not yet given back
};

class BlockCache {
 public:
  /// The heap must outlive the cache. Idle blocks go back to it at
  /// destruction; blocks still out must be released before.
  BlockCache(DeviceHeap& heap, CacheOptions options = {});
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  /// A block of at least `size` bytes for `tag`: an idle one of this tag
  /// whose size is in [size, 2 x size] (the smallest such), else a new one
  /// from the heap. Errors: the heap's (zero_size, out_of_memory, ...), the
  /// latter only after every idle block was freed and the allocation
  /// retried. Complexity O(blocks_per_tag) plus the heap's allocate on a miss.
  Result<CachedBlock> acquire(std::uint64_t tag, Size size);

  /// Gives a block back under its tag: kept idle if the tag has fewer than
  /// blocks_per_tag idle blocks and the capacity allows, else freed.
  /// Complexity O(1) plus the heap's free when dropped.
  void release(std::uint64_t tag, CachedBlock block);

  /// Frees every idle block. Returns the bytes freed.
  Size flush();

  [[nodiscard]] CacheStats stats() const;

 private:
  DeviceHeap& heap_;
  CacheOptions options_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::vector<CachedBlock>> idle_;
  CacheStats counters_;
};

}  // namespace memlayer::bufalloc

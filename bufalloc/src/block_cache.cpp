// BlockCache: idle blocks per tag over a DeviceHeap.
#include "memlayer/bufalloc/block_cache.hpp"

#include <algorithm>

namespace memlayer::bufalloc {

BlockCache::BlockCache(DeviceHeap& heap, CacheOptions options) : heap_(heap), options_(options) {}

BlockCache::~BlockCache() { flush(); }

Result<CachedBlock> BlockCache::acquire(std::uint64_t tag, Size size) {
  {
    std::lock_guard lock(mutex_);
    auto it = idle_.find(tag);
    if (it != idle_.end() && size > 0) {
      auto& blocks = it->second;
      auto best = blocks.end();
      for (auto b = blocks.begin(); b != blocks.end(); ++b)
        if (b->size >= size && b->size / 2 <= size && (best == blocks.end() || b->size < best->size)) best = b;
      if (best != blocks.end()) {
        CachedBlock block = *best;
        blocks.erase(best);
        --counters_.idle_blocks;
        counters_.idle_bytes -= block.size;
        ++counters_.hits;
        ++counters_.out_blocks;
        return block;
      }
    }
  }
  // A miss: allocate outside the lock, so other threads' hits go on.
  auto a = heap_.allocate(size);
  if (!a && a.error().code == Errc::out_of_memory && flush() > 0) a = heap_.allocate(size);
  std::lock_guard lock(mutex_);
  if (!a) {
    ++counters_.failures;
    return a.error();
  }
  ++counters_.misses;
  ++counters_.out_blocks;
  // The heap rounds to its granularity: the block is that big.
  const Size g = heap_.granularity();
  return CachedBlock{a.value(), (size + g - 1) / g * g};
}

void BlockCache::release(std::uint64_t tag, CachedBlock block) {
  {
    std::lock_guard lock(mutex_);
    --counters_.out_blocks;
    auto& blocks = idle_[tag];
    if (blocks.size() < options_.blocks_per_tag && counters_.idle_bytes + block.size <= options_.capacity_bytes) {
      blocks.push_back(block);
      ++counters_.idle_blocks;
      counters_.idle_bytes += block.size;
      return;
    }
    ++counters_.dropped;
  }
  (void)heap_.free(block.handle);
}

Size BlockCache::flush() {
  std::map<std::uint64_t, std::vector<CachedBlock>> idle;
  {
    std::lock_guard lock(mutex_);
    idle.swap(idle_);
    counters_.idle_blocks = 0;
    counters_.idle_bytes = 0;
    ++counters_.flushes;
  }
  Size freed = 0;
  for (auto& [tag, blocks] : idle)
    for (const CachedBlock& b : blocks) {
      (void)heap_.free(b.handle);
      freed += b.size;
    }
  return freed;
}

CacheStats BlockCache::stats() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace memlayer::bufalloc

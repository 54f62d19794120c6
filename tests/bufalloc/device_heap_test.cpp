// DeviceHeap and BlockCache over a modelled native allocator: a device of
// fixed capacity that records every call, so the tests can check what the
// heap asked the driver for and what it gave back.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "memlayer/bufalloc/block_cache.hpp"
#include "memlayer/bufalloc/device_heap.hpp"

using namespace memlayer::bufalloc;

namespace {

constexpr Size KiB = 1024;
constexpr Size MiB = 1024 * KiB;

// The driver's view: a capacity, the live segments, a count of calls.
struct NativeDevice {
  explicit NativeDevice(Size bytes) : capacity(bytes) {}
  Size capacity;
  Size used = 0;
  Address next = 16 * MiB;
  std::map<Address, Size> live;
  int allocations = 0, refusals = 0, releases = 0;
  Size released_bytes = 0;
  std::mutex mutex;

  NativeAllocator allocator() {
    return NativeAllocator{[this](Size size) -> std::optional<Address> {
                             std::lock_guard lock(mutex);
                             if (used + size > capacity) {
                               ++refusals;
                               return std::nullopt;
                             }
                             ++allocations;
                             used += size;
                             const Address a = next;
                             next += (size + MiB - 1) / MiB * MiB;
                             live[a] = size;
                             return a;
                           },
                           [this](Address base, Size size) {
                             std::lock_guard lock(mutex);
                             EXPECT_EQ(live.count(base), 1u) << "released a segment it never gave";
                             EXPECT_EQ(live[base], size);
                             live.erase(base);
                             used -= size;
                             ++releases;
                             released_bytes += size;
                           },
                           {}};
  }
};

std::unique_ptr<DeviceHeap> make_heap(NativeDevice& dev, HeapOptions o) {
  auto h = DeviceHeap::create(dev.allocator(), o);
  EXPECT_TRUE(h.ok()) << h.error().message();
  return h.ok() ? std::move(h).value() : nullptr;
}

HeapOptions segments_of(Size segment, Size cache_cap = 1024 * MiB) {
  HeapOptions o;
  o.segment_size = segment;
  o.cache_cap = cache_cap;
  return o;
}

TEST(DeviceHeap, GrowsBySegmentsAndSubAllocatesFromThem) {
  NativeDevice dev(64 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB));
  std::vector<Address> blocks;
  for (int i = 0; i < 200; ++i) {
    auto a = heap->allocate(4 * KiB);
    ASSERT_TRUE(a.ok()) << a.error().message();
    blocks.push_back(a.value().address);
  }
  EXPECT_EQ(dev.allocations, 1);  // 800 KiB fit the first 1 MiB segment
  auto big = heap->allocate(3 * MiB);  // larger than a segment: one of its own
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(dev.allocations, 2);
  EXPECT_EQ(dev.live.rbegin()->second, 3 * MiB);
  const HeapStats s = heap->stats();
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.reserved_bytes, 4 * MiB);
  EXPECT_EQ(s.used_bytes, 200 * 4 * KiB + 3 * MiB);
  EXPECT_EQ(s.live_blocks, 201u);
  EXPECT_EQ(s.native_allocations, 2u);
  std::set<Address> distinct(blocks.begin(), blocks.end());
  EXPECT_EQ(distinct.size(), blocks.size());
}

TEST(DeviceHeap, OneChunkUpFrontNeverGrows) {
  NativeDevice dev(64 * MiB);
  HeapOptions o;
  o.segment_size = 0;
  o.initial_size = 2 * MiB;
  auto heap = make_heap(dev, o);
  EXPECT_EQ(dev.allocations, 1);
  ASSERT_TRUE(heap->allocate(2 * MiB).ok());
  auto full = heap->allocate(256);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().code, Errc::out_of_memory);
  EXPECT_EQ(dev.allocations, 1);
  EXPECT_EQ(heap->stats().failed_requests, 1u);
}

TEST(DeviceHeap, EmptySegmentsAreCachedUpToTheCapThenGoBack) {
  NativeDevice dev(64 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB, 2 * MiB));
  std::vector<Address> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(heap->allocate(1 * MiB).value().address);  // a segment each
  ASSERT_EQ(dev.allocations, 4);
  for (Address a : blocks) ASSERT_TRUE(heap->free(a).ok());
  HeapStats s = heap->stats();
  EXPECT_EQ(s.cached_bytes, 2 * MiB);  // the cap
  EXPECT_EQ(s.empty_segments, 2u);
  EXPECT_EQ(dev.releases, 2);
  EXPECT_EQ(s.trims, 2u);
  // The next allocation takes a cached segment: no native call.
  ASSERT_TRUE(heap->allocate(512 * KiB).ok());
  EXPECT_EQ(dev.allocations, 4);
  EXPECT_EQ(heap->stats().cache_hits, 1u);
}

TEST(DeviceHeap, TrimReleasesExactlyWhatItSays) {
  NativeDevice dev(64 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB));
  std::vector<Address> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(heap->allocate(1 * MiB).value().address);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(heap->free(blocks[i]).ok());  // one stays live
  ASSERT_EQ(heap->stats().cached_bytes, 4 * MiB);
  const Size released = heap->trim(1 * MiB);
  EXPECT_EQ(released, 3 * MiB);
  EXPECT_EQ(dev.released_bytes, 3 * MiB);
  EXPECT_EQ(heap->stats().reserved_bytes, 2 * MiB);
  EXPECT_EQ(heap->stats().cached_bytes, 1 * MiB);
  EXPECT_EQ(heap->trim_idle(std::chrono::hours(1)), 0u);  // nothing idle that long
  EXPECT_EQ(heap->trim_idle(std::chrono::nanoseconds(0)), 1 * MiB);
  EXPECT_EQ(dev.used, 1 * MiB);  // the live block's segment
  EXPECT_EQ(heap->trim(), 0u);   // never a segment with live blocks
}

TEST(DeviceHeap, SegmentsTheRuntimeHoldsBackStayCachedUntilReleasable) {
  NativeDevice dev(3 * MiB);
  NativeAllocator native = dev.allocator();
  std::set<Address> held;  // e.g. storage a write-back may still read
  native.releasable = [&](Address base, Size) { return held.count(base) == 0; };
  auto made = DeviceHeap::create(std::move(native), segments_of(1 * MiB, 0));
  ASSERT_TRUE(made.ok());
  auto heap = std::move(made).value();
  const Address a = heap->allocate(1 * MiB).value().address;
  const Address b = heap->allocate(1 * MiB).value().address;
  held.insert(a);
  ASSERT_TRUE(heap->free(a).ok());
  ASSERT_TRUE(heap->free(b).ok());
  EXPECT_EQ(dev.releases, 1) << "cap 0 gives b back at once; a is held";
  EXPECT_EQ(dev.live.count(a), 1u);
  EXPECT_EQ(heap->stats().cached_bytes, 1 * MiB);
  // Held, its space is still the heap's to hand out.
  EXPECT_EQ(heap->allocate(1 * MiB).value().address, a);
  ASSERT_TRUE(heap->free(a).ok());
  // The out-of-memory ladder skips it too: 3 MiB cannot fit beside it.
  EXPECT_EQ(heap->allocate(3 * MiB).error().code, Errc::out_of_memory);
  EXPECT_EQ(dev.live.count(a), 1u);
  held.clear();
  EXPECT_EQ(heap->trim(), 1 * MiB);
  EXPECT_EQ(dev.live.count(a), 0u);
  EXPECT_TRUE(heap->allocate(3 * MiB).ok());
}

TEST(DeviceHeap, IdleSegmentsOlderThanMaxIdleGoBack) {
  NativeDevice dev(64 * MiB);
  HeapOptions o = segments_of(1 * MiB);
  o.max_idle = std::chrono::milliseconds(1);
  auto heap = make_heap(dev, o);
  Address a = heap->allocate(1 * MiB).value().address;
  ASSERT_TRUE(heap->free(a).ok());
  EXPECT_EQ(heap->stats().cached_bytes, 1 * MiB);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(heap->allocate(2 * MiB).ok());  // checks the age first
  EXPECT_EQ(dev.releases, 1);
}

TEST(DeviceHeap, RefusedGrowthReleasesCachedSegmentsSmallestFirstAndRetries) {
  NativeDevice dev(4 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB));
  std::vector<Address> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(heap->allocate(1 * MiB).value().address);  // the device is full
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(heap->free(blocks[i]).ok());            // 3 MiB cached
  // 2 MiB fits no cached segment, the driver has nothing: two cached
  // segments go back, then the driver gives 2 MiB.
  auto a = heap->allocate(2 * MiB);
  ASSERT_TRUE(a.ok()) << a.error().message();
  const HeapStats s = heap->stats();
  EXPECT_EQ(s.retries, 2u);
  EXPECT_EQ(s.native_failures, 2u);
  EXPECT_EQ(dev.releases, 2);
  EXPECT_EQ(s.reserved_bytes, 4 * MiB);
}

TEST(DeviceHeap, PressureHandlerIsAskedBeforeFailing) {
  NativeDevice dev(2 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB, 0));
  Address victim = heap->allocate(1 * MiB).value().address;
  ASSERT_TRUE(heap->allocate(1 * MiB).ok());
  int asked = 0;
  heap->set_pressure_handler([&](Size needed) {
    ++asked;
    EXPECT_EQ(needed, 1 * MiB);
    return heap->free(victim).ok();  // the runtime evicts a buffer
  });
  auto a = heap->allocate(1 * MiB);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(asked, 1);
  // Nothing left to evict: a clean failure with the figures.
  auto b = heap->allocate(1 * MiB);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, Errc::out_of_memory);
  EXPECT_EQ(b.error().size, 1 * MiB);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(heap->stats().pressure_calls, 2u);
  EXPECT_EQ(heap->stats().failed_requests, 1u);
}

TEST(DeviceHeap, BadInputsAreNamedErrors) {
  NativeDevice dev(8 * MiB);
  HeapOptions o;
  EXPECT_EQ(DeviceHeap::create(NativeAllocator{}, o).error().code, Errc::invalid_argument);
  o.granularity = 96;
  EXPECT_EQ(DeviceHeap::create(dev.allocator(), o).error().code, Errc::granularity_not_power_of_two);
  o = HeapOptions{};
  o.segment_size = 1000;
  EXPECT_EQ(DeviceHeap::create(dev.allocator(), o).error().code, Errc::invalid_argument);
  o = HeapOptions{};
  o.segment_size = 0;
  EXPECT_EQ(DeviceHeap::create(dev.allocator(), o).error().code, Errc::invalid_argument);
  o.initial_size = 16 * MiB;  // more than the device
  EXPECT_EQ(DeviceHeap::create(dev.allocator(), o).error().code, Errc::out_of_memory);

  auto heap = make_heap(dev, segments_of(1 * MiB));
  EXPECT_EQ(heap->allocate(0).error().code, Errc::zero_size);
  EXPECT_EQ(heap->allocate(64, 3).error().code, Errc::alignment_not_power_of_two);
  EXPECT_EQ(heap->free(12345).error().code, Errc::address_outside_region);
  Address a = heap->allocate(4 * KiB).value().address;
  EXPECT_EQ(heap->free(a + 256).error().code, Errc::not_block_start);
  ASSERT_TRUE(heap->free(a).ok());
  EXPECT_EQ(heap->free(a).error().code, Errc::double_free);
  EXPECT_EQ(heap->stats().live_blocks, 0u);
}

TEST(DeviceHeap, FreeByHandleAndItsNamedErrors) {
  NativeDevice dev(64 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB));
  // Stale: its record now serves the next block of that segment.
  auto a = heap->allocate(4 * KiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(heap->free(a.value()).ok());
  auto c = heap->allocate(4 * KiB);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c.value().index, a.value().index);
  const auto stale = heap->free(a.value());
  EXPECT_EQ(stale.error().code, Errc::stale_handle);
  EXPECT_NE(stale.error().message().find("stale"), std::string::npos);
  EXPECT_EQ(heap->stats().live_blocks, 1u);

  auto b = heap->allocate(2 * MiB);  // a segment of its own
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(heap->stats().segments, 2u);
  ASSERT_TRUE(heap->free(b.value()).ok());
  EXPECT_EQ(heap->stats().empty_segments, 1u);  // emptied by a handle free: cached
  EXPECT_EQ(heap->free(b.value()).error().code, Errc::double_free);

  // Foreign: a handle whose address is in no segment, and another heap's.
  BlockHandle nowhere = c.value();
  nowhere.address = 12345;
  EXPECT_EQ(heap->free(nowhere).error().code, Errc::foreign_handle);
  NativeDevice other_dev(64 * MiB);
  auto other = make_heap(other_dev, segments_of(1 * MiB));
  other_dev.next = dev.next - 2 * MiB;  // hand out the same addresses as this device did
  BlockHandle theirs = other->allocate(4 * KiB).value();
  EXPECT_EQ(heap->free(theirs).error().code, Errc::foreign_handle);
  EXPECT_EQ(heap->stats().live_blocks, 1u);
  EXPECT_TRUE(other->free(theirs).ok());
  EXPECT_TRUE(heap->free(c.value()).ok());
  EXPECT_EQ(heap->stats().live_blocks, 0u);
}

TEST(DeviceHeap, DestructionGivesEverySegmentBack) {
  NativeDevice dev(64 * MiB);
  {
    HeapOptions o = segments_of(1 * MiB);
    o.initial_size = 2 * MiB;
    auto heap = make_heap(dev, o);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(heap->allocate(700 * KiB).ok());
    EXPECT_GT(dev.live.size(), 1u);
  }
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(dev.used, 0u);
}

// Several threads allocate and free at once (run under ThreadSanitizer by
// ./memlayer test-tsan): every block is distinct while live, and the
// bookkeeping adds up at the end.
TEST(DeviceHeapConcurrency, ThreadsAllocateAndFreeAtOnce) {
  NativeDevice dev(256 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB, 2 * MiB));
  std::mutex live_mutex;
  std::set<Address> live;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<BlockHandle> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.empty() || rng() % 3 != 0) {
          auto a = heap->allocate(64 + rng() % (64 * KiB));
          ASSERT_TRUE(a.ok()) << a.error().message();
          std::lock_guard lock(live_mutex);
          ASSERT_TRUE(live.insert(a.value().address).second) << "handed out twice";
          mine.push_back(a.value());
        } else {
          const std::size_t k = rng() % mine.size();
          const BlockHandle a = mine[k];
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
          {
            std::lock_guard lock(live_mutex);
            live.erase(a.address);
          }
          // Odd threads free by address: the segments' address indexes are
          // built and kept while the others free by handle.
          ASSERT_TRUE((t % 2 == 0 ? heap->free(a) : heap->free(a.address)).ok());
        }
      }
      for (const BlockHandle& a : mine) {
        {
          std::lock_guard lock(live_mutex);
          live.erase(a.address);
        }
        ASSERT_TRUE(heap->free(a).ok());
      }
    });
  for (auto& th : threads) th.join();
  const HeapStats s = heap->stats();
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_LE(s.cached_bytes, 2 * MiB);
  EXPECT_EQ(s.reserved_bytes, dev.used);
}

// ---- BlockCache ----------------------------------------------------------------

TEST(BlockCache, ReusesABlockOfTheSameTagWithinTwiceTheRequest) {
  NativeDevice dev(64 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB));
  BlockCache cache(*heap);
  CachedBlock b = cache.acquire(7, 1000).value();
  EXPECT_EQ(b.size, 1024u);  // the heap's granularity
  cache.release(7, b);
  CachedBlock again = cache.acquire(7, 1000).value();
  EXPECT_EQ(again.address(), b.address());
  cache.release(7, again);
  EXPECT_NE(cache.acquire(7, 100).value().address(), b.address());  // 1024 > 2 x 100
  CachedBlock bigger = cache.acquire(7, 4000).value();           // too small to serve it
  EXPECT_NE(bigger.address(), b.address());
  EXPECT_NE(cache.acquire(8, 1000).value().address(), b.address());  // another tag
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.out_blocks, 3u);
  cache.release(7, bigger);
}

TEST(BlockCache, BoundsHoldPerTagAndInBytes) {
  NativeDevice dev(64 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB));
  CacheOptions o;
  o.blocks_per_tag = 2;
  o.capacity_bytes = 40 * KiB;
  BlockCache cache(*heap, o);
  std::vector<CachedBlock> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(cache.acquire(1, 16 * KiB).value());
  for (auto& b : blocks) cache.release(1, b);
  CacheStats s = cache.stats();
  EXPECT_EQ(s.idle_blocks, 2u);  // per tag
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_EQ(heap->stats().live_blocks, 2u);  // the dropped one went back
  CachedBlock other = cache.acquire(2, 16 * KiB).value();
  cache.release(2, other);  // 48 KiB would pass the 40 KiB capacity
  s = cache.stats();
  EXPECT_EQ(s.idle_bytes, 32 * KiB);
  EXPECT_EQ(s.dropped, 2u);
}

TEST(BlockCache, ConcurrentUsersOfOneTagGetBlocksOfTheirOwn) {
  NativeDevice dev(64 * MiB);
  auto heap = make_heap(dev, segments_of(1 * MiB));
  BlockCache cache(*heap);
  CachedBlock a = cache.acquire(3, 8 * KiB).value();
  CachedBlock b = cache.acquire(3, 8 * KiB).value();  // a is still out
  EXPECT_NE(a.address(), b.address());
  cache.release(3, a);
  cache.release(3, b);
  EXPECT_EQ(cache.stats().idle_blocks, 2u);
}

TEST(BlockCache, IdleBlocksAreFreedBeforeAnAllocationFails) {
  NativeDevice dev(64 * MiB);
  HeapOptions o;
  o.segment_size = 0;
  o.initial_size = 1 * MiB;
  auto heap = make_heap(dev, o);
  BlockCache cache(*heap);
  std::vector<CachedBlock> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(cache.acquire(1, 256 * KiB).value());  // the heap is full
  for (auto& b : blocks) cache.release(1, b);                                          // all idle
  auto other = cache.acquire(2, 512 * KiB);  // another tag: the idle blocks must go
  ASSERT_TRUE(other.ok()) << other.error().message();
  EXPECT_EQ(cache.stats().flushes, 1u);
  EXPECT_EQ(cache.stats().idle_blocks, 0u);
  // And for the heap's other users, through the pressure handler.
  CachedBlock spare = cache.acquire(3, 256 * KiB).value();
  cache.release(3, spare);
  heap->set_pressure_handler([&](Size) { return cache.flush() > 0; });
  ASSERT_TRUE(heap->allocate(512 * KiB).ok());
  cache.release(2, other.value());
}

TEST(BlockCacheConcurrency, ThreadsAcquireAndReleaseUnderSharedTags) {
  NativeDevice dev(256 * MiB);
  auto heap = make_heap(dev, segments_of(4 * MiB));
  CacheOptions o;
  o.blocks_per_tag = 3;
  o.capacity_bytes = 1 * MiB;
  BlockCache cache(*heap, o);
  std::mutex live_mutex;
  std::set<Address> live;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      // Each thread holds up to four blocks at a time, so that a block
      // handed out twice is held by two threads at once and seen in `live`.
      struct Held {
        std::uint64_t tag;
        CachedBlock block;
      };
      std::vector<Held> held;
      auto give_back = [&](std::size_t k) {
        {
          std::lock_guard lock(live_mutex);
          live.erase(held[k].block.address());
        }
        cache.release(held[k].tag, held[k].block);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      };
      for (int i = 0; i < 4000; ++i) {
        const std::uint64_t tag = rng() % 3;
        auto b = cache.acquire(tag, 1 * KiB + (rng() % 4) * 1 * KiB);
        ASSERT_TRUE(b.ok());
        {
          std::lock_guard lock(live_mutex);
          ASSERT_TRUE(live.insert(b.value().address()).second) << "one block handed to two users";
        }
        held.push_back({tag, b.value()});
        if (held.size() == 4) give_back(rng() % held.size());
      }
      while (!held.empty()) give_back(held.size() - 1);
    });
  for (auto& th : threads) th.join();
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.out_blocks, 0u);
  EXPECT_LE(s.idle_blocks, 9u);  // 3 tags x 3
  EXPECT_LE(s.idle_bytes, 1 * MiB);
  EXPECT_EQ(heap->stats().live_blocks, s.idle_blocks);
  EXPECT_GT(s.hits, s.misses);
}

}  // namespace

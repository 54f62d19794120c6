// The allocation benchmarks' device: one sim device whose native allocator
// costs what the seeds measured for cudaMalloc (100 us + size at 15 GiB/s),
// and the three ways to get memory from it that the benchmarks compare:
//   native - one native call per allocation, released at free (what a
//            runtime without a heap does: PoCL's CUDA driver, GCC's nvptx
//            plugin before its cache, Futhark without its free list);
//   heap   - bufalloc::DeviceHeap over the native allocator;
//   cache  - bufalloc::BlockCache over that heap, one tag per call site.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "memlayer/bufalloc/block_cache.hpp"
#include "memlayer/bufalloc/device_heap.hpp"
#include "memlayer/drivers/sim_device.hpp"

namespace memlayer::bench {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t GiB = 1024 * MiB;

inline std::unique_ptr<drivers::SimDevice> native_sim(std::uint64_t memory_size) {
  drivers::SimOptions o;
  o.memory_size = memory_size;  // virtual until touched: only what kernels touch is committed
  o.native_allocator = true;
  std::vector<std::unique_ptr<drivers::SimDevice>> made;
  const runtime::Status s = drivers::SimDevice::create(1, o, made);
  if (!s.ok()) throw std::runtime_error(s.message);
  return std::move(made[0]);
}

inline bufalloc::NativeAllocator native_of(runtime::DeviceDriver& dev) {
  bufalloc::NativeAllocator n;
  n.allocate = [&dev](bufalloc::Size size) { return dev.native_allocate(size); };
  n.release = [&dev](bufalloc::Address base, bufalloc::Size size) { dev.native_release(base, size); };
  return n;
}

inline std::unique_ptr<bufalloc::DeviceHeap> heap_over(runtime::DeviceDriver& dev, bufalloc::HeapOptions o) {
  auto h = bufalloc::DeviceHeap::create(native_of(dev), o);
  if (!h) throw std::runtime_error(h.error().message());
  return std::move(h).value();
}

/// Allocation by one of the three paths, with the size the caller asked for.
class Allocator {
 public:
  enum class Kind { native, heap, cache };
  /// Any driver with a native allocator (the sim's, or a GPU's).
  Allocator(Kind kind, runtime::DeviceDriver& dev, bufalloc::HeapOptions heap_options = {},
            bufalloc::CacheOptions cache_options = {})
      : kind_(kind), dev_(dev) {
    if (kind != Kind::native) heap_ = heap_over(dev, heap_options);
    if (kind == Kind::cache) cache_ = std::make_unique<bufalloc::BlockCache>(*heap_, cache_options);
  }
  struct Block {
    runtime::DeviceAddress address = 0;
    std::uint64_t size = 0;  // what was obtained (the cache's block may be larger)
    bufalloc::BlockHandle handle{};  // heap and cache: what they free
  };
  Block get(std::uint64_t tag, std::uint64_t size) {
    switch (kind_) {
      case Kind::native: {
        auto a = dev_.native_allocate(size);
        if (!a) throw std::runtime_error("native allocation failed");
        return {*a, size};
      }
      case Kind::heap: {
        auto a = heap_->allocate(size);
        if (!a) throw std::runtime_error(a.error().message());
        return {a.value().address, size, a.value()};
      }
      case Kind::cache: {
        auto b = cache_->acquire(tag, size);
        if (!b) throw std::runtime_error(b.error().message());
        return {b.value().address(), b.value().size, b.value().handle};
      }
    }
    return {};
  }
  void put(std::uint64_t tag, Block b) {
    switch (kind_) {
      case Kind::native: dev_.native_release(b.address, b.size); break;
      case Kind::heap: (void)heap_->free(b.handle); break;
      case Kind::cache: cache_->release(tag, bufalloc::CachedBlock{b.handle, b.size}); break;
    }
  }
  [[nodiscard]] const bufalloc::DeviceHeap* heap() const { return heap_.get(); }

 private:
  Kind kind_;
  runtime::DeviceDriver& dev_;
  std::unique_ptr<bufalloc::DeviceHeap> heap_;
  std::unique_ptr<bufalloc::BlockCache> cache_;
};

/// Benchmark 1's sizes: 1 KiB to 1 GiB in steps of 4, wall time.
inline void latency_sizes(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(4)->Range(static_cast<std::int64_t>(KiB), static_cast<std::int64_t>(GiB));
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace memlayer::bench

// The allocators under comparison behind one small interface, so each
// benchmark is written once as a template and runs the same code for all.
#pragma once

#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "baseline/region_core.hpp"
#include "memlayer/bufalloc/region.hpp"
#include "workloads.hpp"

namespace memlayer::bench {

/// What a benchmark needs from an allocator: requests are plain byte counts
/// (64-byte alignment is implied); allocate() returns what free() takes back
/// (`Block`: an address, or memlayer's handle), and free() reports whether it
/// was a live block so a broken adapter cannot go unnoticed.
template <class A>
concept BenchAllocator = std::constructible_from<A, Address, Size> &&
    requires(A& a, Size size, typename A::Block block) {
      { a.allocate(size) } -> std::same_as<std::optional<typename A::Block>>;
      { a.free(block) } -> std::same_as<bool>;
    };

/// Stops a benchmark whose allocator could not be set up: it must not print
/// numbers.
[[noreturn]] inline void setup_failed(const char* who, const bufalloc::Error& error) {
  std::fprintf(stderr, "%s: %s\n", who, error.message().c_str());
  std::abort();
}

/// Today's Region, freeing by handle.
class MemlayerAllocator {
 public:
  using Block = bufalloc::BlockHandle;
  MemlayerAllocator(Address base, Size size) : region_(make(base, size)) {}

  std::optional<Block> allocate(Size size) {
    auto result = region_.allocate(size, kAlignment);
    if (!result) return std::nullopt;
    return result.value();
  }
  bool free(const Block& block) { return region_.free(block).ok(); }
  /// For the diagnostic counters: how often the fallback search ran.
  [[nodiscard]] bufalloc::RegionStats stats() const { return region_.stats(); }
  /// Empty when the bookkeeping is consistent, else the first broken rule.
  [[nodiscard]] std::string check() const {
    std::string what;
    return region_.check(&what).ok() ? std::string() : what;
  }

 private:
  static bufalloc::Region make(Address base, Size size) {
    auto region = bufalloc::Region::create(base, size, {.granularity = kAlignment});
    if (!region) setup_failed("memlayer Region::create", region.error());
    return std::move(region).value();
  }

  bufalloc::Region region_;
};

/// The Region as it was before handles (baseline/region_core.hpp), freeing
/// by address through its hash index: the "before" column.
class BaselineAllocator {
 public:
  using Block = Address;
  BaselineAllocator(Address base, Size size) : core_(base, size & ~(kAlignment - 1), kAlignmentLog2) {}

  std::optional<Block> allocate(Size size) {
    auto result = core_.allocate(size, kAlignment);
    if (!result) return std::nullopt;
    return result.value();
  }
  bool free(Block address) { return core_.free(address).ok(); }
  [[nodiscard]] bufalloc::RegionStats stats() const { return core_.stats(); }
  [[nodiscard]] std::string check() const {
    std::string what;
    return core_.check(&what).ok() ? std::string() : what;
  }

 private:
  static constexpr unsigned kAlignmentLog2 = 6;
  static_assert(Size{1} << kAlignmentLog2 == kAlignment);
  baseline::RegionCore core_;
};

static_assert(BenchAllocator<MemlayerAllocator>);
static_assert(BenchAllocator<BaselineAllocator>);

}  // namespace memlayer::bench

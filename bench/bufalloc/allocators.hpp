// The allocators under comparison behind one small interface, so each
// benchmark is written once as a template and runs the same code for all.
#pragma once

#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "memlayer/bufalloc/region.hpp"
#include "workloads.hpp"

namespace memlayer::bench {

/// What a benchmark needs from an allocator: requests are plain byte counts
/// (64-byte alignment is implied), and free() reports whether the address was
/// a live block so a broken adapter cannot go unnoticed.
template <class A>
concept BenchAllocator = std::constructible_from<A, Address, Size> &&
    requires(A& a, Size size, Address address) {
      { a.allocate(size) } -> std::same_as<std::optional<Address>>;
      { a.free(address) } -> std::same_as<bool>;
    };

class MemlayerAllocator {
 public:
  MemlayerAllocator(Address base, Size size) : region_(make(base, size)) {}

  std::optional<Address> allocate(Size size) {
    auto result = region_.allocate(size, kAlignment);
    if (!result) return std::nullopt;
    return result.value();
  }
  bool free(Address address) { return region_.free(address).ok(); }
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
    if (!region) {
      // A benchmark with a broken setup must not print numbers.
      std::fprintf(stderr, "memlayer Region::create: %s\n", region.error().message().c_str());
      std::abort();
    }
    return std::move(region).value();
  }

  bufalloc::Region region_;
};

static_assert(BenchAllocator<MemlayerAllocator>);

}  // namespace memlayer::bench

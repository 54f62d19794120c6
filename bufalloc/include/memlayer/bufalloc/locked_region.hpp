// memlayer/bufalloc/locked_region.hpp — a Region that several threads may use.
//
// Locking: one mutex per region, held for the whole of each call (allocate,
// both frees, reset, stats, walk, cheapest_hole, check). Calls are linearisable; nothing blocks
// except on that mutex; no call takes any other lock, so a LockedRegion can't
// take part in a lock-order deadlock. walk() and cheapest_hole() hold the mutex
// while they run the callbacks: these must not call back into the same region.
//
// Use Region directly when one thread owns the space (a device's submit
// thread, a per-queue allocator): it skips the mutex.
#pragma once

#include <mutex>

#include "memlayer/bufalloc/region.hpp"

namespace memlayer::bufalloc {

class LockedRegion {
 public:
  /// Same contract and errors as Region::create().
  static Result<LockedRegion> create(Address base, Size size, RegionOptions options = {}) {
    auto r = Region::create(base, size, options);
    if (!r) return r.error();
    return LockedRegion(std::move(r).value());
  }

  /// The same contract as the Region function of the same name; thread-safe.
  Result<BlockHandle> allocate(Size size, Size alignment = 0) {
    std::lock_guard lock(mutex_);
    return region_.allocate(size, alignment);
  }
  Result<void> free(BlockHandle block) {
    std::lock_guard lock(mutex_);
    return region_.free(block);
  }
  Result<void> free(Address address) {
    std::lock_guard lock(mutex_);
    return region_.free(address);
  }
  [[nodiscard]] bool indexes_addresses() const {
    std::lock_guard lock(mutex_);
    return region_.indexes_addresses();
  }
  void reset() {
    std::lock_guard lock(mutex_);
    region_.reset();
  }
  [[nodiscard]] RegionStats stats() const {
    std::lock_guard lock(mutex_);
    return region_.stats();
  }
  void walk(const std::function<void(const BlockInfo&)>& visit) const {
    std::lock_guard lock(mutex_);
    region_.walk(visit);
  }
  Result<Hole> cheapest_hole(Size size, Size alignment, const std::function<std::optional<std::uint64_t>(const BlockInfo&)>& evictable,
                             const std::function<void(const BlockInfo&)>& visit) const {
    std::lock_guard lock(mutex_);
    return region_.cheapest_hole(size, alignment, evictable, visit);
  }
  Result<void> check(std::string* what = nullptr) const {
    std::lock_guard lock(mutex_);
    return region_.check(what);
  }
  // Fixed at creation: no lock needed.
  [[nodiscard]] Address base() const noexcept { return region_.base(); }
  [[nodiscard]] Size size() const noexcept { return region_.size(); }
  [[nodiscard]] Size granularity() const noexcept { return region_.granularity(); }
  [[nodiscard]] std::uint32_t id() const noexcept { return region_.id(); }

  // A mutex does not move, so neither does a LockedRegion once shared; moving
  // is allowed only before other threads see it (e.g. out of create()).
  LockedRegion(LockedRegion&& other) noexcept : region_(std::move(other.region_)) {}
  LockedRegion& operator=(LockedRegion&&) = delete;

 private:
  explicit LockedRegion(Region region) noexcept : region_(std::move(region)) {}
  Region region_;
  mutable std::mutex mutex_;
};

}  // namespace memlayer::bufalloc

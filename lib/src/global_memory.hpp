// A device's global memory as the runtime allocates it.
//
// Two kinds of device: one whose whole address space is there from the start
// (the sim arena, PoCL's memlayer device) gets a bufalloc Region over
// [memory_base(), + global_mem_size); one with a native allocator
// (cuMemAlloc) gets a bufalloc DeviceHeap that obtains segments from the
// driver and sub-allocates them, so the driver's cost is paid per segment,
// not per buffer. Either way, storage an eviction freed while its last users
// and write-back may still run is quarantined: whatever is placed over it
// next waits for the eviction's fence, and a segment holding quarantined
// storage stays in the heap (its space reusable, fenced) until those fences
// have completed: only then may it go back to the driver.
//
// Not thread-safe: every call is made under DeviceState::memory_mutex.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "event_state.hpp"
#include "memlayer/bufalloc/device_heap.hpp"
#include "memlayer/bufalloc/region.hpp"
#include "memlayer/runtime/device_driver.hpp"

namespace memlayer::runtime::detail {

class GlobalMemory {
 public:
  GlobalMemory(DeviceDriver& driver, const bufalloc::HeapOptions& heap_options);
  ~GlobalMemory();  // every segment back to the driver (the device is idle by then)
  GlobalMemory(const GlobalMemory&) = delete;
  GlobalMemory& operator=(const GlobalMemory&) = delete;

  /// False for host-memory devices, and when the region or heap could not be
  /// made (setup_error() says why).
  [[nodiscard]] bool usable() const { return region_.has_value() || heap_ != nullptr; }
  [[nodiscard]] const std::string& setup_error() const { return setup_error_; }

  /// A block of `size` bytes aligned to `alignment` (its address is
  /// handle.address); out_of_memory when the device is full (the heap has
  /// already tried its own ladder: dropping cached segments and retrying).
  bufalloc::Result<bufalloc::BlockHandle> allocate(std::uint64_t size, std::uint64_t alignment);
  /// Room in the quarantine for one more block allocated, made with it: the
  /// block is freed by free() or free_after(), which then need none. Throws
  /// std::bad_alloc.
  void promise_quarantine();
  /// A promised block that is never freed (kept until the memory goes).
  void forgo_quarantine() noexcept { --promised_; }
  /// Frees a block nothing can still be using, by the handle allocate() gave:
  /// O(1), no address lookup. Allocates nothing.
  void free(const bufalloc::BlockHandle& block, bool promised) noexcept;
  /// Frees a block whose last users finish with `fence`: see the file
  /// comment. Needs the room promise_quarantine() made: allocates nothing.
  void free_after(const bufalloc::BlockHandle& block, std::uint64_t size, std::shared_ptr<EventState> fence) noexcept;
  /// The live blocks to free so that `size` bytes at `alignment` fit
  /// (bufalloc's Region::cheapest_hole, same callbacks). A device with a
  /// heap has no answer (no_hole): its segments come from the driver and
  /// go back to it, so freed blocks need not join into one hole.
  [[nodiscard]] bufalloc::Result<bufalloc::Hole> cheapest_hole(
      std::uint64_t size, std::uint64_t alignment,
      const std::function<std::optional<std::uint64_t>(const bufalloc::BlockInfo&)>& evictable,
      const std::function<void(const bufalloc::BlockInfo&)>& visit) const;
  /// Whether a block placed at [address, + size) would have to wait for a
  /// fence. Allocates nothing (free() may release a segment after asking).
  [[nodiscard]] bool fenced(DeviceAddress address, std::uint64_t size) const noexcept;
  /// The quarantine fences a block placed at [address, + size) must wait for.
  [[nodiscard]] std::vector<std::shared_ptr<EventState>> fences_over(DeviceAddress address, std::uint64_t size);

  [[nodiscard]] bufalloc::RegionStats region_stats() const;
  [[nodiscard]] bufalloc::HeapStats heap_stats() const;

 private:
  struct Quarantine {
    DeviceAddress address;
    std::uint64_t size;
    std::shared_ptr<EventState> fence;
  };
  void collect();  // drops finished quarantines, releases segments no longer fenced

  DeviceDriver& driver_;
  std::optional<bufalloc::Region> region_;
  std::unique_ptr<bufalloc::DeviceHeap> heap_;
  std::string setup_error_;
  std::vector<Quarantine> quarantine_;
  std::size_t promised_ = 0;  // blocks with room in quarantine_ (its capacity >= size + promised_)
  std::uint64_t cache_cap_ = 0;
};

}  // namespace memlayer::runtime::detail

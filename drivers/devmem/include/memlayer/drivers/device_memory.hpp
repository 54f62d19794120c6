// memlayer/drivers/device_memory.hpp — device global memory for drivers whose
// "device" memory is host memory they own: the sim driver and the PoCL
// memlayer driver.
//
// DeviceArena is one contiguous block of host memory standing for a device's
// global memory, placed with hwloc on a NUMA node (bound when the machine
// allows, unbound otherwise). DeviceMemory adds a bufalloc region over that
// arena, so a driver gets blocks of device memory with alignment, O(1)
// allocate/free and statistics, without writing any of it itself.
//
// Errors are strings that name the device, the request and the state
// (free bytes, largest free block); nothing here aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "memlayer/bufalloc/error.hpp"
#include "memlayer/bufalloc/locked_region.hpp"
#include "memlayer/bufalloc/stats.hpp"

namespace memlayer::drivers {

template <class T>
using DevResult = bufalloc::Result<T, std::string>;

class NumaTopology;  // the process's hwloc topology, shared by every arena

class DeviceArena {
 public:
  /// `size` bytes (> 0) of host memory on NUMA node `numa_node` modulo the
  /// node count (-1: anywhere). Pages are committed on first touch.
  /// Fails if hwloc cannot load the topology or the memory cannot be had.
  /// Thread-safe. Cost: one mmap.
  static DevResult<DeviceArena> create(std::uint64_t size, int numa_node);

  /// NUMA nodes on this machine (at least 1).
  static int numa_node_count();

  DeviceArena(DeviceArena&& other) noexcept;
  DeviceArena& operator=(DeviceArena&& other) noexcept;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena();

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] int numa_node() const noexcept { return numa_node_; }
  /// Whether hwloc really bound the memory to the node.
  [[nodiscard]] bool bound() const noexcept { return bound_; }
  /// The arena bytes [offset, offset + length), or nullptr when any part of
  /// that range is outside the arena. O(1), thread-safe.
  [[nodiscard]] std::byte* locate(std::uint64_t offset, std::uint64_t length) const noexcept;
  /// Whether [p, p + length) lies inside the arena.
  [[nodiscard]] bool contains(const void* p, std::uint64_t length) const noexcept;
  /// Binds the calling thread to the arena's node's cores; best effort (a
  /// container may forbid it). Returns whether it did.
  bool bind_current_thread() const;

 private:
  DeviceArena(std::shared_ptr<NumaTopology> topology, std::byte* data, std::uint64_t size, int node, bool bound);
  void release() noexcept;

  std::shared_ptr<NumaTopology> topology_;
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  int numa_node_ = -1;
  bool bound_ = false;
};

/// A block from DeviceMemory::allocate(): its bytes, and the handle that
/// frees it without an address lookup. A plain value.
struct DeviceBlock {
  std::byte* data = nullptr;
  bufalloc::BlockHandle handle;  ///< handle.address is data's address
};

/// An arena with a bufalloc region over it: the device's allocator.
/// Thread-safe (LockedRegion).
class DeviceMemory {
 public:
  /// `name` is used in error messages. granularity: every block's address
  /// and size is a multiple of it (power of two, at most 4096).
  static DevResult<DeviceMemory> create(std::string name, std::uint64_t size, int numa_node,
                                        std::uint64_t granularity);

  /// A block of `size` bytes (> 0) aligned to max(alignment, granularity).
  /// Out of memory: an error naming the request, the free bytes and the
  /// largest free block. O(1) (TLSF), plus a best-fit scan only when the
  /// O(1) path finds nothing.
  DevResult<DeviceBlock> allocate(std::uint64_t size, std::uint64_t alignment = 0);
  /// Frees a block from allocate() by its handle. A handle of another
  /// memory, of a block freed already, or a stale one is an error naming
  /// which (bufalloc's foreign_handle, double_free, stale_handle), and changes
  /// nothing. O(1).
  DevResult<void> free(const bufalloc::BlockHandle& block);
  /// Frees a block from allocate() by its pointer alone, for callers that
  /// cannot keep the handle. The first call builds the region's address index
  /// (O(live blocks)), which every later allocate and free then maintains
  /// (see bufalloc::Region::free(Address)). A pointer that is not a live
  /// block's start is an error, and changes nothing. O(1) expected.
  DevResult<void> free(const std::byte* block);
  /// The id in this memory's handles (bufalloc::Region::id()), for a caller
  /// that stores a handle in parts and puts it back together.
  [[nodiscard]] std::uint32_t region_id() const noexcept { return region_->id(); }

  [[nodiscard]] bufalloc::RegionStats stats() const { return region_->stats(); }
  [[nodiscard]] const DeviceArena& arena() const noexcept { return arena_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  DeviceMemory(std::string name, DeviceArena arena, std::unique_ptr<bufalloc::LockedRegion> region);

  std::string name_;
  DeviceArena arena_;
  std::unique_ptr<bufalloc::LockedRegion> region_;  // heap: LockedRegion holds a mutex
};

}  // namespace memlayer::drivers

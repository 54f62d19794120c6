// memlayer/runtime/device_driver.hpp — what a device gives memlayer.
//
// A driver describes one device and performs the primitive operations on its
// memory; memlayer does everything else: it manages the device's global
// memory addresses — with a bufalloc Region over [memory_base(), +
// global_mem_size), or, for a driver with a native allocator, a bufalloc
// DeviceHeap over segments the driver hands out — decides what to allocate,
// copy and migrate, and orders the work by events.
//
// Threads. memlayer runs each device's work on worker threads it starts
// itself (DeviceInfo::worker_threads of them). Before a worker runs anything
// it calls on_worker_start() on that thread, so the driver can bind it (the
// sim driver binds it to its NUMA node's cores). Every operation below is
// called on a worker thread, synchronously: it returns when the work is done.
// Operations may run concurrently on different workers of one device, always
// on disjoint memory; a driver that needs more serialisation takes its own
// lock. on_allocate()/on_free() are called on the enqueuing thread, under
// memlayer's per-device allocation lock. Nothing is ever called with a lock
// held that a driver could need, and a driver never calls back into memlayer:
// completion is the return of the call, so no driver can deadlock the
// scheduler (PoCL 3.1's basic driver can: see field notes).
//
// Errors come back as a Status: an OpenCL error code (negative) and a message
// naming the problem. A failed operation fails its command, and memlayer
// fails every command that depends on it. A driver must not throw. An
// operation that fails before it has written a byte says so
// (Status::error_before_start): the bytes it was to write then keep what
// they held, and memlayer loses nothing when they were held only there; any
// other failure may have written part of them, so memlayer trusts nothing
// the operation was to write at that location.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "memlayer/migration/cost_model.hpp"
#include "memlayer/runtime/status.hpp"

namespace memlayer::runtime {

/// An address in a device's global memory space.
using DeviceAddress = std::uint64_t;

/// A link's cost: latency plus size over bandwidth (bytes_per_s > 0).
using migration::LinkCost;

struct DeviceInfo {
  std::string name;
  std::uint64_t global_mem_size = 0;  ///< bytes memlayer may allocate
  std::uint64_t local_mem_size = 0;   ///< bytes of local memory per compute unit
  std::uint64_t base_alignment = 128; ///< every buffer's address alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN / 8)
  unsigned compute_units = 1;
  unsigned worker_threads = 1;        ///< how many threads memlayer runs this device's work on
  /// The device computes directly on host memory (memlayer's `host`
  /// driver): its copy of a buffer is the host copy, nothing ever migrates
  /// between the two, and DeviceAddresses are host pointers.
  bool shares_host_memory = false;
  int numa_node = -1;                 ///< where its memory lives, or -1
};

/// A kernel is a host callable. It receives one pointer per buffer argument
/// (in the device's memory, as the host sees it), then one per local-memory
/// argument, and returns a Status.
using KernelFunction = std::function<Status(std::span<void* const> pointers)>;

class DeviceDriver {
 public:
  virtual ~DeviceDriver() = default;

  [[nodiscard]] virtual const DeviceInfo& info() const noexcept = 0;
  /// The first address of the global memory space (global_mem_size bytes).
  [[nodiscard]] virtual DeviceAddress memory_base() const noexcept { return 0; }

  /// Called once on each worker thread before it runs any operation.
  virtual void on_worker_start(unsigned /*worker_index*/) {}

  /// memlayer placed a buffer at [address, address + size); the driver may
  /// prepare storage for it, or refuse (CL_MEM_OBJECT_ALLOCATION_FAILURE):
  /// memlayer then treats the device as full for this request.
  virtual Status on_allocate(DeviceAddress /*address*/, std::uint64_t /*size*/) { return {}; }
  virtual void on_free(DeviceAddress /*address*/, std::uint64_t /*size*/) {}

  /// A native allocator (cuMemAlloc, clCreateBuffer): a device whose memory
  /// must be obtained from its driver says so here. memlayer then never
  /// places buffers over [memory_base(), + global_mem_size) directly: it
  /// obtains large segments with native_allocate() and sub-allocates them
  /// with a bufalloc::DeviceHeap (ContextOptions::device_heap), so the
  /// native call's cost is paid once per segment, not once per buffer.
  [[nodiscard]] virtual bool has_native_allocator() const noexcept { return false; }
  /// A new range of exactly `size` bytes, aligned to base_alignment, or
  /// std::nullopt when the device has no memory for it. Called on the
  /// enqueuing thread under memlayer's per-device allocation lock; may be
  /// slow (that is why memlayer calls it rarely).
  virtual std::optional<DeviceAddress> native_allocate(std::uint64_t /*size*/) { return std::nullopt; }
  /// Gives back a range native_allocate() returned. memlayer calls it only
  /// when no operation on the range can still be running.
  virtual void native_release(DeviceAddress /*address*/, std::uint64_t /*size*/) {}

  /// host -> device, device -> host, and within the device.
  virtual Status write(DeviceAddress dst, const void* src, std::uint64_t size) = 0;
  virtual Status read(DeviceAddress src, void* dst, std::uint64_t size) = 0;
  virtual Status copy(DeviceAddress src, DeviceAddress dst, std::uint64_t size) = 0;
  /// Fills [dst, dst + size) with repetitions of `pattern` (size is a
  /// multiple of pattern.size()).
  virtual Status fill(DeviceAddress dst, std::uint64_t size, std::span<const std::byte> pattern) = 0;

  /// A host pointer to device memory when the host can access it directly
  /// (maps then need no copy), else nullptr.
  [[nodiscard]] virtual void* host_pointer(DeviceAddress /*address*/) { return nullptr; }

  /// The cost of the host link (both directions), for the migration planner.
  [[nodiscard]] virtual LinkCost host_link() const { return LinkCost{1e-5, 10e9}; }
  /// Whether this device can copy directly from `source`'s memory, and at
  /// what cost. The default: no direct path (migrations go through the host).
  [[nodiscard]] virtual std::optional<LinkCost> peer_link(const DeviceDriver& /*source*/) const {
    return std::nullopt;
  }
  /// Copies from another device's memory straight into this one's. Called
  /// only where peer_link(source) has a value.
  virtual Status copy_from_peer(DeviceDriver& source, DeviceAddress src, DeviceAddress dst, std::uint64_t size);

  /// Runs a kernel over the given buffers (their addresses in this device)
  /// with local-memory arguments of the given sizes, laid out in the local
  /// memory of the compute unit that runs it (see local_memory.hpp).
  virtual Status run_kernel(const KernelFunction& kernel, std::span<const DeviceAddress> buffers,
                            std::span<const std::uint64_t> local_sizes) = 0;
};

}  // namespace memlayer::runtime

// memlayer/runtime/context.hpp — a context over N devices: buffers, queues,
// user events, and the statistics of what moved.
//
// Thread-safety: every function may be called from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "memlayer/bufalloc/device_heap.hpp"
#include "memlayer/bufalloc/stats.hpp"
#include "memlayer/runtime/buffer.hpp"
#include "memlayer/runtime/device_driver.hpp"
#include "memlayer/runtime/event.hpp"
#include "memlayer/runtime/status.hpp"

namespace memlayer::runtime {

class Queue;
namespace detail {
class ContextState;
}

struct ContextStats {
  std::uint64_t bytes_migrated = 0;    ///< bytes moved by migration copies (a staged copy counts twice)
  std::uint64_t copies_direct = 0;     ///< device-to-device migration copies
  std::uint64_t copies_to_host = 0;    ///< device-to-host legs (staging, write-backs)
  std::uint64_t copies_from_host = 0;  ///< host-to-device legs
  std::uint64_t evictions = 0;         ///< device copies dropped to make room
  std::uint64_t write_backs = 0;       ///< evictions that had to save the only copy first
  /// Commands whose device had room for their buffers but in no hole, whose
  /// own buffers were moved to make one (doc/engine.md, the pipeline).
  std::uint64_t compactions = 0;
  /// Commands the engine enqueued, and those of them its fast path took:
  /// every buffer in the steady state (engine.hpp: Engine::enqueue).
  std::uint64_t enqueues = 0;
  std::uint64_t fast_path = 0;
  /// Hidden-migration transfers tried again after failing (each source is
  /// tried up to 3 times: doc/runtime.md, failures).
  std::uint64_t transfer_retries = 0;
  /// Hidden migrations completed from another copy of their bytes after
  /// their own source kept failing (doc/runtime.md, failures).
  std::uint64_t copies_resourced = 0;
  /// Bytes whose content failures lost: a failed command's previous content
  /// was held nowhere any more (doc/runtime.md, failures). Undefined since.
  std::uint64_t bytes_lost = 0;
  std::vector<bufalloc::RegionStats> devices;  ///< each device's global-memory region (zeros for heap devices)
  /// Each device's heap (zeros for devices without a native allocator):
  /// native calls, bytes reserved vs in use, cache hits, trims, retries.
  std::vector<bufalloc::HeapStats> heaps;
};

struct ContextOptions {
  /// How devices with a native allocator (DeviceDriver::has_native_allocator)
  /// get their memory: segments of device_heap.segment_size from the driver,
  /// empty ones cached up to cache_cap (see bufalloc/device_heap.hpp). The
  /// granularity is raised to the device's base alignment. For the old
  /// behaviour, one native call per buffer: segment_size = granularity,
  /// cache_cap = 0.
  bufalloc::HeapOptions device_heap{};
  /// How long one enqueue may wait in all, over all its tries, for room on
  /// a full device (doc/runtime.md, memory pressure): for the work that
  /// holds the room (the write-backs of buffers being evicted, which wait
  /// for those buffers' queued commands), trying again as soon as any one
  /// of it has finished (memlayer/engine/room_wait.hpp). Those may wait for something this
  /// thread does only after the enqueue returns (a user event it sets):
  /// the limit turns that deadlock into an allocation failure
  /// (kMemObjectAllocationFailure).
  std::chrono::milliseconds room_wait{60000};
};

class Context {
 public:
  /// A context over these devices (at least one; at most 63 with their own
  /// memory). Errors: kInvalidValue naming the problem.
  /// Errors also: kInvalidValue when options.device_heap is invalid for a
  /// device (granularity not a power of two, sizes not multiples of it).
  static Result<std::shared_ptr<Context>> create(std::vector<std::unique_ptr<DeviceDriver>> devices,
                                                 const ContextOptions& options = {});
  ~Context();

  [[nodiscard]] std::size_t device_count() const;
  [[nodiscard]] const DeviceInfo& device_info(std::size_t device) const;

  /// OpenCL's clCreateBuffer: flags from mem::, host_ptr for USE_/COPY_HOST_PTR.
  /// Takes no device memory. Errors: kInvalidBufferSize (0), kInvalidValue
  /// (conflicting flags), kInvalidHostPtr (host_ptr missing or unexpected),
  /// kOutOfHostMemory.
  Result<Buffer> create_buffer(std::uint32_t flags, std::uint64_t size, void* host_ptr = nullptr);

  /// OpenCL's clCreateSubBuffer (region): flags inherit from the parent where
  /// absent. Errors: kInvalidMemObject (parent is a sub-buffer or empty),
  /// kInvalidValue (out of bounds, flags that contradict the parent's),
  /// kInvalidBufferSize (0), kMisalignedSubBufferOffset (origin not a
  /// multiple of every device's base alignment).
  Result<Buffer> create_sub_buffer(const Buffer& parent, std::uint32_t flags, std::uint64_t origin,
                                   std::uint64_t size);

  /// A queue on `device`. Errors: kInvalidDevice.
  Result<std::shared_ptr<Queue>> create_queue(std::size_t device, bool out_of_order = false);

  /// An event the host completes or fails with Event::set_user_status().
  Event create_user_event();

  [[nodiscard]] ContextStats stats() const;

  explicit Context(std::shared_ptr<detail::ContextState> state);
  [[nodiscard]] detail::ContextState& state() const { return *state_; }

 private:
  // Shared: buffers and queues keep the devices alive after the Context goes.
  std::shared_ptr<detail::ContextState> state_;
};

}  // namespace memlayer::runtime

// memlayer/runtime/queue.hpp — commands on one device.
//
// An in-order queue runs its commands one after another; an out-of-order
// queue only by their wait lists (and memlayer's own ordering of buffer
// accesses). Either way, memlayer orders conflicting accesses to the same
// bytes in enqueue order across all queues and devices, migrating what each
// command reads to its device first (see doc/migration.md).
//
// Every enqueue returns the command's Event, or fails with nothing enqueued
// and nothing changed: kInvalidValue / kInvalidMemObject / kInvalidOperation
// for bad arguments (named in the message), kInvalidEventWaitList for an
// empty event in the wait list, kMemObjectAllocationFailure when the device
// cannot hold a buffer even after evicting what it can, kOutOfHostMemory
// when host memory runs out (no exception comes out of an enqueue). Out of
// host memory, one case differs: a command whose list of waits, known only
// once memlayer has ordered it after the commands before it, needs more
// memory than was set aside (doc/runtime.md, host memory) is failed without
// running (its event ends with kOutOfHostMemory) and the enqueue returns
// that error: its bytes stay as they were, and a command another thread
// enqueued after it meanwhile fails as after any failed command.
//
// Thread-safety: any thread may enqueue on any queue at any time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "memlayer/migration/access.hpp"
#include "memlayer/runtime/buffer.hpp"
#include "memlayer/runtime/device_driver.hpp"
#include "memlayer/runtime/event.hpp"
#include "memlayer/runtime/rect.hpp"
#include "memlayer/runtime/status.hpp"

namespace memlayer::runtime {

namespace detail {
class ContextState;
struct QueueState;
}  // namespace detail

/// OpenCL's cl_map_flags values.
namespace map {
inline constexpr std::uint32_t kRead = 1u << 0;
inline constexpr std::uint32_t kWrite = 1u << 1;
inline constexpr std::uint32_t kWriteInvalidateRegion = 1u << 2;
}  // namespace map

struct KernelArg {
  Buffer buffer;
  /// read, write (may leave bytes unwritten) or read_write; overwrite only if
  /// the kernel writes every byte.
  migration::Access access = migration::Access::read_write;
};

class Queue {
 public:
  using WaitList = std::span<const Event>;

  Result<Event> enqueue_write(const Buffer& buffer, std::uint64_t offset, std::uint64_t size, const void* source,
                              bool blocking, WaitList wait = {});
  Result<Event> enqueue_read(const Buffer& buffer, std::uint64_t offset, std::uint64_t size, void* destination,
                             bool blocking, WaitList wait = {});
  /// Also within one buffer, and between sub-buffers of one parent; the
  /// ranges must not overlap (kMemCopyOverlap in OpenCL: kInvalidValue here).
  Result<Event> enqueue_copy(const Buffer& source, const Buffer& destination, std::uint64_t source_offset,
                             std::uint64_t destination_offset, std::uint64_t size, WaitList wait = {});
  Result<Event> enqueue_fill(const Buffer& buffer, const void* pattern, std::uint64_t pattern_size,
                             std::uint64_t offset, std::uint64_t size, WaitList wait = {});

  /// clEnqueueWriteBufferRect / clEnqueueReadBufferRect: a box of `region`
  /// (bytes per row, rows, slices) between the buffer, laid out by
  /// `buffer_layout` from the buffer's start, and host memory at `host`,
  /// laid out by `host_layout` (rect.hpp). Errors: kInvalidValue for a bad
  /// layout, a box beyond the buffer or a null pointer; kInvalidOperation
  /// for the buffer's host-access flags. Migration sees the box's bounding
  /// range: a read brings all of it, a write with gaps between its rows
  /// brings the gaps' stale bytes first (they stay valid), a gapless write
  /// brings nothing. The driver moves one row per call.
  Result<Event> enqueue_write_rect(const Buffer& buffer, const RectLayout& buffer_layout, const RectLayout& host_layout,
                                   const RectRegion& region, const void* source, bool blocking, WaitList wait = {});
  Result<Event> enqueue_read_rect(const Buffer& buffer, const RectLayout& buffer_layout, const RectLayout& host_layout,
                                  const RectRegion& region, void* destination, bool blocking, WaitList wait = {});
  /// clEnqueueCopyBufferRect. Within one buffer, or between sub-buffers of
  /// one parent, the two boxes must not share a byte (kInvalidValue; the
  /// check is exact: interleaved rows that do not touch are fine).
  Result<Event> enqueue_copy_rect(const Buffer& source, const Buffer& destination, const RectLayout& source_layout,
                                  const RectLayout& destination_layout, const RectRegion& region, WaitList wait = {});

  struct Mapping {
    void* pointer = nullptr;
    Event event;
  };
  /// Maps through the buffer's host copy (the user's memory for
  /// USE_HOST_PTR). kWrite and kRead|kWrite count as writes; a
  /// write-invalidate map transfers nothing.
  Result<Mapping> enqueue_map(const Buffer& buffer, std::uint32_t flags, std::uint64_t offset, std::uint64_t size,
                              bool blocking, WaitList wait = {});
  /// Errors: kInvalidValue if `pointer` is not a live mapping of `buffer`.
  Result<Event> enqueue_unmap(const Buffer& buffer, void* pointer, WaitList wait = {});

  /// Moves the buffers' content to this queue's device (or the host); with
  /// content_undefined, drops it instead.
  Result<Event> enqueue_migrate(std::span<const Buffer> buffers, bool to_host, bool content_undefined,
                                WaitList wait = {});

  /// Runs `kernel` on this device with the buffers' device pointers; the same
  /// buffer may appear twice (a writable use makes it a write).
  Result<Event> enqueue_kernel(KernelFunction kernel, std::span<const KernelArg> args, WaitList wait = {});
  /// The same with local-memory arguments of the given sizes (their pointers
  /// follow the buffers'). Errors: kOutOfResources when they do not fit in
  /// the device's local memory, kInvalidKernelArgs for a size of 0.
  Result<Event> enqueue_kernel(KernelFunction kernel, std::span<const KernelArg> args,
                               std::span<const std::uint64_t> local_sizes, WaitList wait = {});

  Result<Event> enqueue_marker(WaitList wait = {});
  Result<Event> enqueue_barrier(WaitList wait = {});
  /// Commands are submitted as soon as they are ready: nothing to flush.
  Status flush();
  /// Waits for every command enqueued so far; their first failure, if any.
  Status finish();

  [[nodiscard]] std::size_t device() const;
  [[nodiscard]] bool out_of_order() const;

  explicit Queue(std::unique_ptr<detail::QueueState> state);
  ~Queue();

 private:
  std::unique_ptr<detail::QueueState> state_;
};

}  // namespace memlayer::runtime

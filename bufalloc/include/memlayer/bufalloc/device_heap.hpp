// memlayer/bufalloc/device_heap.hpp — device memory from a few large native
// allocations, handed out in pieces at bufalloc speed.
//
// A device's native allocator (cudaMalloc, clCreateBuffer, a driver's own)
// is slow and its cost grows with the size; calling it per buffer or per
// launch is where runtimes lose time. A DeviceHeap calls it rarely: it
// obtains segments — one chunk up front (MAM's design) and/or more of
// `segment_size` as it runs out (a request larger than that gets a segment
// of its own) — and sub-allocates from each with a Region (TLSF, O(1)).
//
// Segments that become empty stay cached for the next allocation and go
// back to the driver when the cached bytes pass `cache_cap`, when they
// have been idle longer than `max_idle`, or on demand (trim()).
//
// When an allocation cannot be served (the out-of-memory ladder):
//   1. a segment with room serves it; else a new segment is requested;
//   2. if the driver refuses, empty cached segments are released to it,
//      smallest first, retrying after each;
//   3. then the pressure handler (the runtime's eviction: it frees blocks
//      of this heap) is asked, and the ladder starts again while it makes
//      progress;
//   4. only then allocate() fails with out_of_memory.
// Like a Region, the heap never touches the memory it manages: addresses
// are numbers the driver gave it.
//
// Thread-safety: every member function may be called from any thread; one
// mutex per heap, held for each call, native calls included, and released
// around the pressure handler (which may call free()). The handler must not
// call allocate() on the same heap.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "memlayer/bufalloc/region.hpp"

namespace memlayer::bufalloc {

/// The driver's native allocator, as two callbacks.
struct NativeAllocator {
  /// A new segment of exactly `size` bytes, its base a multiple of the
  /// heap's granularity; std::nullopt when the device has no memory for it.
  std::function<std::optional<Address>(Size size)> allocate;
  /// Gives back a segment allocate() returned.
  std::function<void(Address base, Size size)> release;
  /// Optional: whether an empty segment may go back now. A runtime whose
  /// freed storage can still be read by work in flight (an eviction's
  /// write-back) says no until that work is done; the segment then stays
  /// cached, its space reusable, and goes back at a later free, trim or
  /// out-of-memory step. Empty: always. Called under the heap's lock.
  std::function<bool(Address base, Size size)> releasable;
};

struct HeapOptions {
  /// Block granularity (a power of two: the device's base-address alignment).
  Size granularity = 256;
  /// The growth unit (a multiple of granularity). 0: never grow beyond the
  /// initial chunk (MAM).
  Size segment_size = Size{64} << 20;
  /// A chunk obtained at create() (a multiple of granularity; 0: none). It
  /// is kept when empty, except on demand (trim) and in the out-of-memory
  /// ladder.
  Size initial_size = 0;
  /// Empty segments cached at most (bytes); beyond, the oldest go back.
  Size cache_cap = Size{256} << 20;
  /// Empty segments idle longer than this go back (checked at each
  /// allocate and free); zero: no age limit.
  std::chrono::steady_clock::duration max_idle{0};
};

struct HeapStats {
  Size reserved_bytes = 0;       ///< bytes in segments obtained from the driver
  Size used_bytes = 0;           ///< bytes in live blocks (rounded to the granularity)
  Size cached_bytes = 0;         ///< bytes in empty segments
  Size peak_reserved_bytes = 0;
  std::uint64_t segments = 0;
  std::uint64_t empty_segments = 0;
  std::uint64_t live_blocks = 0;
  std::uint64_t allocations = 0;     ///< successful allocate() calls
  std::uint64_t failed_requests = 0; ///< allocate() calls that returned out_of_memory
  std::uint64_t native_allocations = 0;  ///< segments obtained (initial chunk included)
  std::uint64_t native_failures = 0;     ///< segment requests the driver refused
  std::uint64_t native_releases = 0;     ///< segments given back
  std::uint64_t cache_hits = 0;      ///< allocations served by a cached empty segment
  std::uint64_t trims = 0;           ///< segments given back by cap, age or trim()
  Size trimmed_bytes = 0;
  std::uint64_t retries = 0;         ///< segment requests retried after releasing cached segments
  std::uint64_t pressure_calls = 0;  ///< times the pressure handler was asked
};

class DeviceHeap {
 public:
  /// Errors: invalid_argument (a callback missing, segment_size and
  /// initial_size both 0, sizes not multiples of the granularity),
  /// granularity_not_power_of_two, out_of_memory (the initial chunk was
  /// refused). Complexity O(1) plus one native call for the initial chunk.
  static Result<std::unique_ptr<DeviceHeap>> create(NativeAllocator native, HeapOptions options = {});
  ~DeviceHeap();  ///< gives every segment back (live blocks or not)
  DeviceHeap(const DeviceHeap&) = delete;
  DeviceHeap& operator=(const DeviceHeap&) = delete;

 private:
  struct PrivateTag {
    explicit PrivateTag() = default;
  };

 public:
  DeviceHeap(PrivateTag, NativeAllocator native, HeapOptions options);  ///< use create()

  /// The runtime's eviction, asked in step 3 of the ladder with the bytes
  /// the request needs; it returns whether it freed anything. Runs without
  /// the heap's lock; it may call free(), not allocate().
  void set_pressure_handler(std::function<bool(Size needed)> handler);

  /// `size` bytes at a multiple of `alignment` (0: the granularity), as the
  /// handle of the segment's Region (region.hpp): free it with free(handle).
  /// Errors: zero_size, size_overflow, alignment_not_power_of_two,
  /// alignment_overflow, out_of_memory (size, alignment, free bytes in the
  /// segments and their largest free block). A failure leaves the heap as it
  /// was, save for released cached segments and what the handler freed.
  /// Complexity O(segments) to find room (a few), plus native calls when
  /// it grows.
  Result<BlockHandle> allocate(Size size, Size alignment = 0);

  /// Frees a block allocate() returned, by its handle. Errors (nothing
  /// changes): foreign_handle (its address is in no segment, or its segment's
  /// region did not issue it), double_free, stale_handle (see Region::free).
  /// Complexity O(log segments) to find the segment by the handle's address,
  /// then O(1); a segment it empties may go back to the driver (cap, age).
  Result<void> free(BlockHandle block);

  /// Frees a block by its address alone, through its segment's Region's
  /// address index (built at the segment's first such call: see
  /// Region::free(Address)). Errors: address_outside_region (in no segment),
  /// not_block_start, double_free. Complexity O(log segments) plus the
  /// region's free by address.
  Result<void> free(Address address);

  /// Gives back empty segments until at most `keep_bytes` stay cached,
  /// oldest first, the initial chunk too. Returns the bytes given back.
  Size trim(Size keep_bytes = 0);

  /// Gives back empty segments idle for longer than `age` (the initial
  /// chunk too). Returns the bytes given back.
  Size trim_idle(std::chrono::steady_clock::duration age);

  [[nodiscard]] HeapStats stats() const;
  [[nodiscard]] Size granularity() const noexcept { return options_.granularity; }

 private:
  struct Segment;
  void add_segment(std::unique_ptr<Segment> s);
  Result<BlockHandle> try_segments(Size size, Size alignment);
  bool grow(Size size, Size alignment);
  Size release_empty(std::function<bool(const Segment&)> which, bool count_as_trim);
  void release_segment(Segment* s);
  [[nodiscard]] bool releasable(const Segment& s) const;
  void after_free(std::chrono::steady_clock::time_point now);
  [[nodiscard]] Segment* segment_of(Address address) const;
  void after_block_freed(Segment& s);
  [[nodiscard]] HeapStats stats_locked() const;

  NativeAllocator native_;
  HeapOptions options_;
  std::function<bool(Size)> pressure_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Segment>> segments_;  // in the order obtained
  std::map<Address, Segment*> by_base_;
  HeapStats counters_;  // counters and reserved bytes; the other sizes are computed in stats()
};

}  // namespace memlayer::bufalloc

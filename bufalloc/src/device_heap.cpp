// DeviceHeap: segments from the driver, blocks from a Region per segment.
#include "memlayer/bufalloc/device_heap.hpp"

#include <algorithm>
#include <utility>

namespace memlayer::bufalloc {

namespace {

using Clock = std::chrono::steady_clock;

bool power_of_two(Size v) { return v != 0 && (v & (v - 1)) == 0; }

// Rounds up to a multiple of the power of two g; false on overflow.
bool round_up(Size v, Size g, Size& out) {
  if (v > ~Size{0} - (g - 1)) return false;
  out = (v + g - 1) & ~(g - 1);
  return true;
}

Error invalid(Size size = 0) { return Error{Errc::invalid_argument, size, 0, 0, 0, 0}; }

}  // namespace

struct DeviceHeap::Segment {
  // A constructor, not aggregate init: clang 14 lacks C++20 parenthesised aggregate init for make_unique.
  Segment(Address b, Size s, Region r, bool init, Clock::time_point since)
      : base(b), size(s), region(std::move(r)), initial(init), empty_since(since) {}
  Address base;
  Size size;
  Region region;
  bool initial;
  Clock::time_point empty_since;
  bool cached = false;  // emptied by free(): the next block from it is a cache hit
  [[nodiscard]] bool empty() const { return region.stats().live_blocks == 0; }
};

DeviceHeap::DeviceHeap(PrivateTag, NativeAllocator native, HeapOptions options)
    : native_(std::move(native)), options_(options) {}

void DeviceHeap::add_segment(std::unique_ptr<Segment> s) {
  by_base_[s->base] = s.get();
  counters_.reserved_bytes += s->size;
  counters_.peak_reserved_bytes = std::max(counters_.peak_reserved_bytes, counters_.reserved_bytes);
  ++counters_.native_allocations;
  segments_.push_back(std::move(s));
}

DeviceHeap::~DeviceHeap() {
  for (auto& s : segments_) native_.release(s->base, s->size);
}

Result<std::unique_ptr<DeviceHeap>> DeviceHeap::create(NativeAllocator native, HeapOptions options) {
  if (!power_of_two(options.granularity)) return Error{Errc::granularity_not_power_of_two, 0, 0, 0, 0, 0};
  if (!native.allocate || !native.release) return invalid();
  if (options.segment_size == 0 && options.initial_size == 0) return invalid();
  if (options.segment_size % options.granularity != 0) return invalid(options.segment_size);
  if (options.initial_size % options.granularity != 0) return invalid(options.initial_size);
  auto heap = std::make_unique<DeviceHeap>(PrivateTag{}, std::move(native), options);
  if (options.initial_size > 0) {
    std::optional<Address> base = heap->native_.allocate(options.initial_size);
    if (!base) return Error{Errc::out_of_memory, options.initial_size, 0, 0, 0, 0};
    auto region = Region::create(*base, options.initial_size, RegionOptions{options.granularity});
    if (!region) {
      heap->native_.release(*base, options.initial_size);
      return region.error();
    }
    heap->add_segment(std::make_unique<Segment>(*base, options.initial_size, std::move(region).value(), true,
                                                Clock::now()));
  }
  return heap;
}

void DeviceHeap::set_pressure_handler(std::function<bool(Size)> handler) {
  std::lock_guard lock(mutex_);
  pressure_ = std::move(handler);
}

// Newest segment first: it is the likeliest to have room.
Result<BlockHandle> DeviceHeap::try_segments(Size size, Size alignment) {
  Error last{Errc::out_of_memory, size, alignment, 0, 0, 0};
  for (auto it = segments_.rbegin(); it != segments_.rend(); ++it) {
    Segment& s = **it;
    auto r = s.region.allocate(size, alignment);
    if (r) {
      if (s.cached) ++counters_.cache_hits;
      s.cached = false;
      return r;
    }
    if (r.error().code != Errc::out_of_memory) return r.error();  // a bad request, not a full heap
    last.free_bytes += r.error().free_bytes;
    last.largest_free = std::max(last.largest_free, r.error().largest_free);
  }
  return last;
}

// One new segment that can hold the request (its own size when larger than
// segment_size). False when the driver refuses or growth is off.
bool DeviceHeap::grow(Size size, Size alignment) {
  if (options_.segment_size == 0) return false;
  Size need = 0;
  const Size pad = alignment > options_.granularity ? alignment : 0;
  if (!round_up(size, options_.granularity, need) || need > ~Size{0} - pad) return false;
  need = std::max(need + pad, options_.segment_size);
  std::optional<Address> base = native_.allocate(need);
  if (!base) {
    ++counters_.native_failures;
    return false;
  }
  auto region = Region::create(*base, need, RegionOptions{options_.granularity});
  if (!region) {  // a misaligned base from the driver: give it back
    native_.release(*base, need);
    ++counters_.native_failures;
    return false;
  }
  add_segment(std::make_unique<Segment>(*base, need, std::move(region).value(), false, Clock::now()));
  return true;
}

void DeviceHeap::release_segment(Segment* s) {
  native_.release(s->base, s->size);
  ++counters_.native_releases;
  counters_.reserved_bytes -= s->size;
  by_base_.erase(s->base);
  segments_.erase(std::find_if(segments_.begin(), segments_.end(), [s](const auto& p) { return p.get() == s; }));
}

bool DeviceHeap::releasable(const Segment& s) const {
  return s.empty() && (!native_.releasable || native_.releasable(s.base, s.size));
}

// Releases the empty segments `which` selects, oldest-empty first.
Size DeviceHeap::release_empty(std::function<bool(const Segment&)> which, bool count_as_trim) {
  std::vector<Segment*> empty;
  for (auto& s : segments_)
    if (releasable(*s)) empty.push_back(s.get());
  std::sort(empty.begin(), empty.end(), [](const Segment* a, const Segment* b) { return a->empty_since < b->empty_since; });
  Size released = 0;
  for (Segment* s : empty) {
    if (!which(*s)) continue;
    released += s->size;
    if (count_as_trim) {
      ++counters_.trims;
      counters_.trimmed_bytes += s->size;
    }
    release_segment(s);
  }
  return released;
}

Result<BlockHandle> DeviceHeap::allocate(Size size, Size alignment) {
  // Refused before anything grows for it.
  if (size == 0) return Error{Errc::zero_size, size, alignment, 0, 0, 0};
  if (alignment != 0 && !power_of_two(alignment)) return Error{Errc::alignment_not_power_of_two, size, alignment, 0, 0, 0};
  std::unique_lock lock(mutex_);
  // The handler may report progress that never makes room: ask it a bounded
  // number of times.
  constexpr int kMaxPressureRounds = 64;
  for (int round = 0;; ++round) {
    if (options_.max_idle.count() > 0) after_free(Clock::now());
    auto r = try_segments(size, alignment);
    if (r || r.error().code != Errc::out_of_memory) {
      if (r) ++counters_.allocations;
      return r;
    }
    if (grow(size, alignment)) continue;
    // The driver refused: give back cached segments, smallest first, and
    // ask again after each.
    bool grown = false;
    for (;;) {
      Segment* smallest = nullptr;
      for (auto& s : segments_)
        if (releasable(*s) && (smallest == nullptr || s->size < smallest->size)) smallest = s.get();
      if (smallest == nullptr) break;
      release_segment(smallest);
      ++counters_.retries;
      if (grow(size, alignment)) {
        grown = true;
        break;
      }
    }
    if (grown) continue;
    // Then the runtime: evict, and try everything again while it helps.
    std::function<bool(Size)> handler = pressure_;
    if (handler && round < kMaxPressureRounds) {
      ++counters_.pressure_calls;
      lock.unlock();
      const bool freed = handler(size);
      lock.lock();
      if (freed) continue;
    }
    ++counters_.failed_requests;
    Error e = r.error();
    return e;
  }
}

void DeviceHeap::after_free(Clock::time_point now) {
  // Age first, then the cap; the initial chunk stays.
  if (options_.max_idle.count() > 0)
    release_empty([&](const Segment& s) { return !s.initial && now - s.empty_since > options_.max_idle; }, true);
  Size cached = 0;
  for (auto& s : segments_)
    if (s->empty() && !s->initial) cached += s->size;
  if (cached > options_.cache_cap)
    release_empty(
        [&](const Segment& s) {
          if (s.initial || cached <= options_.cache_cap) return false;
          cached -= s.size;
          return true;
        },
        true);
}

// The segment holding `address`, or nullptr. O(log segments).
DeviceHeap::Segment* DeviceHeap::segment_of(Address address) const {
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return nullptr;
  Segment* s = std::prev(it)->second;
  return address - s->base < s->size ? s : nullptr;
}

void DeviceHeap::after_block_freed(Segment& s) {
  if (!s.empty()) return;
  const auto now = Clock::now();
  s.empty_since = now;
  s.cached = true;
  after_free(now);
}

Result<void> DeviceHeap::free(BlockHandle block) {
  std::lock_guard lock(mutex_);
  Segment* s = segment_of(block.address);
  if (s == nullptr) return Error{Errc::foreign_handle, 0, 0, block.address, 0, 0};
  auto r = s->region.free(block);
  if (r) after_block_freed(*s);
  return r;
}

Result<void> DeviceHeap::free(Address address) {
  std::lock_guard lock(mutex_);
  Segment* s = segment_of(address);
  if (s == nullptr) return Error{Errc::address_outside_region, 0, 0, address, 0, 0};
  auto r = s->region.free(address);
  if (r) after_block_freed(*s);
  return r;
}

Size DeviceHeap::trim(Size keep_bytes) {
  std::lock_guard lock(mutex_);
  Size cached = 0;
  for (auto& s : segments_)
    if (s->empty()) cached += s->size;
  return release_empty(
      [&](const Segment& s) {
        if (cached <= keep_bytes) return false;
        cached -= s.size;
        return true;
      },
      true);
}

Size DeviceHeap::trim_idle(std::chrono::steady_clock::duration age) {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  return release_empty([&](const Segment& s) { return now - s.empty_since > age; }, true);
}

HeapStats DeviceHeap::stats_locked() const {
  HeapStats h = counters_;
  h.used_bytes = h.cached_bytes = 0;
  h.segments = segments_.size();
  h.empty_segments = h.live_blocks = 0;
  for (const auto& s : segments_) {
    const RegionStats r = s->region.stats();
    h.used_bytes += r.used_bytes;
    h.live_blocks += r.live_blocks;
    if (r.live_blocks == 0) {
      ++h.empty_segments;
      h.cached_bytes += s->size;
    }
  }
  return h;
}

HeapStats DeviceHeap::stats() const {
  std::lock_guard lock(mutex_);
  return stats_locked();
}

}  // namespace memlayer::bufalloc

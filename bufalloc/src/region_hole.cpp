// RegionCore::cheapest_hole(): which live blocks to free so that a request
// fits (region.hpp). For eviction, off the hot path, so it lives apart from
// region_core.cpp.
#include <limits>
#include <optional>

#include "region_core.hpp"

namespace memlayer::bufalloc::detail {

namespace {

// Whether [start, end) holds `asize` bytes at an address that is a multiple
// of `align`, without overflow: the padding is below `align`, and the
// region never reaches 2^64-1 (Region::create()).
bool holds(Address start, Address end, Size asize, Size align) noexcept {
  const Size pad = (align - (start & (align - 1))) & (align - 1);
  const Size span = end - start;
  return span >= asize && span - asize >= pad;
}

}  // namespace

// One pass in address order. The run ends at block `last` and starts at
// `first`, the latest start from which it still holds the request: freeing
// fewer blocks never costs more, and a run that holds the request still
// holds it when it grows, so `first` only ever moves forward. A live block
// `evictable` refuses ends every run before it: the next starts after it.
Result<Hole> RegionCore::cheapest_hole(Size size, Size alignment, const std::function<std::optional<std::uint64_t>(const BlockInfo&)>& evictable,
                                       const std::function<void(const BlockInfo&)>& visit) const {
  const auto request = checked_request(size, alignment);
  if (!request) return request.error();
  const auto [asize, align] = request.value();

  auto end_of = [&](RecordIndex i) { return address_of(records_[records_[i].next_phys]); };
  auto live = [&](RecordIndex i) { return records_[i].kind() != RecordKind::free; };
  struct Run {
    RecordIndex first = kSentinel, last = kSentinel;
    Size live_bytes = 0;
    std::uint64_t live_blocks = 0, weight = 0;
    [[nodiscard]] bool cheaper_than(const Run& o) const noexcept {
      if (o.first == kSentinel) return true;
      if (live_bytes != o.live_bytes) return live_bytes < o.live_bytes;
      return live_blocks != o.live_blocks ? live_blocks < o.live_blocks : weight < o.weight;
    }
  };
  Run best, run;
  run.first = records_[kSentinel].next_phys;
  for (RecordIndex last = run.first; last != kSentinel; last = records_[last].next_phys) {
    if (live(last)) {
      const BlockInfo b = info_of(last);
      const std::optional<std::uint64_t> weight = evictable(b);
      if (!weight) {
        run = Run{records_[last].next_phys};
        continue;
      }
      run.live_bytes += b.size;
      ++run.live_blocks;
      run.weight += *weight;
    }
    const Address end = end_of(last);
    for (RecordIndex next = records_[run.first].next_phys;
         run.first != last && holds(address_of(records_[next]), end, asize, align); next = records_[next].next_phys) {
      if (live(run.first)) {
        // Asked again rather than remembered: remembering the run's weights
        // would allocate.
        const BlockInfo b = info_of(run.first);
        run.live_bytes -= b.size;
        --run.live_blocks;
        run.weight -= evictable(b).value_or(0);
      }
      run.first = next;
    }
    if (!holds(address_of(records_[run.first]), end, asize, align)) continue;
    run.last = last;
    if (run.cheaper_than(best)) best = run;
  }
  if (best.first == kSentinel)
    return Error{Errc::no_hole, size, alignment, 0, size_ - (used_units_ << glog_), largest_free()};
  for (RecordIndex i = best.first;; i = records_[i].next_phys) {
    if (live(i)) visit(info_of(i));
    if (i == best.last) break;
  }
  const Address start = address_of(records_[best.first]);
  return Hole{start, end_of(best.last) - start, best.live_bytes, best.live_blocks, best.weight};
}

}  // namespace memlayer::bufalloc::detail

#include "global_memory.hpp"

#include <algorithm>

namespace memlayer::runtime::detail {

namespace {
bool finished(const std::shared_ptr<EventState>& e) { return e->status() <= cl::kComplete; }
bool overlaps(DeviceAddress a, std::uint64_t an, DeviceAddress b, std::uint64_t bn) { return a < b + bn && b < a + an; }
}  // namespace

GlobalMemory::GlobalMemory(DeviceDriver& driver, const bufalloc::HeapOptions& heap_options) : driver_(driver) {
  const DeviceInfo& info = driver.info();
  if (info.shares_host_memory) return;
  if (!driver.has_native_allocator()) {
    auto made = bufalloc::Region::create(driver.memory_base(), info.global_mem_size,
                                         bufalloc::RegionOptions{info.base_alignment});
    if (made) region_.emplace(std::move(made).value());
    else setup_error_ = info.name + ": global memory: " + made.error().message();
    return;
  }
  bufalloc::HeapOptions options = heap_options;
  options.granularity = std::max<std::uint64_t>(options.granularity, info.base_alignment);
  // A segment larger than the device could never be obtained.
  const std::uint64_t whole = info.global_mem_size & ~(options.granularity - 1);
  if (whole > 0 && options.segment_size > whole) options.segment_size = whole;
  cache_cap_ = options.cache_cap;
  bufalloc::NativeAllocator native;
  native.allocate = [this](bufalloc::Size size) { return driver_.native_allocate(size); };
  native.release = [this](bufalloc::Address base, bufalloc::Size size) { driver_.native_release(base, size); };
  // Never while an eviction's write-back may still read from it.
  native.releasable = [this](bufalloc::Address base, bufalloc::Size size) { return !fenced(base, size); };
  auto made = bufalloc::DeviceHeap::create(std::move(native), options);
  if (made) heap_ = std::move(made).value();
  else setup_error_ = info.name + ": device heap: " + made.error().message();
}

GlobalMemory::~GlobalMemory() {
  quarantine_.clear();  // the device is idle: every fence has completed
  heap_.reset();        // gives every segment back
}

void GlobalMemory::collect() {
  const std::size_t before = quarantine_.size();
  std::erase_if(quarantine_, [](const Quarantine& q) { return finished(q.fence); });
  // Segments held back for those fences may go now, down to the cap.
  if (heap_ && quarantine_.size() != before) heap_->trim(cache_cap_);
}

bufalloc::Result<bufalloc::BlockHandle> GlobalMemory::allocate(std::uint64_t size, std::uint64_t alignment) {
  collect();
  if (region_) return region_->allocate(size, alignment);
  if (heap_) return heap_->allocate(size, alignment);
  return bufalloc::Error{bufalloc::Errc::out_of_memory, size, alignment, 0, 0, 0};
}

bufalloc::Result<bufalloc::Hole> GlobalMemory::cheapest_hole(
    std::uint64_t size, std::uint64_t alignment,
    const std::function<std::optional<std::uint64_t>(const bufalloc::BlockInfo&)>& evictable,
    const std::function<void(const bufalloc::BlockInfo&)>& visit) const {
  if (region_) return region_->cheapest_hole(size, alignment, evictable, visit);
  return bufalloc::Error{bufalloc::Errc::no_hole, size, alignment};
}

void GlobalMemory::free(const bufalloc::BlockHandle& block, bool promised) noexcept {
  if (promised) --promised_;
  if (region_) (void)region_->free(block);
  else if (heap_) (void)heap_->free(block);
}

void GlobalMemory::promise_quarantine() {
  // Geometrically: one at a time would copy the list at every placement.
  const std::size_t needed = quarantine_.size() + promised_ + 1;
  if (needed > quarantine_.capacity()) quarantine_.reserve(std::max<std::size_t>(needed, 2 * quarantine_.capacity()));
  ++promised_;
}

void GlobalMemory::free_after(const bufalloc::BlockHandle& block, std::uint64_t size,
                              std::shared_ptr<EventState> fence) noexcept {
  // Quarantine first: freeing may hand the segment back, and that must see it.
  quarantine_.push_back({block.address, size, std::move(fence)});  // promised: within capacity
  free(block, true);
}

bool GlobalMemory::fenced(DeviceAddress address, std::uint64_t size) const noexcept {
  return std::any_of(quarantine_.begin(), quarantine_.end(), [&](const Quarantine& q) {
    return !finished(q.fence) && overlaps(address, size, q.address, q.size);
  });
}

std::vector<std::shared_ptr<EventState>> GlobalMemory::fences_over(DeviceAddress address, std::uint64_t size) {
  std::vector<std::shared_ptr<EventState>> out;
  for (const Quarantine& q : quarantine_)
    if (!finished(q.fence) && overlaps(address, size, q.address, q.size)) out.push_back(q.fence);
  return out;
}

bufalloc::RegionStats GlobalMemory::region_stats() const { return region_ ? region_->stats() : bufalloc::RegionStats{}; }
bufalloc::HeapStats GlobalMemory::heap_stats() const { return heap_ ? heap_->stats() : bufalloc::HeapStats{}; }

}  // namespace memlayer::runtime::detail

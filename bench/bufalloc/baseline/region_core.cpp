// Baseline copy for memlayer-bench-bufalloc only: see baseline/region_core.hpp.
#include "region_core.hpp"

#include <bit>
#include <limits>

namespace memlayer::bench::baseline {

namespace {
constexpr Size kMax = std::numeric_limits<Size>::max();

// Padding that brings `addr` up to a multiple of `alignment` (a power of two).
constexpr Size pad_for(Address addr, Size alignment) noexcept { return (0 - addr) & (alignment - 1); }
}  // namespace

RegionCore::RegionCore(Address base, Size usable, unsigned granularity_log2)
    : base_(base), size_(usable), glog_(granularity_log2) {
  init_space();
}

void RegionCore::init_space() {
  fl_bitmap_ = 0;
  sl_bitmap_.fill(0);
  for (auto& row : heads_) row.fill(nullptr);
  pool_.clear();
  index_.clear();
  first_ = pool_.acquire();
  *first_ = Block{base_, size_, nullptr, nullptr, nullptr, nullptr, 0, 0, true};
  used_ = 0;
  live_ = 0;
  free_count_ = 0;
  largest_cache_ = 0;
  largest_valid_ = true;
  insert_free(first_);
}

void RegionCore::insert_free(Block* b) noexcept {
  const SizeClass c = class_of(units(b->size));
  Block*& head = heads_[c.fl][c.sl];
  b->fl = static_cast<std::uint16_t>(c.fl);
  b->sl = static_cast<std::uint8_t>(c.sl);
  b->is_free = true;
  b->prev_free = nullptr;
  b->next_free = head;
  if (head != nullptr) head->prev_free = b;
  head = b;
  sl_bitmap_[c.fl] |= 1u << c.sl;
  fl_bitmap_ |= std::uint64_t{1} << c.fl;
  ++free_count_;
  if (largest_valid_ && b->size > largest_cache_) largest_cache_ = b->size;
}

void RegionCore::remove_free(Block* b) noexcept {
  if (b->prev_free != nullptr) {
    b->prev_free->next_free = b->next_free;
  } else {
    heads_[b->fl][b->sl] = b->next_free;
    if (b->next_free == nullptr) {
      sl_bitmap_[b->fl] &= ~(1u << b->sl);
      if (sl_bitmap_[b->fl] == 0) fl_bitmap_ &= ~(std::uint64_t{1} << b->fl);
    }
  }
  if (b->next_free != nullptr) b->next_free->prev_free = b->prev_free;
  b->is_free = false;
  --free_count_;
  if (b->size == largest_cache_) largest_valid_ = false;
}

// The O(1) good-fit search: first non-empty class at or above the class that
// guarantees `search_units`. Any block there fits.
Block* RegionCore::find_fast(std::uint64_t search_units) const noexcept {
  const auto at_least = class_at_least(search_units);
  if (!at_least) return nullptr;
  unsigned fl = at_least->fl;
  std::uint32_t sl_map = sl_bitmap_[fl] & (~0u << at_least->sl);
  if (sl_map == 0) {
    if (fl + 1 >= kFlCount) return nullptr;
    const std::uint64_t fl_map = fl_bitmap_ & (~std::uint64_t{0} << (fl + 1));
    if (fl_map == 0) return nullptr;
    fl = static_cast<unsigned>(std::countr_zero(fl_map));
    sl_map = sl_bitmap_[fl];
  }
  return heads_[fl][static_cast<unsigned>(std::countr_zero(sl_map))];
}

// The fallback: every free block that could hold asize lives in its class or
// above; scan those lists for the smallest block that fits with its real
// alignment padding. Runs only when find_fast failed, i.e. the classes it
// covers are empty, so in practice this scans one or two lists.
Block* RegionCore::find_best(Size asize, Size alignment) const noexcept {
  const SizeClass start = class_of(units(asize));
  Block* best = nullptr;
  for (unsigned fl = start.fl; fl < kFlCount; ++fl) {
    if ((fl_bitmap_ >> fl & 1) == 0) continue;
    std::uint32_t sl_map = sl_bitmap_[fl];
    if (fl == start.fl) sl_map &= ~0u << start.sl;
    while (sl_map != 0) {
      const unsigned sl = static_cast<unsigned>(std::countr_zero(sl_map));
      sl_map &= sl_map - 1;
      for (Block* b = heads_[fl][sl]; b != nullptr; b = b->next_free) {
        const Size pad = pad_for(b->addr, alignment);
        if (pad > b->size || b->size - pad < asize) continue;
        if (best == nullptr || b->size < best->size) {
          best = b;
          if (b->size - pad == asize) return best;  // cannot do better
        }
      }
    }
    if (best != nullptr) return best;  // higher classes only hold bigger blocks
  }
  return best;
}

// Turns free block b into a live block of asize bytes at the first aligned
// address in it; the padding before and the rest after become free blocks.
Address RegionCore::carve(Block* b, Size asize, Size alignment) {
  remove_free(b);
  const Size pad = pad_for(b->addr, alignment);
  if (pad != 0) {
    Block* lead = pool_.acquire();
    *lead = Block{b->addr, pad, b->prev_phys, b, nullptr, nullptr, 0, 0, true};
    if (b->prev_phys != nullptr) {
      b->prev_phys->next_phys = lead;
    } else {
      first_ = lead;
    }
    b->prev_phys = lead;
    b->addr += pad;
    b->size -= pad;
    insert_free(lead);
  }
  if (b->size > asize) {
    Block* tail = pool_.acquire();
    *tail = Block{b->addr + asize, b->size - asize, b, b->next_phys, nullptr, nullptr, 0, 0, true};
    if (b->next_phys != nullptr) b->next_phys->prev_phys = tail;
    b->next_phys = tail;
    b->size = asize;
    insert_free(tail);
  }
  index_.insert(b->addr, b);
  used_ += asize;
  if (used_ > peak_) peak_ = used_;
  ++live_;
  return b->addr;
}

Result<Address> RegionCore::allocate(Size size, Size alignment) {
  const Size g = granularity();
  if (size == 0) return Error{Errc::zero_size, size, alignment};
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return Error{Errc::alignment_not_power_of_two, size, alignment};
  if (size > kMax - (g - 1)) return Error{Errc::size_overflow, size, alignment};
  const Size asize = (size + g - 1) & ~(g - 1);
  const Size align = alignment > g ? alignment : g;
  const Size worst_pad = align - g;
  if (asize > kMax - worst_pad) return Error{Errc::alignment_overflow, size, alignment};

  if (asize <= size_) {
    if (Block* b = find_fast(units(asize + worst_pad))) return carve(b, asize, align);
    ++slow_;
    if (Block* b = find_best(asize, align)) return carve(b, asize, align);
  }
  return oom(size, alignment);
}

Error RegionCore::oom(Size size, Size alignment) {
  ++failed_;
  return Error{Errc::out_of_memory, size, alignment, 0, size_ - used_, largest_free()};
}

Result<void> RegionCore::free(Address address) {
  Block* b = index_.erase(address);
  if (b == nullptr) return free_error(address);
  used_ -= b->size;
  --live_;
  if (Block* prev = b->prev_phys; prev != nullptr && prev->is_free) {
    remove_free(prev);
    prev->size += b->size;
    prev->next_phys = b->next_phys;
    if (b->next_phys != nullptr) b->next_phys->prev_phys = prev;
    pool_.release(b);
    b = prev;
  }
  if (Block* next = b->next_phys; next != nullptr && next->is_free) {
    remove_free(next);
    b->size += next->size;
    b->next_phys = next->next_phys;
    if (next->next_phys != nullptr) next->next_phys->prev_phys = b;
    pool_.release(next);
  }
  insert_free(b);
  return {};
}

// Off the hot path: a bad free is a caller bug, worth an exact diagnosis.
Error RegionCore::free_error(Address address) const noexcept {
  Error e{Errc::address_outside_region};
  e.address = address;
  if (address < base_ || address - base_ >= size_) return e;
  for (const Block* b = first_; b != nullptr; b = b->next_phys) {
    if (address - b->addr < b->size) {
      e.code = b->is_free ? Errc::double_free : Errc::not_block_start;
      return e;
    }
  }
  return e;  // unreachable while the blocks tile the space
}

void RegionCore::reset() { init_space(); }

Size RegionCore::largest_free() const noexcept {
  if (!largest_valid_) {
    largest_cache_ = 0;
    if (fl_bitmap_ != 0) {
      const unsigned fl = 63u - static_cast<unsigned>(std::countl_zero(fl_bitmap_));
      const unsigned sl = 31u - static_cast<unsigned>(std::countl_zero(sl_bitmap_[fl]));
      for (const Block* b = heads_[fl][sl]; b != nullptr; b = b->next_free)
        if (b->size > largest_cache_) largest_cache_ = b->size;
    }
    largest_valid_ = true;
  }
  return largest_cache_;
}

RegionStats RegionCore::stats() const {
  RegionStats s;
  s.total_bytes = size_;
  s.used_bytes = used_;
  s.free_bytes = size_ - used_;
  s.largest_free = largest_free();
  s.peak_used_bytes = peak_;
  s.live_blocks = live_;
  s.free_blocks = free_count_;
  s.failed_requests = failed_;
  s.slow_searches = slow_;
  return s;
}

void RegionCore::walk(const std::function<void(const BlockInfo&)>& visit) const {
  for (const Block* b = first_; b != nullptr; b = b->next_phys) visit(BlockInfo{b->addr, b->size, b->is_free});
}

Result<void> RegionCore::check(std::string* what) const {
  auto fail = [&](std::string why) -> Result<void> {
    if (what != nullptr) *what = std::move(why);
    return Error{Errc::invariant_violation};
  };
  const Size g = granularity();

  // 1. The blocks tile [base, base + size) in address order.
  if (first_ == nullptr || first_->prev_phys != nullptr || first_->addr != base_)
    return fail("first block does not start at the base");
  Address expect = base_;
  std::uint64_t blocks = 0, live = 0, free_blocks = 0;
  Size used = 0, largest = 0;
  for (const Block* b = first_; b != nullptr; b = b->next_phys) {
    if (++blocks > pool_.live()) return fail("more blocks in address order than records (cycle?)");
    if (b->addr != expect) return fail("gap or overlap at address " + std::to_string(expect));
    if (b->size == 0 || (b->size & (g - 1)) != 0) return fail("block size not a positive multiple of the granularity");
    if (b->size > size_ - (b->addr - base_)) return fail("block runs past the end of the region");
    if (b->next_phys != nullptr && b->next_phys->prev_phys != b) return fail("broken address-order links");
    if (b->is_free) {
      ++free_blocks;
      if (b->size > largest) largest = b->size;
      if (b->next_phys != nullptr && b->next_phys->is_free) return fail("two adjacent free blocks");
    } else {
      ++live;
      used += b->size;
      if (index_.find(b->addr) != b) return fail("live block missing from the address index");
    }
    expect = b->addr + b->size;
  }
  if (expect - base_ != size_) return fail("blocks do not cover the whole region");

  // 2. The counters agree with the blocks.
  if (used != used_) return fail("used-bytes counter disagrees with the blocks");
  if (live != live_) return fail("live-block counter disagrees with the blocks");
  if (free_blocks != free_count_) return fail("free-block counter disagrees with the blocks");
  if (pool_.live() != blocks) return fail("block pool leaks or double-releases records");
  if (peak_ < used_) return fail("peak below current use");
  if (largest_valid_ && largest_cache_ != largest) return fail("cached largest free block is stale");

  // 3. The size-class index holds exactly the free blocks, each in its class.
  std::uint64_t listed = 0;
  for (unsigned fl = 0; fl < kFlCount; ++fl) {
    if (((fl_bitmap_ >> fl) & 1) != (sl_bitmap_[fl] != 0 ? 1u : 0u))
      return fail("first-level bitmap disagrees with second level");
    for (unsigned sl = 0; sl < kSlCount; ++sl) {
      const Block* head = heads_[fl][sl];
      if (((sl_bitmap_[fl] >> sl) & 1) != (head != nullptr ? 1u : 0u))
        return fail("second-level bitmap disagrees with its list");
      if (head != nullptr && head->prev_free != nullptr) return fail("list head has a predecessor");
      for (const Block* b = head; b != nullptr; b = b->next_free) {
        if (++listed > free_blocks) return fail("free lists hold more blocks than are free (cycle?)");
        if (!b->is_free) return fail("used block in a free list");
        if (!(class_of(units(b->size)) == SizeClass{fl, sl}) || b->fl != fl || b->sl != sl)
          return fail("free block filed in the wrong class");
        if (b->next_free != nullptr && b->next_free->prev_free != b) return fail("broken free-list links");
      }
    }
  }
  if (listed != free_blocks) return fail("a free block is missing from the free lists");

  // 4. The address index holds exactly the live blocks.
  if (index_.size() != live_) return fail("address index size disagrees with live blocks");
  bool index_ok = true;
  index_.for_each([&](std::uint64_t key, const Block* b) {
    if (b->addr != key || b->is_free) index_ok = false;
  });
  if (!index_ok) return fail("address index entry points to a wrong or free block");
  return {};
}

}  // namespace memlayer::bench::baseline

#include "region_core.hpp"

#include <atomic>
#include <bit>
#include <limits>

// The hot path's helpers are inlined into allocate() and free() (GCC and
// Clang left them as calls): each pair of calls cost about a tenth of a
// free+allocate pair at 10^3 live blocks, measured.
#if defined(__GNUC__)
#define MEMLAYER_HOT_INLINE [[gnu::always_inline]] inline
#else
#define MEMLAYER_HOT_INLINE inline
#endif

namespace memlayer::bufalloc::detail {

namespace {
constexpr Size kMax = std::numeric_limits<Size>::max();

// Padding that brings `addr` up to a multiple of `alignment` (a power of two).
constexpr Size pad_for(Address addr, Size alignment) noexcept { return (0 - addr) & (alignment - 1); }

// Region ids for handles: unique per process until 2^32-1 regions were made;
// 0 is skipped so that a zeroed handle names no region.
std::uint32_t next_region_id() noexcept {
  static std::atomic<std::uint32_t> counter{0};
  std::uint32_t id = 0;
  while (id == 0) id = counter.fetch_add(1, std::memory_order_relaxed) + 1;
  return id;
}
}  // namespace

RegionCore::RegionCore(Address base, Size usable, unsigned granularity_log2)
    : base_(base),
      size_(usable),
      glog_(granularity_log2),
      granularity_(Size{1} << granularity_log2),
      size_units_(usable >> granularity_log2),
      id_(next_region_id()) {
  (void)records_.acquire();  // index 0: the sentinel
  init_space();
}

void RegionCore::init_space() {
  fl_bitmap_ = 0;
  sl_bitmap_.fill(0);
  heads_.fill(kSentinel);
  // Handles from before must not match the blocks made after: a live
  // record's next use as a live block would otherwise repeat its generation.
  for (RecordIndex i = 1; i < records_.made(); ++i)
    if (records_[i].kind() == RecordKind::live) records_[i].next_generation();
  records_.release_all_from(1);
  if (index_) index_->clear();
  const RecordIndex first = records_.acquire();  // after the sentinel's: record 1 spare or within capacity
  BlockRecord& end = records_[kSentinel];
  end = BlockRecord{base_ + size_, 0, static_cast<std::uint32_t>(RecordKind::sentinel), first, first, kSentinel, kSentinel};
  BlockRecord& b = records_[first];
  b.address = base_;
  b.prev_phys = kSentinel;
  b.next_phys = kSentinel;
  used_units_ = 0;
  live_ = 0;
  largest_units_ = 0;
  b.change_kind<RecordKind::unused, RecordKind::free>();
  set_units(b, units(size_));
  insert_free(first, units(size_));
}

// Files free block i, of size_units granules, in its class; the caller has
// set its size field. Its prev_free is left alone: a head's is never read
// (block_record.hpp).
MEMLAYER_HOT_INLINE void RegionCore::insert_free(RecordIndex i, std::uint64_t size_units) noexcept {
  const unsigned c = class_of(size_units);
  RecordIndex& head = heads_[c];
  BlockRecord& b = records_[i];
  b.next_free = head;
  records_[head].prev_free = i;  // no branch on an empty list: block_record.hpp
  head = i;
  sl_bitmap_[first_level(c)] |= 1u << second_level(c);
  fl_bitmap_ |= std::uint64_t{1} << first_level(c);
  if (size_units > largest_units_) largest_units_ = size_units;
}

// Clears class c's bits if its list is now empty. Without a branch: whether
// a list empties is data the predictor cannot learn (measured with
// cachegrind's branch simulation: a third of a mispredict per pair).
// `head`: the class's head as the caller just wrote it (not read back).
MEMLAYER_HOT_INLINE void RegionCore::update_bitmaps(unsigned c, RecordIndex head) noexcept {
  std::uint32_t& sl_map = sl_bitmap_[first_level(c)];
  sl_map &= ~(static_cast<std::uint32_t>(head == kSentinel) << second_level(c));
  fl_bitmap_ &= ~(static_cast<std::uint64_t>(sl_map == 0) << first_level(c));
}

// Unlinks free block i, of size_units granules, from its class list; the
// caller sets its new kind. Callers that know the size pass it: recomputing
// it was a measurable share of a pair.
MEMLAYER_HOT_INLINE void RegionCore::unlink_free(RecordIndex i, std::uint64_t size_units) noexcept {
  const BlockRecord& b = records_[i];
  const RecordIndex prev = b.prev_free;
  const RecordIndex next = b.next_free;
  const unsigned c = class_of(size_units);
  // The link that names i: the list head's, or the predecessor's (a head's
  // prev_free is stale: block_record.hpp). Selected with a mask, not
  // branched on: GCC turns a ?: here into a branch, which cachegrind's
  // branch simulation found mispredicted in a third of the merges.
  const std::uintptr_t is_head = std::uintptr_t{0} - static_cast<std::uintptr_t>(heads_[c] == i);
  const auto head_link = reinterpret_cast<std::uintptr_t>(&heads_[c]);
  const auto prev_link = reinterpret_cast<std::uintptr_t>(&records_[prev].next_free);
  RecordIndex* const link = reinterpret_cast<RecordIndex*>((head_link & is_head) | (prev_link & ~is_head));
  *link = next;
  records_[next].prev_free = prev;
  update_bitmaps(c, heads_[c]);
  if (size_units == largest_units_) largest_units_ = kLargestUnknown;
}

// The O(1) good-fit search: the first non-empty class at or above the class
// that guarantees `search_units`. Any block there fits. Returns that class's
// head and sets *found to the class, or returns kSentinel. (A head, not the
// class alone: the caller then tests the value it needs next, where testing
// a class against kNoClass cost a compare the compiler could not drop.)
MEMLAYER_HOT_INLINE RecordIndex RegionCore::find_fast(std::uint64_t search_units, unsigned* found) const noexcept {
  // class_at_least(), with its overflow test as the branch itself (a class
  // number compared with kNoClass afterwards cost a compare the compiler
  // could not drop).
  std::uint64_t rounded = 0;
  if (!round_up_to_class(search_units, &rounded)) [[unlikely]] return kSentinel;
  const unsigned at_least = class_of(rounded);
  unsigned fl = first_level(at_least);
  std::uint32_t sl_map = sl_bitmap_[fl] & (~0u << second_level(at_least));
  if (sl_map == 0) {
    // fl + 1 <= kFlCount = 60: the shift stays below 64, and the bitmap has
    // no bits at or above kFlCount.
    const std::uint64_t fl_map = fl_bitmap_ & (~std::uint64_t{0} << (fl + 1));
    if (fl_map == 0) return kSentinel;
    fl = static_cast<unsigned>(__builtin_ctzll(fl_map));
    sl_map = sl_bitmap_[fl];  // not 0: fl's bit says so
  }
  // __builtin_ctz, not std::countr_zero: the maps are not 0 here, and
  // countr_zero's answer for 0 costs a test and a branch on the x86-64
  // baseline (no tzcnt).
  *found = (fl << kSlLog2) + static_cast<unsigned>(__builtin_ctz(sl_map));
  return heads_[*found];
}

// The fallback: every free block that could hold asize lives in its class or
// above; scan those lists for the smallest block that fits with its real
// alignment padding. Runs only when find_fast failed, i.e. the classes it
// covers are empty, so in practice this scans one or two lists.
RecordIndex RegionCore::find_best(std::uint64_t asize_units, Size alignment) const noexcept {
  const unsigned start = class_of(asize_units);
  const Size asize = asize_units << glog_;
  RecordIndex best = kSentinel;
  Size best_size = 0;
  for (unsigned fl = first_level(start); fl < kFlCount; ++fl) {
    if ((fl_bitmap_ >> fl & 1) == 0) continue;
    std::uint32_t sl_map = sl_bitmap_[fl];
    if (fl == first_level(start)) sl_map &= ~0u << second_level(start);
    while (sl_map != 0) {
      const unsigned sl = static_cast<unsigned>(std::countr_zero(sl_map));
      sl_map &= sl_map - 1;
      for (RecordIndex i = heads_[(fl << kSlLog2) + sl]; i != kSentinel; i = records_[i].next_free) {
        const BlockRecord& b = records_[i];
        const Size size = units_of(b) << glog_;
        const Size pad = pad_for(address_of(b), alignment);
        if (pad > size || size - pad < asize) continue;
        if (best == kSentinel || size < best_size) {
          best = i;
          best_size = size;
          if (size - pad == asize) return best;  // cannot do better
        }
      }
    }
    if (best != kSentinel) return best;  // higher classes only hold bigger blocks
  }
  return best;
}

// Makes unused record `tail` the free block of tail_units right after
// block i's first asize_units (carve() and carve_head() share it).
MEMLAYER_HOT_INLINE void RegionCore::split_tail(RecordIndex i, RecordIndex tail, std::uint64_t asize_units,
                                                std::uint64_t tail_units) noexcept {
  BlockRecord& b = records_[i];
  BlockRecord& t = records_[tail];
  const RecordIndex next = b.next_phys;
  t.address = b.address + (asize_units << glog_);
  t.prev_phys = i;
  t.next_phys = next;
  records_[next].prev_phys = tail;
  b.next_phys = tail;
  t.change_kind<RecordKind::unused, RecordKind::free>();
  set_units(t, tail_units);
  insert_free(tail, tail_units);
}

// Turns free block i into a live block of asize granules at the first
// aligned address in it; the padding before and the rest after become free
// blocks. Every host allocation comes first, so a std::bad_alloc changes
// nothing. The general case, for allocate_general(); allocate()'s own is
// carve_head().
BlockHandle RegionCore::carve(RecordIndex i, std::uint64_t asize_units, Size alignment) {
  const Size pad_units = units(pad_for(address_of(records_[i]), alignment));
  const std::uint64_t block_units = units_of(records_[i]);
  const std::uint64_t tail_units = block_units - pad_units - asize_units;
  RecordIndex lead = kSentinel;
  RecordIndex tail = kSentinel;
  if (pad_units != 0) lead = records_.acquire();
  try {
    if (tail_units != 0) tail = records_.acquire();
    if (index_) index_->reserve_one();
  } catch (...) {
    if (tail != kSentinel) records_.release(tail);
    if (lead != kSentinel) records_.release(lead);
    throw;
  }

  unlink_free(i, block_units);
  BlockRecord& b = records_[i];  // after every acquire(), which may move the records
  if (lead != kSentinel) {
    BlockRecord& l = records_[lead];
    l.address = b.address;
    l.prev_phys = b.prev_phys;
    l.next_phys = i;
    records_[b.prev_phys].next_phys = lead;
    b.prev_phys = lead;
    b.address += pad_units << glog_;
    l.change_kind<RecordKind::unused, RecordKind::free>();
    set_units(l, pad_units);
    insert_free(lead, pad_units);
  }
  set_units(b, asize_units);
  if (tail != kSentinel) split_tail(i, tail, asize_units, tail_units);
  b.change_kind<RecordKind::free, RecordKind::live>();
  b.next_generation();
  const Address address = address_of(b);
  if (index_) index_->insert_reserved(address, i);
  used_units_ += asize_units;
  if (used_units_ > peak_units_) peak_units_ = used_units_;
  ++live_;
  return make_handle(address, i, b.generation());
}

// carve() for allocate()'s common case: block i is the head of class c, the
// request needs no padding (alignment at most the granularity) and the
// region keeps no address index. The block stays where it starts, the rest
// after it becomes a free block, and the head is popped without
// unlink_free()'s middle-of-list cases. acquire() is the only host
// allocation and comes before any change, so a std::bad_alloc changes
// nothing.
// kExact: c is an exact class (below kExactClasses) and the request's own,
// so the block fits exactly and there is no tail to make.
template <bool kExact>
MEMLAYER_HOT_INLINE Result<BlockHandle> RegionCore::carve_head(RecordIndex i, unsigned c,
                                                               std::uint64_t asize_units) {
  const std::uint64_t block_units = kExact ? asize_units : units_of(records_[i]);
  const std::uint64_t tail_units = block_units - asize_units;
  const RecordIndex tail = !kExact && tail_units != 0 ? records_.acquire() : kSentinel;

  BlockRecord& b = records_[i];  // after acquire(), which may move the records
  const RecordIndex after = b.next_free;
  heads_[c] = after;
  // Nothing to write into the new head: its prev_free is never read.
  update_bitmaps(c, after);
  if (block_units == largest_units_) largest_units_ = kLargestUnknown;

  if constexpr (!kExact) set_units(b, asize_units);
  if (!kExact && tail != kSentinel) split_tail(i, tail, asize_units, tail_units);
  b.change_kind<RecordKind::free, RecordKind::live>();
  b.next_generation();
  used_units_ += asize_units;
  if (used_units_ > peak_units_) peak_units_ = used_units_;
  ++live_;
  return make_handle(b.address, i, b.generation());
}

// The common request: alignment no larger than the granularity (0 included),
// which every block address already meets, so there is no padding to
// compute, and no address index to keep. Anything else, errors included,
// takes allocate_general(), out of line so that it does not crowd this path.
MEMLAYER_HOT_INLINE Result<BlockHandle> RegionCore::allocate(Size size, Size alignment) {
  if (alignment <= granularity_ && (alignment & (alignment - 1)) == 0 && size != 0 && !index_) [[likely]] {
    // Rounded up without overflow: size - 1 cannot wrap here.
    const std::uint64_t asize_units = ((size - 1) >> glog_) + 1;
    // Below kExactClasses granules a class holds one size, and the class
    // index is the size: when the request's own class has a block, that
    // block is the one find_fast() would take, and it fits exactly. Testing
    // that first decides "exact fit or split" from the list head alone,
    // before any record is read; the answer depends on the request's size
    // and no predictor learns it, so deciding it early makes the mispredict
    // cheaper, and the exact case skips the search. Class 0 is always empty
    // (no block has 0 granules): larger requests look there and move on.
    const unsigned exact = asize_units < kExactClasses ? static_cast<unsigned>(asize_units) : 0;
    if (const RecordIndex i = heads_[exact]; i != kSentinel) return carve_head<true>(i, exact, asize_units);
    if (asize_units <= size_units_) [[likely]] {
      unsigned c = 0;
      if (const RecordIndex i = find_fast(asize_units, &c); i != kSentinel) [[likely]]
        return carve_head<false>(i, c, asize_units);
    }
  }
  return allocate_general(size, alignment);
}

// Every request the fast path above did not serve: bad arguments, alignment
// above the granularity, a region with an address index, and the fallback
// search (when the fast path's find_fast() found nothing, it finds nothing
// again here).
Result<RegionCore::Request> RegionCore::checked_request(Size size, Size alignment) const {
  const Size g = granularity();
  if (size == 0) return Error{Errc::zero_size, size, alignment};
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return Error{Errc::alignment_not_power_of_two, size, alignment};
  if (size > kMax - (g - 1)) return Error{Errc::size_overflow, size, alignment};
  const Size asize = (size + g - 1) & ~(g - 1);
  const Size align = alignment > g ? alignment : g;
  if (asize > kMax - (align - g)) return Error{Errc::alignment_overflow, size, alignment};
  return Request{asize, align};
}

[[gnu::noinline]] Result<BlockHandle> RegionCore::allocate_general(Size size, Size alignment) {
  const auto request = checked_request(size, alignment);
  if (!request) return request.error();
  const auto [asize, align] = request.value();
  const Size worst_pad = align - granularity();

  if (asize <= size_) {
    unsigned c = 0;
    if (const RecordIndex i = find_fast(units(asize + worst_pad), &c); i != kSentinel) return carve(i, units(asize), align);
    ++slow_;
    if (RecordIndex i = find_best(units(asize), align); i != kSentinel) return carve(i, units(asize), align);
  }
  return oom(size, alignment);
}

Error RegionCore::oom(Size size, Size alignment) {
  ++failed_;
  return Error{Errc::out_of_memory, size, alignment, 0, size_ - (used_units_ << glog_), largest_free()};
}

// Frees live block i, merging it with free neighbours. `indexed`: whether
// it still has an address-index entry to drop.
MEMLAYER_HOT_INLINE void RegionCore::release_block(RecordIndex i, bool indexed) noexcept {
  BlockRecord& b = records_[i];
  const RecordIndex prev = b.prev_phys;
  const RecordIndex next = b.next_phys;
  BlockRecord& n = records_[next];
  std::uint64_t merged_units = units_of(b);
  used_units_ -= merged_units;
  --live_;
  if (indexed) (void)index_->erase(address_of(b));
  RecordIndex start = i;
  if (BlockRecord& p = records_[prev]; p.kind() == RecordKind::free) {
    const std::uint64_t p_units = units_of(p);
    unlink_free(prev, p_units);
    merged_units += p_units;
    p.next_phys = next;
    n.prev_phys = prev;
    set_units(p, merged_units);
    records_.release(i);
    start = prev;
  } else {
    b.change_kind<RecordKind::live, RecordKind::free>();
  }
  if (n.kind() == RecordKind::free) {
    const std::uint64_t n_units = units_of(n);
    unlink_free(next, n_units);
    merged_units += n_units;
    const RecordIndex after = n.next_phys;
    records_[start].next_phys = after;
    records_[after].prev_phys = start;
    set_units(records_[start], merged_units);
    records_.release(next);
  }
  // Without a merge the block keeps its size field: nothing to write.
  insert_free(start, merged_units);
}

// A handle is good when it names this region, a record made and not the
// sentinel (index - 1 < made - 1, one unsigned compare), whose tag is that of
// a live block of the handle's generation (one compare for kind and
// generation) and whose address is the handle's.
MEMLAYER_HOT_INLINE Result<void> RegionCore::free(BlockHandle block) {
  if (block.region == id_ && block.index - 1u < records_.made() - 1u) [[likely]] {
    const BlockRecord& b = records_[block.index];
    if (b.tag == BlockRecord::live_tag(block.generation) && address_of(b) == block.address) [[likely]] {
      release_block(block.index, index_ != nullptr);
      return {};
    }
  }
  return refuse(block.address, block.index, block.generation, block.region);
}

// Names what is wrong with a handle free(handle) refused. O(1).
// Takes the handle's fields one by one, not the handle: free(handle) then
// keeps them in registers instead of copying the handle to memory for this
// call it rarely makes. Returns the Result itself so that the call is a tail
// call.
[[gnu::noinline, gnu::cold]] Result<void> RegionCore::refuse(Address address, RecordIndex index,
                                                             std::uint32_t generation,
                                                             std::uint32_t region) const noexcept {
  Error e{Errc::foreign_handle};
  e.address = address;
  if (region != id_ || index == kSentinel || index >= records_.made()) return e;
  const BlockRecord& b = records_[index];
  if (b.generation() != generation) {
    e.code = Errc::stale_handle;  // the record has been a live block again since
  } else if (b.kind() != RecordKind::live) {
    e.code = Errc::double_free;  // freed, and its record not live again since
  }
  // else: the live block of that record and generation starts elsewhere: an
  // altered handle, foreign_handle.
  return e;
}

Result<void> RegionCore::free(Address address) {
  if (!index_) build_index();
  const RecordIndex i = index_->erase(address);
  if (i == AddressIndex::kEmpty) return free_error(address);
  release_block(i, false);
  return {};
}

// The first free(address): index every live block, then keep the index. Built
// aside, so a std::bad_alloc leaves the region as it was.
void RegionCore::build_index() {
  auto index = std::make_unique<AddressIndex>();
  for (RecordIndex i = records_[kSentinel].next_phys; i != kSentinel; i = records_[i].next_phys)
    if (records_[i].kind() == RecordKind::live) index->insert(address_of(records_[i]), i);
  index_ = std::move(index);
}

// Off the hot path: a bad free is a caller bug, worth an exact diagnosis.
Error RegionCore::free_error(Address address) const noexcept {
  Error e{Errc::address_outside_region};
  e.address = address;
  if (address < base_ || address - base_ >= size_) return e;
  for (RecordIndex i = records_[kSentinel].next_phys; i != kSentinel; i = records_[i].next_phys) {
    const BlockRecord& b = records_[i];
    if (address - address_of(b) < units_of(b) << glog_) {
      e.code = b.kind() == RecordKind::free ? Errc::double_free : Errc::not_block_start;
      return e;
    }
  }
  return e;  // unreachable while the blocks tile the space
}

void RegionCore::reset() { init_space(); }

Size RegionCore::largest_free() const noexcept {
  if (largest_units_ == kLargestUnknown) {
    largest_units_ = 0;
    if (fl_bitmap_ != 0) {
      const unsigned fl = 63u - static_cast<unsigned>(std::countl_zero(fl_bitmap_));
      const unsigned sl = 31u - static_cast<unsigned>(std::countl_zero(sl_bitmap_[fl]));
      for (RecordIndex i = heads_[(fl << kSlLog2) + sl]; i != kSentinel; i = records_[i].next_free) {
        const std::uint64_t size = units_of(records_[i]);
        if (size > largest_units_) largest_units_ = size;
      }
    }
  }
  return largest_units_ << glog_;
}

RegionStats RegionCore::stats() const {
  RegionStats s;
  s.total_bytes = size_;
  s.used_bytes = used_units_ << glog_;
  s.free_bytes = size_ - s.used_bytes;
  s.largest_free = largest_free();
  s.peak_used_bytes = peak_units_ << glog_;
  s.live_blocks = live_;
  s.free_blocks = free_blocks();
  s.failed_requests = failed_;
  s.slow_searches = slow_;
  return s;
}

void RegionCore::walk(const std::function<void(const BlockInfo&)>& visit) const {
  for (RecordIndex i = records_[kSentinel].next_phys; i != kSentinel; i = records_[i].next_phys) visit(info_of(i));
}

}  // namespace memlayer::bufalloc::detail

namespace memlayer::bufalloc {

// Defined here rather than in region.cpp so that the engine's hot path is
// inlined into the public call: one call per operation, and the handle is
// read where it arrives instead of being copied for a second call.
Result<BlockHandle> Region::allocate(Size size, Size alignment) { return core_->allocate(size, alignment); }
Result<void> Region::free(BlockHandle block) { return core_->free(block); }

}  // namespace memlayer::bufalloc

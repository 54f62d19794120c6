// RegionCore::check(): every invariant of the bookkeeping, for tests and
// debugging. Off the hot path, so it lives apart from region_core.cpp.
#include "region_core.hpp"

namespace memlayer::bufalloc::detail {

Result<void> RegionCore::check(std::string* what) const {
  auto fail = [&](std::string why) -> Result<void> {
    if (what != nullptr) *what = std::move(why);
    return Error{Errc::invariant_violation};
  };
  const std::uint64_t made = records_.made();

  // 1. The blocks tile [base, base + size) in address order: a ring through
  // the sentinel, addresses rising from base to the sentinel's, the end.
  const BlockRecord& end = records_[kSentinel];
  if (end.kind() != RecordKind::sentinel || end.address != base_ + size_) return fail("sentinel record damaged");
  if (end.next_phys == kSentinel || end.next_phys >= made) return fail("no first block");
  Address expect = base_;
  std::uint64_t blocks = 0, live = 0, holes = 0;
  Size used = 0, largest = 0;
  RecordIndex prev = kSentinel;
  for (RecordIndex i = end.next_phys; i != kSentinel;) {
    if (i >= made) return fail("address-order link to a record never made");
    if (++blocks > made) return fail("more blocks in address order than records (cycle?)");
    const BlockRecord& b = records_[i];
    if (b.prev_phys != prev) return fail("broken address-order links");
    if (b.address != expect) return fail("gap or overlap at offset " + std::to_string(expect - base_));
    if (b.next_phys >= made) return fail("address-order link to a record never made");
    const Address next_address = records_[b.next_phys].address;
    if (next_address <= b.address) return fail("block of zero or negative size");
    if (((next_address - b.address) & (granularity() - 1)) != 0) return fail("block size not a multiple of the granularity");
    const std::uint64_t span = units(next_address - b.address);
    if (b.size != kSizeFromNext ? b.size != span : span < kSizeFromNext)
      return fail("stored block size disagrees with the next block's address");
    const Size size = units_of(b) << glog_;
    if (b.kind() == RecordKind::free) {
      ++holes;
      if (size > largest) largest = size;
      if (records_[b.next_phys].kind() == RecordKind::free) return fail("two adjacent free blocks");
    } else if (b.kind() == RecordKind::live) {
      ++live;
      used += size;
      if (index_ && index_->find(address_of(b)) != i) return fail("live block missing from the address index");
    } else {
      return fail("spare record linked in address order");
    }
    expect = next_address;
    prev = i;
    i = b.next_phys;
  }
  if (end.prev_phys != prev) return fail("sentinel does not link back to the last block");
  if (expect != base_ + size_) return fail("blocks do not cover the whole region");

  // 2. The counters agree with the blocks; every record is a block, the
  // sentinel or spare, exactly once.
  if (used != used_units_ << glog_) return fail("used-bytes counter disagrees with the blocks");
  if (live != live_) return fail("live-block counter disagrees with the blocks");
  if (holes != free_blocks()) return fail("free-block count disagrees with the blocks");
  if (records_.in_use() != blocks + 1) return fail("record pool leaks or double-releases records");
  std::uint64_t spare = 0;
  for (RecordIndex i = records_.spare_head(); i != kSentinel; i = records_[i].next_free) {
    if (i >= made || ++spare > made) return fail("broken spare-record chain");
    if (records_[i].kind() != RecordKind::unused) return fail("a block record in the spare chain");
  }
  if (spare + blocks + 1 != made) return fail("spare chain disagrees with the pool's count");
  if (peak_units_ < used_units_) return fail("peak below current use");
  if (largest_units_ != kLargestUnknown && largest_units_ << glog_ != largest) return fail("cached largest free block is stale");

  // 3. The size-class index holds exactly the free blocks, each in its class.
  std::uint64_t listed = 0;
  for (unsigned fl = 0; fl < kFlCount; ++fl) {
    if (((fl_bitmap_ >> fl) & 1) != (sl_bitmap_[fl] != 0 ? 1u : 0u))
      return fail("first-level bitmap disagrees with second level");
    for (unsigned sl = 0; sl < kSlCount; ++sl) {
      const RecordIndex head = heads_[(fl << kSlLog2) + sl];
      if (((sl_bitmap_[fl] >> sl) & 1) != (head != kSentinel ? 1u : 0u))
        return fail("second-level bitmap disagrees with its list");
      if (head >= made) return fail("list head is a record never made");
      for (RecordIndex i = head; i != kSentinel; i = records_[i].next_free) {
        if (i >= made) return fail("free-list link to a record never made");
        if (++listed > holes) return fail("free lists hold more blocks than are free (cycle?)");
        const BlockRecord& b = records_[i];
        if (b.kind() != RecordKind::free) return fail("used block in a free list");
        if (class_of(units_of(b)) != (fl << kSlLog2) + sl) return fail("free block filed in the wrong class");
        if (b.next_free != kSentinel && (b.next_free >= made || records_[b.next_free].prev_free != i))
          return fail("broken free-list links");
      }
    }
  }
  if (listed != holes) return fail("a free block is missing from the free lists");

  // 4. The address index, once built, holds exactly the live blocks.
  if (index_) {
    if (index_->size() != live_) return fail("address index size disagrees with live blocks");
    bool index_ok = true;
    index_->for_each([&](std::uint64_t key, RecordIndex i) {
      if (i >= made || records_[i].kind() != RecordKind::live || address_of(records_[i]) != key) index_ok = false;
    });
    if (!index_ok) return fail("address index entry points to a wrong or free block");
  }
  return {};
}

}  // namespace memlayer::bufalloc::detail

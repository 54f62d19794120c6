// The block records of one Region, addressed by 32-bit index.
//
// Fixed pages of 1024 records (32 KiB): record i is pages_[i / 1024][i % 1024].
// Pages never move, so growing never copies records (a single contiguous
// array would copy them all when it doubles: a latency spike proportional to
// the block count, exactly what the region avoids elsewhere) and a reference
// to a record stays valid while others are acquired. A new page is left
// uninitialised, so the OS commits its memory only as records are used.
// Spare records are chained through next_free and reused last-released
// first: the pair "free a block, allocate one" reuses records still in cache.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "block_record.hpp"

namespace memlayer::bufalloc::detail {

class RecordPool {
 public:
  [[nodiscard]] BlockRecord& operator[](RecordIndex i) noexcept { return pages_[i >> kPageLog2][i & kPageMask]; }
  [[nodiscard]] const BlockRecord& operator[](RecordIndex i) const noexcept {
    return pages_[i >> kPageLog2][i & kPageMask];
  }

  /// A record whose kind the caller sets; its generation is kept from its
  /// last use (0 for a new one). Throws std::bad_alloc when the host has no
  /// memory for a new page or all 2^32 - 1 indices are in use. O(1), plus
  /// one page allocation every 1024 new records.
  RecordIndex acquire() {
    if (spare_head_ != kSentinel) {
      const RecordIndex i = spare_head_;
      spare_head_ = (*this)[i].next_free;
      --spare_count_;
      return i;
    }
    if (made_ == kMaxRecords) throw std::bad_alloc();
    if ((made_ & kPageMask) == 0) pages_.push_back(std::make_unique_for_overwrite<BlockRecord[]>(kPageSize));
    const RecordIndex i = made_++;
    (*this)[i].generation = 0;
    return i;
  }

  /// Gives a record back for reuse. O(1).
  void release(RecordIndex i) noexcept {
    BlockRecord& r = (*this)[i];
    r.kind = RecordKind::unused;
    r.next_free = spare_head_;
    spare_head_ = i;
    ++spare_count_;
  }

  /// Makes every record from `first` on spare again, generations kept, lowest
  /// index reused first. O(records made).
  void release_all_from(RecordIndex first) noexcept {
    spare_head_ = kSentinel;
    spare_count_ = 0;
    for (RecordIndex i = made_; i > first; --i) release(i - 1);
  }

  /// Records ever made: every valid index is below this.
  [[nodiscard]] RecordIndex made() const noexcept { return made_; }
  /// Records made and not spare.
  [[nodiscard]] std::uint64_t in_use() const noexcept { return made_ - spare_count_; }
  [[nodiscard]] RecordIndex spare_head() const noexcept { return spare_head_; }

 private:
  static constexpr unsigned kPageLog2 = 10;
  static constexpr RecordIndex kPageSize = RecordIndex{1} << kPageLog2;
  static constexpr RecordIndex kPageMask = kPageSize - 1;
  static constexpr RecordIndex kMaxRecords = ~RecordIndex{0};

  std::vector<std::unique_ptr<BlockRecord[]>> pages_;
  RecordIndex made_ = 0;
  RecordIndex spare_head_ = kSentinel;  // 0 ends the chain: the sentinel is never spare
  std::uint64_t spare_count_ = 0;
};

}  // namespace memlayer::bufalloc::detail

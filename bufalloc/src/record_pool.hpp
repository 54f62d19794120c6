// The block records of one Region: one contiguous array, addressed by 32-bit
// index.
//
// One array, not pages: every record access on the hot path is then a single
// load from one base pointer, where pages cost a dependent load of the page
// pointer first (measured: the pair benchmark at 10^3 live blocks spent more
// time on those loads than on the allocator's own work). The price is that
// growing copies the records into an array twice the size: amortised O(1),
// and a region in steady state (as many blocks and holes as it had before)
// never grows. The links are indices, so a move needs no fixing up; a caller
// only must not hold a reference to a record across acquire().
// Spare records are chained through next_free and reused last-released
// first: the pair "free a block, allocate one" reuses records still in cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "block_record.hpp"

namespace memlayer::bufalloc::detail {

class RecordPool {
 public:
  [[nodiscard]] BlockRecord& operator[](RecordIndex i) noexcept { return records_[i]; }
  [[nodiscard]] const BlockRecord& operator[](RecordIndex i) const noexcept { return records_[i]; }

  /// A record whose fields the caller sets, all but `tag`'s generation,
  /// which is kept from its last use (0 for a new record). Invalidates
  /// references to records. Throws std::bad_alloc when the host has no memory
  /// to grow or all 2^32 - 1 indices are in use. O(1), amortised over the
  /// growth.
  RecordIndex acquire() {
    if (spare_head_ != kSentinel) {
      const RecordIndex i = spare_head_;
      spare_head_ = records_[i].next_free;
      --spare_count_;
      return i;
    }
    if (made_ == capacity_) grow();
    const RecordIndex i = made_++;
    records_[i].tag = 0;
    // A free-list head's prev_free is never read, but always names a record
    // made (block_record.hpp): a new record starts with one.
    records_[i].prev_free = kSentinel;
    return i;
  }

  /// Gives a record back for reuse, its generation kept. O(1).
  void release(RecordIndex i) noexcept {
    BlockRecord& r = records_[i];
    r.set_kind(RecordKind::unused);
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
  static constexpr std::uint64_t kFirstCapacity = 64;
  static constexpr std::uint64_t kMaxRecords = ~RecordIndex{0};

  void grow() {
    if (capacity_ == kMaxRecords) throw std::bad_alloc();
    const std::uint64_t capacity = std::min(capacity_ == 0 ? kFirstCapacity : capacity_ * 2, kMaxRecords);
    Records bigger = allocate_records(capacity);
    std::copy_n(records_.get(), made_, bigger.get());
    records_ = std::move(bigger);
    capacity_ = capacity;
  }

  struct FreeRecords {
    void operator()(BlockRecord* p) const noexcept { std::free(p); }
  };
  using Records = std::unique_ptr<BlockRecord[], FreeRecords>;

  // Uninitialised: the OS commits the new pages only as records are used.
  // An array of 2 MiB or more (65536 records and up) is aligned to 2 MiB and
  // offered huge pages: a free() of a random block reads its record and two
  // neighbours, each on a random page, and with 4 KiB pages those were TLB
  // misses on top of the cache misses (at 10^5 live blocks the array spans
  // over a thousand pages).
  static Records allocate_records(std::uint64_t capacity) {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    const std::size_t bytes = static_cast<std::size_t>(capacity) * sizeof(BlockRecord);
    void* p = nullptr;
    if (bytes >= kHuge) {
      p = std::aligned_alloc(kHuge, (bytes + kHuge - 1) & ~(kHuge - 1));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      if (p != nullptr) (void)madvise(p, (bytes + kHuge - 1) & ~(kHuge - 1), MADV_HUGEPAGE);  // a hint
#endif
    } else {
      p = std::malloc(bytes);
    }
    if (p == nullptr) throw std::bad_alloc();
    return Records(static_cast<BlockRecord*>(p));
  }

  Records records_;
  std::uint64_t capacity_ = 0;
  RecordIndex made_ = 0;
  RecordIndex spare_head_ = kSentinel;  // 0 ends the chain: the sentinel is never spare
  std::uint64_t spare_count_ = 0;
};

}  // namespace memlayer::bufalloc::detail

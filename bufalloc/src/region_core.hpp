// The TLSF engine behind Region. Private: the public contract is region.hpp,
// the record layout block_record.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "address_index.hpp"
#include "memlayer/bufalloc/region.hpp"
#include "record_pool.hpp"
#include "size_class.hpp"

namespace memlayer::bufalloc::detail {

class RegionCore {
 public:
  RegionCore(Address base, Size usable, unsigned granularity_log2);

  Result<BlockHandle> allocate(Size size, Size alignment);
  Result<void> free(BlockHandle block);
  Result<void> free(Address address);
  bool indexes_addresses() const noexcept { return index_ != nullptr; }
  void reset();
  RegionStats stats() const;
  void walk(const std::function<void(const BlockInfo&)>& visit) const;
  Result<void> check(std::string* what) const;
  Result<Hole> cheapest_hole(Size size, Size alignment, const std::function<std::optional<std::uint64_t>(const BlockInfo&)>& evictable,
                             const std::function<void(const BlockInfo&)>& visit) const;

  Address base() const noexcept { return base_; }
  Size size() const noexcept { return size_; }
  Size granularity() const noexcept { return granularity_; }
  std::uint32_t id() const noexcept { return id_; }

 private:
  std::uint64_t units(Size bytes) const noexcept { return bytes >> glog_; }
  static Address address_of(const BlockRecord& r) noexcept { return r.address; }
  // A block's size in granules: stored, or for a giant block up to the next
  // block (block_record.hpp).
  std::uint64_t units_of(const BlockRecord& r) const noexcept {
    return r.size != kSizeFromNext ? r.size : units(records_[r.next_phys].address - r.address);
  }
  static void set_units(BlockRecord& r, std::uint64_t size_units) noexcept {
    r.size = size_units < kSizeFromNext ? static_cast<std::uint32_t>(size_units) : kSizeFromNext;
  }
  void insert_free(RecordIndex i, std::uint64_t size_units) noexcept;
  void update_bitmaps(unsigned c, RecordIndex head) noexcept;
  void unlink_free(RecordIndex i, std::uint64_t size_units) noexcept;
  RecordIndex find_fast(std::uint64_t search_units, unsigned* found) const noexcept;
  RecordIndex find_best(std::uint64_t asize_units, Size alignment) const noexcept;
  void split_tail(RecordIndex i, RecordIndex tail, std::uint64_t asize_units, std::uint64_t tail_units) noexcept;
  BlockHandle carve(RecordIndex i, std::uint64_t asize_units, Size alignment);
  template <bool kExact>
  Result<BlockHandle> carve_head(RecordIndex i, unsigned c, std::uint64_t asize_units);
  Result<BlockHandle> allocate_general(Size size, Size alignment);
  // A request's size rounded up to the granularity and its effective
  // alignment, or the error that names what is wrong with it (zero size,
  // an alignment not a power of two, overflow): allocate() and
  // cheapest_hole() take requests alike.
  struct Request {
    Size asize, align;
  };
  Result<Request> checked_request(Size size, Size alignment) const;
  BlockHandle make_handle(Address address, RecordIndex i, std::uint32_t generation) const noexcept {
    return BlockHandle{address, i, generation, id_};
  }
  void release_block(RecordIndex i, bool indexed) noexcept;
  Result<void> refuse(Address address, RecordIndex index, std::uint32_t generation,
                      std::uint32_t region) const noexcept;
  Error free_error(Address address) const noexcept;
  Error oom(Size size, Size alignment);
  BlockInfo info_of(RecordIndex i) const noexcept {
    const BlockRecord& b = records_[i];
    return BlockInfo{address_of(b), units_of(b) << glog_, b.kind() == RecordKind::free};
  }
  Size largest_free() const noexcept;
  std::uint64_t free_blocks() const noexcept { return records_.in_use() - 1 - live_; }
  void build_index();
  void init_space();

  Address base_;
  Size size_;
  unsigned glog_;
  // size_ and the granularity as allocate() compares with them, so that its
  // fast path shifts by glog_ once (a shift by a variable is three micro-ops
  // on the x86 baseline the library is built for).
  Size granularity_;
  std::uint64_t size_units_;
  std::uint32_t id_;

  std::uint64_t fl_bitmap_ = 0;
  std::array<std::uint32_t, kFlCount> sl_bitmap_{};
  std::array<RecordIndex, kClassCount> heads_{};  // by class_of()'s number

  RecordPool records_;
  // Made by the first free(address); see region.hpp.
  std::unique_ptr<AddressIndex> index_;

  // Counters in granules, not bytes: the hot path adds and compares without
  // shifting; stats() converts.
  std::uint64_t used_units_ = 0;
  std::uint64_t peak_units_ = 0;
  std::uint64_t live_ = 0;
  // No counter of free blocks: every record made and not spare is the
  // sentinel, a live block or a free block, so stats() derives the count
  // from live_ and the pool (free_blocks()), and the hot path keeps one
  // counter fewer.
  std::uint64_t failed_ = 0;
  std::uint64_t slow_ = 0;
  // The largest free block in granules, kept exact while cheap: raised on
  // insert, invalidated when a block of that size leaves the free lists.
  // kLargestUnknown marks it invalid; no block is that big, so insert's
  // "raise if bigger" leaves it alone and one compare serves both cases.
  static constexpr std::uint64_t kLargestUnknown = ~std::uint64_t{0};
  mutable std::uint64_t largest_units_ = 0;
};

}  // namespace memlayer::bufalloc::detail

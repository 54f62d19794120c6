// The Region engine as it was before free-by-handle (issue 16): a 56-byte
// pointer-linked block record and an address-index hash that free() looks up.
// Kept here FOR THE BENCHMARK ONLY, so memlayer-bench-bufalloc can measure
// today's Region against it side by side in one run; it is not part of the
// library. Only the namespace differs from the original (and these aliases).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "address_index.hpp"
#include "block_pool.hpp"
#include "memlayer/bufalloc/region.hpp"
#include "size_class.hpp"

namespace memlayer::bench::baseline {

using bufalloc::Address;
using bufalloc::BlockInfo;
using bufalloc::Errc;
using bufalloc::Error;
using bufalloc::RegionStats;
using bufalloc::Result;
using bufalloc::Size;

// One block of the managed space. Lives on the host, never in the space.
struct Block {
  Address addr;
  Size size;
  Block* prev_phys;  // neighbours in address order
  Block* next_phys;
  Block* prev_free;  // size-class list links, meaningful while is_free
  Block* next_free;
  std::uint16_t fl;  // the size class it is filed under, while is_free
  std::uint8_t sl;
  bool is_free;
};

class RegionCore {
 public:
  RegionCore(Address base, Size usable, unsigned granularity_log2);

  Result<Address> allocate(Size size, Size alignment);
  Result<void> free(Address address);
  void reset();
  RegionStats stats() const;
  void walk(const std::function<void(const BlockInfo&)>& visit) const;
  Result<void> check(std::string* what) const;

  Address base() const noexcept { return base_; }
  Size size() const noexcept { return size_; }
  Size granularity() const noexcept { return Size{1} << glog_; }

 private:
  std::uint64_t units(Size bytes) const noexcept { return bytes >> glog_; }
  void insert_free(Block* b) noexcept;
  void remove_free(Block* b) noexcept;
  Block* find_fast(std::uint64_t search_units) const noexcept;
  Block* find_best(Size asize, Size alignment) const noexcept;
  Address carve(Block* b, Size asize, Size alignment);
  Error free_error(Address address) const noexcept;
  Error oom(Size size, Size alignment);
  Size largest_free() const noexcept;
  void init_space();

  Address base_;
  Size size_;
  unsigned glog_;

  std::uint64_t fl_bitmap_ = 0;
  std::array<std::uint32_t, kFlCount> sl_bitmap_{};
  std::array<std::array<Block*, kSlCount>, kFlCount> heads_{};

  Block* first_ = nullptr;
  BlockPool<Block> pool_;
  AddressIndex<Block> index_;

  Size used_ = 0;
  Size peak_ = 0;
  std::uint64_t live_ = 0;
  std::uint64_t free_count_ = 0;
  std::uint64_t failed_ = 0;
  std::uint64_t slow_ = 0;
  // The largest free block, kept exact while cheap: raised on insert,
  // invalidated when a block of that size leaves the free lists.
  mutable Size largest_cache_ = 0;
  mutable bool largest_valid_ = false;
};

}  // namespace memlayer::bench::baseline

// Baseline copy for memlayer-bench-bufalloc only: see baseline/region_core.hpp.
// A pool of fixed-size records whose pages double in size. Records never move,
// so the region links them with plain pointers; there is no cap on how many
// exist; and growing never copies: a new page is one allocation (left
// uninitialised, so the OS hands out its pages lazily), which keeps acquire()
// O(1) in the worst case, not just amortised.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace memlayer::bench::baseline {

template <class T>
class BlockPool {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "records are raw storage, reused without constructors");

 public:
  /// A record, uninitialised unless recycled. The caller initialises it.
  T* acquire() {
    if (recycled_ != nullptr) {
      T* record = recycled_;
      recycled_ = *reinterpret_cast<T**>(record);
      --recycled_count_;
      return record;
    }
    if (page_count_ == 0 || used_in_page_ == page_capacity(page_count_ - 1)) {
      // page k holds kFirstPage << k records; 48 pages hold more records
      // than a 64-bit space can have blocks of one byte.
      pages_[page_count_] = std::make_unique_for_overwrite<Slot[]>(page_capacity(page_count_));
      ++page_count_;
      used_in_page_ = 0;
    }
    return reinterpret_cast<T*>(&pages_[page_count_ - 1][used_in_page_++]);
  }

  /// Gives a record back for reuse. O(1).
  void release(T* record) noexcept {
    *reinterpret_cast<T**>(record) = recycled_;
    recycled_ = record;
    ++recycled_count_;
  }

  /// Forgets every record but keeps the first page; O(pages).
  void clear() noexcept {
    for (std::size_t i = 1; i < page_count_; ++i) pages_[i].reset();
    page_count_ = page_count_ > 0 ? 1 : 0;
    used_in_page_ = 0;
    recycled_ = nullptr;
    recycled_count_ = 0;
  }

  /// Records handed out and not released.
  [[nodiscard]] std::uint64_t live() const noexcept {
    if (page_count_ == 0) return 0;
    std::uint64_t made = (kFirstPage << (page_count_ - 1)) - kFirstPage + used_in_page_;
    return made - recycled_count_;
  }

 private:
  static constexpr std::size_t kFirstPage = 256;
  static constexpr std::size_t kMaxPages = 48;
  // Raw storage sized and aligned for T, also big enough for the free-list link.
  struct alignas(alignof(T) > alignof(T*) ? alignof(T) : alignof(T*)) Slot {
    unsigned char bytes[sizeof(T) > sizeof(T*) ? sizeof(T) : sizeof(T*)];
  };
  static constexpr std::size_t page_capacity(std::size_t k) noexcept { return kFirstPage << k; }

  std::array<std::unique_ptr<Slot[]>, kMaxPages> pages_{};
  std::size_t page_count_ = 0;
  std::size_t used_in_page_ = 0;
  T* recycled_ = nullptr;
  std::uint64_t recycled_count_ = 0;
};

}  // namespace memlayer::bench::baseline

// memlayer/migration/detail/inline_list.hpp — a list that keeps its first N
// elements inside itself.
//
// A span's holders and readers (range_versions.hpp) are almost always one or
// two events: kept inline, writing a span, moving it into an undo record and
// dropping the record allocate nothing and touch no other cache line. Longer
// lists move to one heap array, doubled as they grow.
//
// Elements must be trivially copyable (they are copied as bytes). Iterators
// are pointers, invalidated by any change of size, and by a move. Not
// thread-safe: one owner at a time, like std::vector.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

namespace memlayer::migration::detail {

template <class T, std::uint32_t N>
class InlineList {
  static_assert(std::is_trivially_copyable_v<T>, "InlineList copies its elements as bytes");
  static_assert(N > 0);

 public:
  InlineList() noexcept = default;
  InlineList(const InlineList& o) { append(o.begin(), o.size_); }
  InlineList(InlineList&& o) noexcept { take(o); }
  InlineList& operator=(const InlineList& o) {
    if (this != &o) {
      size_ = 0;
      append(o.begin(), o.size_);
    }
    return *this;
  }
  InlineList& operator=(InlineList&& o) noexcept {
    if (this != &o) {
      free_heap();
      take(o);
    }
    return *this;
  }
  ~InlineList() { free_heap(); }

  [[nodiscard]] T* begin() noexcept { return data_; }
  [[nodiscard]] T* end() noexcept { return data_ + size_; }
  [[nodiscard]] const T* begin() const noexcept { return data_; }
  [[nodiscard]] const T* end() const noexcept { return data_ + size_; }
  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] T& operator[](std::uint32_t i) noexcept { return begin()[i]; }
  [[nodiscard]] const T& operator[](std::uint32_t i) const noexcept { return begin()[i]; }
  [[nodiscard]] T& back() noexcept { return begin()[size_ - 1]; }

  /// O(1) amortised. Throws std::bad_alloc past N elements when out of memory.
  void push_back(const T& v) {
    if (size_ == capacity_) grow();
    begin()[size_++] = v;
  }
  /// push_back() where reserve() made the room. O(1), allocates nothing.
  void push_back_reserved(const T& v) noexcept { begin()[size_++] = v; }
  /// Room for `n` elements, so that adding up to there allocates nothing.
  /// Throws std::bad_alloc. O(size) when it grows.
  void reserve(std::uint32_t n) {
    while (capacity_ < n) grow();
  }
  /// Inserts before `pos`. O(size).
  void insert(const T* pos, const T& v) {
    const auto i = static_cast<std::uint32_t>(pos - begin());
    if (size_ == capacity_) grow();
    T* d = begin();
    std::memmove(d + i + 1, d + i, (size_ - i) * sizeof(T));
    d[i] = v;
    ++size_;
  }
  /// Removes the element at `pos`, keeping the order. O(size).
  void erase(const T* pos) noexcept {
    T* d = begin();
    const auto i = static_cast<std::uint32_t>(pos - d);
    std::memmove(d + i, d + i + 1, (size_ - i - 1) * sizeof(T));
    --size_;
  }
  /// Removes the elements `pred` is true of among the first `n` (every
  /// element by default), then the next ones while `pred` is true of them:
  /// it looks no further than the first element past `n` that stays.
  /// Keeps the order. O(elements looked at + elements after them), those
  /// after in one memmove.
  template <class Pred>
  void erase_if(Pred&& pred, std::uint32_t n = ~std::uint32_t{0}) {
    T* d = begin();
    const std::uint32_t all = std::min(n, size_);
    std::uint32_t kept = 0;
    std::uint32_t i = 0;
    for (; i < all; ++i)
      if (!pred(d[i])) d[kept++] = d[i];
    while (i < size_ && pred(d[i])) ++i;
    if (kept != i) std::memmove(d + kept, d + i, (size_ - i) * sizeof(T));
    size_ = kept + (size_ - i);
  }
  /// Keeps the storage (a heap array stays for the next elements).
  void clear() noexcept { size_ = 0; }
  /// The list becomes `v` alone (clear(), then push_back(v), which finds
  /// room: there is always room for one). O(1).
  void assign_one(const T& v) noexcept {
    size_ = 1;
    begin()[0] = v;
  }

  friend bool operator==(const InlineList& a, const InlineList& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void append(const T* src, std::uint32_t n) {
    while (capacity_ < n) grow();
    std::memcpy(begin(), src, n * sizeof(T));
    size_ = n;
  }
  void grow() {
    const std::uint32_t cap = capacity_ * 2;
    T* bigger = std::allocator<T>().allocate(cap);
    std::memcpy(bigger, begin(), size_ * sizeof(T));
    free_heap();
    data_ = bigger;
    capacity_ = cap;
  }
  // Gives the heap array back, if any, and points at the inline array
  // again; the caller sets size_ (grow() and take() do).
  void free_heap() noexcept {
    if (data_ != inline_) std::allocator<T>().deallocate(data_, capacity_);
    data_ = inline_;
    capacity_ = N;
  }
  // Leaves `o` empty and inline. The inline array is copied whole (a fixed
  // size: a few moves, no memcpy call), used or not.
  // Precondition: this list holds no heap array.
  void take(InlineList& o) noexcept {
    size_ = o.size_;
    capacity_ = o.capacity_;
    std::memcpy(inline_, o.inline_, sizeof inline_);
    data_ = o.data_ == o.inline_ ? inline_ : o.data_;
    o.size_ = 0;
    o.capacity_ = N;
    o.data_ = o.inline_;
  }

  // Where the elements are and how many first: a look at a short list
  // (data_, size_, the first elements) reads one cache line.
  T* data_ = inline_;  // inline_, or the heap array this list owns (capacity_ elements)
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
  T inline_[N]{};
};

}  // namespace memlayer::migration::detail

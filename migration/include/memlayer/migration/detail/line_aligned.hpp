// memlayer/migration/detail/line_aligned.hpp — an allocator whose blocks
// start on a cache line.
//
// RangeVersions' span tree (range_versions.hpp) allocates its nodes with
// it: a node's header, its key and what the fast path reads of its span then
// lie in two known lines, where a node placed at any 16-byte boundary
// straddles a third every other time (a kernel with many buffer arguments
// touches one node per buffer, each a first-level miss: doc/engine.md, the
// enqueue's cost).
//
// Stateless; thread-safety as the global operator new.
#pragma once

#include <cstddef>
#include <new>

namespace memlayer::migration::detail {

inline constexpr std::size_t kCacheLine = 64;

template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{alignof(T) > kCacheLine ? alignof(T) : kCacheLine};
  LineAligned() noexcept = default;
  template <class U>
  LineAligned(const LineAligned<U>&) noexcept {}  // NOLINT: rebinding, as std::allocator
  /// Throws std::bad_alloc. O(1).
  [[nodiscard]] T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), kAlign));
  }
  // The unsized form: Clang declares the sized one only with
  // -fsized-deallocation.
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete(p, kAlign);
  }
  template <class U>
  friend bool operator==(const LineAligned&, const LineAligned<U>&) noexcept {
    return true;
  }
};

}  // namespace memlayer::migration::detail

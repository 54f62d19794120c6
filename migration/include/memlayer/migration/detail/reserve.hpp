// memlayer/migration/detail/reserve.hpp — room made ahead, for steps that
// must not allocate (a commit after its plan: range_versions.hpp,
// engine/src/transaction.cpp).
#pragma once

#include <algorithm>
#include <cstddef>

namespace memlayer::migration::detail {

/// Room in `v` for `more` elements beyond its size, growing its capacity
/// geometrically (a reserve of size + 1 at each call would reallocate every
/// time). Throws std::bad_alloc; changes no element. Amortised O(1) per
/// element.
template <class Vector>
[[gnu::noinline]] void grow_for(Vector& v, std::size_t more) {
  v.reserve(std::max(v.size() + more, 2 * v.capacity()));
}
/// (The check inline, on every enqueue's path; the growth out of line.)
template <class Vector>
[[gnu::always_inline]] inline void reserve_more(Vector& v, std::size_t more) {
  // The free room, not size + more against the capacity: for more == 1
  // the compiler then compares two pointers (no element-size shifts).
  if (v.capacity() - v.size() < more) [[unlikely]]
    grow_for(v, more);
}

}  // namespace memlayer::migration::detail

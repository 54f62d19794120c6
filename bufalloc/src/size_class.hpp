// The two-level segregated-fit size classes, over sizes counted in granules.
//
// Sizes below 32 granules get one class each (first level 0, second level =
// size). Above, first level f-4 holds [2^f, 2^(f+1)) granules, cut into 32
// equal second-level classes. A class's sizes differ by less than 1/32 of its
// lower bound, which bounds the internal waste of a good fit to ~3%.
//
// A class is named by one number, fl * 32 + sl: the free-list heads are one
// array indexed by it, and the bitmaps take fl = index / 32 and sl =
// index % 32. Computing it needs no branch: with s = max(0, f - 5) the index
// is s * 32 + (units >> s), because units >> s lies in [32, 64) above 63
// granules (32 + sl) and is units itself below.
#pragma once

#include <bit>
#include <cstdint>

namespace memlayer::bufalloc::detail {

inline constexpr unsigned kSlLog2 = 5;
inline constexpr unsigned kSlCount = 1u << kSlLog2;
inline constexpr unsigned kFlCount = 64 - kSlLog2 + 1;  // units < 2^64
inline constexpr unsigned kClassCount = kFlCount * kSlCount;
/// Classes below this hold one size each, equal to the class number.
inline constexpr unsigned kExactClasses = 2 * kSlCount;
/// class_at_least(): no class can guarantee the fit.
inline constexpr unsigned kNoClass = kClassCount;

/// How far a size is shifted to find its second level: 0 below 64 granules.
constexpr unsigned class_shift(std::uint64_t units) noexcept {
  // units | 32 has its top bit at 5 or above, so the shift is never negative.
  return 63u - static_cast<unsigned>(std::countl_zero(units | kSlCount)) - kSlLog2;
}

/// The class a free block of `units` granules is filed under. units >= 1.
constexpr unsigned class_of(std::uint64_t units) noexcept {
  const unsigned s = class_shift(units);
  return (s << kSlLog2) + static_cast<unsigned>(units >> s);
}

constexpr unsigned first_level(unsigned c) noexcept { return c >> kSlLog2; }
constexpr unsigned second_level(unsigned c) noexcept { return c & (kSlCount - 1); }

/// The first step of class_at_least(): units rounded up to the next class
/// boundary, into *rounded; false when that overflows. For a caller that
/// branches on the overflow itself.
constexpr bool round_up_to_class(std::uint64_t units, std::uint64_t* rounded) noexcept {
  return !__builtin_add_overflow(units, (std::uint64_t{1} << class_shift(units)) - 1, rounded);
}

/// The lowest class whose every block holds at least `units` granules: units
/// rounded up to the next class boundary. kNoClass when that rounding
/// overflows (no class can guarantee the fit; only the fallback search can
/// help). units >= 1.
constexpr unsigned class_at_least(std::uint64_t units) noexcept {
  std::uint64_t rounded = 0;
  return round_up_to_class(units, &rounded) ? class_of(rounded) : kNoClass;
}

namespace size_class_checks {
// The branch-free formulas against the definition at the top of this file.
constexpr bool matches_definition(std::uint64_t units) {
  unsigned fl = 0, sl = static_cast<unsigned>(units);
  if (units >= kSlCount) {
    const unsigned f = 63u - static_cast<unsigned>(std::countl_zero(units));
    fl = f - kSlLog2 + 1;
    sl = static_cast<unsigned>((units >> (f - kSlLog2)) - kSlCount);
  }
  return first_level(class_of(units)) == fl && second_level(class_of(units)) == sl && fl < kFlCount;
}
constexpr bool all_match() {
  for (std::uint64_t u = 1; u < 4096; ++u)
    if (!matches_definition(u)) return false;
  for (unsigned b = 12; b < 64; ++b) {
    const std::uint64_t p = std::uint64_t{1} << b;
    for (const std::uint64_t u : {p - 1, p, p + 1, p + p / 3, p | (p - 1)})
      if (!matches_definition(u)) return false;
  }
  // Rounding up lands on a class boundary at or above the size, never below.
  for (std::uint64_t u = 1; u < 4096; ++u) {
    const unsigned c = class_at_least(u);
    if (c < class_of(u) || c > class_of(u) + 1) return false;
  }
  for (std::uint64_t u = 1; u < kExactClasses; ++u)
    if (class_of(u) != u || class_at_least(u) != u) return false;
  return class_at_least(~std::uint64_t{0}) == kNoClass && class_of(~std::uint64_t{0}) == kClassCount - 1;
}
static_assert(all_match(), "class_of()/class_at_least() disagree with the size classes' definition");
}  // namespace size_class_checks

}  // namespace memlayer::bufalloc::detail

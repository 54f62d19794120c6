// Baseline copy for memlayer-bench-bufalloc only: see baseline/region_core.hpp.
// The two-level segregated-fit size classes, over sizes counted in granules.
//
// Sizes below 32 granules get one class each (first level 0, second level =
// size). Above, first level f-4 holds [2^f, 2^(f+1)) granules, cut into 32
// equal second-level classes. A class's sizes differ by less than 1/32 of its
// lower bound, which bounds the internal waste of a good fit to ~3%.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>

namespace memlayer::bench::baseline {

inline constexpr unsigned kSlLog2 = 5;
inline constexpr unsigned kSlCount = 1u << kSlLog2;
inline constexpr unsigned kFlCount = 64 - kSlLog2 + 1;  // units < 2^64

struct SizeClass {
  unsigned fl;
  unsigned sl;
  friend bool operator==(SizeClass, SizeClass) = default;
};

/// The class a free block of `units` granules is filed under. units >= 1.
constexpr SizeClass class_of(std::uint64_t units) noexcept {
  if (units < kSlCount) return {0, static_cast<unsigned>(units)};
  const unsigned f = 63u - static_cast<unsigned>(std::countl_zero(units));
  return {f - kSlLog2 + 1, static_cast<unsigned>((units >> (f - kSlLog2)) - kSlCount)};
}

/// The lowest class whose every block holds at least `units` granules: units
/// rounded up to the next class boundary. Empty when that rounding overflows
/// (no class can guarantee the fit; only the fallback search can help).
constexpr std::optional<SizeClass> class_at_least(std::uint64_t units) noexcept {
  if (units >= kSlCount) {
    const unsigned f = 63u - static_cast<unsigned>(std::countl_zero(units));
    const std::uint64_t step = std::uint64_t{1} << (f - kSlLog2);
    if (units > UINT64_MAX - (step - 1)) return std::nullopt;
    units += step - 1;
  }
  return class_of(units);
}

}  // namespace memlayer::bench::baseline

// memlayer/migration/location.hpp — where a buffer's bytes can live.
//
// A location is one memory that can hold a copy of a buffer: the host copy
// (location 0) or one device global memory (1..63). Devices that share a
// memory share a location, exactly as PoCL keys its copies by global_mem_id,
// not by device. The planner only ever compares and stores location numbers.
#pragma once

#include <bit>
#include <cstdint>

namespace memlayer::migration {

using Location = std::uint32_t;
inline constexpr Location kHost = 0;
inline constexpr Location kMaxLocations = 64;  ///< host + 63 device memories

/// A set of locations, one bit each. A value type; every operation O(1).
class LocationSet {
 public:
  constexpr LocationSet() = default;
  static constexpr LocationSet of(Location l) { return LocationSet(std::uint64_t{1} << l); }
  /// Every location: what content nobody defined is valid at.
  static constexpr LocationSet all() { return LocationSet(~std::uint64_t{0}); }

  [[nodiscard]] constexpr bool contains(Location l) const { return ((bits_ >> l) & 1u) != 0; }
  [[nodiscard]] constexpr bool empty() const { return bits_ == 0; }
  [[nodiscard]] constexpr unsigned count() const { return static_cast<unsigned>(std::popcount(bits_)); }
  constexpr void insert(Location l) { bits_ |= std::uint64_t{1} << l; }
  constexpr void erase(Location l) { bits_ &= ~(std::uint64_t{1} << l); }
  [[nodiscard]] constexpr std::uint64_t bits() const { return bits_; }

  /// Calls f(location) for each member, lowest first.
  template <class F>
  constexpr void for_each(F&& f) const {
    for (std::uint64_t b = bits_; b != 0; b &= b - 1) f(static_cast<Location>(std::countr_zero(b)));
  }

  friend constexpr LocationSet operator&(LocationSet a, LocationSet b) { return LocationSet(a.bits_ & b.bits_); }
  friend constexpr bool operator==(LocationSet, LocationSet) = default;

 private:
  constexpr explicit LocationSet(std::uint64_t bits) : bits_(bits) {}
  std::uint64_t bits_ = 0;
};

}  // namespace memlayer::migration

// memlayer/migration/access.hpp — what a command does to a byte range.
#pragma once

#include <cstdint>

namespace memlayer::migration {

enum class Access : std::uint8_t {
  /// Reads the range: it must be valid at the command's location first.
  read,
  /// May write any byte of the range but need not write all of them (a
  /// kernel's write-only argument): the bytes it leaves must keep their
  /// content, so stale parts are migrated first, as for read_write.
  write,
  /// Reads and writes (a read|write map, a kernel's read-write argument).
  read_write,
  /// Writes every byte of the range (a buffer write or fill, a copy's
  /// destination, a write-invalidate map): nothing is migrated.
  overwrite,
};

[[nodiscard]] constexpr bool reads_old_content(Access a) { return a != Access::overwrite; }
[[nodiscard]] constexpr bool writes(Access a) { return a != Access::read; }

/// One buffer range a command uses at one location.
struct Use {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  Access access = Access::read;
};

}  // namespace memlayer::migration

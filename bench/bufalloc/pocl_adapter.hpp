// PoCL 3.1's bufalloc (lib/CL/devices/bufalloc.c, built from Debian's
// pocl-source tarball) behind the benchmark allocator interface, set up the
// way a device driver with scarce memory would: the BALLOCS_TIGHT strategy.
// Only built when the tarball was found (MEMLAYER_BENCH_HAVE_POCL).
#pragma once

#include <memory>
#include <optional>

#include "workloads.hpp"

namespace memlayer::bench {

class PoclAllocator {
 public:
  using Block = Address;  ///< what allocate() returns and free() takes
  PoclAllocator(Address base, Size size);
  PoclAllocator(PoclAllocator&&) noexcept;
  PoclAllocator& operator=(PoclAllocator&&) noexcept;
  ~PoclAllocator();

  std::optional<Address> allocate(Size size);
  /// Frees by address, as memlayer's Region did: pocl_free_buffer() walks
  /// the chunk list to find it, which is what a driver holding only the
  /// device address pays.
  bool free(Address address);

  /// While on, allocations go straight to the end of the region (PoCL's
  /// BALLOCS_WASTEFUL). Before the first free that is exactly what TIGHT does
  /// too, after an O(n) walk that finds no free chunk; the benchmarks use it
  /// to pre-fill 10^5 blocks without an O(n^2) setup.
  void set_prefill(bool on);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memlayer::bench

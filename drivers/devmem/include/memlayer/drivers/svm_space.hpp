// memlayer/drivers/svm_space.hpp — shared virtual memory (OpenCL's
// coarse-grained buffer SVM) for drivers whose devices compute inside this
// process on the host's CPU: the PoCL memlayer driver.
//
// An SvmSpace is one range of virtual addresses, reserved once, out of which
// SVM allocations are carved by a bufalloc region. An allocation's address
// is one pointer for the host and for every device computing in the process,
// so a pointer stored inside an SVM buffer means the same bytes wherever it
// is followed. Reserving costs no memory (MAP_NORESERVE): a page is committed
// when first touched and given back when the allocations over it are freed.
// doc/svm.md says how a device with physically separate memory maps onto the
// same design.
//
// Errors are strings naming the space, the request and the state (free
// bytes, largest free block); nothing here aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "memlayer/bufalloc/stats.hpp"
#include "memlayer/drivers/device_memory.hpp"

namespace memlayer::drivers {

class SvmSpace {
 public:
  /// A live allocation: its first byte and its size as requested.
  struct Allocation {
    std::byte* data = nullptr;
    std::uint64_t size = 0;
  };

  /// Reserves `size` bytes (> 0) of virtual addresses. `name` is used in
  /// error messages. granularity: every allocation's address and size is a
  /// multiple of it (a power of two, at most 4096). Fails when the process
  /// cannot reserve that much address space. Cost: one mmap.
  static DevResult<SvmSpace> create(std::string name, std::uint64_t size, std::uint64_t granularity);

  SvmSpace(SvmSpace&&) noexcept;
  SvmSpace& operator=(SvmSpace&&) noexcept;
  SvmSpace(const SvmSpace&) = delete;
  SvmSpace& operator=(const SvmSpace&) = delete;
  /// Gives the whole range back; pointers into it become invalid.
  ~SvmSpace();

  /// An allocation of `size` bytes (> 0) aligned to max(alignment,
  /// granularity); its bytes are undefined. Errors: size 0, a bad alignment,
  /// or no room (naming the request, the free bytes and the largest free
  /// block). O(1) (bufalloc's TLSF), plus O(log allocations) for the
  /// lookup table. Thread-safe.
  DevResult<std::byte*> allocate(std::uint64_t size, std::uint64_t alignment = 0);

  /// Frees the allocation starting at `p` and gives its whole pages back to
  /// the system (they read as zero if used again). A null pointer, one
  /// inside or outside an allocation, or one freed already is an error
  /// naming it, and changes nothing. O(log allocations). Thread-safe.
  DevResult<void> free(const void* p);

  /// The live allocation holding the byte at `p` (its first byte or any
  /// other), or nullopt. O(log allocations). Thread-safe.
  [[nodiscard]] std::optional<Allocation> find(const void* p) const;

  /// Whether [p, p + length) lies inside the reserved range (allocated or
  /// not). O(1), thread-safe.
  [[nodiscard]] bool contains(const void* p, std::uint64_t length) const noexcept;

  /// The region's figures: used and free bytes, live blocks, peaks.
  /// Thread-safe.
  [[nodiscard]] bufalloc::RegionStats stats() const;
  [[nodiscard]] std::uint64_t size() const noexcept;
  [[nodiscard]] const std::string& name() const noexcept;

 private:
  struct State;
  explicit SvmSpace(std::unique_ptr<State> state) noexcept;
  std::unique_ptr<State> state_;
};

}  // namespace memlayer::drivers

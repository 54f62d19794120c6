#include "memlayer/bufalloc/error.hpp"

#include <string>

namespace memlayer::bufalloc {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::zero_size: return "zero_size";
    case Errc::size_overflow: return "size_overflow";
    case Errc::alignment_not_power_of_two: return "alignment_not_power_of_two";
    case Errc::alignment_overflow: return "alignment_overflow";
    case Errc::out_of_memory: return "out_of_memory";
    case Errc::address_outside_region: return "address_outside_region";
    case Errc::not_block_start: return "not_block_start";
    case Errc::double_free: return "double_free";
    case Errc::region_empty: return "region_empty";
    case Errc::region_wraps: return "region_wraps";
    case Errc::granularity_not_power_of_two: return "granularity_not_power_of_two";
    case Errc::misaligned_base: return "misaligned_base";
    case Errc::stale_mark: return "stale_mark";
    case Errc::invariant_violation: return "invariant_violation";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::host_out_of_memory: return "host_out_of_memory";
    case Errc::stale_handle: return "stale_handle";
    case Errc::foreign_handle: return "foreign_handle";
    case Errc::no_hole: return "no_hole";
  }
  return "unknown_error";
}

std::string Error::message() const {
  using std::to_string;
  const std::string name = errc_name(code);
  const std::string req = "request of " + to_string(size) + " bytes (alignment " + to_string(alignment) + ")";
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::zero_size: return name + ": a request of 0 bytes is not allowed";
    case Errc::size_overflow: return name + ": " + req + " overflows 64 bits when rounded up to the granularity";
    case Errc::alignment_not_power_of_two: return name + ": alignment " + to_string(alignment) + " is not a power of two";
    case Errc::alignment_overflow: return name + ": " + req + " overflows 64 bits with its alignment padding";
    case Errc::out_of_memory:
      return name + ": " + req + " failed; " + to_string(free_bytes) + " bytes free, largest free block " +
             to_string(largest_free) + " bytes";
    case Errc::address_outside_region: return name + ": address " + to_string(address) + " is outside the region";
    case Errc::not_block_start: return name + ": address " + to_string(address) + " is inside a live block, not at its start";
    case Errc::double_free:
      return name + ": address " + to_string(address) + " is not allocated (already freed, or never allocated)";
    case Errc::region_empty:
      return name + ": region size " + to_string(size) + " is smaller than the granularity " + to_string(alignment);
    case Errc::region_wraps:
      return name + ": region at " + to_string(address) + " of " + to_string(size) + " bytes wraps the 64-bit address space";
    case Errc::granularity_not_power_of_two:
      return name + ": granularity " + to_string(alignment) + " is not a power of two";
    case Errc::misaligned_base:
      return name + ": base " + to_string(address) + " is not a multiple of the granularity " + to_string(alignment);
    case Errc::stale_mark: return name + ": the mark is from another allocator, before a reset, or above the current top";
    case Errc::invariant_violation: return name + ": allocator bookkeeping is inconsistent";
    case Errc::invalid_argument: return name + ": a required pointer argument is null";
    case Errc::host_out_of_memory: return name + ": host memory for the allocator's bookkeeping ran out";
    case Errc::stale_handle:
      return name + ": the handle of the block at address " + to_string(address) +
             " is stale: that block was freed and its record now serves another block";
    case Errc::foreign_handle:
      return name + ": the handle of address " + to_string(address) +
             " was not issued by this region (another region's, zero-initialised, or altered)";
    case Errc::no_hole:
      return name + ": no run of free and evictable blocks can hold a " + req + "; " + to_string(free_bytes) +
             " bytes free, largest free block " + to_string(largest_free) + " bytes";
  }
  return name;
}

}  // namespace memlayer::bufalloc

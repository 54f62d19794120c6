#include "memlayer/bufalloc/linear_region.hpp"

#include <atomic>
#include <bit>
#include <limits>

namespace memlayer::bufalloc {

namespace {
// Every instance and every reset epoch draws a fresh owner tag, so a mark
// can't be replayed on another allocator or across a reset.
std::uint64_t next_owner() noexcept {
  static std::atomic<std::uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

Result<LinearRegion> LinearRegion::create(Address base, Size size) {
  if (size == 0) return Error{Errc::region_empty, size, 1, base};
  if (size > std::numeric_limits<Size>::max() - base) return Error{Errc::region_wraps, size, 1, base};
  return LinearRegion(base, size);
}

LinearRegion::LinearRegion(Address base, Size size) noexcept : base_(base), size_(size), owner_(next_owner()) {}

Result<Address> LinearRegion::allocate(Size size, Size alignment) {
  if (size == 0) return Error{Errc::zero_size, size, alignment};
  if (alignment == 0) alignment = 1;
  if ((alignment & (alignment - 1)) != 0) return Error{Errc::alignment_not_power_of_two, size, alignment};
  // base_ + top_ <= base_ + size_ cannot overflow (checked at create).
  const Address cursor = base_ + top_;
  const Size pad = (0 - cursor) & (alignment - 1);
  const Size room = size_ - top_;
  if (pad > room || size > room - pad) {
    ++failed_;
    Error e{Errc::out_of_memory, size, alignment};
    e.free_bytes = room;
    e.largest_free = room;
    return e;
  }
  top_ += pad + size;
  if (top_ > peak_) peak_ = top_;
  ++allocations_;
  return cursor + pad;
}

Result<void> LinearRegion::rollback(Mark m) {
  if (m.owner != owner_ || m.top > top_) return Error{Errc::stale_mark};
  top_ = m.top;
  return {};
}

void LinearRegion::reset() noexcept {
  top_ = 0;
  owner_ = next_owner();
}

LinearStats LinearRegion::stats() const noexcept {
  return LinearStats{size_, top_, peak_, allocations_, failed_};
}

}  // namespace memlayer::bufalloc

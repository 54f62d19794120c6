#include "pocl_adapter.hpp"

#include <cstdio>
#include <cstdlib>

#include "bufalloc.h"

namespace memlayer::bench {

struct PoclAllocator::Impl {
  // memory_region holds MAX_CHUNKS_IN_REGION chunk records inline (16 MiB at
  // 262144), too big for the stack; PoCL expects callers to provide storage.
  memory_region_t* region = nullptr;

  Impl() : region(static_cast<memory_region_t*>(std::calloc(1, sizeof(memory_region)))) {
    if (region == nullptr) {
      std::fprintf(stderr, "PoclAllocator: cannot allocate the region record\n");
      std::abort();
    }
  }
  ~Impl() { std::free(const_cast<memory_region*>(region)); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
};

PoclAllocator::PoclAllocator(Address base, Size size) : impl_(std::make_unique<Impl>()) {
  memory_region_t* region = impl_->region;
  pocl_init_mem_region(region, static_cast<memory_address_t>(base), static_cast<size_t>(size));
  region->strategy = BALLOCS_TIGHT;
  // The header calls this field a power-of-two exponent, but bufalloc.c masks
  // addresses with (alignment - 1): it is a byte count. 64 is also PoCL's
  // default; set here so the comparison does not depend on that default.
  region->alignment = static_cast<unsigned short>(kAlignment);
}

PoclAllocator::PoclAllocator(PoclAllocator&&) noexcept = default;
PoclAllocator& PoclAllocator::operator=(PoclAllocator&&) noexcept = default;
PoclAllocator::~PoclAllocator() = default;

std::optional<Address> PoclAllocator::allocate(Size size) {
  if (size == 0) return std::nullopt;
  // PoCL aligns only a chunk's start and keeps the exact size, so the tail
  // left behind is unaligned and its padding is lost on the next append.
  // Rounding up first gives it the same 64-byte granularity as the others.
  const Size rounded = (size + kAlignment - 1) & ~(kAlignment - 1);
  chunk_info_t* chunk = pocl_alloc_buffer_from_region(impl_->region, static_cast<size_t>(rounded));
  if (chunk == nullptr) return std::nullopt;
  return static_cast<Address>(chunk->start_address);
}

bool PoclAllocator::free(Address address) {
  return pocl_free_buffer(impl_->region, static_cast<memory_address_t>(address)) != nullptr;
}

void PoclAllocator::set_prefill(bool on) {
  impl_->region->strategy = on ? BALLOCS_WASTEFUL : BALLOCS_TIGHT;
}

}  // namespace memlayer::bench

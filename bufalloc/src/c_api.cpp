// The C boundary: typed errors become ml_status codes plus a thread-local
// message; no exception crosses it.
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "memlayer/bufalloc.h"
#include "memlayer/bufalloc/linear_region.hpp"
#include "memlayer/bufalloc/locked_region.hpp"
#include "memlayer/bufalloc/region.hpp"
#include "memlayer/c_status.hpp"

using namespace memlayer::bufalloc;
namespace c_api = memlayer::c_api;

struct ml_region {
  // Exactly one is engaged, chosen by ML_REGION_THREAD_SAFE.
  std::optional<Region> plain;
  std::optional<LockedRegion> locked;

  template <class F>
  decltype(auto) with(F&& f) {
    return plain ? f(*plain) : f(*locked);
  }
  template <class F>
  decltype(auto) with(F&& f) const {
    return plain ? f(*plain) : f(*locked);
  }
};

struct ml_linear {
  explicit ml_linear(LinearRegion r) : region(std::move(r)) {}
  LinearRegion region;
};

namespace {

ml_status to_status(Errc code) noexcept { return static_cast<ml_status>(code); }

ml_status fail(const Error& e, const std::string& detail = {}) {
  return c_api::fail(to_status(e.code), detail.empty() ? e.message() : e.message() + ": " + detail);
}

ml_status fail(Errc code) { return fail(Error{code}); }

// Runs f, turning host allocation failure into a status.
template <class F>
ml_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(Errc::host_out_of_memory);
  }
}

template <class R>
ml_status from_result(const R& r) {
  return r.ok() ? ML_OK : fail(r.error());
}

}  // namespace

extern "C" {

ml_status ml_region_create(uint64_t base, uint64_t size, uint64_t granularity, uint32_t flags, ml_region** out) {
  if (out == nullptr) return fail(Errc::invalid_argument);
  return guarded([&] {
    auto region = std::make_unique<ml_region>();
    if ((flags & ML_REGION_THREAD_SAFE) != 0) {
      auto made = LockedRegion::create(base, size, RegionOptions{granularity});
      if (!made) return fail(made.error());
      region->locked.emplace(std::move(made).value());
    } else {
      auto made = Region::create(base, size, RegionOptions{granularity});
      if (!made) return fail(made.error());
      region->plain.emplace(std::move(made).value());
    }
    *out = region.release();  // ownership passes to the caller's ml_region_destroy
    return ML_OK;
  });
}

void ml_region_destroy(ml_region* region) { std::unique_ptr<ml_region> owned(region); }

ml_status ml_region_alloc(ml_region* region, uint64_t size, uint64_t alignment, uint64_t* out_address) {
  if (region == nullptr || out_address == nullptr) return fail(Errc::invalid_argument);
  return guarded([&] {
    auto r = region->with([&](auto& reg) { return reg.allocate(size, alignment); });
    if (!r) return fail(r.error());
    *out_address = r.value().address;
    return ML_OK;
  });
}

ml_status ml_region_alloc_block(ml_region* region, uint64_t size, uint64_t alignment, ml_block* out_block) {
  if (region == nullptr || out_block == nullptr) return fail(Errc::invalid_argument);
  return guarded([&] {
    auto r = region->with([&](auto& reg) { return reg.allocate(size, alignment); });
    if (!r) return fail(r.error());
    const BlockHandle& h = r.value();
    *out_block = ml_block{h.address, h.index, h.generation, h.region, 0};
    return ML_OK;
  });
}

ml_status ml_region_free(ml_region* region, uint64_t address) {
  if (region == nullptr) return fail(Errc::invalid_argument);
  // The first free by address builds the region's address index.
  return guarded([&] { return from_result(region->with([&](auto& reg) { return reg.free(address); })); });
}

ml_status ml_region_free_block(ml_region* region, const ml_block* block) {
  if (region == nullptr || block == nullptr) return fail(Errc::invalid_argument);
  const BlockHandle h{block->address, block->index, block->generation, block->region};
  return from_result(region->with([&](auto& reg) { return reg.free(h); }));
}

ml_status ml_region_reset(ml_region* region) {
  if (region == nullptr) return fail(Errc::invalid_argument);
  return guarded([&] {
    region->with([](auto& reg) { reg.reset(); });
    return ML_OK;
  });
}

ml_status ml_region_get_stats(const ml_region* region, ml_region_stats* out) {
  if (region == nullptr || out == nullptr) return fail(Errc::invalid_argument);
  const RegionStats s = region->with([](const auto& reg) { return reg.stats(); });
  *out = ml_region_stats{s.total_bytes,  s.used_bytes,      s.free_bytes,      s.largest_free, s.peak_used_bytes,
                         s.live_blocks,  s.free_blocks,     s.failed_requests, s.slow_searches, s.fragmentation()};
  return ML_OK;
}

ml_status ml_region_walk(const ml_region* region, ml_block_visitor visit, void* user) {
  if (region == nullptr || visit == nullptr) return fail(Errc::invalid_argument);
  region->with([&](const auto& reg) {
    reg.walk([&](const BlockInfo& b) { visit(user, b.address, b.size, b.free ? 1 : 0); });
  });
  return ML_OK;
}

ml_status ml_region_cheapest_hole(const ml_region* region, uint64_t size, uint64_t alignment,
                                  ml_block_filter evictable, ml_block_visitor visit, void* user, ml_hole* out) {
  if (region == nullptr || out == nullptr) return fail(Errc::invalid_argument);
  return guarded([&] {
    auto r = region->with([&](const auto& reg) {
      return reg.cheapest_hole(
          size, alignment,
          [&](const BlockInfo& b) -> std::optional<std::uint64_t> {
            if (evictable != nullptr && evictable(user, b.address, b.size) == 0) return std::nullopt;
            return 0;
          },
          [&](const BlockInfo& b) {
            if (visit != nullptr) visit(user, b.address, b.size, 0);
          });
    });
    if (!r) return fail(r.error());
    const Hole& h = r.value();
    *out = ml_hole{h.address, h.size, h.live_bytes, h.live_blocks};
    return ML_OK;
  });
}

ml_status ml_region_check(const ml_region* region) {
  if (region == nullptr) return fail(Errc::invalid_argument);
  std::string what;
  auto r = region->with([&](const auto& reg) { return reg.check(&what); });
  return r.ok() ? ML_OK : fail(r.error(), what);
}

ml_status ml_linear_create(uint64_t base, uint64_t size, ml_linear** out) {
  if (out == nullptr) return fail(Errc::invalid_argument);
  return guarded([&] {
    auto made = LinearRegion::create(base, size);
    if (!made) return fail(made.error());
    *out = std::make_unique<ml_linear>(std::move(made).value()).release();  // freed by ml_linear_destroy
    return ML_OK;
  });
}

void ml_linear_destroy(ml_linear* linear) { std::unique_ptr<ml_linear> owned(linear); }

ml_status ml_linear_alloc(ml_linear* linear, uint64_t size, uint64_t alignment, uint64_t* out_address) {
  if (linear == nullptr || out_address == nullptr) return fail(Errc::invalid_argument);
  auto r = linear->region.allocate(size, alignment);
  if (!r) return fail(r.error());
  *out_address = r.value();
  return ML_OK;
}

ml_status ml_linear_mark_get(const ml_linear* linear, ml_linear_mark* out) {
  if (linear == nullptr || out == nullptr) return fail(Errc::invalid_argument);
  const auto m = linear->region.mark();
  *out = ml_linear_mark{m.top, m.owner};
  return ML_OK;
}

ml_status ml_linear_rollback(ml_linear* linear, ml_linear_mark mark) {
  if (linear == nullptr) return fail(Errc::invalid_argument);
  return from_result(linear->region.rollback(LinearRegion::Mark{mark.top, mark.owner}));
}

ml_status ml_linear_reset(ml_linear* linear) {
  if (linear == nullptr) return fail(Errc::invalid_argument);
  linear->region.reset();
  return ML_OK;
}

ml_status ml_linear_get_stats(const ml_linear* linear, ml_linear_stats* out) {
  if (linear == nullptr || out == nullptr) return fail(Errc::invalid_argument);
  const LinearStats s = linear->region.stats();
  *out = ml_linear_stats{s.total_bytes, s.used_bytes, s.peak_used_bytes, s.allocations, s.failed_requests};
  return ML_OK;
}

}  // extern "C"

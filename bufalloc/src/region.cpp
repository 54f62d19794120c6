#include "memlayer/bufalloc/region.hpp"

#include <bit>

#include "region_core.hpp"

namespace memlayer::bufalloc {

Result<Region> Region::create(Address base, Size size, RegionOptions options) {
  const Size g = options.granularity;
  Error e{Errc::ok, size, g, base};
  if (g == 0 || (g & (g - 1)) != 0) return (e.code = Errc::granularity_not_power_of_two, e);
  if ((base & (g - 1)) != 0) return (e.code = Errc::misaligned_base, e);
  if (size > UINT64_MAX - base) return (e.code = Errc::region_wraps, e);
  const Size usable = size & ~(g - 1);
  if (usable == 0) return (e.code = Errc::region_empty, e);
  return Region(std::make_unique<detail::RegionCore>(base, usable, static_cast<unsigned>(std::countr_zero(g))));
}

Region::Region(std::unique_ptr<detail::RegionCore> core) noexcept : core_(std::move(core)) {}
Region::Region(Region&&) noexcept = default;
Region& Region::operator=(Region&&) noexcept = default;
Region::~Region() = default;

// Region::allocate() and Region::free(BlockHandle) are defined in
// region_core.cpp, where the engine's hot path is inlined into them.
Result<void> Region::free(Address address) { return core_->free(address); }
bool Region::indexes_addresses() const noexcept { return core_->indexes_addresses(); }
void Region::reset() { core_->reset(); }
RegionStats Region::stats() const { return core_->stats(); }
void Region::walk(const std::function<void(const BlockInfo&)>& visit) const { core_->walk(visit); }
Result<Hole> Region::cheapest_hole(Size size, Size alignment, const std::function<std::optional<std::uint64_t>(const BlockInfo&)>& evictable,
                                   const std::function<void(const BlockInfo&)>& visit) const {
  return core_->cheapest_hole(size, alignment, evictable, visit);
}
Result<void> Region::check(std::string* what) const { return core_->check(what); }
Address Region::base() const noexcept { return core_->base(); }
Size Region::size() const noexcept { return core_->size(); }
Size Region::granularity() const noexcept { return core_->granularity(); }
std::uint32_t Region::id() const noexcept { return core_->id(); }

}  // namespace memlayer::bufalloc

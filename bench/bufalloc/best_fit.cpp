#include "best_fit.hpp"

#include <iterator>

namespace memlayer::bench {

namespace {
Size round_up(Size size) { return (size + kAlignment - 1) & ~(kAlignment - 1); }
}  // namespace

BestFitAllocator::BestFitAllocator(Address base, Size size) {
  const Size usable = size & ~(kAlignment - 1);
  if (usable != 0) insert_free(base, usable);
}

std::optional<Address> BestFitAllocator::allocate(Size size) {
  if (size == 0) return std::nullopt;
  const Size need = round_up(size);
  // Every block starts and ends on the alignment, so "fits" is just size.
  const auto fit = by_size_.lower_bound({need, 0});
  if (fit == by_size_.end()) return std::nullopt;
  const auto [block_size, address] = *fit;
  by_size_.erase(fit);
  by_address_.erase(address);
  if (block_size > need) insert_free(address + need, block_size - need);
  used_.emplace(address, need);
  return address;
}

bool BestFitAllocator::free(Address address) {
  const auto used = used_.find(address);
  if (used == used_.end()) return false;
  Address start = address;
  Size size = used->second;
  used_.erase(used);

  const auto next = by_address_.lower_bound(address);
  if (next != by_address_.end() && next->first == address + size) {
    size += next->second;
    erase_free(next);
  }
  const auto after = by_address_.lower_bound(address);
  if (after != by_address_.begin()) {
    const auto prev = std::prev(after);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  insert_free(start, size);
  return true;
}

void BestFitAllocator::insert_free(Address address, Size size) {
  by_size_.emplace(size, address);
  by_address_.emplace(address, size);
}

void BestFitAllocator::erase_free(std::map<Address, Size>::iterator block) {
  by_size_.erase({block->second, block->first});
  by_address_.erase(block);
}

}  // namespace memlayer::bench

// The exact best-fit reference: always takes the smallest free block that
// holds the request (lowest address on ties), carving from its front, and
// coalesces on free. Balanced trees make it O(log n) and cache-unfriendly;
// it is here as the utilisation anchor, not as a speed contender.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "workloads.hpp"

namespace memlayer::bench {

class BestFitAllocator {
 public:
  using Block = Address;  ///< what allocate() returns and free() takes
  BestFitAllocator(Address base, Size size);

  std::optional<Address> allocate(Size size);
  bool free(Address address);

 private:
  void insert_free(Address address, Size size);
  void erase_free(std::map<Address, Size>::iterator block);

  std::set<std::pair<Size, Address>> by_size_;
  std::map<Address, Size> by_address_;
  std::unordered_map<Address, Size> used_;
};

}  // namespace memlayer::bench

// The incremental hash index behind free(address), checked against
// std::unordered_map through growth, migration and erasure.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

#include "address_index.hpp"

using memlayer::bufalloc::detail::AddressIndex;

TEST(AddressIndex, MatchesAReferenceMapThroughGrowthAndMigration) {
  AddressIndex index;
  std::unordered_map<std::uint64_t, AddressIndex::Value> ref;
  std::mt19937_64 rng(42);
  std::vector<std::uint64_t> keys;
  for (int step = 0; step < 400000; ++step) {
    const bool grow_phase = (step / 50000) % 2 == 0;  // alternately fill and drain
    if (!keys.empty() && rng() % 100 < (grow_phase ? 30u : 70u)) {
      const size_t k = rng() % keys.size();
      const std::uint64_t key = keys[k];
      ASSERT_EQ(index.erase(key), ref[key]) << step;
      ref.erase(key);
      keys[k] = keys.back();
      keys.pop_back();
    } else {
      const std::uint64_t key = (rng() % (1ull << 40)) * 64;  // aligned like block addresses
      if (ref.count(key)) continue;
      const auto v = static_cast<AddressIndex::Value>(1 + rng() % (1u << 16));  // 0 means absent
      index.insert(key, v);
      ref[key] = v;
      keys.push_back(key);
    }
    ASSERT_EQ(index.size(), ref.size());
    if (step % 997 == 0) {
      for (std::uint64_t key : keys) ASSERT_EQ(index.find(key), ref[key]);
      ASSERT_EQ(index.find(1), AddressIndex::kEmpty);  // never a key: not 64-aligned
    }
  }
  size_t visited = 0;
  index.for_each([&](std::uint64_t key, AddressIndex::Value v) {
    ++visited;
    EXPECT_EQ(ref.at(key), v);
  });
  EXPECT_EQ(visited, ref.size());
  index.clear();
  EXPECT_EQ(index.size(), 0u);
  for (std::uint64_t key : keys) EXPECT_EQ(index.find(key), AddressIndex::kEmpty);
}

TEST(AddressIndex, EraseOfMissingKeyIsHarmless) {
  AddressIndex index;
  const AddressIndex::Value v = 7;
  index.insert(128, v);
  EXPECT_EQ(index.erase(64), AddressIndex::kEmpty);
  EXPECT_EQ(index.erase(128), v);
  EXPECT_EQ(index.erase(128), AddressIndex::kEmpty);
  EXPECT_EQ(index.size(), 0u);
}

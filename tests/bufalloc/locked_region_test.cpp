// LockedRegion under several threads: no two live blocks ever overlap, and
// the bookkeeping is consistent afterwards. Half the threads free by handle,
// half by address, so the address index is built and kept up to date while
// handle frees run alongside.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "memlayer/bufalloc/locked_region.hpp"

using namespace memlayer::bufalloc;

TEST(LockedRegion, ConcurrentAllocateFreeKeepsBlocksDisjoint) {
  auto made = LockedRegion::create(0, Size{64} << 20, RegionOptions{64});
  ASSERT_TRUE(made.ok());
  LockedRegion& region = made.value();
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  std::vector<std::vector<std::pair<BlockHandle, Size>>> kept(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      std::vector<std::pair<BlockHandle, Size>> live;
      for (int i = 0; i < kOps; ++i) {
        if (!live.empty() && rng() % 2 == 0) {
          const size_t k = rng() % live.size();
          const bool by_handle = t % 2 == 0;
          ASSERT_TRUE((by_handle ? region.free(live[k].first) : region.free(live[k].first.address)).ok());
          live[k] = live.back();
          live.pop_back();
        } else {
          const Size size = 1 + rng() % 8192;
          auto a = region.allocate(size, Size{1} << (rng() % 10));
          ASSERT_TRUE(a.ok()) << a.error().message();
          live.emplace_back(a.value(), size);
        }
        if (i % 1000 == 0) (void)region.stats();
      }
      kept[t] = std::move(live);
    });
  }
  for (auto& th : threads) th.join();

  std::vector<std::pair<Address, Size>> all;
  for (auto& v : kept)
    for (auto& [block, size] : v) all.emplace_back(block.address, size);
  std::sort(all.begin(), all.end());
  for (size_t i = 1; i < all.size(); ++i)
    ASSERT_LE(all[i - 1].first + all[i - 1].second, all[i].first) << "overlapping live blocks";
  EXPECT_EQ(region.stats().live_blocks, all.size());
  std::string what;
  EXPECT_TRUE(region.check(&what).ok()) << what;
  EXPECT_TRUE(region.indexes_addresses());
}

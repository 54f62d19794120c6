// Region's contracts on valid input: placement, alignment, coalescing, the
// "never full while a fitting block exists" guarantee, statistics, walk, reset.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "memlayer/bufalloc/region.hpp"

using namespace memlayer::bufalloc;

namespace {

Region make(Address base, Size size, Size granularity = 64) {
  auto r = Region::create(base, size, RegionOptions{granularity});
  EXPECT_TRUE(r.ok()) << r.error().message();
  return std::move(r).value();
}

std::vector<BlockInfo> blocks(const Region& r) {
  std::vector<BlockInfo> out;
  r.walk([&](const BlockInfo& b) { out.push_back(b); });
  return out;
}

void expect_consistent(const Region& r) {
  std::string what;
  EXPECT_TRUE(r.check(&what).ok()) << what;
}

}  // namespace

TEST(Region, CreateReportsGeometryAndOneFreeBlock) {
  Region r = make(4096, 1 << 20);
  EXPECT_EQ(r.base(), 4096u);
  EXPECT_EQ(r.size(), 1u << 20);
  EXPECT_EQ(r.granularity(), 64u);
  const RegionStats s = r.stats();
  EXPECT_EQ(s.total_bytes, 1u << 20);
  EXPECT_EQ(s.free_bytes, 1u << 20);
  EXPECT_EQ(s.largest_free, 1u << 20);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  expect_consistent(r);
}

TEST(Region, UsableSizeIsRoundedDownToGranularity) {
  Region r = make(0, 1000, 64);
  EXPECT_EQ(r.size(), 960u);
  EXPECT_EQ(r.stats().total_bytes, 960u);
  expect_consistent(r);
}

TEST(Region, AllocationsAreInsideDisjointAndRounded) {
  Region r = make(1 << 16, 1 << 20);
  std::vector<std::pair<Address, Size>> got;
  for (Size size : {1u, 63u, 64u, 65u, 1000u, 4096u, 12345u}) {
    auto a = r.allocate(size);
    ASSERT_TRUE(a.ok()) << a.error().message();
    EXPECT_EQ(a.value().address % 64, 0u);
    EXPECT_GE(a.value().address, r.base());
    EXPECT_LE(a.value().address + size, r.base() + r.size());
    got.emplace_back(a.value().address, (size + 63) / 64 * 64);
  }
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t j = i + 1; j < got.size(); ++j)
      EXPECT_TRUE(got[i].first + got[i].second <= got[j].first || got[j].first + got[j].second <= got[i].first);
  Size used = 0;
  for (auto& [a, s] : got) used += s;
  EXPECT_EQ(r.stats().used_bytes, used);
  EXPECT_EQ(r.stats().live_blocks, got.size());
  expect_consistent(r);
}

TEST(Region, AlignmentZeroOrSmallMeansGranularity) {
  Region r = make(0, 1 << 20, 256);
  for (Size align : {0u, 1u, 2u, 128u, 256u}) {
    auto a = r.allocate(10, align);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a.value().address % 256, 0u) << "alignment " << align;
  }
}

TEST(Region, LargeAlignmentIsHonouredAndPaddingStaysUsable) {
  Region r = make(0, 1 << 20, 64);
  ASSERT_TRUE(r.allocate(64).ok());  // occupies [0, 64): the next 4 KiB boundary needs padding
  auto big = r.allocate(100, 4096);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big.value().address % 4096, 0u);
  EXPECT_EQ(big.value().address, 4096u);
  // The padding [64, 4096) is a free block, not waste: 63 more 64 B blocks fit there.
  for (int i = 0; i < 63; ++i) {
    auto a = r.allocate(64);
    ASSERT_TRUE(a.ok());
    EXPECT_LT(a.value().address, 4096u) << "padding was not reused";
  }
  expect_consistent(r);
}

TEST(Region, AlignmentBeyondRegionBaseAlignment) {
  // Base aligned only to 64; a 1 MiB alignment must still be met exactly.
  Region r = make(64, 4u << 20, 64);
  auto a = r.allocate(64, 1u << 20);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value().address % (1u << 20), 0u);
  expect_consistent(r);
}

TEST(Region, FillsToTheLastByte) {
  Region r = make(0, 64 * 1000, 64);
  std::vector<Address> got;
  for (int i = 0; i < 1000; ++i) {
    auto a = r.allocate(64);
    ASSERT_TRUE(a.ok()) << "block " << i << ": " << a.error().message();
    got.push_back(a.value().address);
  }
  EXPECT_EQ(r.allocate(1).error().code, Errc::out_of_memory);
  EXPECT_EQ(r.stats().free_bytes, 0u);
  for (Address a : got) ASSERT_TRUE(r.free(a).ok());
  EXPECT_EQ(r.stats().free_blocks, 1u);
  EXPECT_EQ(r.stats().largest_free, r.size());
  expect_consistent(r);
}

TEST(Region, FreeCoalescesWithBothNeighbours) {
  Region r = make(0, 64 * 4, 64);
  Address a = r.allocate(64).value().address, b = r.allocate(64).value().address, c = r.allocate(64).value().address;
  ASSERT_TRUE(r.free(a).ok());
  ASSERT_TRUE(r.free(c).ok());
  EXPECT_EQ(r.stats().free_blocks, 2u);  // [a] and [c + tail]
  ASSERT_TRUE(r.free(b).ok());
  EXPECT_EQ(r.stats().free_blocks, 1u);
  EXPECT_EQ(r.stats().largest_free, 256u);
  auto bl = blocks(r);
  ASSERT_EQ(bl.size(), 1u);
  EXPECT_TRUE(bl[0].free);
  expect_consistent(r);
}

TEST(Region, NeverFullWhileAFittingBlockExists) {
  // 65 granules sits in a class whose sizes step by 2, so the O(1) search for
  // 65 rounds up to 66 and misses the exact 65-granule hole. The fallback must
  // find it.
  Region r = make(0, 64 * 66, 64);
  Address a = r.allocate(64 * 65).value().address;
  ASSERT_TRUE(r.allocate(64).ok());
  ASSERT_TRUE(r.free(a).ok());
  const auto before = r.stats().slow_searches;
  auto again = r.allocate(64 * 65);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again.value().address, a);
  EXPECT_EQ(r.stats().slow_searches, before + 1);
  EXPECT_EQ(r.stats().failed_requests, 0u);
  expect_consistent(r);
}

TEST(Region, FallbackUsesRealAlignmentPadding) {
  // A 64-byte hole at 1024 already aligned to 1024: the O(1) search wants a
  // block of 64 + 960 worst-case padding and finds none; the hole still fits.
  Region r = make(0, 4096, 64);
  std::vector<Address> all;
  for (int i = 0; i < 64; ++i) all.push_back(r.allocate(64).value().address);
  ASSERT_TRUE(r.free(1024).ok());
  auto a = r.allocate(64, 1024);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a.value().address, 1024u);
  expect_consistent(r);
}

TEST(Region, BestFitChosenByFallback) {
  // Holes of 135 and 133 granules share the class [132, 136). A request for
  // 133 rounds up to 136 and misses the O(1) path; the fallback must take the
  // exact 133-granule hole rather than split the 135 one.
  Region r = make(0, 64 * (135 + 1 + 133 + 1), 64);
  Address h135 = r.allocate(64 * 135).value().address;
  ASSERT_TRUE(r.allocate(64).ok());
  Address h133 = r.allocate(64 * 133).value().address;
  ASSERT_TRUE(r.allocate(64).ok());
  ASSERT_TRUE(r.free(h135).ok());
  ASSERT_TRUE(r.free(h133).ok());
  const auto slow_before = r.stats().slow_searches;
  auto a = r.allocate(64 * 133);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value().address, h133);
  EXPECT_EQ(r.stats().slow_searches, slow_before + 1);
  EXPECT_EQ(r.stats().largest_free, 64u * 135);
  expect_consistent(r);
}

TEST(Region, StatisticsTrackUsePeakAndFragmentation) {
  Region r = make(0, 64 * 100, 64);
  std::vector<Address> got;
  for (int i = 0; i < 10; ++i) got.push_back(r.allocate(640).value().address);
  EXPECT_EQ(r.stats().used_bytes, 6400u);
  EXPECT_EQ(r.stats().peak_used_bytes, 6400u);
  for (int i = 0; i < 10; i += 2) ASSERT_TRUE(r.free(got[i]).ok());
  const RegionStats s = r.stats();
  EXPECT_EQ(s.used_bytes, 3200u);
  EXPECT_EQ(s.peak_used_bytes, 6400u);
  EXPECT_EQ(s.live_blocks, 5u);
  EXPECT_EQ(s.free_blocks, 5u);
  EXPECT_EQ(s.largest_free, 640u);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 1.0 - 640.0 / 3200.0);
  EXPECT_EQ(r.allocate(641).error().code, Errc::out_of_memory);
  EXPECT_EQ(r.stats().failed_requests, 1u);
}

TEST(Region, LargestFreeFollowsSplitsAndMerges) {
  Region r = make(0, 64 * 64, 64);
  Address a = r.allocate(64 * 32).value().address;
  EXPECT_EQ(r.stats().largest_free, 64u * 32);
  Address b = r.allocate(64 * 16).value().address;
  EXPECT_EQ(r.stats().largest_free, 64u * 16);
  ASSERT_TRUE(r.free(a).ok());
  EXPECT_EQ(r.stats().largest_free, 64u * 32);
  ASSERT_TRUE(r.free(b).ok());
  EXPECT_EQ(r.stats().largest_free, 64u * 64);
  expect_consistent(r);
}

TEST(Region, WalkTilesTheSpaceInAddressOrder) {
  Region r = make(1024, 64 * 50, 64);
  Address a = r.allocate(128).value().address;
  ASSERT_TRUE(r.allocate(64).ok());
  ASSERT_TRUE(r.free(a).ok());
  auto bl = blocks(r);
  ASSERT_EQ(bl.size(), 3u);
  Address expect = r.base();
  for (const auto& b : bl) {
    EXPECT_EQ(b.address, expect);
    expect += b.size;
  }
  EXPECT_EQ(expect, r.base() + r.size());
  EXPECT_TRUE(bl[0].free);
  EXPECT_FALSE(bl[1].free);
  EXPECT_TRUE(bl[2].free);
}

TEST(Region, ResetFreesEverythingKeepsPeak) {
  Region r = make(0, 1 << 20, 64);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(r.allocate(1000).ok());
  const Size peak = r.stats().peak_used_bytes;
  r.reset();
  const RegionStats s = r.stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(s.peak_used_bytes, peak);
  expect_consistent(r);
  EXPECT_TRUE(r.allocate(1 << 20).ok());
}

TEST(Region, AddressesAtTheTopOfThe64BitSpace) {
  const Address base = UINT64_MAX - (Size{1} << 20) + 1 - 4095;  // 4 KiB aligned
  Region r = make(base & ~Address{4095}, Size{1} << 20, 4096);
  auto a = r.allocate(Size{1} << 19);
  ASSERT_TRUE(a.ok());
  auto b = r.allocate(Size{1} << 19);
  ASSERT_TRUE(b.ok()) << b.error().message();
  EXPECT_EQ(b.value().address + (Size{1} << 19) - 1, r.base() + r.size() - 1);
  EXPECT_EQ(r.allocate(1).error().code, Errc::out_of_memory);
  ASSERT_TRUE(r.free(a.value().address).ok());
  ASSERT_TRUE(r.free(b.value().address).ok());
  expect_consistent(r);
}

TEST(Region, NoLimitOnLiveBlocks) {
  // PoCL's bufalloc stops at 1024 chunk records per region; this must not.
  constexpr int kBlocks = 200000;
  Region r = make(0, Size{64} * kBlocks, 64);
  std::vector<Address> got;
  got.reserve(kBlocks);
  for (int i = 0; i < kBlocks; ++i) {
    auto a = r.allocate(64);
    ASSERT_TRUE(a.ok()) << i;
    got.push_back(a.value().address);
  }
  EXPECT_EQ(r.stats().live_blocks, static_cast<std::uint64_t>(kBlocks));
  expect_consistent(r);
  // Free every other block (maximal fragmentation), then the rest.
  for (int i = 0; i < kBlocks; i += 2) ASSERT_TRUE(r.free(got[i]).ok());
  EXPECT_EQ(r.stats().free_blocks, static_cast<std::uint64_t>(kBlocks / 2));
  expect_consistent(r);
  for (int i = 1; i < kBlocks; i += 2) ASSERT_TRUE(r.free(got[i]).ok());
  EXPECT_EQ(r.stats().free_blocks, 1u);
  expect_consistent(r);
}

TEST(Region, MovedRegionKeepsItsBlocks) {
  Region r = make(0, 1 << 16, 64);
  Address a = r.allocate(100).value().address;
  Region moved = std::move(r);
  EXPECT_TRUE(moved.free(a).ok());
  expect_consistent(moved);
}

// A record keeps sizes below 2^32 granules; bigger blocks take their size
// from the next block's offset (bufalloc/src/block_record.hpp). Splits, merges
// and the best-fit fallback across that boundary, checked against the walk.
TEST(Region, BlocksOf2To32GranulesAndMoreKeepExactSizes) {
  const Size g = 64;
  const Size huge = Size{1} << 40;  // 2^34 granules
  Region r = make(0, huge, g);
  const Size big = (Size{1} << 32) * g + 3 * g;  // just past the 32-bit size field
  auto a = r.allocate(100);
  auto b = r.allocate(big);
  auto c = r.allocate(big, Size{1} << 36);  // with padding in front, and a giant hole after
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(c.value().address % (Size{1} << 36), 0u);
  expect_consistent(r);
  Size sum = 0;
  bool saw_big = false;
  for (const BlockInfo& info : blocks(r)) {
    sum += info.size;
    if (!info.free && info.size == big) saw_big = true;
  }
  EXPECT_EQ(sum, huge);
  EXPECT_TRUE(saw_big);
  EXPECT_EQ(r.stats().used_bytes, 128 + 2 * big);
  ASSERT_TRUE(r.free(b.value()).ok());  // a giant live block, merged with the padding after it
  expect_consistent(r);
  EXPECT_GE(r.stats().largest_free, big);
  auto again = r.allocate(big - g);  // reuses part of it
  ASSERT_TRUE(again.ok());
  expect_consistent(r);
  ASSERT_TRUE(r.free(c.value()).ok());
  ASSERT_TRUE(r.free(a.value()).ok());
  ASSERT_TRUE(r.free(again.value()).ok());
  expect_consistent(r);
  EXPECT_EQ(r.stats().free_blocks, 1u);
  EXPECT_EQ(r.stats().largest_free, huge);
}

// free(handle) needs no address index; the first free(address) builds it and
// from then on every allocate and free keeps it.
TEST(Region, TheAddressIndexExistsOnlyOnceAnAddressWasFreed) {
  Region r = make(0, 1 << 20);
  std::vector<BlockHandle> held;
  for (int i = 0; i < 100; ++i) held.push_back(r.allocate(64 + 64 * static_cast<Size>(i % 5)).value());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(r.free(held[static_cast<std::size_t>(i)]).ok());
  EXPECT_FALSE(r.indexes_addresses());
  ASSERT_TRUE(r.free(held[50].address).ok());  // builds it over the 49 live blocks
  EXPECT_TRUE(r.indexes_addresses());
  expect_consistent(r);  // check() verifies the index holds exactly the live blocks
  auto fresh = r.allocate(128);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(r.free(fresh.value().address).ok());  // found through the index
  for (std::size_t i = 51; i < 100; i += 2) ASSERT_TRUE(r.free(held[i]).ok());
  for (std::size_t i = 52; i < 100; i += 2) ASSERT_TRUE(r.free(held[i].address).ok());
  expect_consistent(r);
  EXPECT_EQ(r.stats().live_blocks, 0u);
  r.reset();
  EXPECT_TRUE(r.indexes_addresses());  // it stays, empty
  expect_consistent(r);
}

// allocate() serves alignment <= granularity on a region without an address
// index by a path of its own (the exact class first, then the class search,
// no padding); a region that indexes addresses takes the general path for
// every request. Both must place every block at the same address: the fast
// path is a shortcut, not another policy (the utilisation figures in the
// README rely on that).
TEST(Region, FastPathPlacesBlocksAsTheGeneralPathDoes) {
  constexpr Size kGranularity = 64;
  Region fast = make(1 << 20, 64 << 20, kGranularity);
  Region general = make(1 << 20, 64 << 20, kGranularity);
  // One block freed by address makes `general` index addresses for good.
  ASSERT_TRUE(fast.free(fast.allocate(64).value()).ok());
  ASSERT_TRUE(general.free(general.allocate(64).value().address).ok());
  ASSERT_FALSE(fast.indexes_addresses());
  ASSERT_TRUE(general.indexes_addresses());

  std::uint64_t state = 0x9e3779b97f4a7c15u;
  auto next = [&] {  // splitmix64: the same sequence on every platform
    state += 0x9e3779b97f4a7c15u;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  };
  std::vector<BlockHandle> live;
  for (int op = 0; op < 200000; ++op) {
    if (!live.empty() && (live.size() > 3000 || next() % 2 == 0)) {
      const std::size_t k = next() % live.size();
      ASSERT_TRUE(fast.free(live[k]).ok());
      ASSERT_TRUE(general.free(live[k].address).ok());
      live[k] = live.back();
      live.pop_back();
      continue;
    }
    // Sizes across the exact classes (below 64 granules) and above, with
    // alignment 0, 1 (below the granularity) or the granularity itself.
    const Size size = 1 + next() % (next() % 4 == 0 ? 64 * 1024 : 4096);
    const Size alignment = std::array<Size, 3>{0, 1, kGranularity}[next() % 3];
    auto a = fast.allocate(size, alignment);
    auto b = general.allocate(size, alignment);
    ASSERT_EQ(a.ok(), b.ok()) << "op " << op;
    if (!a.ok()) continue;
    ASSERT_EQ(a.value().address, b.value().address) << "op " << op << ", size " << size;
    live.push_back(a.value());
  }
  expect_consistent(fast);
  expect_consistent(general);
  EXPECT_EQ(fast.stats().free_blocks, general.stats().free_blocks);
  EXPECT_EQ(fast.stats().largest_free, general.stats().largest_free);
}

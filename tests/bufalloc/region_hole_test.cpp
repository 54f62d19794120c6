// Region::cheapest_hole(): which live blocks to free so that a request fits
// (region.hpp), checked on hand-made layouts, against a brute-force search
// over random ones, through the C API, and on bad input.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "memlayer/bufalloc.h"
#include "memlayer/bufalloc/region.hpp"

using namespace memlayer::bufalloc;

namespace {

Region make(Size size) {
  auto r = Region::create(0, size, RegionOptions{64});
  EXPECT_TRUE(r.ok()) << r.error().message();
  return std::move(r).value();
}

// `n` blocks of `each` bytes filling a region of n * each bytes.
std::vector<BlockHandle> fill(Region& r, int n, Size each) {
  std::vector<BlockHandle> out;
  for (int i = 0; i < n; ++i) out.push_back(r.allocate(each).value());
  EXPECT_EQ(r.stats().free_bytes, 0u);
  return out;
}

auto all = [](const BlockInfo&) -> std::optional<std::uint64_t> { return 0; };

struct Found {
  Result<Hole> hole;
  std::vector<Address> visited;
};

Found search(const Region& r, Size size, Size alignment,
             const std::function<std::optional<std::uint64_t>(const BlockInfo&)>& evictable = all) {
  std::vector<Address> visited;
  auto h = r.cheapest_hole(size, alignment, evictable, [&](const BlockInfo& b) {
    EXPECT_FALSE(b.free);
    visited.push_back(b.address);
  });
  return {h, visited};
}

}  // namespace

// Free space cut into holes of 128 bytes between live blocks of 128: a
// 384-byte request needs the one block between two holes freed, not the
// oldest ones wherever they lie.
TEST(RegionHole, FreesTheOneBlockBetweenTwoHoles) {
  Region r = make(1024);
  auto b = fill(r, 8, 128);
  ASSERT_TRUE(r.free(b[1]).ok());
  ASSERT_TRUE(r.free(b[3]).ok());
  ASSERT_FALSE(r.allocate(384).ok());
  Found f = search(r, 384, 0);
  ASSERT_TRUE(f.hole.ok()) << f.hole.error().message();
  EXPECT_EQ(f.hole.value().address, 128u);
  EXPECT_EQ(f.hole.value().size, 384u);
  EXPECT_EQ(f.hole.value().live_bytes, 128u);
  EXPECT_EQ(f.hole.value().live_blocks, 1u);
  EXPECT_EQ(f.visited, std::vector<Address>{256});
  ASSERT_TRUE(r.free(b[2]).ok());
  EXPECT_TRUE(r.allocate(384).ok());
}

// Fewer live bytes win over fewer blocks; ties go to fewer blocks.
TEST(RegionHole, FewestLiveBytesThenFewestBlocks) {
  Region r = make(2048);
  // [0,512) one block of 512 | [512,640) free | [640,768) 128 | [768,896) 128 | [896,1024) free | rest 1024 live
  BlockHandle big = r.allocate(512).value();
  BlockHandle gap1 = r.allocate(128).value();
  BlockHandle s1 = r.allocate(128).value();
  BlockHandle s2 = r.allocate(128).value();
  BlockHandle gap2 = r.allocate(128).value();
  BlockHandle rest = r.allocate(1024).value();
  ASSERT_TRUE(r.free(gap1).ok());
  ASSERT_TRUE(r.free(gap2).ok());
  Found f = search(r, 512, 0);
  ASSERT_TRUE(f.hole.ok());
  EXPECT_EQ(f.hole.value().live_bytes, 256u);  // s1 and s2, not the 512-byte block
  EXPECT_EQ(f.visited, (std::vector<Address>{s1.address, s2.address}));
  (void)big;
  (void)rest;

  // Two runs of 256 live bytes: one of two blocks, one of one block.
  Region t = make(1024);
  auto a = t.allocate(128).value();
  auto b = t.allocate(128).value();
  auto c = t.allocate(128).value();  // freed
  auto d = t.allocate(256).value();
  auto e = t.allocate(128).value();  // freed
  auto rest2 = t.allocate(256).value();
  ASSERT_TRUE(t.free(c).ok());
  ASSERT_TRUE(t.free(e).ok());
  Found g = search(t, 384, 0);
  ASSERT_TRUE(g.hole.ok());
  EXPECT_EQ(g.hole.value().live_blocks, 1u);
  EXPECT_EQ(g.visited, std::vector<Address>{d.address});
  (void)a;
  (void)b;
  (void)rest2;
}

// Among runs of equal bytes and blocks, the lowest sum of weights: the
// least recently used, say, when every block is the same size.
TEST(RegionHole, WeightsBreakTies) {
  Region r = make(1024);
  auto b = fill(r, 8, 128);
  const std::vector<std::uint64_t> last_use = {5, 3, 7, 1, 4, 2, 6, 0};  // b[7] is the oldest
  auto weight = [&](const BlockInfo& x) -> std::optional<std::uint64_t> { return last_use[x.address / 128]; };
  Found f = search(r, 128, 0, weight);
  ASSERT_TRUE(f.hole.ok());
  EXPECT_EQ(f.visited, std::vector<Address>{b[7].address});
  EXPECT_EQ(f.hole.value().weight, 0u);
  Found two = search(r, 256, 0, weight);
  ASSERT_TRUE(two.hole.ok());
  EXPECT_EQ(two.visited, (std::vector<Address>{b[3].address, b[4].address}));  // 1 + 4: the lowest pair
  EXPECT_EQ(two.hole.value().weight, 5u);
}

// A block the caller cannot evict ends every run through it.
TEST(RegionHole, SkipsRunsThroughARefusedBlock) {
  Region r = make(1024);
  auto b = fill(r, 8, 128);
  for (int i : {1, 3, 5}) ASSERT_TRUE(r.free(b[i]).ok());
  int asked = 0;
  Found f = search(r, 384, 0, [&](const BlockInfo& x) -> std::optional<std::uint64_t> {
    ++asked;
    if (x.address == b[2].address) return std::nullopt;
    return 0;
  });
  ASSERT_TRUE(f.hole.ok());
  EXPECT_EQ(f.visited, std::vector<Address>{b[4].address});
  EXPECT_LE(asked, 2 * 5);  // twice per live block at most
}

// The request's alignment padding must lie within the run too.
TEST(RegionHole, AlignmentPaddingCounts) {
  Region r = make(4096);
  auto b = fill(r, 8, 512);
  for (int i : {2, 3, 5}) ASSERT_TRUE(r.free(b[i]).ok());  // free: [1024, 2048) and [2560, 3072)
  Found unaligned = search(r, 1024, 0);
  ASSERT_TRUE(unaligned.hole.ok());
  EXPECT_EQ(unaligned.hole.value().live_blocks, 0u);
  // At a multiple of 2048, [1024, 2048) is no use: [2048, 3072) is, once b[4] goes.
  Found f = search(r, 1024, 2048);
  ASSERT_TRUE(f.hole.ok()) << f.hole.error().message();
  EXPECT_EQ(f.visited, std::vector<Address>{b[4].address});
  ASSERT_FALSE(r.allocate(1024, 2048).ok());
  ASSERT_TRUE(r.free(b[4]).ok());
  auto placed = r.allocate(1024, 2048);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed.value().address, 2048u);
}

TEST(RegionHole, ARequestThatFitsNeedsNothingFreed) {
  Region r = make(1024);
  (void)r.allocate(128).value();
  Found f = search(r, 256, 0);
  ASSERT_TRUE(f.hole.ok());
  EXPECT_EQ(f.hole.value().live_blocks, 0u);
  EXPECT_TRUE(f.visited.empty());
}

TEST(RegionHole, BadInputIsNamedAndVisitsNothing) {
  Region r = make(1024);
  auto b = fill(r, 8, 128);
  ASSERT_TRUE(r.free(b[0]).ok());
  Found zero = search(r, 0, 0);
  EXPECT_EQ(zero.hole.error().code, Errc::zero_size);
  EXPECT_EQ(search(r, 128, 3).hole.error().code, Errc::alignment_not_power_of_two);
  EXPECT_EQ(search(r, UINT64_MAX, 0).hole.error().code, Errc::size_overflow);
  EXPECT_EQ(search(r, (1ull << 63) + 128, 1ull << 63).hole.error().code, Errc::alignment_overflow);
  Found too_big = search(r, 2048, 0);
  EXPECT_EQ(too_big.hole.error().code, Errc::no_hole);
  EXPECT_TRUE(too_big.visited.empty());
  Found none = search(r, 256, 0, [](const BlockInfo&) -> std::optional<std::uint64_t> { return std::nullopt; });
  EXPECT_EQ(none.hole.error().code, Errc::no_hole);
  EXPECT_TRUE(none.visited.empty());
  EXPECT_EQ(none.hole.error().message(),
            "no_hole: no run of free and evictable blocks can hold a request of 256 bytes (alignment 0); 128 bytes "
            "free, largest free block 128 bytes");
  std::string what;
  EXPECT_TRUE(r.check(&what).ok()) << what;
  EXPECT_EQ(r.stats().failed_requests, 0u);  // a search is not a failed allocation
}

// Random layouts and refusals: the run found is as cheap as the cheapest a
// brute-force search over every run finds, holds the request once its
// blocks are freed, and contains no refused block.
TEST(RegionHole, MatchesBruteForceOnRandomLayouts) {
  std::mt19937_64 rng(33);
  for (int round = 0; round < 300; ++round) {
    Region r = make(16384);
    std::vector<BlockHandle> live;
    for (int i = 0; i < 200; ++i) {
      if (live.empty() || rng() % 3 != 0) {
        auto a = r.allocate(64 * (1 + rng() % 12));
        if (a) live.push_back(a.value());
      } else {
        const std::size_t k = rng() % live.size();
        ASSERT_TRUE(r.free(live[k]).ok());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    std::set<Address> refused;
    for (const BlockHandle& h : live)
      if (rng() % 5 == 0) refused.insert(h.address);
    const Size size = 64 * (1 + rng() % 40);
    const Size alignment = Size{64} << (rng() % 4);
    auto evictable = [&](const BlockInfo& b) -> std::optional<std::uint64_t> {
      if (refused.count(b.address) != 0) return std::nullopt;
      return 0;
    };

    std::vector<BlockInfo> blocks;
    r.walk([&](const BlockInfo& b) { blocks.push_back(b); });
    bool any = false;
    Size best = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      Size cost = 0;
      for (std::size_t j = i; j < blocks.size(); ++j) {
        if (!blocks[j].free && refused.count(blocks[j].address)) break;
        if (!blocks[j].free) cost += blocks[j].size;
        const Address start = blocks[i].address, end = blocks[j].address + blocks[j].size;
        const Address aligned = (start + alignment - 1) / alignment * alignment;
        if (aligned + size <= end) {
          if (!any || cost < best) best = cost;
          any = true;
          break;
        }
      }
    }
    Found f = search(r, size, alignment, evictable);
    ASSERT_EQ(f.hole.ok(), any) << "round " << round << ": " << f.hole.error().message();
    if (!any) continue;
    EXPECT_EQ(f.hole.value().live_bytes, best) << "round " << round;
    EXPECT_EQ(f.hole.value().live_blocks, f.visited.size());
    for (Address a : f.visited) {
      EXPECT_EQ(refused.count(a), 0u);
      ASSERT_TRUE(r.free(a).ok());
    }
    EXPECT_TRUE(r.allocate(size, alignment).ok()) << "round " << round;
    std::string what;
    ASSERT_TRUE(r.check(&what).ok()) << what;
  }
}

TEST(RegionHole, CApi) {
  ml_region* r = nullptr;
  ASSERT_EQ(ml_region_create(0, 1024, 64, ML_REGION_THREAD_SAFE, &r), ML_OK);
  uint64_t a[8];
  for (auto& x : a) ASSERT_EQ(ml_region_alloc(r, 128, 0, &x), ML_OK);
  ASSERT_EQ(ml_region_free(r, a[1]), ML_OK);
  ASSERT_EQ(ml_region_free(r, a[3]), ML_OK);
  std::vector<uint64_t> visited;
  auto visit = [](void* user, uint64_t address, uint64_t, int is_free) {
    EXPECT_EQ(is_free, 0);
    static_cast<std::vector<uint64_t>*>(user)->push_back(address);
  };
  ml_hole hole{};
  ASSERT_EQ(ml_region_cheapest_hole(r, 384, 0, nullptr, visit, &visited, &hole), ML_OK);
  EXPECT_EQ(visited, std::vector<uint64_t>{a[2]});
  EXPECT_EQ(hole.address, 128u);
  EXPECT_EQ(hole.live_bytes, 128u);
  auto refuse_all = [](void*, uint64_t, uint64_t) { return 0; };
  EXPECT_EQ(ml_region_cheapest_hole(r, 384, 0, refuse_all, nullptr, nullptr, &hole), ML_ERROR_NO_HOLE);
  EXPECT_NE(std::string(ml_last_error_message()).find("no_hole"), std::string::npos);
  EXPECT_STREQ(ml_status_name(ML_ERROR_NO_HOLE), "ML_ERROR_NO_HOLE");
  EXPECT_EQ(ml_region_cheapest_hole(r, 0, 0, nullptr, nullptr, nullptr, &hole), ML_ERROR_ZERO_SIZE);
  EXPECT_EQ(ml_region_cheapest_hole(r, 384, 0, nullptr, nullptr, nullptr, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_cheapest_hole(nullptr, 384, 0, nullptr, nullptr, nullptr, &hole), ML_ERROR_INVALID_ARGUMENT);
  ml_region_destroy(r);
}

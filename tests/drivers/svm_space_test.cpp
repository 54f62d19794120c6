// SvmSpace: the shared-virtual-memory range the PoCL memlayer driver carves
// SVM allocations from (doc/svm.md).
#include "memlayer/drivers/svm_space.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using memlayer::drivers::SvmSpace;

namespace {

SvmSpace space(std::uint64_t size = 64 << 20, std::uint64_t granularity = 128) {
  auto s = SvmSpace::create("svm", size, granularity);
  EXPECT_TRUE(s.ok()) << s.error();
  return std::move(s).value();
}

TEST(SvmSpace, AllocationsAreAlignedDisjointUsableAndInside) {
  SvmSpace s = space();
  std::vector<std::pair<std::byte*, std::uint64_t>> blocks;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t size = 1 + 977 * i;
    auto p = s.allocate(size, i % 3 == 0 ? 4096 : 0);
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.value()) % (i % 3 == 0 ? 4096 : 128), 0u);
    EXPECT_TRUE(s.contains(p.value(), size));
    std::memset(p.value(), i, size);  // really usable memory
    blocks.emplace_back(p.value(), size);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {  // nothing overwrote another
    const auto [p, size] = blocks[i];
    EXPECT_TRUE(std::all_of(p, p + size, [&](std::byte b) { return b == std::byte(i); })) << i;
  }
  EXPECT_EQ(s.stats().live_blocks, blocks.size());
  for (const auto& [p, size] : blocks) ASSERT_TRUE(s.free(p).ok());
  EXPECT_EQ(s.stats().live_blocks, 0u);
  EXPECT_EQ(s.stats().used_bytes, 0u);
}

TEST(SvmSpace, FindsTheAllocationOfAnyOfItsBytes) {
  SvmSpace s = space();
  std::byte* a = s.allocate(1000).value();
  std::byte* b = s.allocate(5000).value();
  auto in_a = s.find(a + 999);
  ASSERT_TRUE(in_a.has_value());
  EXPECT_EQ(in_a->data, a);
  EXPECT_EQ(in_a->size, 1000u);
  EXPECT_EQ(s.find(b)->data, b);
  EXPECT_EQ(s.find(b + 4999)->size, 5000u);
  EXPECT_FALSE(s.find(a + 1000).has_value());  // the padding up to the granularity is no one's
  EXPECT_FALSE(s.find(b + 5000).has_value());
  EXPECT_FALSE(s.find(nullptr).has_value());
  int on_stack = 0;
  EXPECT_FALSE(s.find(&on_stack).has_value());
  ASSERT_TRUE(s.free(a).ok());
  EXPECT_FALSE(s.find(a).has_value());
  EXPECT_EQ(s.find(b + 1)->data, b);
}

TEST(SvmSpace, BadFreesAreNamedAndChangeNothing) {
  SvmSpace s = space();
  std::byte* a = s.allocate(4096).value();
  auto inside = s.free(a + 128);
  ASSERT_FALSE(inside.ok());
  EXPECT_NE(inside.error().find("not the start of a live SVM allocation"), std::string::npos) << inside.error();
  int on_stack = 0;
  auto outside = s.free(&on_stack);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.error().find("is not in the SVM space"), std::string::npos) << outside.error();
  auto null = s.free(nullptr);
  ASSERT_FALSE(null.ok());
  EXPECT_NE(null.error().find("null pointer"), std::string::npos) << null.error();
  EXPECT_EQ(s.stats().live_blocks, 1u);
  ASSERT_TRUE(s.free(a).ok());
  auto twice = s.free(a);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().find("not the start of a live SVM allocation"), std::string::npos) << twice.error();
}

TEST(SvmSpace, BadRequestsAreNamed) {
  EXPECT_FALSE(SvmSpace::create("svm", 0, 128).ok());
  auto g = SvmSpace::create("svm", 1 << 20, 100);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().find("granularity 100"), std::string::npos) << g.error();
  SvmSpace s = space(1 << 20);
  auto zero = s.allocate(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().find("svm: "), std::string::npos) << zero.error();
  auto big = s.allocate(2 << 20);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().find("svm: "), std::string::npos) << big.error();
  EXPECT_FALSE(s.allocate(64, 3).ok());  // alignment not a power of two
  EXPECT_EQ(s.stats().live_blocks, 0u);
}

// Reserving is free: a space far larger than this machine's memory is made,
// and only touched pages cost anything.
TEST(SvmSpace, ReservesAddressesNotMemory) {
  SvmSpace s = space(std::uint64_t{64} << 30);
  auto p = s.allocate(std::uint64_t{48} << 30);
  ASSERT_TRUE(p.ok()) << p.error();
  p.value()[0] = std::byte{1};
  p.value()[(std::uint64_t{48} << 30) - 1] = std::byte{2};
  EXPECT_EQ(p.value()[0], std::byte{1});
  ASSERT_TRUE(s.free(p.value()).ok());
}

// Freed whole pages go back to the system: used again, they read as zero.
TEST(SvmSpace, FreedPagesComeBackEmpty) {
  SvmSpace s = space(1 << 20, 4096);
  std::byte* a = s.allocate(3 * 4096).value();
  std::memset(a, 0x77, 3 * 4096);
  ASSERT_TRUE(s.free(a).ok());
  std::byte* b = s.allocate(3 * 4096).value();
  ASSERT_EQ(b, a);  // the same block, first fit of an empty space
  EXPECT_TRUE(std::all_of(b, b + 3 * 4096, [](std::byte x) { return x == std::byte{0}; }));
}

TEST(SvmSpace, ThreadsAllocateAndFreeAtOnce) {
  SvmSpace s = space();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::byte*> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.empty() || rng() % 3 != 0) {
          auto p = s.allocate(1 + rng() % 8192);
          ASSERT_TRUE(p.ok()) << p.error();
          *p.value() = std::byte(t);
          mine.push_back(p.value());
        } else {
          std::byte* p = mine.back();
          mine.pop_back();
          ASSERT_EQ(*p, std::byte(t));
          ASSERT_TRUE(s.find(p).has_value());
          ASSERT_TRUE(s.free(p).ok());
        }
      }
      for (std::byte* p : mine) ASSERT_TRUE(s.free(p).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.stats().live_blocks, 0u);
}

}  // namespace

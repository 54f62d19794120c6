// LinearRegion: the per-launch local-memory stack.
#include <gtest/gtest.h>

#include "memlayer/bufalloc/linear_region.hpp"

using namespace memlayer::bufalloc;

namespace {
LinearRegion make(Address base, Size size) {
  auto r = LinearRegion::create(base, size);
  EXPECT_TRUE(r.ok()) << r.error().message();
  return std::move(r).value();
}
}  // namespace

TEST(LinearRegion, BumpsWithAlignment) {
  LinearRegion l = make(1000, 4096);
  EXPECT_EQ(l.allocate(10).value(), 1000u);
  EXPECT_EQ(l.allocate(4, 16).value(), 1024u);  // 1010 rounded up to 16
  EXPECT_EQ(l.allocate(1, 0).value(), 1028u);   // alignment 0 means 1
  EXPECT_EQ(l.allocate(8, 256).value(), 1280u);
  EXPECT_EQ(l.stats().used_bytes, 1288u - 1000u);
  EXPECT_EQ(l.stats().allocations, 4u);
}

TEST(LinearRegion, ExactFitThenOutOfMemoryWithFigures) {
  LinearRegion l = make(0, 256);
  ASSERT_TRUE(l.allocate(200).ok());
  auto r = l.allocate(64, 64);  // 200 -> pad to 256: no room at all
  ASSERT_EQ(r.error().code, Errc::out_of_memory);
  EXPECT_EQ(r.error().free_bytes, 56u);
  EXPECT_NE(r.error().message().find("56 bytes free"), std::string::npos) << r.error().message();
  EXPECT_EQ(l.stats().failed_requests, 1u);
  EXPECT_EQ(l.stats().used_bytes, 200u);  // the failure changed nothing
  EXPECT_EQ(l.allocate(56).value(), 200u);
  EXPECT_EQ(l.allocate(1).error().code, Errc::out_of_memory);
}

TEST(LinearRegion, MarkAndRollback) {
  LinearRegion l = make(0, 4096);
  ASSERT_TRUE(l.allocate(100).ok());
  const auto m = l.mark();
  ASSERT_TRUE(l.allocate(1000).ok());
  ASSERT_TRUE(l.allocate(1000).ok());
  EXPECT_EQ(l.stats().used_bytes, 2100u);
  ASSERT_TRUE(l.rollback(m).ok());
  EXPECT_EQ(l.stats().used_bytes, 100u);
  EXPECT_EQ(l.stats().peak_used_bytes, 2100u);
  EXPECT_EQ(l.allocate(1).value(), 100u);
  // Rolling back to the same mark again is fine while it is below the top.
  EXPECT_TRUE(l.rollback(m).ok());
}

TEST(LinearRegion, StaleMarksAreRejected) {
  LinearRegion l = make(0, 4096);
  const auto early = l.mark();
  ASSERT_TRUE(l.allocate(100).ok());
  const auto late = l.mark();
  ASSERT_TRUE(l.rollback(early).ok());
  EXPECT_EQ(l.rollback(late).error().code, Errc::stale_mark);  // above the top now

  ASSERT_TRUE(l.allocate(100).ok());
  const auto before_reset = l.mark();
  l.reset();
  EXPECT_EQ(l.stats().used_bytes, 0u);
  ASSERT_TRUE(l.allocate(500).ok());
  EXPECT_EQ(l.rollback(before_reset).error().code, Errc::stale_mark);
  EXPECT_EQ(l.stats().used_bytes, 500u);

  LinearRegion other = make(0, 4096);
  ASSERT_TRUE(other.allocate(1000).ok());
  EXPECT_EQ(other.rollback(l.mark()).error().code, Errc::stale_mark);
  EXPECT_EQ(other.stats().used_bytes, 1000u);
}

TEST(LinearRegion, BadInputs) {
  LinearRegion l = make(0, 4096);
  EXPECT_EQ(l.allocate(0).error().code, Errc::zero_size);
  EXPECT_EQ(l.allocate(8, 3).error().code, Errc::alignment_not_power_of_two);
  EXPECT_EQ(l.allocate(UINT64_MAX).error().code, Errc::out_of_memory);
  EXPECT_EQ(l.stats().used_bytes, 0u);
  LinearRegion high = make(4096, 4096);  // no 2^63-aligned address inside
  EXPECT_EQ(high.allocate(1, Size{1} << 63).error().code, Errc::out_of_memory);
  EXPECT_EQ(LinearRegion::create(0, 0).error().code, Errc::region_empty);
  EXPECT_EQ(LinearRegion::create(UINT64_MAX - 10, 11).error().code, Errc::region_wraps);
  EXPECT_TRUE(LinearRegion::create(UINT64_MAX - 10, 10).ok());
}

TEST(LinearRegion, WorksAtTheTopOfTheAddressSpace) {
  LinearRegion l = make(UINT64_MAX - 4094, 4094);
  auto a = l.allocate(16, 4096);  // the next 4096-aligned address would be 2^64
  EXPECT_EQ(a.error().code, Errc::out_of_memory);
  auto b = l.allocate(4094);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value(), UINT64_MAX - 4094);
}

// Every bad input to Region gets its named error, a message with the figures,
// and leaves the region exactly as it was.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "memlayer/bufalloc/region.hpp"

using namespace memlayer::bufalloc;

namespace {

struct Snapshot {
  std::vector<std::tuple<Address, Size, bool>> blocks;
  Size used;
  std::uint64_t live;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const Region& r) {
  Snapshot s{{}, r.stats().used_bytes, r.stats().live_blocks};
  r.walk([&](const BlockInfo& b) { s.blocks.emplace_back(b.address, b.size, b.free); });
  return s;
}

class RegionErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    region_.emplace(std::move(Region::create(0x10000, 64 * 64, RegionOptions{64})).value());
    a_ = region_->allocate(64 * 4).value().address;
    b_ = region_->allocate(64 * 4).value().address;
    ASSERT_TRUE(region_->free(a_).ok());  // [a_ free][b_ live][rest free]
    before_ = snapshot(*region_);
  }
  void expect_unchanged() {
    EXPECT_EQ(snapshot(*region_), before_);
    std::string what;
    EXPECT_TRUE(region_->check(&what).ok()) << what;
  }
  std::optional<Region> region_;
  Address a_ = 0, b_ = 0;
  Snapshot before_;
};

}  // namespace

TEST_F(RegionErrors, ZeroSize) {
  auto r = region_->allocate(0);
  EXPECT_EQ(r.error().code, Errc::zero_size);
  EXPECT_NE(r.error().message().find("0 bytes"), std::string::npos);
  expect_unchanged();
}

TEST_F(RegionErrors, SizeOverflow) {
  auto r = region_->allocate(UINT64_MAX);
  EXPECT_EQ(r.error().code, Errc::size_overflow);
  EXPECT_NE(r.error().message().find("18446744073709551615"), std::string::npos);
  expect_unchanged();
}

TEST_F(RegionErrors, AlignmentNotPowerOfTwo) {
  for (Size bad : {3u, 96u, 1000u}) {
    auto r = region_->allocate(64, bad);
    EXPECT_EQ(r.error().code, Errc::alignment_not_power_of_two) << bad;
    EXPECT_NE(r.error().message().find(std::to_string(bad)), std::string::npos);
  }
  expect_unchanged();
}

TEST_F(RegionErrors, AlignmentOverflow) {
  auto r = region_->allocate((Size{1} << 63) + (Size{1} << 62), Size{1} << 63);
  EXPECT_EQ(r.error().code, Errc::alignment_overflow);
  expect_unchanged();
}

TEST_F(RegionErrors, OutOfMemoryReportsRequestFreeAndLargest) {
  auto r = region_->allocate(64 * 61, 0);
  ASSERT_EQ(r.error().code, Errc::out_of_memory);
  EXPECT_EQ(r.error().size, 64u * 61);
  EXPECT_EQ(r.error().free_bytes, 64u * 60);
  EXPECT_EQ(r.error().largest_free, 64u * 56);
  const std::string m = r.error().message();
  EXPECT_NE(m.find("3904"), std::string::npos) << m;  // the request
  EXPECT_NE(m.find("3840"), std::string::npos) << m;  // free bytes
  EXPECT_NE(m.find("3584"), std::string::npos) << m;  // largest free block
  EXPECT_EQ(region_->stats().failed_requests, 1u);
  expect_unchanged();
}

TEST_F(RegionErrors, RequestLargerThanTheRegion) {
  EXPECT_EQ(region_->allocate(Size{1} << 40).error().code, Errc::out_of_memory);
  expect_unchanged();
}

TEST_F(RegionErrors, FreeOutsideRegion) {
  for (Address bad : {Address{0}, Address{0xFFFF}, Address{0x10000 + 64 * 64}, UINT64_MAX}) {
    auto r = region_->free(bad);
    EXPECT_EQ(r.error().code, Errc::address_outside_region) << bad;
    EXPECT_EQ(r.error().address, bad);
  }
  expect_unchanged();
}

TEST_F(RegionErrors, FreeInsideLiveBlock) {
  EXPECT_EQ(region_->free(b_ + 64).error().code, Errc::not_block_start);
  EXPECT_EQ(region_->free(b_ + 1).error().code, Errc::not_block_start);
  expect_unchanged();
}

TEST_F(RegionErrors, DoubleFree) {
  auto r = region_->free(a_);
  EXPECT_EQ(r.error().code, Errc::double_free);
  EXPECT_NE(r.error().message().find(std::to_string(a_)), std::string::npos);
  expect_unchanged();
  // Still reported after the freed block merged into a free neighbour.
  ASSERT_TRUE(region_->free(b_).ok());
  EXPECT_EQ(region_->free(b_).error().code, Errc::double_free);
}

TEST_F(RegionErrors, FreeOfNeverAllocatedFreeSpace) {
  EXPECT_EQ(region_->free(0x10000 + 64 * 40).error().code, Errc::double_free);
  expect_unchanged();
}

TEST(RegionCreateErrors, EachBadGeometryHasItsError) {
  EXPECT_EQ(Region::create(0, 4096, RegionOptions{0}).error().code, Errc::granularity_not_power_of_two);
  EXPECT_EQ(Region::create(0, 4096, RegionOptions{48}).error().code, Errc::granularity_not_power_of_two);
  EXPECT_EQ(Region::create(100, 4096, RegionOptions{64}).error().code, Errc::misaligned_base);
  EXPECT_EQ(Region::create(32, 8192, RegionOptions{64}).error().code, Errc::misaligned_base);
  EXPECT_EQ(Region::create(Address{1} << 63, Size{1} << 63, RegionOptions{64}).error().code, Errc::region_wraps);
  EXPECT_EQ(Region::create(0, 0).error().code, Errc::region_empty);
  EXPECT_EQ(Region::create(0, 63, RegionOptions{64}).error().code, Errc::region_empty);
  auto wraps = Region::create(UINT64_MAX & ~Address{63}, 128, RegionOptions{64});
  EXPECT_EQ(wraps.error().code, Errc::region_wraps);
  EXPECT_NE(wraps.error().message().find("wraps"), std::string::npos);
  // The largest legal region ends exactly at 2^64 - 1.
  EXPECT_TRUE(Region::create(0, UINT64_MAX, RegionOptions{1}).ok());
}

TEST(RegionErrorNames, EveryCodeHasADistinctName) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(Errc::host_out_of_memory); ++c)
    EXPECT_TRUE(names.insert(errc_name(static_cast<Errc>(c))).second) << c;
  for (Errc c : {Errc::stale_handle, Errc::foreign_handle}) {
    EXPECT_TRUE(names.insert(errc_name(c)).second) << static_cast<int>(c);
    EXPECT_STRNE(errc_name(c), "unknown_error");
  }
  EXPECT_STREQ(errc_name(static_cast<Errc>(999)), "unknown_error");
}

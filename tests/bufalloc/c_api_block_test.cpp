// The C API's block handles: ml_region_alloc_block / ml_region_free_block,
// each bad input with its named status and a message, nothing changed by a
// refused free, and the mix with ml_region_free (by address).
#include <gtest/gtest.h>

#include <string>

#include "memlayer/bufalloc.h"

namespace {

std::string last() { return ml_last_error_message(); }

uint64_t live_blocks(const ml_region* r) {
  ml_region_stats s{};
  EXPECT_EQ(ml_region_get_stats(r, &s), ML_OK);
  return s.live_blocks;
}

// One test per region flavour: the thread-safe one goes through its lock.
class CApiBlocks : public ::testing::TestWithParam<uint32_t> {
 protected:
  void SetUp() override { ASSERT_EQ(ml_region_create(0x10000, 1 << 20, 64, GetParam(), &r_), ML_OK); }
  void TearDown() override {
    EXPECT_EQ(ml_region_check(r_), ML_OK) << last();
    ml_region_destroy(r_);
  }
  ml_region* r_ = nullptr;
};

}  // namespace

TEST_P(CApiBlocks, AllocAndFreeByHandle) {
  ml_block a{}, b{};
  ASSERT_EQ(ml_region_alloc_block(r_, 100, 0, &a), ML_OK);
  ASSERT_EQ(ml_region_alloc_block(r_, 100, 4096, &b), ML_OK);
  EXPECT_EQ(a.address, 0x10000u);
  EXPECT_EQ(b.address % 4096, 0u);
  EXPECT_NE(a.region, 0u);
  EXPECT_EQ(a.region, b.region);
  EXPECT_EQ(live_blocks(r_), 2u);
  EXPECT_EQ(ml_region_free_block(r_, &a), ML_OK);
  EXPECT_EQ(ml_region_free_block(r_, &b), ML_OK);
  EXPECT_EQ(live_blocks(r_), 0u);
}

TEST_P(CApiBlocks, NullArguments) {
  ml_block out{};
  out.address = 77;
  EXPECT_EQ(ml_region_alloc_block(nullptr, 64, 0, &out), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_alloc_block(r_, 64, 0, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("null"), std::string::npos) << last();
  EXPECT_EQ(out.address, 77u);  // untouched
  ASSERT_EQ(ml_region_alloc_block(r_, 64, 0, &out), ML_OK);
  EXPECT_EQ(ml_region_free_block(nullptr, &out), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_free_block(r_, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(live_blocks(r_), 1u);
}

TEST_P(CApiBlocks, AllocErrorsLeaveTheHandleUntouched) {
  ml_block out{};
  out.address = 5;
  EXPECT_EQ(ml_region_alloc_block(r_, 0, 0, &out), ML_ERROR_ZERO_SIZE);
  EXPECT_EQ(ml_region_alloc_block(r_, 64, 48, &out), ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO);
  EXPECT_EQ(ml_region_alloc_block(r_, 2 << 20, 0, &out), ML_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(last().find("2097152"), std::string::npos) << last();
  EXPECT_EQ(out.address, 5u);
}

TEST_P(CApiBlocks, DoubleFree) {
  ml_block a{};
  ASSERT_EQ(ml_region_alloc_block(r_, 256, 0, &a), ML_OK);
  ASSERT_EQ(ml_region_free_block(r_, &a), ML_OK);
  EXPECT_EQ(ml_region_free_block(r_, &a), ML_ERROR_DOUBLE_FREE);
  EXPECT_NE(last().find("double_free"), std::string::npos) << last();
  EXPECT_NE(last().find(std::to_string(a.address)), std::string::npos) << last();
}

TEST_P(CApiBlocks, StaleHandleNeverFreesTheBlockNowInItsRecord) {
  ml_block a{}, b{};
  ASSERT_EQ(ml_region_alloc_block(r_, 256, 0, &a), ML_OK);
  ASSERT_EQ(ml_region_free_block(r_, &a), ML_OK);
  ASSERT_EQ(ml_region_alloc_block(r_, 256, 0, &b), ML_OK);
  // Same place, same record: only the generation tells them apart.
  ASSERT_EQ(b.address, a.address);
  ASSERT_EQ(b.index, a.index);
  EXPECT_NE(b.generation, a.generation);
  EXPECT_EQ(ml_region_free_block(r_, &a), ML_ERROR_STALE_HANDLE);
  EXPECT_NE(last().find("stale_handle"), std::string::npos) << last();
  EXPECT_EQ(live_blocks(r_), 1u);
  EXPECT_EQ(ml_region_free_block(r_, &b), ML_OK);
}

TEST_P(CApiBlocks, HandlesFromBeforeAResetAreStale) {
  ml_block a{};
  ASSERT_EQ(ml_region_alloc_block(r_, 256, 0, &a), ML_OK);
  ASSERT_EQ(ml_region_reset(r_), ML_OK);
  ml_block b{};
  ASSERT_EQ(ml_region_alloc_block(r_, 256, 0, &b), ML_OK);
  EXPECT_EQ(ml_region_free_block(r_, &a), ML_ERROR_STALE_HANDLE);
  EXPECT_EQ(live_blocks(r_), 1u);
}

TEST_P(CApiBlocks, ForeignHandles) {
  ml_region* other = nullptr;
  ASSERT_EQ(ml_region_create(0x10000, 1 << 20, 64, GetParam(), &other), ML_OK);
  ml_block mine{}, theirs{};
  ASSERT_EQ(ml_region_alloc_block(r_, 256, 0, &mine), ML_OK);
  ASSERT_EQ(ml_region_alloc_block(other, 256, 0, &theirs), ML_OK);
  // Same base, same history: everything matches but the region.
  ASSERT_EQ(theirs.address, mine.address);
  ASSERT_EQ(theirs.index, mine.index);
  ASSERT_EQ(theirs.generation, mine.generation);
  EXPECT_EQ(ml_region_free_block(r_, &theirs), ML_ERROR_FOREIGN_HANDLE);
  EXPECT_NE(last().find("foreign_handle"), std::string::npos) << last();
  EXPECT_EQ(live_blocks(r_), 1u);
  EXPECT_EQ(live_blocks(other), 1u);

  const ml_block zero{};
  EXPECT_EQ(ml_region_free_block(r_, &zero), ML_ERROR_FOREIGN_HANDLE);
  ml_block altered = mine;
  altered.address += 64;
  EXPECT_EQ(ml_region_free_block(r_, &altered), ML_ERROR_FOREIGN_HANDLE);
  altered = mine;
  altered.index = 0xffffffffu;
  EXPECT_EQ(ml_region_free_block(r_, &altered), ML_ERROR_FOREIGN_HANDLE);
  EXPECT_EQ(live_blocks(r_), 1u);
  EXPECT_EQ(ml_region_free_block(other, &theirs), ML_OK);
  ml_region_destroy(other);
}

TEST_P(CApiBlocks, MixWithFreeByAddress) {
  ml_block a{}, b{};
  uint64_t c = 0;
  ASSERT_EQ(ml_region_alloc_block(r_, 128, 0, &a), ML_OK);
  ASSERT_EQ(ml_region_alloc_block(r_, 128, 0, &b), ML_OK);
  ASSERT_EQ(ml_region_alloc(r_, 128, 0, &c), ML_OK);
  EXPECT_EQ(ml_region_free(r_, a.address), ML_OK);  // a handle's block, by address
  EXPECT_EQ(ml_region_free_block(r_, &a), ML_ERROR_DOUBLE_FREE);
  EXPECT_EQ(ml_region_free_block(r_, &b), ML_OK);
  EXPECT_EQ(ml_region_free(r_, b.address), ML_ERROR_DOUBLE_FREE);
  EXPECT_EQ(ml_region_free(r_, c), ML_OK);
  EXPECT_EQ(live_blocks(r_), 0u);
}

INSTANTIATE_TEST_SUITE_P(Flavours, CApiBlocks, ::testing::Values(0u, ML_REGION_THREAD_SAFE),
                         [](const auto& flavour) { return flavour.param == 0 ? std::string("plain") : std::string("locked"); });

TEST(CApiBlocks, StatusNamesOfTheHandleErrors) {
  EXPECT_STREQ(ml_status_name(ML_ERROR_STALE_HANDLE), "ML_ERROR_STALE_HANDLE");
  EXPECT_STREQ(ml_status_name(ML_ERROR_FOREIGN_HANDLE), "ML_ERROR_FOREIGN_HANDLE");
}

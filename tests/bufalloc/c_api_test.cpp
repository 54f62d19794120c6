// The C API: statuses, out-parameters untouched on failure, messages.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "memlayer/bufalloc.h"

namespace {
std::string last() { return ml_last_error_message(); }
}  // namespace

TEST(CApi, RegionLifecycle) {
  ml_region* r = nullptr;
  ASSERT_EQ(ml_region_create(0x1000, 1 << 20, 64, 0, &r), ML_OK);
  ASSERT_NE(r, nullptr);
  uint64_t a = 0, b = 0;
  ASSERT_EQ(ml_region_alloc(r, 100, 0, &a), ML_OK);
  ASSERT_EQ(ml_region_alloc(r, 100, 4096, &b), ML_OK);
  EXPECT_EQ(b % 4096, 0u);
  ml_region_stats s{};
  ASSERT_EQ(ml_region_get_stats(r, &s), ML_OK);
  EXPECT_EQ(s.live_blocks, 2u);
  EXPECT_EQ(s.used_bytes, 256u);
  EXPECT_EQ(s.total_bytes, 1u << 20);
  EXPECT_EQ(ml_region_check(r), ML_OK);
  EXPECT_EQ(ml_region_free(r, a), ML_OK);
  EXPECT_EQ(ml_region_free(r, b), ML_OK);
  ASSERT_EQ(ml_region_get_stats(r, &s), ML_OK);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  ASSERT_EQ(ml_region_alloc(r, 1000, 0, &a), ML_OK);
  EXPECT_EQ(ml_region_reset(r), ML_OK);
  ASSERT_EQ(ml_region_get_stats(r, &s), ML_OK);
  EXPECT_EQ(s.live_blocks, 0u);
  ml_region_destroy(r);
  ml_region_destroy(nullptr);  // ignored
}

TEST(CApi, ErrorsLeaveOutParamsAndExplainThemselves) {
  ml_region* r = nullptr;
  ASSERT_EQ(ml_region_create(0, 4096, 64, 0, &r), ML_OK);
  uint64_t out = 12345;
  EXPECT_EQ(ml_region_alloc(r, 0, 0, &out), ML_ERROR_ZERO_SIZE);
  EXPECT_EQ(ml_region_alloc(r, 64, 48, &out), ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO);
  EXPECT_NE(last().find("48"), std::string::npos);
  EXPECT_EQ(ml_region_alloc(r, UINT64_MAX, 0, &out), ML_ERROR_SIZE_OVERFLOW);
  EXPECT_EQ(ml_region_alloc(r, (1ull << 63) + (1ull << 62), 1ull << 63, &out), ML_ERROR_ALIGNMENT_OVERFLOW);
  EXPECT_EQ(ml_region_alloc(r, 8192, 0, &out), ML_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(last().find("8192"), std::string::npos);
  EXPECT_NE(last().find("4096 bytes free"), std::string::npos) << last();
  EXPECT_EQ(out, 12345u);
  EXPECT_EQ(ml_region_free(r, 1u << 20), ML_ERROR_ADDRESS_OUTSIDE_REGION);
  EXPECT_EQ(ml_region_free(r, 0), ML_ERROR_DOUBLE_FREE);
  ASSERT_EQ(ml_region_alloc(r, 128, 0, &out), ML_OK);
  EXPECT_EQ(ml_region_free(r, out + 64), ML_ERROR_NOT_BLOCK_START);
  EXPECT_EQ(ml_region_check(r), ML_OK);
  ml_region_destroy(r);
}

TEST(CApi, NullArgumentsAreRejected) {
  EXPECT_EQ(ml_region_create(0, 4096, 64, 0, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("null"), std::string::npos);
  uint64_t out = 0;
  EXPECT_EQ(ml_region_alloc(nullptr, 64, 0, &out), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_free(nullptr, 0), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_reset(nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_get_stats(nullptr, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_check(nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_walk(nullptr, nullptr, nullptr), ML_ERROR_INVALID_ARGUMENT);
  ml_region* r = nullptr;
  ASSERT_EQ(ml_region_create(0, 4096, 64, 0, &r), ML_OK);
  EXPECT_EQ(ml_region_alloc(r, 64, 0, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_get_stats(r, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_region_walk(r, nullptr, nullptr), ML_ERROR_INVALID_ARGUMENT);
  ml_region_destroy(r);
  EXPECT_EQ(ml_linear_create(0, 10, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_linear_alloc(nullptr, 1, 0, &out), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_linear_mark_get(nullptr, nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_linear_rollback(nullptr, ml_linear_mark{}), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_linear_reset(nullptr), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_linear_get_stats(nullptr, nullptr), ML_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, CreateErrors) {
  ml_region* r = reinterpret_cast<ml_region*>(0x1);
  EXPECT_EQ(ml_region_create(0, 4096, 3, 0, &r), ML_ERROR_GRANULARITY_NOT_POWER_OF_TWO);
  EXPECT_EQ(ml_region_create(10, 4096, 64, 0, &r), ML_ERROR_MISALIGNED_BASE);
  EXPECT_EQ(ml_region_create(UINT64_MAX - 63, 128, 64, 0, &r), ML_ERROR_REGION_WRAPS);
  EXPECT_EQ(ml_region_create(0, 10, 64, ML_REGION_THREAD_SAFE, &r), ML_ERROR_REGION_EMPTY);
  EXPECT_EQ(r, reinterpret_cast<ml_region*>(0x1));  // untouched on failure
  ml_linear* l = nullptr;
  EXPECT_EQ(ml_linear_create(0, 0, &l), ML_ERROR_REGION_EMPTY);
  EXPECT_EQ(ml_linear_create(UINT64_MAX, 2, &l), ML_ERROR_REGION_WRAPS);
  EXPECT_EQ(l, nullptr);
}

TEST(CApi, WalkVisitsBlocksInOrder) {
  ml_region* r = nullptr;
  ASSERT_EQ(ml_region_create(0, 64 * 10, 64, 0, &r), ML_OK);
  uint64_t a = 0;
  ASSERT_EQ(ml_region_alloc(r, 64, 0, &a), ML_OK);
  ASSERT_EQ(ml_region_alloc(r, 128, 0, &a), ML_OK);
  struct Seen {
    std::vector<uint64_t> addr, size;
    std::vector<int> free;
  } seen;
  auto visit = [](void* user, uint64_t addr, uint64_t size, int is_free) {
    auto* s = static_cast<Seen*>(user);
    s->addr.push_back(addr);
    s->size.push_back(size);
    s->free.push_back(is_free);
  };
  ASSERT_EQ(ml_region_walk(r, visit, &seen), ML_OK);
  EXPECT_EQ(seen.addr, (std::vector<uint64_t>{0, 64, 192}));
  EXPECT_EQ(seen.size, (std::vector<uint64_t>{64, 128, 448}));
  EXPECT_EQ(seen.free, (std::vector<int>{0, 0, 1}));
  ml_region_destroy(r);
}

TEST(CApi, ThreadSafeRegionFromManyThreads) {
  ml_region* r = nullptr;
  ASSERT_EQ(ml_region_create(0, 1ull << 26, 64, ML_REGION_THREAD_SAFE, &r), ML_OK);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([r] {
      std::vector<uint64_t> mine;
      for (int i = 0; i < 5000; ++i) {
        uint64_t a = 0;
        ASSERT_EQ(ml_region_alloc(r, 64 + static_cast<uint64_t>(i % 7) * 64, 0, &a), ML_OK);
        mine.push_back(a);
        if (i % 3 == 0) {
          ASSERT_EQ(ml_region_free(r, mine.back()), ML_OK);
          mine.pop_back();
        }
      }
      for (uint64_t a : mine) ASSERT_EQ(ml_region_free(r, a), ML_OK);
    });
  }
  for (auto& t : threads) t.join();
  ml_region_stats s{};
  ASSERT_EQ(ml_region_get_stats(r, &s), ML_OK);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(ml_region_check(r), ML_OK);
  ml_region_destroy(r);
}

TEST(CApi, LinearLifecycle) {
  ml_linear* l = nullptr;
  ASSERT_EQ(ml_linear_create(0, 1024, &l), ML_OK);
  uint64_t a = 0;
  ASSERT_EQ(ml_linear_alloc(l, 10, 0, &a), ML_OK);
  ml_linear_mark m{};
  ASSERT_EQ(ml_linear_mark_get(l, &m), ML_OK);
  ASSERT_EQ(ml_linear_alloc(l, 100, 64, &a), ML_OK);
  EXPECT_EQ(a, 64u);
  ml_linear_stats s{};
  ASSERT_EQ(ml_linear_get_stats(l, &s), ML_OK);
  EXPECT_EQ(s.used_bytes, 164u);
  ASSERT_EQ(ml_linear_rollback(l, m), ML_OK);
  ASSERT_EQ(ml_linear_get_stats(l, &s), ML_OK);
  EXPECT_EQ(s.used_bytes, 10u);
  EXPECT_EQ(s.peak_used_bytes, 164u);
  EXPECT_EQ(ml_linear_alloc(l, 2000, 0, &a), ML_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ml_linear_alloc(l, 0, 0, &a), ML_ERROR_ZERO_SIZE);
  EXPECT_EQ(ml_linear_alloc(l, 1, 6, &a), ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO);
  ASSERT_EQ(ml_linear_reset(l), ML_OK);
  EXPECT_EQ(ml_linear_rollback(l, m), ML_ERROR_STALE_MARK);
  ml_linear_destroy(l);
  ml_linear_destroy(nullptr);
}

TEST(CApi, StatusNamesAreDistinct) {
  std::set<std::string> names;
  for (int s = ML_OK; s <= ML_ERROR_HOST_OUT_OF_MEMORY; ++s)
    EXPECT_TRUE(names.insert(ml_status_name(static_cast<ml_status>(s))).second) << s;
  EXPECT_STREQ(ml_status_name(static_cast<ml_status>(31)), "ML_UNKNOWN_STATUS");
}

TEST(CApi, LastErrorIsPerThread) {
  uint64_t out = 0;
  ml_region* r = nullptr;
  ASSERT_EQ(ml_region_create(0, 4096, 64, 0, &r), ML_OK);
  EXPECT_EQ(ml_region_alloc(r, 0, 0, &out), ML_ERROR_ZERO_SIZE);
  std::string other;
  std::thread([&] { other = ml_last_error_message(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(last().find("zero_size"), std::string::npos);
  ml_region_destroy(r);
}

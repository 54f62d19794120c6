// DeviceArena and DeviceMemory: the device-memory code the sim and PoCL
// drivers share.
#include "memlayer/drivers/device_memory.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using memlayer::drivers::DeviceArena;
using memlayer::drivers::DeviceBlock;
using memlayer::drivers::DeviceMemory;

TEST(DeviceArena, LocateChecksEveryRange) {
  auto a = DeviceArena::create(1 << 20, 0);
  ASSERT_TRUE(a.ok()) << a.error();
  const DeviceArena& arena = a.value();
  EXPECT_EQ(arena.size(), 1u << 20);
  EXPECT_EQ(arena.locate(0, 1 << 20), arena.data());
  EXPECT_EQ(arena.locate(100, 28), arena.data() + 100);
  EXPECT_EQ(arena.locate(1 << 20, 0), arena.data() + (1 << 20));  // the end, empty
  EXPECT_EQ(arena.locate(1 << 20, 1), nullptr);
  EXPECT_EQ(arena.locate(1, 1 << 20), nullptr);
  EXPECT_EQ(arena.locate(~std::uint64_t{0}, 2), nullptr);  // no wrap-around
  EXPECT_TRUE(arena.contains(arena.data() + 10, 10));
  EXPECT_FALSE(arena.contains(arena.data() + (1 << 20) - 1, 2));
  std::memset(arena.data(), 0x5a, arena.size());  // really usable memory
  EXPECT_EQ(static_cast<unsigned char>(arena.data()[12345]), 0x5a);
}

TEST(DeviceArena, BadSizeIsAnError) {
  auto a = DeviceArena::create(0, 0);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().find("size must be > 0"), std::string::npos) << a.error();
}

TEST(DeviceArena, MovesOwnership) {
  auto a = DeviceArena::create(4096, -1);
  ASSERT_TRUE(a.ok());
  DeviceArena first = std::move(a).value();
  std::byte* p = first.data();
  DeviceArena second = std::move(first);
  EXPECT_EQ(second.data(), p);
  EXPECT_EQ(first.data(), nullptr);  // NOLINT: checking the moved-from state on purpose
  DeviceArena third = std::move(DeviceArena::create(8192, -1)).value();
  third = std::move(second);  // frees third's old block, takes second's
  EXPECT_EQ(third.data(), p);
}

TEST(DeviceMemory, BlocksAreAlignedDisjointAndInsideTheArena) {
  auto m = DeviceMemory::create("dev", 1 << 20, 0, 128);
  ASSERT_TRUE(m.ok()) << m.error();
  DeviceMemory& mem = m.value();
  std::vector<DeviceBlock> blocks;
  for (int i = 0; i < 64; ++i) {
    auto b = mem.allocate(1000 + i);
    ASSERT_TRUE(b.ok()) << b.error();
    std::byte* data = b.value().data;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(data) % 128, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(data), b.value().handle.address);
    EXPECT_TRUE(mem.arena().contains(data, 1000 + i));
    std::memset(data, i, 1000 + i);
    blocks.push_back(b.value());
  }
  for (int i = 0; i < 64; ++i)  // no block overwrote another
    EXPECT_EQ(static_cast<int>(blocks[i].data[999 + i]), i);
  EXPECT_EQ(mem.stats().live_blocks, 64u);
  for (const DeviceBlock& b : blocks) ASSERT_TRUE(mem.free(b.handle).ok());
  EXPECT_EQ(mem.stats().live_blocks, 0u);
  EXPECT_EQ(mem.stats().free_bytes, mem.stats().total_bytes);
}

TEST(DeviceMemory, FullMemoryFailsWithFiguresAndRecovers) {
  auto m = DeviceMemory::create("dev7", 1 << 20, 0, 64);
  ASSERT_TRUE(m.ok());
  DeviceMemory& mem = m.value();
  auto big = mem.allocate(768 << 10);
  ASSERT_TRUE(big.ok());
  auto fail = mem.allocate(512 << 10);
  ASSERT_FALSE(fail.ok());
  EXPECT_NE(fail.error().find("dev7"), std::string::npos) << fail.error();
  EXPECT_NE(fail.error().find("out_of_memory"), std::string::npos) << fail.error();
  EXPECT_NE(fail.error().find("524288"), std::string::npos) << fail.error();  // the request
  EXPECT_EQ(mem.stats().failed_requests, 1u);
  ASSERT_TRUE(mem.free(big.value().handle).ok());
  EXPECT_TRUE(mem.allocate(512 << 10).ok());  // works again once memory is released
}

TEST(DeviceMemory, BadFreeAndBadCreateAreErrors) {
  auto m = DeviceMemory::create("dev", 1 << 20, 0, 64);
  ASSERT_TRUE(m.ok());
  auto b = m.value().allocate(256);
  ASSERT_TRUE(b.ok());
  auto wrong = m.value().free(b.value().data + 64);  // not a block start
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().find("dev"), std::string::npos);
  EXPECT_EQ(m.value().stats().live_blocks, 1u);  // changed nothing
  ASSERT_TRUE(m.value().free(b.value().data).ok());  // by pointer
  auto twice = m.value().free(b.value().handle);     // then by handle
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().find("double_free"), std::string::npos) << twice.error();
  EXPECT_FALSE(m.value().free(b.value().data).ok());  // double free by pointer

  // A handle of another device's memory names that, and frees nothing here.
  auto other = DeviceMemory::create("dev2", 1 << 20, 0, 64);
  ASSERT_TRUE(other.ok());
  auto mine = m.value().allocate(256);
  auto theirs = other.value().allocate(256);
  ASSERT_TRUE(mine.ok() && theirs.ok());
  auto foreign = m.value().free(theirs.value().handle);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().find("foreign_handle"), std::string::npos) << foreign.error();
  EXPECT_EQ(m.value().stats().live_blocks, 1u);
  EXPECT_EQ(other.value().stats().live_blocks, 1u);
  // A stale one: the block freed, its record serving the next block.
  ASSERT_TRUE(m.value().free(mine.value().handle).ok());
  auto next = m.value().allocate(256);
  ASSERT_TRUE(next.ok());
  auto stale = m.value().free(mine.value().handle);
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.error().find("stale_handle"), std::string::npos) << stale.error();
  EXPECT_EQ(m.value().stats().live_blocks, 1u);  // the next block is still live

  auto bad = DeviceMemory::create("dev", 1 << 20, 0, 96);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("granularity 96"), std::string::npos) << bad.error();
  EXPECT_FALSE(DeviceMemory::create("dev", 0, 0, 64).ok());
}

#include <gtest/gtest.h>

#include <vector>

#include "memlayer/drivers/host_device.hpp"

using namespace memlayer;

namespace {
runtime::DeviceAddress addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
}  // namespace

TEST(HostDevice, SharesHostMemory) {
  drivers::HostDevice dev(1 << 20, 3);
  EXPECT_TRUE(dev.info().shares_host_memory);
  EXPECT_EQ(dev.info().worker_threads, 3u);
  std::vector<int> a{1, 2, 3, 4}, b(4, 0);
  EXPECT_EQ(dev.host_pointer(addr(a.data())), a.data());
  ASSERT_TRUE(dev.copy(addr(a.data()), addr(b.data()), sizeof(int) * 4).ok());
  EXPECT_EQ(a, b);
  const int v = 7;
  ASSERT_TRUE(dev.write(addr(b.data()) + sizeof(int), &v, sizeof v).ok());
  int r = 0;
  ASSERT_TRUE(dev.read(addr(b.data()) + sizeof(int), &r, sizeof r).ok());
  EXPECT_EQ(r, 7);
  const std::byte pattern[2]{std::byte{0xAB}, std::byte{0xCD}};
  ASSERT_TRUE(dev.fill(addr(b.data()), 8, pattern).ok());
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b.data())[7], 0xCD);
  EXPECT_FALSE(dev.fill(addr(b.data()), 7, pattern).ok());
  const std::vector<runtime::DeviceAddress> args{addr(a.data())};
  ASSERT_TRUE(dev.run_kernel(
                     [](std::span<void* const> p) {
                       static_cast<int*>(p[0])[0] = 99;
                       return runtime::Status{};
                     },
                     args, {})
                  .ok());
  EXPECT_EQ(a[0], 99);
}

TEST(HostDevice, NullAddressesAreErrors) {
  drivers::HostDevice dev;
  int x = 0;
  EXPECT_EQ(dev.read(0, &x, 4).code, -30);
  EXPECT_FALSE(dev.write(0, &x, 4).ok());
  EXPECT_FALSE(dev.copy(0, 0, 4).ok());
  EXPECT_NE(dev.copy(0, 0, 4).message.find("null"), std::string::npos);
  EXPECT_FALSE(dev.peer_link(dev).has_value());
}

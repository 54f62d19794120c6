// The CUDA driver. Without an NVIDIA GPU (or driver) every test that needs
// one skips, saying why; option checking runs everywhere. With a GPU: the
// operations against a host model, and memlayer's runtime on it (buffers
// from heap segments, not one cuMemAlloc each; with two GPUs, a buffer moved
// between them: by a peer copy or through the host, whichever the driver
// offers, the test does not tell which).
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "memlayer/drivers/cuda_device.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"

using namespace memlayer;
using drivers::CudaDevice;
using drivers::CudaOptions;

namespace {

std::vector<std::unique_ptr<CudaDevice>> gpus(const CudaOptions& o = {}) {
  std::vector<std::unique_ptr<CudaDevice>> out;
  const runtime::Status s = CudaDevice::create(o, out);
  if (!s.ok()) {
    EXPECT_EQ(s.code, -1) << "only 'no device' may stop these tests: " << s.message;
    EXPECT_NE(s.message.find("cuda: "), std::string::npos) << s.message;
    std::cout << "[ SKIPPED  ] " << s.message << "\n";
  }
  return out;
}

#define REQUIRE_GPU(devices)                                         \
  auto devices = gpus();                                             \
  if (devices.empty()) GTEST_SKIP() << "no NVIDIA GPU on this machine"

std::vector<std::uint8_t> pattern(std::size_t n, int seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 29 + static_cast<std::size_t>(seed));
  return v;
}

}  // namespace

TEST(CudaDevice, BadOptionsAreRejectedByName) {
  std::vector<std::unique_ptr<CudaDevice>> out;
  CudaOptions o;
  o.worker_threads = 0;
  const runtime::Status a = CudaDevice::create(o, out);
  EXPECT_EQ(a.code, runtime::cl::kInvalidValue);
  EXPECT_NE(a.message.find("worker_threads"), std::string::npos) << a.message;
  o = CudaOptions{};
  o.memory_fraction = 1.5;
  EXPECT_NE(CudaDevice::create(o, out).message.find("memory_fraction"), std::string::npos);
  EXPECT_TRUE(out.empty());
}

TEST(CudaDevice, WithoutAGpuCreateSaysWhyAndMakesNothing) {
  std::vector<std::unique_ptr<CudaDevice>> out;
  const runtime::Status s = CudaDevice::create({}, out);
  if (s.ok()) {
    EXPECT_FALSE(out.empty());
    for (auto& d : out) {
      EXPECT_TRUE(d->has_native_allocator());
      EXPECT_GT(d->info().global_mem_size, 0u);
      EXPECT_EQ(d->info().base_alignment, 256u);
    }
  } else {
    EXPECT_EQ(s.code, -1) << s.message;
    // Says why: no driver library, cuInit's error, or no GPU.
    const bool says_why = s.message.find("cannot load libcuda.so.1") != std::string::npos ||
                          s.message.find("cuInit: ") != std::string::npos ||
                          s.message.find("no GPU") != std::string::npos;
    EXPECT_TRUE(says_why) << s.message;
    EXPECT_TRUE(out.empty());
  }
}

TEST(CudaDevice, OrdinalOutOfRangeIsNamed) {
  REQUIRE_GPU(devices);
  std::vector<std::unique_ptr<CudaDevice>> out;
  const runtime::Status s = CudaDevice::create({}, out, {static_cast<int>(devices.size())});
  EXPECT_EQ(s.code, runtime::cl::kInvalidValue);
  EXPECT_NE(s.message.find("out of range"), std::string::npos) << s.message;
}

TEST(CudaDevice, OperationsMatchAHostModel) {
  REQUIRE_GPU(devices);
  CudaDevice& d = *devices[0];
  constexpr std::uint64_t n = 1 << 20;
  auto base = d.native_allocate(n);
  ASSERT_TRUE(base);
  EXPECT_EQ(*base % 256, 0u);
  std::vector<std::uint8_t> model = pattern(n, 1);
  ASSERT_TRUE(d.write(*base, model.data(), n).ok());
  // Overlapping copies both ways, as memmove would do them.
  ASSERT_TRUE(d.copy(*base + 1000, *base + 1700, 50000).ok());
  std::memmove(model.data() + 1700, model.data() + 1000, 50000);
  ASSERT_TRUE(d.copy(*base + 300000, *base + 299000, 70000).ok());
  std::memmove(model.data() + 299000, model.data() + 300000, 70000);
  // Fills with every pattern size OpenCL allows.
  std::uint64_t at = 600000;
  for (std::size_t p : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 128u}) {
    std::vector<std::byte> pat(p);
    for (std::size_t i = 0; i < p; ++i) pat[i] = static_cast<std::byte>(0x10 + i + p);
    ASSERT_TRUE(d.fill(*base + at, p * 100, pat).ok()) << p;
    for (std::size_t i = 0; i < p * 100; ++i) model[at + i] = static_cast<std::uint8_t>(pat[i % p]);
    at += p * 100 + 256;
  }
  std::vector<std::uint8_t> back(n);
  ASSERT_TRUE(d.read(*base, back.data(), n).ok());
  EXPECT_EQ(back, model);
  std::vector<std::byte> three(3);
  EXPECT_FALSE(d.fill(*base, 100, three).ok()) << "100 is not a multiple of 3";
  const std::uint64_t sizes[1] = {64};
  const runtime::Status local = d.run_kernel([](std::span<void* const>) { return runtime::Status{}; }, {}, sizes);
  EXPECT_EQ(local.code, runtime::cl::kInvalidKernelArgs);
  d.native_release(*base, n);
}

TEST(CudaDevice, AnImpossibleAllocationFailsCleanly) {
  REQUIRE_GPU(devices);
  EXPECT_FALSE(devices[0]->native_allocate(std::uint64_t{1} << 50));  // 1 PiB
  auto ok = devices[0]->native_allocate(4096);
  EXPECT_TRUE(ok);
  if (ok) devices[0]->native_release(*ok, 4096);
}

TEST(CudaDevice, RuntimeBuffersComeFromHeapSegments) {
  REQUIRE_GPU(devices);
  std::vector<std::unique_ptr<runtime::DeviceDriver>> drivers;
  for (auto& d : devices) drivers.push_back(std::move(d));
  const std::size_t count = drivers.size();
  runtime::ContextOptions options;
  options.device_heap.segment_size = 64 << 20;
  auto ctx = runtime::Context::create(std::move(drivers), options).value();
  std::vector<std::shared_ptr<runtime::Queue>> queues;
  for (std::size_t i = 0; i < count; ++i) queues.push_back(ctx->create_queue(i).value());
  std::vector<runtime::Buffer> bufs;
  for (int i = 0; i < 16; ++i) {
    bufs.push_back(ctx->create_buffer(runtime::mem::kReadWrite, 1 << 20).value());
    const auto data = pattern(1 << 20, i);
    ASSERT_TRUE(queues[0]->enqueue_write(bufs.back(), 0, data.size(), data.data(), true).ok());
  }
  EXPECT_EQ(ctx->stats().heaps[0].native_allocations, 1u) << "16 buffers, one cuMemAlloc";
  // Read each back on the last GPU: across devices when there are two.
  for (int i = 0; i < 16; ++i) {
    std::vector<std::uint8_t> back(1 << 20);
    ASSERT_TRUE(queues.back()->enqueue_read(bufs[static_cast<std::size_t>(i)], 0, back.size(), back.data(), true).ok());
    EXPECT_EQ(back, pattern(1 << 20, i)) << i;
  }
  if (count > 1) {
    EXPECT_GT(ctx->stats().bytes_migrated, 0u);
  }
}

// The runtime on devices with a native allocator: buffers are sub-allocated
// from segments the device heap obtains, not one native call per buffer;
// freed segments are cached and reused; the heap's out-of-memory ladder and
// eviction cooperate; bad heap options are refused by name.
#include <gtest/gtest.h>

#include <vector>

#include "memlayer/drivers/sim_device.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"

using namespace memlayer;
using namespace memlayer::runtime;
using migration::Access;

namespace {

struct Rig {
  std::vector<drivers::SimDevice*> sims;  // owned by the context
  std::shared_ptr<Context> ctx;
  std::vector<std::shared_ptr<Queue>> queues;
};

drivers::SimOptions native_sim(std::uint64_t memory_size) {
  drivers::SimOptions o;
  o.memory_size = memory_size;
  o.native_allocator = true;
  o.native_allocation_cost = {20e-6, 15.0 * (1ull << 30)};
  return o;
}

Rig make_rig(unsigned devices, const drivers::SimOptions& sim, const ContextOptions& options) {
  std::vector<std::unique_ptr<drivers::SimDevice>> made;
  const Status s = drivers::SimDevice::create(devices, sim, made);
  EXPECT_TRUE(s.ok()) << s.message;
  Rig rig;
  std::vector<std::unique_ptr<DeviceDriver>> drivers;
  for (auto& d : made) {
    rig.sims.push_back(d.get());
    drivers.push_back(std::move(d));
  }
  auto ctx = Context::create(std::move(drivers), options);
  EXPECT_TRUE(ctx.ok()) << ctx.error().message;
  rig.ctx = ctx.value();
  for (std::size_t i = 0; i < rig.ctx->device_count(); ++i) rig.queues.push_back(rig.ctx->create_queue(i).value());
  return rig;
}

ContextOptions heap(std::uint64_t segment_size, std::uint64_t cache_cap) {
  ContextOptions o;
  o.device_heap.segment_size = segment_size;
  o.device_heap.cache_cap = cache_cap;
  return o;
}

std::vector<std::uint8_t> pattern(std::size_t n, int seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 13 + static_cast<std::size_t>(seed));
  return v;
}

Buffer write_new(Rig& rig, std::size_t device, const std::vector<std::uint8_t>& data) {
  auto b = rig.ctx->create_buffer(mem::kReadWrite, data.size());
  EXPECT_TRUE(b.ok()) << b.error().message;
  auto w = rig.queues[device]->enqueue_write(b.value(), 0, data.size(), data.data(), true);
  EXPECT_TRUE(w.ok()) << w.error().message;
  return b.value();
}

std::vector<std::uint8_t> read_all(Queue& q, const Buffer& b) {
  std::vector<std::uint8_t> out(b.size());
  auto r = q.enqueue_read(b, 0, b.size(), out.data(), true);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return out;
}

}  // namespace

TEST(HeapDevice, BuffersShareOneSegment) {
  Rig rig = make_rig(1, native_sim(64 << 20), heap(8 << 20, 64 << 20));
  std::vector<Buffer> bufs;
  for (int i = 0; i < 16; ++i) bufs.push_back(write_new(rig, 0, pattern(256 << 10, i)));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(read_all(*rig.queues[0], bufs[static_cast<std::size_t>(i)]), pattern(256 << 10, i));
  const bufalloc::HeapStats h = rig.ctx->stats().heaps[0];
  EXPECT_EQ(rig.sims[0]->native_allocations(), 1u);
  EXPECT_EQ(h.native_allocations, 1u);
  EXPECT_EQ(h.live_blocks, 16u);
  EXPECT_EQ(h.used_bytes, 16u * (256 << 10));
  EXPECT_EQ(h.reserved_bytes, 8u << 20);
}

TEST(HeapDevice, PerBufferOptionCallsTheDriverForEachBufferAndGivesItBack) {
  Rig rig = make_rig(1, native_sim(64 << 20), heap(256, 0));
  {
    std::vector<Buffer> bufs;
    for (int i = 0; i < 16; ++i) bufs.push_back(write_new(rig, 0, pattern(100 << 10, i)));
    EXPECT_EQ(rig.sims[0]->native_allocations(), 16u);
    EXPECT_EQ(rig.sims[0]->native_bytes(), 16u * (100 << 10));
  }
  ASSERT_TRUE(rig.queues[0]->finish().ok());
  EXPECT_EQ(rig.sims[0]->native_bytes(), 0u) << "cache_cap 0: every freed segment goes back";
  EXPECT_EQ(rig.ctx->stats().heaps[0].native_releases, 16u);
}

TEST(HeapDevice, FreedSegmentIsCachedAndReused) {
  Rig rig = make_rig(1, native_sim(64 << 20), heap(4 << 20, 64 << 20));
  { Buffer b = write_new(rig, 0, pattern(1 << 20, 1)); }
  ASSERT_TRUE(rig.queues[0]->finish().ok());
  bufalloc::HeapStats h = rig.ctx->stats().heaps[0];
  EXPECT_EQ(h.cached_bytes, 4u << 20);
  EXPECT_EQ(rig.sims[0]->native_bytes(), 4u << 20) << "still held: cached, not given back";
  Buffer again = write_new(rig, 0, pattern(1 << 20, 2));
  h = rig.ctx->stats().heaps[0];
  EXPECT_EQ(h.cache_hits, 1u);
  EXPECT_EQ(rig.sims[0]->native_allocations(), 1u);
  EXPECT_EQ(read_all(*rig.queues[0], again), pattern(1 << 20, 2));
}

TEST(HeapDevice, CachedSegmentsAreGivenBackToServeALargerBuffer) {
  // Four 1 MiB segments fill the 4 MiB device; two adjacent ones are freed
  // (cached); a 2 MiB buffer needs the driver to make a new segment, which
  // it can do only once the heap has given the cached ones back.
  Rig rig = make_rig(1, native_sim(4 << 20), heap(1 << 20, 64 << 20));
  std::vector<Buffer> bufs;
  for (int i = 0; i < 4; ++i) bufs.push_back(write_new(rig, 0, pattern(768 << 10, i)));
  EXPECT_EQ(rig.sims[0]->native_allocations(), 4u);
  bufs.erase(bufs.begin(), bufs.begin() + 2);
  ASSERT_TRUE(rig.queues[0]->finish().ok());
  EXPECT_EQ(rig.ctx->stats().heaps[0].cached_bytes, 2u << 20);
  Buffer big = write_new(rig, 0, pattern(2 << 20, 9));
  EXPECT_EQ(read_all(*rig.queues[0], big), pattern(2 << 20, 9));
  const ContextStats s = rig.ctx->stats();
  EXPECT_GT(s.heaps[0].retries, 0u);
  EXPECT_EQ(s.evictions, 0u) << "the cached segments sufficed: nothing was evicted";
  EXPECT_EQ(read_all(*rig.queues[0], bufs[0]), pattern(768 << 10, 2));
  EXPECT_EQ(read_all(*rig.queues[0], bufs[1]), pattern(768 << 10, 3));
}

TEST(HeapDevice, WorkingSetTwiceTheDeviceRunsByEvictionWithoutLosingData) {
  for (std::uint64_t cap : {std::uint64_t{0}, std::uint64_t{64} << 20}) {
    Rig rig = make_rig(2, native_sim(1 << 20), heap(256 << 10, cap));
    std::vector<Buffer> bufs;
    std::vector<std::vector<std::uint8_t>> model;
    for (int i = 0; i < 8; ++i) {
      model.push_back(pattern(256 << 10, i));
      bufs.push_back(write_new(rig, 0, model.back()));
    }
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < bufs.size(); ++i) {
        auto& q = *rig.queues[(i + static_cast<std::size_t>(round)) % 2];
        auto add_one = [n = model[i].size()](std::span<void* const> p) {
          auto* bytes = static_cast<std::uint8_t*>(p[0]);
          for (std::size_t k = 0; k < n; ++k) bytes[k] = static_cast<std::uint8_t>(bytes[k] + 1);
          return Status{};
        };
        auto r = q.enqueue_kernel(add_one, std::vector<KernelArg>{{bufs[i], Access::read_write}});
        ASSERT_TRUE(r.ok()) << "cap " << cap << ": " << r.error().message;
        for (auto& byte : model[i]) byte = static_cast<std::uint8_t>(byte + 1);
      }
    }
    for (std::size_t i = 0; i < bufs.size(); ++i)
      EXPECT_EQ(read_all(*rig.queues[i % 2], bufs[i]), model[i]) << "cap " << cap << ", buffer " << i;
    EXPECT_GT(rig.ctx->stats().evictions, 0u);
    EXPECT_GT(rig.ctx->stats().write_backs, 0u);
  }
}

TEST(HeapDevice, TooBigFailsWithTheDeviceNamedAndLeavesNothingBehind) {
  Rig rig = make_rig(1, native_sim(1 << 20), heap(256 << 10, 64 << 20));
  auto big = rig.ctx->create_buffer(mem::kReadWrite, 2 << 20).value();
  const std::uint8_t v = 7;
  auto r = rig.queues[0]->enqueue_fill(big, &v, 1, 0, big.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, cl::kMemObjectAllocationFailure);
  EXPECT_NE(r.error().message.find("sim0"), std::string::npos) << r.error().message;
  EXPECT_EQ(rig.ctx->stats().heaps[0].live_blocks, 0u);
  Buffer fits = write_new(rig, 0, pattern(512 << 10, 4));
  EXPECT_EQ(read_all(*rig.queues[0], fits), pattern(512 << 10, 4));
}

TEST(HeapDevice, BadHeapOptionsAreRefusedByName) {
  std::vector<std::unique_ptr<drivers::SimDevice>> made;
  ASSERT_TRUE(drivers::SimDevice::create(1, native_sim(1 << 20), made).ok());
  std::vector<std::unique_ptr<DeviceDriver>> drivers;
  drivers.push_back(std::move(made[0]));
  ContextOptions o;
  o.device_heap.granularity = 300;
  auto ctx = Context::create(std::move(drivers), o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.error().code, cl::kInvalidValue);
  EXPECT_NE(ctx.error().message.find("device heap"), std::string::npos) << ctx.error().message;
}

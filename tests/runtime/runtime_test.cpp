// The runtime end to end on sim devices: lazy allocation, sub-buffers,
// migrations, events, maps, memory pressure, failures.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "memlayer/drivers/host_device.hpp"
#include "memlayer/drivers/sim_device.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"

using namespace memlayer;
using namespace memlayer::runtime;
using migration::Access;

namespace {

struct Rig {
  std::shared_ptr<Context> ctx;
  std::vector<std::shared_ptr<Queue>> queues;
};

Rig rig_of(std::vector<std::unique_ptr<DeviceDriver>> drivers, const ContextOptions& context = {}) {
  auto made = Context::create(std::move(drivers), context);
  EXPECT_TRUE(made.ok()) << made.error().message;
  Rig rig{made.value(), {}};
  for (std::size_t i = 0; i < rig.ctx->device_count(); ++i) rig.queues.push_back(rig.ctx->create_queue(i).value());
  return rig;
}

Rig make_rig(unsigned devices, drivers::SimOptions options = {}, bool with_host = false,
             const ContextOptions& context = {}) {
  if (options.memory_size == drivers::SimOptions{}.memory_size) options.memory_size = 8 << 20;
  std::vector<std::unique_ptr<drivers::SimDevice>> sims;
  if (devices > 0) {  // (0 would mean one per NUMA node)
    const Status s = drivers::SimDevice::create(devices, options, sims);
    EXPECT_TRUE(s.ok()) << s.message;
  }
  std::vector<std::unique_ptr<DeviceDriver>> drivers;
  for (auto& d : sims) drivers.push_back(std::move(d));
  if (with_host) drivers.push_back(std::make_unique<drivers::HostDevice>());
  return rig_of(std::move(drivers), context);
}

// One sim device per element of `each`, each with its own options.
Rig make_rig_each(std::vector<drivers::SimOptions> each) {
  std::vector<std::unique_ptr<DeviceDriver>> drivers;
  for (drivers::SimOptions& o : each) {
    o.memory_size = 8 << 20;
    std::vector<std::unique_ptr<drivers::SimDevice>> one;
    const Status s = drivers::SimDevice::create(1, o, one);
    EXPECT_TRUE(s.ok()) << s.message;
    for (auto& d : one) drivers.push_back(std::move(d));
  }
  return rig_of(std::move(drivers));
}

Buffer buffer(Context& ctx, std::uint64_t size, std::uint32_t flags = mem::kReadWrite, void* host = nullptr) {
  auto b = ctx.create_buffer(flags, size, host);
  EXPECT_TRUE(b.ok()) << b.error().message;
  return b.value();
}

std::vector<std::uint8_t> pattern(std::size_t n, int seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + static_cast<std::size_t>(seed));
  return v;
}

std::vector<std::uint8_t> read_all(Queue& q, const Buffer& b) {
  std::vector<std::uint8_t> out(b.size());
  auto r = q.enqueue_read(b, 0, b.size(), out.data(), true);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return out;
}

// A kernel that adds `k` to every byte of its first argument.
KernelFunction add(std::uint8_t k, std::uint64_t size) {
  return [k, size](std::span<void* const> p) {
    auto* bytes = static_cast<std::uint8_t*>(p[0]);
    for (std::uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<std::uint8_t>(bytes[i] + k);
    return Status{};
  };
}

}  // namespace

TEST(Runtime, WriteOnOneDeviceReadOnAnother) {
  Rig rig = make_rig(2);
  Buffer b = buffer(*rig.ctx, 4096);
  const auto data = pattern(4096, 1);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(b, 0, 4096, data.data(), false).ok());
  EXPECT_EQ(read_all(*rig.queues[1], b), data);
  const ContextStats s = rig.ctx->stats();
  EXPECT_EQ(s.bytes_migrated, 2 * 4096u) << "device 0 -> host -> device 1";
  EXPECT_EQ(s.copies_to_host, 1u);
  EXPECT_EQ(s.copies_from_host, 1u);
}

TEST(Runtime, BuffersTakeDeviceMemoryOnlyWhenFirstUsed) {
  Rig rig = make_rig(2);
  Buffer b = buffer(*rig.ctx, 1 << 20);
  EXPECT_EQ(rig.ctx->stats().devices[0].live_blocks, 0u);
  EXPECT_EQ(rig.ctx->stats().devices[1].live_blocks, 0u);
  const std::uint8_t zero = 0;
  ASSERT_TRUE(rig.queues[1]->enqueue_fill(b, &zero, 1, 0, b.size()).value().wait() == cl::kComplete);
  EXPECT_EQ(rig.ctx->stats().devices[0].live_blocks, 0u);
  EXPECT_EQ(rig.ctx->stats().devices[1].live_blocks, 1u);
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, 0u) << "a fill overwrites: nothing to migrate";
}

TEST(Runtime, DisjointSubBuffersOnTwoDevicesMoveOnlyTheirBytes) {
  drivers::SimOptions o;
  o.peer_link = LinkCost{1e-6, 50e9};
  Rig rig = make_rig(2, o);
  Buffer parent = buffer(*rig.ctx, 8192);
  const auto data = pattern(8192, 3);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(parent, 0, 8192, data.data(), true).ok());
  Buffer lo = rig.ctx->create_sub_buffer(parent, 0, 0, 4096).value();
  Buffer hi = rig.ctx->create_sub_buffer(parent, 0, 4096, 4096).value();
  const auto before = rig.ctx->stats().bytes_migrated;
  std::vector<KernelArg> a{{lo, Access::read_write}}, b{{hi, Access::read_write}};
  ASSERT_TRUE(rig.queues[0]->enqueue_kernel(add(1, 4096), a).ok());
  ASSERT_TRUE(rig.queues[1]->enqueue_kernel(add(2, 4096), b).ok());
  ASSERT_TRUE(rig.queues[0]->finish().ok());
  ASSERT_TRUE(rig.queues[1]->finish().ok());
  EXPECT_EQ(rig.ctx->stats().bytes_migrated - before, 4096u) << "only hi went to device 1 (directly)";
  auto expect = data;
  for (int i = 0; i < 4096; ++i) expect[static_cast<std::size_t>(i)] += 1;
  for (int i = 4096; i < 8192; ++i) expect[static_cast<std::size_t>(i)] += 2;
  EXPECT_EQ(read_all(*rig.queues[0], parent), expect);
  EXPECT_EQ(read_all(*rig.queues[1], parent), expect);
}

// A refused call's status: its code, and a message naming the problem.
template <class T>
void expect_refused(const Result<T>& r, int code, const std::string& says) {
  ASSERT_FALSE(r.ok()) << "accepted; expected code " << code << " saying: " << says;
  EXPECT_EQ(r.error().code, code) << r.error().message;
  EXPECT_NE(r.error().message.find(says), std::string::npos) << r.error().message;
}
void expect_refused(const Status& st, int code, const std::string& says) {
  EXPECT_EQ(st.code, code) << st.message;
  EXPECT_NE(st.message.find(says), std::string::npos) << st.message;
}

TEST(Runtime, SubBufferErrors) {
  Rig rig = make_rig(1);
  Buffer parent = buffer(*rig.ctx, 4096, mem::kReadOnly);
  expect_refused(rig.ctx->create_sub_buffer(parent, 0, 100, 128), cl::kMisalignedSubBufferOffset,
                 "origin 100 is not a multiple of");
  expect_refused(rig.ctx->create_sub_buffer(parent, 0, 4096, 1), cl::kInvalidValue,
                 "[4096, +1) exceeds the parent's 4096 bytes");
  expect_refused(rig.ctx->create_sub_buffer(parent, 0, 0, 0), cl::kInvalidBufferSize, "size is 0");
  expect_refused(rig.ctx->create_sub_buffer(parent, mem::kWriteOnly, 0, 128), cl::kInvalidValue,
                 "its access flags contradict the parent's");
  expect_refused(rig.ctx->create_sub_buffer(parent, mem::kUseHostPtr, 0, 128), cl::kInvalidValue,
                 "only access and host-access flags are allowed");
  Buffer sub = rig.ctx->create_sub_buffer(parent, 0, 128, 128).value();
  EXPECT_EQ(sub.flags() & mem::kReadOnly, mem::kReadOnly) << "inherited";
  expect_refused(rig.ctx->create_sub_buffer(sub, 0, 0, 64), cl::kInvalidMemObject, "the parent is itself a sub-buffer");
  expect_refused(rig.ctx->create_sub_buffer(Buffer{}, 0, 0, 64), cl::kInvalidMemObject, "the parent is empty");
}

TEST(Runtime, BufferCreationErrors) {
  Rig rig = make_rig(1);
  int x = 0;
  expect_refused(rig.ctx->create_buffer(0, 0), cl::kInvalidBufferSize, "size is 0");
  expect_refused(rig.ctx->create_buffer(mem::kReadOnly | mem::kWriteOnly, 4), cl::kInvalidValue,
                 "more than one of READ_WRITE, WRITE_ONLY, READ_ONLY");
  expect_refused(rig.ctx->create_buffer(mem::kUseHostPtr, 4), cl::kInvalidHostPtr, "without a host_ptr");
  expect_refused(rig.ctx->create_buffer(0, 4, &x), cl::kInvalidHostPtr, "host_ptr given without");
  expect_refused(rig.ctx->create_buffer(mem::kUseHostPtr | mem::kCopyHostPtr, 4, &x), cl::kInvalidValue,
                 "USE_HOST_PTR excludes ALLOC_HOST_PTR and COPY_HOST_PTR");
  expect_refused(rig.ctx->create_buffer(1u << 20, 4), cl::kInvalidValue, "unknown flag bits");
}

// A context needs at least one device, none null, and at most 63 with
// memory of their own (the planner's locations: migration/location.hpp).
TEST(Runtime, ContextCreationErrors) {
  expect_refused(Context::create({}), cl::kInvalidValue, "no devices");
  std::vector<std::unique_ptr<DeviceDriver>> with_null;
  with_null.push_back(std::make_unique<drivers::HostDevice>());
  with_null.push_back(nullptr);
  expect_refused(Context::create(std::move(with_null)), cl::kInvalidDevice, "device 1 is null");
  drivers::SimOptions o;
  o.memory_size = 64 << 10;
  std::vector<std::unique_ptr<drivers::SimDevice>> sims;
  ASSERT_TRUE(drivers::SimDevice::create(64, o, sims).ok());
  std::vector<std::unique_ptr<DeviceDriver>> many;
  for (auto& d : sims) many.push_back(std::move(d));
  expect_refused(Context::create(std::move(many)), cl::kInvalidValue, "more than 63 devices with their own memory");
}

// A user event takes one status, complete or an error; other events none.
TEST(Runtime, UserEventStatusErrors) {
  Rig rig = make_rig(1);
  Event user = rig.ctx->create_user_event();
  expect_refused(user.set_user_status(3), cl::kInvalidValue, "must be complete (0) or an error (< 0)");
  ASSERT_TRUE(user.set_user_status(cl::kComplete).ok());
  expect_refused(user.set_user_status(cl::kComplete), cl::kInvalidOperation, "set already");
  Buffer b = buffer(*rig.ctx, 64);
  const std::uint8_t v = 1;
  Event fill = rig.queues[0]->enqueue_fill(b, &v, 1, 0, 64).value();
  expect_refused(fill.set_user_status(cl::kComplete), cl::kInvalidEvent, "not a user event");
  EXPECT_EQ(fill.wait(), cl::kComplete);
  expect_refused(Event{}.set_user_status(cl::kComplete), cl::kInvalidEvent, "not a user event");
}

TEST(Runtime, CopyHostPtrAndUseHostPtr) {
  Rig rig = make_rig(2);
  auto data = pattern(1000, 5);
  Buffer copied = buffer(*rig.ctx, 1000, mem::kCopyHostPtr, data.data());
  data[0] = 99;  // the copy was taken at creation
  EXPECT_EQ(read_all(*rig.queues[1], copied)[0], pattern(1000, 5)[0]);
  Buffer used = buffer(*rig.ctx, 1000, mem::kUseHostPtr, data.data());
  ASSERT_TRUE(rig.queues[0]->enqueue_kernel(add(1, 1000), std::vector<KernelArg>{{used, Access::read_write}}).ok());
  auto m = rig.queues[1]->enqueue_map(used, map::kRead, 0, 1000, true);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m.value().pointer, data.data()) << "a USE_HOST_PTR map points into the user's memory";
  EXPECT_EQ(data[0], 100);
  ASSERT_TRUE(rig.queues[1]->enqueue_unmap(used, m.value().pointer).ok());
}

TEST(Runtime, MapsSeeAndPublishTheLatestData) {
  Rig rig = make_rig(2);
  Buffer b = buffer(*rig.ctx, 256);
  const auto data = pattern(256, 9);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(b, 0, 256, data.data(), false).ok());
  auto m = rig.queues[1]->enqueue_map(b, map::kRead | map::kWrite, 0, 256, true).value();
  auto* p = static_cast<std::uint8_t*>(m.pointer);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), p));
  p[10] = 0xAA;
  ASSERT_TRUE(rig.queues[1]->enqueue_unmap(b, m.pointer).ok());
  EXPECT_EQ(read_all(*rig.queues[0], b)[10], 0xAA);
  EXPECT_EQ(read_all(*rig.queues[1], b)[10], 0xAA);
  // A write-invalidate map moves nothing.
  const auto before = rig.ctx->stats().bytes_migrated;
  auto w = rig.queues[0]->enqueue_map(b, map::kWriteInvalidateRegion, 0, 256, true).value();
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, before);
  std::memset(w.pointer, 7, 256);
  ASSERT_TRUE(rig.queues[0]->enqueue_unmap(b, w.pointer).ok());
  EXPECT_EQ(read_all(*rig.queues[1], b), std::vector<std::uint8_t>(256, 7));
  EXPECT_EQ(rig.queues[0]->enqueue_unmap(b, w.pointer).error().code, cl::kInvalidValue) << "unmapped already";
}

TEST(Runtime, SameBufferTwiceInAKernelCountsAsAWrite) {
  Rig rig = make_rig(2);
  Buffer b = buffer(*rig.ctx, 64);
  const auto data = pattern(64, 2);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(b, 0, 64, data.data(), true).ok());
  std::vector<KernelArg> args{{b, Access::read}, {b, Access::write}};
  ASSERT_TRUE(rig.queues[1]
                  ->enqueue_kernel(
                      [](std::span<void* const> p) {
                        EXPECT_EQ(p[0], p[1]);
                        static_cast<std::uint8_t*>(p[1])[0] = 42;
                        return Status{};
                      },
                      args)
                  .ok());
  EXPECT_EQ(read_all(*rig.queues[0], b)[0], 42);
}

TEST(Runtime, CopyBetweenSiblingSubBuffers) {
  Rig rig = make_rig(2);
  Buffer parent = buffer(*rig.ctx, 512);
  const auto data = pattern(512, 4);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(parent, 0, 512, data.data(), true).ok());
  Buffer a = rig.ctx->create_sub_buffer(parent, 0, 0, 256).value();
  Buffer c = rig.ctx->create_sub_buffer(parent, 0, 256, 256).value();
  ASSERT_TRUE(rig.queues[1]->enqueue_copy(a, c, 0, 0, 256).ok());
  auto out = read_all(*rig.queues[0], parent);
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + 256, out.begin() + 256));
  EXPECT_EQ(rig.queues[1]->enqueue_copy(parent, a, 0, 10, 100).error().code, cl::kInvalidValue) << "overlap";
}

TEST(Runtime, UserEventsGateCommandsAndFailuresPropagate) {
  Rig rig = make_rig(2);
  Buffer b = buffer(*rig.ctx, 128);
  Event gate = rig.ctx->create_user_event();
  const auto data = pattern(128, 6);
  std::vector<Event> wait{gate};
  Event w = rig.queues[0]->enqueue_write(b, 0, 128, data.data(), false, wait).value();
  std::vector<std::uint8_t> out(128);
  // The read on device 1 depends on the write only through memlayer's
  // migration edges.
  Event r = rig.queues[1]->enqueue_read(b, 0, 128, out.data(), false).value();
  // Had either run before the gate was set, it would have completed, and
  // the waits below would return kComplete.
  ASSERT_TRUE(gate.set_user_status(-1234).ok());
  EXPECT_EQ(w.wait(), cl::kExecStatusErrorForEventsInWaitList);
  EXPECT_EQ(r.wait(), cl::kExecStatusErrorForEventsInWaitList) << "through the implicit migration";
  EXPECT_NE(r.error_message().find("failed"), std::string::npos);
  // A dependency that failed before the enqueue fails the command at once.
  Event late = rig.queues[1]->enqueue_marker(std::vector<Event>{w}).value();
  EXPECT_EQ(late.wait(), cl::kExecStatusErrorForEventsInWaitList);
  EXPECT_EQ(gate.set_user_status(0).code, cl::kInvalidOperation);
  EXPECT_EQ(w.set_user_status(0).code, cl::kInvalidEvent);
}

TEST(Runtime, CallbacksAndProfiling) {
  Rig rig = make_rig(1);
  Buffer b = buffer(*rig.ctx, 64);
  Event gate = rig.ctx->create_user_event();
  std::atomic<int> called{-99};
  const auto data = pattern(64, 1);  // a non-blocking write reads it later
  Event w = rig.queues[0]->enqueue_write(b, 0, 64, data.data(), false, std::vector<Event>{gate}).value();
  w.on_complete([&](int status) { called = status; });
  EXPECT_EQ(called.load(), -99);
  ASSERT_TRUE(gate.set_user_status(cl::kComplete).ok());
  ASSERT_EQ(w.wait(), cl::kComplete);
  for (int i = 0; i < 100 && called.load() == -99; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(called.load(), cl::kComplete);
  const ProfilingInfo p = w.profiling();
  EXPECT_LE(p.queued_ns, p.submitted_ns);
  EXPECT_LE(p.submitted_ns, p.started_ns);
  EXPECT_LE(p.started_ns, p.ended_ns);
  int late = -99;
  w.on_complete([&](int status) { late = status; });
  EXPECT_EQ(late, cl::kComplete) << "registered after completion: runs at once";
}

TEST(Runtime, WorkingSetTwiceTheDeviceMemoryRunsByEviction) {
  drivers::SimOptions o;
  o.memory_size = 1 << 20;
  Rig rig = make_rig(2, o);
  std::vector<Buffer> bufs;
  std::vector<std::vector<std::uint8_t>> model;
  for (int i = 0; i < 8; ++i) {
    bufs.push_back(buffer(*rig.ctx, 256 << 10));  // 8 x 256 KiB = 2 MiB per device
    model.push_back(pattern(256 << 10, i));
    ASSERT_TRUE(rig.queues[0]->enqueue_write(bufs.back(), 0, 256 << 10, model.back().data(), true).ok());
  }
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      auto& q = *rig.queues[(i + static_cast<std::size_t>(round)) % 2];
      auto r = q.enqueue_kernel(add(1, 256 << 10), std::vector<KernelArg>{{bufs[i], Access::read_write}});
      ASSERT_TRUE(r.ok()) << r.error().message;
      for (auto& byte : model[i]) byte = static_cast<std::uint8_t>(byte + 1);
    }
  }
  for (std::size_t i = 0; i < bufs.size(); ++i) EXPECT_EQ(read_all(*rig.queues[i % 2], bufs[i]), model[i]) << i;
  EXPECT_GT(rig.ctx->stats().evictions, 0u);
  EXPECT_GT(rig.ctx->stats().write_backs, 0u);
}

// A device whose free space is cut into two 64 KiB holes (B1's and B3's
// storage, given back when they were released) between buffers whose
// bytes are only there, B5, B7, B0 the least recently used: a 192 KiB
// buffer needs B2 evicted, the one between the holes. Evicting by rank
// alone took B5, B7, B0 and B6 (issue 33: four write-backs, three of them
// for ranges that joined no hole); the device's region names B2.
TEST(Runtime, EvictionFreesTheBufferBetweenTwoHolesNotTheLeastRecentlyUsed) {
  drivers::SimOptions o;
  o.memory_size = 512 << 10;
  Rig rig = make_rig(1, o);
  constexpr std::uint64_t kSize = 64 << 10;
  std::vector<Buffer> bufs;
  std::vector<std::vector<std::uint8_t>> model;
  for (int i = 0; i < 8; ++i) {
    bufs.push_back(buffer(*rig.ctx, kSize));
    model.push_back(pattern(kSize, i));
    ASSERT_TRUE(rig.queues[0]->enqueue_write(bufs.back(), 0, kSize, model.back().data(), true).ok());  // only there
  }
  ASSERT_EQ(rig.ctx->stats().devices[0].free_bytes, 0u);
  for (int i : {5, 7, 0, 6, 4, 2}) {  // the least recently used first
    auto r = rig.queues[0]->enqueue_kernel([](std::span<void* const>) { return Status{}; },
                                           std::vector<KernelArg>{{bufs[static_cast<std::size_t>(i)], Access::read}});
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r.value().wait(), cl::kComplete);
  }
  bufs[1] = Buffer{};
  bufs[3] = Buffer{};
  ASSERT_EQ(rig.ctx->stats().devices[0].largest_free, kSize);
  Buffer big = buffer(*rig.ctx, 3 * kSize);
  const auto data = pattern(3 * kSize, 9);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(big, 0, data.size(), data.data(), true).ok());
  const ContextStats st = rig.ctx->stats();
  EXPECT_EQ(st.evictions, 1u) << "B2 only";
  EXPECT_EQ(st.write_backs, 1u);
  EXPECT_EQ(st.copies_to_host, 1u) << "B2's bytes";
  EXPECT_EQ(read_all(*rig.queues[0], big), data);
  for (std::size_t i : {0u, 2u, 4u, 5u, 6u, 7u}) EXPECT_EQ(read_all(*rig.queues[0], bufs[i]), model[i]) << i;
}

// Buffers that fit one by one but not together: the kernel fails at once,
// naming their sizes, and nothing is evicted (or written back) for it.
TEST(Runtime, AKernelWhoseBuffersTogetherExceedTheDeviceFailsAtOnceEvictingNothing) {
  drivers::SimOptions o;
  o.memory_size = 1 << 20;
  Rig rig = make_rig(1, o);
  Buffer resident = buffer(*rig.ctx, 256 << 10);
  const auto data = pattern(256 << 10, 5);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(resident, 0, data.size(), data.data(), true).ok());  // only on the device
  Buffer a = buffer(*rig.ctx, 600 << 10);
  Buffer b = buffer(*rig.ctx, 600 << 10);
  auto r = rig.queues[0]->enqueue_kernel([](std::span<void* const>) { return Status{}; },
                                         std::vector<KernelArg>{{a, Access::read}, {b, Access::read}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, cl::kMemObjectAllocationFailure);
  for (const char* part : {"1228800 bytes", "614400-byte", "1048576"})
    EXPECT_NE(r.error().message.find(part), std::string::npos) << part << " not in: " << r.error().message;
  EXPECT_EQ(rig.ctx->stats().evictions, 0u);
  EXPECT_EQ(rig.ctx->stats().write_backs, 0u);
  EXPECT_EQ(read_all(*rig.queues[0], resident), data);
}

TEST(Runtime, TooBigForTheDeviceFailsCleanlyAndLeavesNoTrace) {
  drivers::SimOptions o;
  o.memory_size = 1 << 20;
  Rig rig = make_rig(1, o);
  Buffer big = buffer(*rig.ctx, 2 << 20);
  const std::uint8_t v = 1;
  auto r = rig.queues[0]->enqueue_fill(big, &v, 1, 0, big.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, cl::kMemObjectAllocationFailure);
  EXPECT_NE(r.error().message.find("sim0"), std::string::npos) << r.error().message;
  EXPECT_EQ(rig.ctx->stats().devices[0].live_blocks, 0u);
  Buffer fits = buffer(*rig.ctx, 512 << 10);
  ASSERT_TRUE(rig.queues[0]->enqueue_fill(fits, &v, 1, 0, fits.size()).ok());
  EXPECT_EQ(read_all(*rig.queues[0], fits)[100], 1);
}

// A failed command fails what waits for it, not its queue: queue order is
// order only (doc/runtime.md, failures).
TEST(Runtime, InjectedTransferFailureFailsWhatWaitsForItNotTheQueue) {
  drivers::SimOptions o;
  o.transfer_failure_probability = 1.0;
  Rig rig = make_rig(1, o);
  Buffer b = buffer(*rig.ctx, 64);
  const auto data = pattern(64, 0);
  Event w = rig.queues[0]->enqueue_write(b, 0, 64, data.data(), false).value();
  Event next = rig.queues[0]->enqueue_marker().value();
  Event waiting = rig.queues[0]->enqueue_marker(std::vector<Event>{w}).value();
  EXPECT_EQ(w.wait(), cl::kOutOfResources);
  EXPECT_NE(w.error_message().find("injected"), std::string::npos);
  EXPECT_EQ(next.wait(), cl::kComplete);
  EXPECT_EQ(waiting.wait(), cl::kExecStatusErrorForEventsInWaitList);
  EXPECT_FALSE(rig.queues[0]->finish().ok()) << "finish reports the failure it saw";
}

// A write cancelled by its failed wait list leaves the buffer as it was, on
// every device; what was queued behind it on its bytes fails with it, and
// what comes once the failure is known runs on the old content.
TEST(Runtime, ACancelledWriteLeavesThePreviousContentEverywhere) {
  Rig rig = make_rig(2);
  auto data = pattern(4096, 9);
  Buffer b = buffer(*rig.ctx, data.size(), mem::kReadWrite | mem::kCopyHostPtr, data.data());
  ASSERT_TRUE(rig.queues[1]->enqueue_kernel(add(1, 4096), std::vector<KernelArg>{{b, Access::read_write}}).ok());
  ASSERT_TRUE(rig.queues[1]->finish().ok());
  for (auto& x : data) ++x;  // now held on device 1 only
  Event gate = rig.ctx->create_user_event();
  const auto other = pattern(1024, 3);
  Event w = rig.queues[0]->enqueue_write(b, 512, other.size(), other.data(), false, std::vector<Event>{gate}).value();
  std::vector<std::uint8_t> early(4096);
  Event r = rig.queues[1]->enqueue_read(b, 0, 4096, early.data(), false).value();  // behind the write
  ASSERT_TRUE(gate.set_user_status(-5).ok());
  EXPECT_EQ(w.wait(), cl::kExecStatusErrorForEventsInWaitList);
  EXPECT_EQ(r.wait(), cl::kExecStatusErrorForEventsInWaitList);
  EXPECT_EQ(read_all(*rig.queues[0], b), data);
  EXPECT_EQ(read_all(*rig.queues[1], b), data);
  ASSERT_TRUE(rig.queues[0]->enqueue_kernel(add(2, 4096), std::vector<KernelArg>{{b, Access::read_write}}).ok());
  for (auto& x : data) x = static_cast<std::uint8_t>(x + 2);
  EXPECT_EQ(read_all(*rig.queues[1], b), data);
  EXPECT_EQ(rig.ctx->stats().bytes_lost, 0u);
}

// A kernel that fails while running spoils only its own device's copy: the
// content before it is read back from where else it was.
TEST(Runtime, AKernelThatFailsHalfWayLeavesTheContentBeforeItElsewhere) {
  Rig rig = make_rig(2);
  auto data = pattern(4096, 4);
  Buffer b = buffer(*rig.ctx, data.size(), mem::kReadWrite | mem::kCopyHostPtr, data.data());
  ASSERT_EQ(read_all(*rig.queues[0], b), data);  // now on device 0 and the host
  auto half_then_fail = [](std::span<void* const> p) {
    auto* bytes = static_cast<std::uint8_t*>(p[0]);
    for (int i = 0; i < 2048; ++i) bytes[i] = 0xEE;
    return Status::error(cl::kOutOfResources, "the kernel gave up half-way");
  };
  Event k = rig.queues[0]->enqueue_kernel(half_then_fail, std::vector<KernelArg>{{b, Access::read_write}}).value();
  EXPECT_EQ(k.wait(), cl::kOutOfResources);
  EXPECT_EQ(read_all(*rig.queues[0], b), data) << "device 0's copy must be fetched again";
  EXPECT_EQ(read_all(*rig.queues[1], b), data);
  EXPECT_EQ(rig.ctx->stats().bytes_lost, 0u);
}

// Where a failed kernel's location held the only copy, those bytes are lost
// (undefined, counted) and nothing else is; the buffer stays usable.
TEST(Runtime, ContentOnlyWhereAKernelFailedHalfWayIsCountedLost) {
  Rig rig = make_rig(2);
  Buffer b = buffer(*rig.ctx, 4096);
  const auto data = pattern(4096, 6);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(b, 0, 4096, data.data(), true).ok());  // only on device 0
  Buffer middle = rig.ctx->create_sub_buffer(b, 0, 1024, 1024).value();
  auto fail_at_once = [](std::span<void* const>) { return Status::error(cl::kOutOfResources, "failed"); };
  Event k = rig.queues[0]->enqueue_kernel(fail_at_once, std::vector<KernelArg>{{middle, Access::read_write}}).value();
  EXPECT_EQ(k.wait(), cl::kOutOfResources);
  const auto seen = read_all(*rig.queues[1], b);
  EXPECT_TRUE(std::equal(seen.begin(), seen.begin() + 1024, data.begin()));
  EXPECT_TRUE(std::equal(seen.begin() + 2048, seen.end(), data.begin() + 2048));
  EXPECT_EQ(rig.ctx->stats().bytes_lost, 1024u);
  const auto again = pattern(4096, 8);
  ASSERT_TRUE(rig.queues[1]->enqueue_write(b, 0, 4096, again.data(), true).ok());
  EXPECT_EQ(read_all(*rig.queues[0], b), again);
}

namespace {

// A rig of two sim devices whose first (location 1) fails its transfer
// number `fail_transfer` (1-based) once, and a 16 x 16 buffer made by a
// kernel there: its only copy (a kernel moves nothing).
struct OnlyOnFaultyDevice {
  Rig rig;
  std::optional<Buffer> b;
  std::vector<std::uint8_t> data = pattern(256, 5);

  explicit OnlyOnFaultyDevice(std::uint64_t fail_transfer) {
    drivers::SimOptions faulty;
    faulty.fail_transfer_number = fail_transfer;
    rig = make_rig_each({faulty, {}});
    b = buffer(*rig.ctx, data.size());
    auto make = [this](std::span<void* const> p) {
      std::memcpy(p[0], data.data(), data.size());
      return Status{};
    };
    EXPECT_EQ(rig.queues[0]->enqueue_kernel(make, std::vector<KernelArg>{{*b, Access::overwrite}}).value().wait(),
              cl::kComplete);
  }
};

}  // namespace

// A user's write that fails before it moves a byte (the sim's injected
// faults: Status::error_before_start) changes nothing: the device where it
// ran held the only copy of the bytes it was to write, and they keep what
// they held (taken as half-written, they were counted lost and undefined).
TEST(Runtime, AWriteThatFailsBeforeItStartsKeepsTheOnlyCopyOfItsBytes) {
  OnlyOnFaultyDevice t(1);  // the write below
  const auto other = pattern(128, 77);
  Event w = t.rig.queues[0]->enqueue_write(*t.b, 64, other.size(), other.data(), false).value();
  EXPECT_EQ(w.wait(), cl::kOutOfResources);
  EXPECT_NE(w.error_message().find("injected"), std::string::npos) << "the failure is the user's to see";
  EXPECT_EQ(read_all(*t.rig.queues[1], *t.b), t.data) << "the old bytes, moved from device 0";
  EXPECT_EQ(t.rig.ctx->stats().bytes_lost, 0u);
  EXPECT_EQ(t.b->bytes_lost(), 0u);
}

// A box written row by row: a row that fails after another was written is
// tried again, so the box is not left half-written over the only copy of
// its bytes (the gaps between its rows included); a failed first row
// changes nothing, and fails the command.
TEST(Runtime, ARectWriteIsNeverLeftHalfWrittenByOneFailedRow) {
  const RectLayout left{{0, 2, 0}, 16, 0};  // the left half of rows 2..9
  const std::vector<std::uint8_t> ones(8 * 8, 1);
  {
    OnlyOnFaultyDevice t(2);  // the second row, once
    Event w = t.rig.queues[0]->enqueue_write_rect(*t.b, left, {}, {8, 8, 1}, ones.data(), false).value();
    EXPECT_EQ(w.wait(), cl::kComplete) << w.error_message();
    for (std::uint64_t y = 2; y < 10; ++y) std::memset(t.data.data() + y * 16, 1, 8);
    EXPECT_EQ(read_all(*t.rig.queues[1], *t.b), t.data);
    EXPECT_EQ(t.rig.ctx->stats().bytes_lost, 0u);
  }
  {
    OnlyOnFaultyDevice t(1);  // the first row
    Event w = t.rig.queues[0]->enqueue_write_rect(*t.b, left, {}, {8, 8, 1}, ones.data(), false).value();
    EXPECT_EQ(w.wait(), cl::kOutOfResources);
    EXPECT_EQ(read_all(*t.rig.queues[1], *t.b), t.data);
    EXPECT_EQ(t.rig.ctx->stats().bytes_lost, 0u);
  }
}

// A hidden migration is tried again when its transfer fails; the user's own
// command is not (its failure is the user's to see).
TEST(Runtime, AHiddenMigrationWhoseTransferFailsOnceIsTriedAgain) {
  drivers::SimOptions o;
  o.fail_transfer_number = 1;  // on each device: its first transfer
  Rig rig = make_rig(1, o);
  auto data = pattern(4096, 3);
  Buffer b = buffer(*rig.ctx, data.size(), mem::kReadWrite | mem::kCopyHostPtr, data.data());
  // The read runs on the device: the host's bytes are imported first (the
  // transfer that fails once), then read back.
  EXPECT_EQ(read_all(*rig.queues[0], b), data);
  EXPECT_TRUE(rig.queues[0]->finish().ok());

  Rig direct = make_rig(1, o);
  Buffer c = buffer(*direct.ctx, 64);
  const auto bytes = pattern(64, 1);
  Event w = direct.queues[0]->enqueue_write(c, 0, 64, bytes.data(), false).value();
  EXPECT_EQ(w.wait(), cl::kOutOfResources) << "a user's write is not retried";
  EXPECT_NE(w.error_message().find("transfer number 1"), std::string::npos) << w.error_message();
}

// A kernel that fails unless its first argument holds `expected`.
KernelFunction expect_bytes(std::vector<std::uint8_t> expected) {
  return [expected = std::move(expected)](std::span<void* const> p) {
    if (std::memcmp(p[0], expected.data(), expected.size()) == 0) return Status{};
    return Status::error(cl::kInvalidValue, "the kernel saw other bytes");
  };
}

// A source whose transfers keep failing (a burst longer than the retries)
// is replaced by another complete copy of the bytes: the host's here.
TEST(Runtime, AHiddenMigrationWhoseSourceKeepsFailingIsMadeFromAnotherCopy) {
  drivers::SimOptions o;
  o.peer_link = migration::LinkCost{1e-6, 100e9};  // cheaper than the host's: device 0 is the source
  o.fail_transfer_number = 2;                       // device 0's second transfer, the peer copy out...
  o.fault_burst = 3;                                // ...and its two retries
  Rig rig = make_rig(2, o);
  auto data = pattern(4096, 5);
  Buffer b = buffer(*rig.ctx, data.size(), mem::kReadWrite | mem::kCopyHostPtr, data.data());
  ASSERT_EQ(rig.queues[0]->enqueue_kernel(expect_bytes(data), std::vector<KernelArg>{{b, Access::read}})
                .value()
                .wait(),
            cl::kComplete);  // imported to device 0 (its transfer 1): now there and at the host
  Event k = rig.queues[1]->enqueue_kernel(expect_bytes(data), std::vector<KernelArg>{{b, Access::read}}).value();
  EXPECT_EQ(k.wait(), cl::kComplete) << k.error_message();
  const ContextStats st = rig.ctx->stats();
  EXPECT_EQ(st.copies_resourced, 1u);
  EXPECT_EQ(st.transfer_retries, 3u) << "two more tries from device 0, one from the host";
}

// With no other copy to read, the command that needed the bytes fails,
// naming the buffer and the range; the bytes stay where they are, and the
// buffer serves the next command once the source works again.
TEST(Runtime, AHiddenMigrationWithNoOtherSourceFailsNamingTheBufferAndTheRange) {
  drivers::SimOptions o;
  o.peer_link = migration::LinkCost{1e-6, 100e9};
  drivers::SimOptions faulty = o;
  faulty.fail_transfer_number = 1;  // device 0's first transfer, the peer copy out, and its two retries
  faulty.fault_burst = 3;
  Rig rig = make_rig_each({faulty, o});
  Buffer b = buffer(*rig.ctx, 4096);
  const auto data = pattern(4096, 6);
  auto fill = [&data](std::span<void* const> p) {
    std::memcpy(p[0], data.data(), data.size());
    return Status{};
  };
  ASSERT_EQ(rig.queues[0]->enqueue_kernel(fill, std::vector<KernelArg>{{b, Access::overwrite}}).value().wait(),
            cl::kComplete);  // valid on device 0 only
  Event k = rig.queues[1]->enqueue_kernel(expect_bytes(data), std::vector<KernelArg>{{b, Access::read}}).value();
  EXPECT_EQ(k.wait(), cl::kExecStatusErrorForEventsInWaitList);
  EXPECT_NE(k.error_message().find("buffer " + std::to_string(b.id()) + ", bytes [0, 4096)"), std::string::npos)
      << k.error_message();
  EXPECT_EQ(rig.ctx->stats().copies_resourced, 0u);
  EXPECT_EQ(rig.ctx->stats().bytes_lost, 0u);
  EXPECT_EQ(rig.queues[0]->enqueue_kernel(expect_bytes(data), std::vector<KernelArg>{{b, Access::read}})
                .value()
                .wait(),
            cl::kComplete);
  Event again = rig.queues[1]->enqueue_kernel(expect_bytes(data), std::vector<KernelArg>{{b, Access::read}}).value();
  EXPECT_EQ(again.wait(), cl::kComplete) << again.error_message();
}

// Two 4 KiB buffers fill a device of 8 KiB, each written there by a
// kernel (valid nowhere else); a third needs one of them evicted.
struct FullDevice {
  Rig rig;
  std::vector<Buffer> dirty;
  std::vector<std::uint8_t> content = pattern(4096, 12);
  static drivers::SimOptions of_8k(drivers::SimOptions o) {
    o.memory_size = 8192;
    return o;
  }
  // A room wait short enough for a test that waits it out.
  static ContextOptions short_room_wait() {
    ContextOptions c;
    c.room_wait = std::chrono::milliseconds(300);
    return c;
  }
  explicit FullDevice(const drivers::SimOptions& o) : rig(make_rig(1, of_8k(o), false, short_room_wait())) {
    for (int i = 0; i < 2; ++i) {
      dirty.push_back(buffer(*rig.ctx, 4096));
      auto fill = [this](std::span<void* const> p) {
        std::memcpy(p[0], content.data(), content.size());
        return Status{};
      };
      EXPECT_EQ(rig.queues[0]->enqueue_kernel(fill, std::vector<KernelArg>{{dirty.back(), Access::overwrite}})
                    .value()
                    .wait(),
                cl::kComplete);
    }
  }
};

// An eviction's write-back that keeps failing loses nothing: the bytes stay
// on the device, with their storage, until a later try writes them back.
TEST(Runtime, AnEvictionWhoseWriteBackFailsKeepsTheBytesUntilItSucceeds) {
  drivers::SimOptions o;
  o.fail_transfer_number = 1;  // the first write-back and its two retries, and the next try
  o.fault_burst = 4;
  FullDevice full(o);
  Buffer third = buffer(*full.rig.ctx, 4096);
  const std::uint8_t v = 7;
  Event fill = full.rig.queues[0]->enqueue_fill(third, &v, 1, 0, 4096).value();
  EXPECT_EQ(fill.wait(), cl::kComplete) << fill.error_message();
  const ContextStats st = full.rig.ctx->stats();
  EXPECT_EQ(st.write_backs, 2u) << "one failed, one made again";
  EXPECT_EQ(st.evictions, 1u);
  EXPECT_EQ(st.bytes_lost, 0u);
  EXPECT_EQ(read_all(*full.rig.queues[0], full.dirty[0]), full.content);
  EXPECT_EQ(read_all(*full.rig.queues[0], full.dirty[1]), full.content);
}

// When it never succeeds, the command that needed the room keeps trying
// for ContextOptions::room_wait, then fails with an allocation failure,
// and the bytes are where they were.
TEST(Runtime, AnEvictionWhoseWriteBackNeverSucceedsFailsTheCommandAndLosesNothing) {
  drivers::SimOptions o;
  o.fail_transfer_number = 1;
  o.fault_burst = 1u << 30;  // every transfer from the first on
  FullDevice full(o);
  Buffer third = buffer(*full.rig.ctx, 4096);
  const std::uint8_t v = 7;
  auto r = full.rig.queues[0]->enqueue_fill(third, &v, 1, 0, 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, cl::kMemObjectAllocationFailure);
  EXPECT_NE(r.error().message.find("written back"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("waited 300 ms for room"), std::string::npos) << r.error().message;
  const ContextStats st = full.rig.ctx->stats();
  EXPECT_EQ(st.evictions, 0u);
  EXPECT_EQ(st.bytes_lost, 0u);
  for (const Buffer& b : full.dirty) {
    EXPECT_EQ(full.rig.queues[0]->enqueue_kernel(expect_bytes(full.content), std::vector<KernelArg>{{b, Access::read}})
                  .value()
                  .wait(),
              cl::kComplete)
        << "the bytes stayed on the device";
  }
}

// Bytes still being made when eviction must take their storage (every
// buffer on the device is being written by a queued kernel) are written
// back by a copy that waits for them while the storage goes: that copy
// keeps trying through a fault burst longer than a hidden migration's
// tries, and the bytes survive.
TEST(Runtime, AWriteBackOfBytesStillBeingMadeKeepsTryingUntilItSucceeds) {
  drivers::SimOptions o;
  o.memory_size = 8192;
  o.fail_transfer_number = 1;  // the write-back's first try and the next 5
  o.fault_burst = 6;
  Rig rig = make_rig(1, o);
  Event gate = rig.ctx->create_user_event();
  std::vector<Buffer> made;
  std::vector<std::vector<std::uint8_t>> contents;
  contents.reserve(2);  // the kernels hold references to them
  std::vector<Event> makers;
  for (int i = 0; i < 2; ++i) {
    made.push_back(buffer(*rig.ctx, 4096));
    contents.push_back(pattern(4096, 13 + i));
    auto fill = [&content = contents.back()](std::span<void* const> p) {
      std::memcpy(p[0], content.data(), content.size());
      return Status{};
    };
    makers.push_back(rig.queues[0]
                         ->enqueue_kernel(fill, std::vector<KernelArg>{{made.back(), Access::overwrite}},
                                          std::vector<Event>{gate})
                         .value());
  }
  Buffer third = buffer(*rig.ctx, 4096);
  const std::uint8_t v = 7;
  Event f = rig.queues[0]->enqueue_fill(third, &v, 1, 0, 4096).value();  // evicts one of them, unmade
  ASSERT_TRUE(gate.set_user_status(cl::kComplete).ok());
  for (Event& m : makers) EXPECT_EQ(m.wait(), cl::kComplete) << m.error_message();
  EXPECT_EQ(f.wait(), cl::kComplete) << f.error_message();
  EXPECT_EQ(rig.ctx->stats().evictions, 1u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(read_all(*rig.queues[0], made[i]), contents[i]) << "buffer " << i;
  EXPECT_EQ(read_all(*rig.queues[0], third), std::vector<std::uint8_t>(4096, 7));
  EXPECT_EQ(rig.ctx->stats().bytes_lost, 0u);
  EXPECT_GE(rig.ctx->stats().transfer_retries, 5u) << "the write-back's";
}

// One that never succeeds gives up after ContextOptions::room_wait: the
// bytes are lost and counted, for the context and for the buffer that lost
// them. (The write-back is a hidden command: its error message, naming the
// buffer and the range, is on no event the application holds.)
TEST(Runtime, AWriteBackOfBytesStillBeingMadeGivesUpAfterRoomWait) {
  drivers::SimOptions o;
  o.memory_size = 8192;
  o.fail_transfer_number = 1;
  o.fault_burst = 1u << 30;
  ContextOptions options;
  options.room_wait = std::chrono::milliseconds(200);
  Rig rig = make_rig(1, o, false, options);
  std::shared_ptr<Context> ctx = rig.ctx;
  std::shared_ptr<Queue> q = rig.queues[0];
  Event gate = ctx->create_user_event();
  auto fill = [](std::span<void* const> p) {
    std::memset(p[0], 3, 4096);
    return Status{};
  };
  std::vector<Buffer> made;
  for (int i = 0; i < 2; ++i) {
    made.push_back(buffer(*ctx, 4096));
    ASSERT_TRUE(q->enqueue_kernel(fill, std::vector<KernelArg>{{made.back(), Access::overwrite}},
                                  std::vector<Event>{gate})
                    .ok());
  }
  std::optional<Buffer> third = buffer(*ctx, 4096);
  const std::uint8_t v = 7;
  Event f = q->enqueue_fill(*third, &v, 1, 0, 4096).value();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(gate.set_user_status(cl::kComplete).ok());
  EXPECT_EQ(f.wait(), cl::kComplete) << f.error_message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200)) << "it kept trying";
  // The loss is found when the buffer is next used (room for it: the third
  // buffer goes; no transfer: what is lost is not copied).
  third.reset();
  for (const Buffer& b : made) {
    Event k = q->enqueue_kernel([](std::span<void* const>) { return Status{}; },
                                std::vector<KernelArg>{{b, Access::read}})
                  .value();
    EXPECT_EQ(k.wait(), cl::kComplete) << k.error_message();
  }
  EXPECT_EQ(ctx->stats().bytes_lost, 4096u);
  EXPECT_EQ(made[0].bytes_lost() + made[1].bytes_lost(), 4096u);
  EXPECT_TRUE(made[0].bytes_lost() == 0 || made[1].bytes_lost() == 0) << "one buffer was evicted, one lost its bytes";
}

// A write-back that takes longer than ContextOptions::room_wait (a device
// whose transfers hang, say) fails the enqueue that waits for it, rather
// than holding the application's thread.
TEST(Runtime, AnEnqueueWaitsForAWriteBackAtMostRoomWait) {
  drivers::SimOptions o;
  o.memory_size = 8192;
  o.host_link = runtime::LinkCost{1.0, 12e9};  // a second per transfer
  o.model_link_time = true;
  ContextOptions options;
  options.room_wait = std::chrono::milliseconds(100);
  Rig rig = make_rig(1, o, false, options);
  std::shared_ptr<Context> ctx = rig.ctx;
  std::shared_ptr<Queue> q = rig.queues[0];
  const auto data = pattern(4096, 13);
  auto fill = [&data](std::span<void* const> p) {
    std::memcpy(p[0], data.data(), data.size());
    return Status{};
  };
  std::vector<Buffer> dirty;
  for (int i = 0; i < 2; ++i) {
    dirty.push_back(buffer(*ctx, 4096));
    ASSERT_EQ(q->enqueue_kernel(fill, std::vector<KernelArg>{{dirty.back(), Access::overwrite}}).value().wait(),
              cl::kComplete);
  }
  Buffer third = buffer(*ctx, 4096);
  const std::uint8_t v = 7;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = q->enqueue_fill(third, &v, 1, 0, 4096);
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, cl::kMemObjectAllocationFailure);
  EXPECT_NE(r.error().message.find("waited 100 ms for room"), std::string::npos) << r.error().message;
  EXPECT_LT(waited, std::chrono::milliseconds(900)) << "it waited for the write-back itself";
  EXPECT_EQ(ctx->stats().bytes_lost, 0u);
  // A write of the buffer being written back waits for that copy (it reads
  // the bytes): nothing is in flight once it has run.
  EXPECT_EQ(q->enqueue_kernel(fill, std::vector<KernelArg>{{dirty[0], Access::overwrite}}).value().wait(),
            cl::kComplete);
  EXPECT_EQ(ctx->stats().write_backs, 1u);
}

TEST(Runtime, HostDeviceNeedsNoMigrationToTheHost) {
  Rig rig = make_rig(0, {}, true);
  ASSERT_EQ(rig.ctx->device_count(), 1u);
  Buffer b = buffer(*rig.ctx, 1024);
  const auto data = pattern(1024, 8);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(b, 0, 1024, data.data(), true).ok());
  auto m = rig.queues[0]->enqueue_map(b, map::kRead, 0, 1024, true).value();
  EXPECT_TRUE(std::equal(data.begin(), data.end(), static_cast<std::uint8_t*>(m.pointer)));
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, 0u);
}

TEST(Runtime, MigrateCommandMovesOrDropsContent) {
  Rig rig = make_rig(2);
  Buffer b = buffer(*rig.ctx, 4096);
  const auto data = pattern(4096, 11);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(b, 0, 4096, data.data(), true).ok());
  std::vector<Buffer> one{b};
  ASSERT_EQ(rig.queues[1]->enqueue_migrate(one, false, false).value().wait(), cl::kComplete);
  const auto moved = rig.ctx->stats().bytes_migrated;
  EXPECT_GT(moved, 0u);
  EXPECT_EQ(read_all(*rig.queues[1], b), data);
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, moved) << "already there: the read moved nothing";
  ASSERT_EQ(rig.queues[0]->enqueue_migrate(one, false, true).value().wait(), cl::kComplete);
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, moved) << "CONTENT_UNDEFINED moves nothing";
}

TEST(Runtime, OutOfOrderQueueBarrier) {
  Rig rig = make_rig(1);
  auto q = rig.ctx->create_queue(0, true).value();
  Buffer a = buffer(*rig.ctx, 64), c = buffer(*rig.ctx, 64);
  Event gate = rig.ctx->create_user_event();
  const auto one = pattern(64, 1), two = pattern(64, 2);
  Event w = q->enqueue_write(a, 0, 64, one.data(), false, std::vector<Event>{gate}).value();
  Event independent = q->enqueue_write(c, 0, 64, two.data(), false).value();
  EXPECT_EQ(independent.wait(), cl::kComplete) << "out of order: not stuck behind the gated write";
  Event barrier = q->enqueue_barrier().value();
  Event after = q->enqueue_marker(std::vector<Event>{independent}).value();
  // Markers and barriers have no work: one whose dependencies have all
  // completed completes inside its enqueue call. `after` depends only on a
  // completed write and the barrier, so it is still pending exactly when the
  // barrier orders it behind the gated write.
  EXPECT_GT(barrier.status(), cl::kComplete);
  EXPECT_GT(after.status(), cl::kComplete) << "commands after a barrier wait for it";
  // The order they end in: the gated write, then the barrier, then `after`.
  // A callback may still be running when wait() returns (the status is
  // published first), so the check waits for all three callbacks.
  std::mutex order_mutex;
  std::condition_variable recorded;
  std::vector<int> order;
  auto record = [&](int which) {
    return [&, which](int) {
      std::lock_guard lock(order_mutex);
      order.push_back(which);
      recorded.notify_all();
    };
  };
  w.on_complete(record(0));
  barrier.on_complete(record(1));
  after.on_complete(record(2));
  ASSERT_TRUE(gate.set_user_status(cl::kComplete).ok());
  EXPECT_EQ(after.wait(), cl::kComplete);
  EXPECT_EQ(w.wait(), cl::kComplete);
  std::unique_lock lock(order_mutex);
  ASSERT_TRUE(recorded.wait_for(lock, std::chrono::seconds(30), [&] { return order.size() == 3; }))
      << "callbacks seen: " << order.size();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST(Runtime, ManyThreadsEnqueueAtOnce) {
  Rig rig = make_rig(3);
  constexpr int kThreads = 4, kBuffers = 4, kRounds = 50;
  std::vector<Buffer> bufs;
  for (int i = 0; i < kBuffers; ++i) {
    bufs.push_back(buffer(*rig.ctx, 1024));
    const std::uint8_t zero = 0;
    ASSERT_TRUE(rig.queues[0]->enqueue_fill(bufs.back(), &zero, 1, 0, 1024).ok());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        auto& q = *rig.queues[static_cast<std::size_t>((t + r) % 3)];
        auto res = q.enqueue_kernel(add(1, 1024),
                                    std::vector<KernelArg>{{bufs[static_cast<std::size_t>((t + r) % kBuffers)],
                                                            Access::read_write}});
        ASSERT_TRUE(res.ok()) << res.error().message;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (auto& q : rig.queues) ASSERT_TRUE(q->finish().ok());
  int total = 0;
  for (auto& b : bufs) total += read_all(*rig.queues[0], b)[5];
  EXPECT_EQ(total, kThreads * kRounds) << "every increment happened exactly once, in some order";
}

// Two threads enqueue kernels on the same eight buffers, given in opposite
// orders. The engine's fast path locks a command's buffers in the order
// given and may wait only for one above all it holds (engine/src/
// fast_path.cpp): waiting for another would deadlock with the thread that
// holds it and waits in turn. A watchdog turns a hang into a failure;
// every increment must land.
TEST(Runtime, KernelsGivenTheSameBuffersInOppositeOrdersNeverDeadlock) {
  Rig rig = make_rig(1);
  constexpr int kBuffers = 8, kRounds = 20000;
  std::vector<Buffer> bufs;
  const std::uint8_t zero = 0;
  for (int i = 0; i < kBuffers; ++i) {
    bufs.push_back(buffer(*rig.ctx, 256));
    ASSERT_TRUE(rig.queues[0]->enqueue_fill(bufs.back(), &zero, 1, 0, 256).ok());
  }
  ASSERT_TRUE(rig.queues[0]->finish().ok());
  std::vector<KernelArg> forward, backward;
  for (int i = 0; i < kBuffers; ++i) {
    forward.push_back({bufs[static_cast<std::size_t>(i)], i == 0 ? Access::read_write : Access::read});
    backward.push_back({bufs[static_cast<std::size_t>(kBuffers - 1 - i)], i == 0 ? Access::read_write : Access::read});
  }
  const auto before = rig.ctx->stats();
  auto work = std::async(std::launch::async, [&] {
    std::atomic<int> failures{0}, ready{0};
    auto run = [&](const std::vector<KernelArg>& args) {
      auto q = rig.ctx->create_queue(0, true).value();
      ++ready;
      while (ready.load() < 2) std::this_thread::yield();  // both at once, or they may never meet
      for (int r = 0; r < kRounds; ++r)
        if (!q->enqueue_kernel(add(1, 256), args).ok()) ++failures;
      if (!q->finish().ok()) ++failures;
    };
    std::thread t1([&] { run(forward); });
    std::thread t2([&] { run(backward); });
    t1.join();
    t2.join();
    return failures.load();
  });
  if (work.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "KernelsGivenTheSameBuffersInOppositeOrdersNeverDeadlock: no progress in 60 s: deadlock\n");
    std::_Exit(1);  // the stuck threads cannot be joined
  }
  EXPECT_EQ(work.get(), 0);
  EXPECT_EQ(read_all(*rig.queues[0], bufs.front())[7], kRounds % 256);
  EXPECT_EQ(read_all(*rig.queues[0], bufs.back())[7], kRounds % 256);
  const auto after = rig.ctx->stats();
  EXPECT_GT(after.fast_path - before.fast_path, 0u) << "the fast path was never taken: the test shows nothing";
}

TEST(Runtime, EnqueueArgumentErrors) {
  Rig rig = make_rig(1);
  Buffer b = buffer(*rig.ctx, 64);
  std::uint8_t x[64]{};
  auto& q = *rig.queues[0];
  expect_refused(q.enqueue_write(b, 60, 8, x, false), cl::kInvalidValue, "write: [60, +8) exceeds the buffer's 64 bytes");
  expect_refused(q.enqueue_read(b, 0, 0, x, false), cl::kInvalidValue, "read: size is 0");
  expect_refused(q.enqueue_read(Buffer{}, 0, 1, x, false), cl::kInvalidMemObject, "read: the buffer is empty");
  expect_refused(q.enqueue_read(b, 0, 1, nullptr, false), cl::kInvalidValue, "read: the destination pointer is null");
  expect_refused(q.enqueue_fill(b, x, 3, 0, 63), cl::kInvalidValue, "fill: the pattern must be 1, 2, 4, ... or 128 bytes");
  expect_refused(q.enqueue_marker(std::vector<Event>{Event{}}), cl::kInvalidEventWaitList,
                 "the wait list holds an empty event");
  Buffer host_ro = buffer(*rig.ctx, 64, mem::kHostReadOnly);
  expect_refused(q.enqueue_write(host_ro, 0, 1, x, false), cl::kInvalidOperation,
                 "write: the buffer is HOST_READ_ONLY or HOST_NO_ACCESS");
  Buffer host_none = buffer(*rig.ctx, 64, mem::kHostNoAccess);
  expect_refused(q.enqueue_map(host_none, map::kRead, 0, 64, true), cl::kInvalidOperation,
                 "map: reading a HOST_WRITE_ONLY or HOST_NO_ACCESS buffer");
  expect_refused(rig.ctx->create_queue(5), cl::kInvalidDevice, "create queue: no device 5");
  Rig other = make_rig(1);
  expect_refused(other.queues[0]->enqueue_read(b, 0, 1, x, true), cl::kInvalidContext,
                 "read: the buffer belongs to another context");
  // A kernel's arguments are checked one by one, before anything is
  // enqueued: a bad second one refuses the whole kernel, which never runs.
  bool ran = false;
  const KernelFunction mark = [&ran](std::span<void* const>) {
    ran = true;
    return Status{};
  };
  expect_refused(q.enqueue_kernel(mark, std::vector<KernelArg>{{b, Access::read}, {Buffer{}, Access::read}}),
                 cl::kInvalidMemObject, "kernel argument: the buffer is empty");
  Buffer elsewhere = buffer(*other.ctx, 64);
  expect_refused(q.enqueue_kernel(mark, std::vector<KernelArg>{{b, Access::write}, {elsewhere, Access::read}}),
                 cl::kInvalidContext, "kernel argument: the buffer belongs to another context");
  ASSERT_TRUE(q.finish().ok());
  EXPECT_FALSE(ran);
  EXPECT_EQ(b.bytes_lost(), 0u);
}

TEST(Runtime, KernelsGetLocalMemoryAndOversizedLaunchesFailAtEnqueue) {
  drivers::SimOptions o;
  o.local_mem_size = 4096;
  Rig rig = make_rig(1, o);
  EXPECT_EQ(rig.ctx->device_info(0).local_mem_size, 4096u);
  Buffer b = buffer(*rig.ctx, 16);
  const std::vector<std::uint64_t> locals{1024, 1024};
  auto r = rig.queues[0]->enqueue_kernel(
      [](std::span<void* const> p) {
        // A reduction through local memory: the result lands in the buffer.
        auto* scratch = static_cast<std::uint8_t*>(p[1]);
        auto* second = static_cast<std::uint8_t*>(p[2]);
        for (int i = 0; i < 1024; ++i) scratch[i] = 1, second[i] = 2;
        int sum = 0;
        for (int i = 0; i < 1024; ++i) sum += scratch[i] + second[i];
        std::memcpy(p[0], &sum, sizeof sum);
        return Status{};
      },
      std::vector<KernelArg>{{b, Access::write}}, locals);
  ASSERT_TRUE(r.ok()) << r.error().message;
  int sum = 0;
  ASSERT_TRUE(rig.queues[0]->enqueue_read(b, 0, sizeof sum, &sum, true).ok());
  EXPECT_EQ(sum, 3 * 1024);
  const std::vector<std::uint64_t> too_much{2048, 2048, 1};
  auto over = rig.queues[0]->enqueue_kernel([](std::span<void* const>) { return Status{}; },
                                            std::vector<KernelArg>{{b, Access::read}}, too_much);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, cl::kOutOfResources);
  EXPECT_NE(over.error().message.find("4096"), std::string::npos) << over.error().message;
  const std::vector<std::uint64_t> zero{0};
  EXPECT_EQ(rig.queues[0]
                ->enqueue_kernel([](std::span<void* const>) { return Status{}; }, std::vector<KernelArg>{}, zero)
                .error()
                .code,
            cl::kInvalidKernelArgs);
}

TEST(Runtime, ReleasingABufferWhileItsMigrationsAreInFlightIsSafe) {
  drivers::SimOptions o;
  o.model_link_time = true;  // slow transfers: the copies are surely in flight
  o.host_link = LinkCost{2e-3, 1e9};
  Rig rig = make_rig(2, o);
  std::vector<std::uint8_t> out(64 << 10);
  Event read;
  {
    Buffer b = buffer(*rig.ctx, 64 << 10);
    const auto data = pattern(64 << 10, 12);
    ASSERT_TRUE(rig.queues[0]->enqueue_write(b, 0, data.size(), data.data(), true).ok());
    read = rig.queues[1]->enqueue_read(b, 0, out.size(), out.data(), false).value();
    EXPECT_GT(read.status(), cl::kComplete);
  }  // the last handle goes while the device 0 -> host -> device 1 copies run
  ASSERT_EQ(read.wait(), cl::kComplete);
  EXPECT_EQ(out, pattern(64 << 10, 12));
  for (auto& q : rig.queues) ASSERT_TRUE(q->finish().ok());
  for (int i = 0; i < 100 && rig.ctx->stats().devices[1].live_blocks != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(rig.ctx->stats().devices[0].live_blocks, 0u);
  EXPECT_EQ(rig.ctx->stats().devices[1].live_blocks, 0u) << "the storage went with the last command";
}

// A command at a device holds no buffer: a buffer released while its
// kernel waits goes at once, its storage fenced by that kernel. The device
// has room for one buffer: the next is placed over the same bytes, and its
// write waits for the kernel still to write the old ones. Nothing is
// evicted (a kernel holding the buffer would make the write evict it, and
// write its bytes back to the host for nobody).
TEST(Runtime, AReleasedBuffersRoomIsTakenAfterItsQueuedKernel) {
  drivers::SimOptions o;
  o.memory_size = 64 << 10;
  Rig rig = make_rig(1, o);
  Event gate = rig.ctx->create_user_event();
  Event kernel;
  {
    Buffer old_one = buffer(*rig.ctx, 64 << 10);
    auto k = rig.queues[0]->enqueue_kernel(
        [](std::span<void* const> t) {
          std::memset(t[0], 0xAA, 64 << 10);
          return Status{};
        },
        std::vector<KernelArg>{{old_one, Access::write}}, std::vector<Event>{gate});
    ASSERT_TRUE(k.ok()) << k.error().message;
    kernel = k.value();
  }
  Buffer next = buffer(*rig.ctx, 64 << 10);
  const auto data = pattern(64 << 10, 31);
  auto w = rig.queues[0]->enqueue_write(next, 0, data.size(), data.data(), false);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_GT(kernel.status(), cl::kComplete) << "gated";
  ASSERT_TRUE(gate.set_user_status(cl::kComplete).ok());
  ASSERT_EQ(w.value().wait(), cl::kComplete);
  EXPECT_EQ(kernel.wait(), cl::kComplete);
  EXPECT_EQ(read_all(*rig.queues[0], next), data) << "the kernel's bytes came before the write";
  EXPECT_EQ(rig.ctx->stats().evictions, 0u);
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, 0u);
}

// A command at the host location works on the buffer's host copy, the
// buffer's own memory: it holds the buffer until it has run (ASan sees a
// use after free otherwise).
TEST(Runtime, AHostCommandKeepsTheBufferItUses) {
  Rig rig = make_rig(1, {}, true);
  Queue& host = *rig.queues[1];
  Event gate = rig.ctx->create_user_event();
  const auto data = pattern(4096, 32);
  std::vector<std::uint8_t> seen(4096);
  Event kernel;
  {
    Buffer b = buffer(*rig.ctx, 4096, mem::kReadWrite | mem::kCopyHostPtr, const_cast<std::uint8_t*>(data.data()));
    auto k = host.enqueue_kernel(
        [&seen](std::span<void* const> t) {
          std::memcpy(seen.data(), t[0], seen.size());
          return Status{};
        },
        std::vector<KernelArg>{{b, Access::read}}, std::vector<Event>{gate});
    ASSERT_TRUE(k.ok()) << k.error().message;
    kernel = k.value();
  }
  ASSERT_TRUE(gate.set_user_status(cl::kComplete).ok());
  ASSERT_EQ(kernel.wait(), cl::kComplete);
  EXPECT_EQ(seen, data);
}

TEST(Runtime, AFailedAllocationChangesNoVersion) {
  drivers::SimOptions o;
  o.memory_size = 1 << 20;
  Rig rig = make_rig(2, o);
  Buffer small = buffer(*rig.ctx, 4096);
  const auto data = pattern(4096, 21);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(small, 0, 4096, data.data(), true).ok());
  EXPECT_EQ(read_all(*rig.queues[1], small), data);  // now valid on both devices
  const auto moved = rig.ctx->stats().bytes_migrated;
  // A kernel on device 1 that would write `small` but also needs a buffer
  // larger than the device: it fails at enqueue...
  Buffer huge = buffer(*rig.ctx, 2 << 20);
  auto r = rig.queues[1]->enqueue_kernel([](std::span<void* const>) { return Status{}; },
                                         std::vector<KernelArg>{{small, Access::write}, {huge, Access::read}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, cl::kMemObjectAllocationFailure);
  // ...and leaves `small` valid on device 0: had its version moved to device
  // 1, this read would migrate it back.
  EXPECT_EQ(read_all(*rig.queues[0], small), data);
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, moved);
  EXPECT_EQ(rig.ctx->stats().devices[1].live_blocks, 1u) << "only small's storage, none for huge";
}

TEST(Runtime, UndefinedContentIsNeverCopied) {
  Rig rig = make_rig(2);
  Buffer fresh = buffer(*rig.ctx, 64 << 10);  // no host data: its bytes are undefined
  Buffer alloc = buffer(*rig.ctx, 4096, mem::kAllocHostPtr);
  for (std::size_t d : {0u, 1u, 0u}) {
    auto k = rig.queues[d]->enqueue_kernel([](std::span<void* const>) { return Status{}; },
                                           std::vector<KernelArg>{{fresh, Access::read}, {alloc, Access::read}});
    ASSERT_TRUE(k.ok()) << k.error().message;
    ASSERT_EQ(k.value().wait(), cl::kComplete);
  }
  std::vector<std::uint8_t> out(4096);
  ASSERT_TRUE(rig.queues[1]->enqueue_read(fresh, 0, out.size(), out.data(), true).ok());
  auto map = rig.queues[0]->enqueue_map(alloc, map::kRead, 0, 4096, true);
  ASSERT_TRUE(map.ok());
  ASSERT_EQ(rig.queues[0]->enqueue_unmap(alloc, map.value().pointer).value().wait(), cl::kComplete);
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, 0u) << "uninitialised bytes were copied";
  // Bytes written on device 0 are defined: those, and only those, move.
  const auto data = pattern(1000, 3);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(fresh, 5000, data.size(), data.data(), true).ok());
  std::vector<std::uint8_t> back(data.size());
  ASSERT_TRUE(rig.queues[1]->enqueue_read(fresh, 5000, back.size(), back.data(), true).ok());
  EXPECT_EQ(back, data);
  ASSERT_TRUE(rig.queues[1]->enqueue_read(fresh, 0, out.size(), out.data(), true).ok());
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, 2 * data.size()) << "device 0 -> host -> device 1, 1000 bytes";
}

// Buffers whose last handle goes while other threads' enqueues evict them.
// The application's handle and an eviction's write-back (a copy holds its
// buffer) race to drop the last reference; eviction must never be the one
// that destroys a buffer while it holds the device's memory lock (the
// buffer's destructor takes that lock: a self-deadlock). A watchdog turns
// a hang into a failure.
TEST(Runtime, BuffersReleasedWhileEvictionsRunNeverDeadlock) {
  drivers::SimOptions o;
  o.memory_size = 256 << 10;
  Rig rig = make_rig(1, o);
  constexpr int kThreads = 3, kRounds = 3000;
  auto work = std::async(std::launch::async, [&] {
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        auto q = rig.ctx->create_queue(0, true).value();
        const auto data = pattern(48 << 10, t);
        // Two live per thread: six do not fit, so enqueues evict. A command
        // at a device holds no buffer (the engine fences its storage): the
        // handle dropped two rounds on races the write-backs holding it.
        std::array<Buffer, 2> kept;
        for (int i = 0; i < kRounds; ++i) {
          Buffer& b = kept[static_cast<std::size_t>(i) % kept.size()];
          b = buffer(*rig.ctx, 48 << 10);
          auto w = q->enqueue_write(b, 0, data.size(), data.data(), false);
          if (!w) {
            if (w.error().code != cl::kMemObjectAllocationFailure) ++failures;
            continue;
          }
          if (i % 8 == 0 && w.value().wait() != cl::kComplete) ++failures;
        }
        if (!q->finish().ok()) ++failures;
      });
    }
    for (auto& th : threads) th.join();
    return failures.load();
  });
  if (work.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "BuffersReleasedWhileEvictionsRunNeverDeadlock: no progress in 60 s: deadlock\n");
    std::_Exit(1);  // the stuck threads cannot be joined
  }
  EXPECT_EQ(work.get(), 0);
  // How many evictions run depends on how far the enqueues get ahead of the
  // worker (thousands here, 53 once under ASan on a loaded machine): the
  // premise is that some ran while buffers were released.
  EXPECT_GT(rig.ctx->stats().evictions, 0u) << "no eviction ran: the device was meant to be too small";
}

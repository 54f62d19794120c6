// The sim driver: arena placement, operations and their bounds, fault
// injection, the link model, peer copies, kernels.
#include <gtest/gtest.h>

#include <hwloc.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "memlayer/drivers/sim_device.hpp"

using namespace memlayer;
using drivers::SimDevice;
using drivers::SimOptions;

namespace {

std::vector<std::unique_ptr<SimDevice>> make(unsigned count, SimOptions options = {}) {
  options.memory_size = options.memory_size == SimOptions{}.memory_size ? (1u << 20) : options.memory_size;
  std::vector<std::unique_ptr<SimDevice>> devices;
  const runtime::Status s = SimDevice::create(count, options, devices);
  EXPECT_TRUE(s.ok()) << s.message;
  return devices;
}

std::vector<std::byte> bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(seed)) & 0xff);
  return v;
}

}  // namespace

TEST(SimDevice, DefaultIsOneDevicePerNumaNode) {
  hwloc_topology_t topo;
  ASSERT_EQ(hwloc_topology_init(&topo), 0);
  ASSERT_EQ(hwloc_topology_load(topo), 0);
  const int nodes = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  hwloc_topology_destroy(topo);
  auto devices = make(0);
  EXPECT_EQ(devices.size(), static_cast<std::size_t>(nodes));
  EXPECT_EQ(make(3).size(), 3u);
}

TEST(SimDevice, InfoAndDistinctAddressSpaces) {
  SimOptions o;
  o.memory_size = 4 << 20;
  o.local_mem_size = 32 << 10;
  o.base_alignment = 256;
  auto d = make(2, o);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0]->info().global_mem_size, 4u << 20);
  EXPECT_EQ(d[0]->info().local_mem_size, 32u << 10);
  EXPECT_EQ(d[0]->info().base_alignment, 256u);
  EXPECT_FALSE(d[0]->info().shares_host_memory);
  EXPECT_NE(d[0]->info().name, d[1]->info().name);
  EXPECT_NE(d[0]->memory_base(), 0u);
  EXPECT_GE(d[1]->memory_base(), d[0]->memory_base() + (4u << 20)) << "address spaces must not overlap";
}

TEST(SimDevice, ArenaLivesOnItsNumaNode) {
  auto d = make(1);
  if (!d[0]->memory_bound()) GTEST_SKIP() << "hwloc cannot bind memory here";
  hwloc_topology_t topo;
  ASSERT_EQ(hwloc_topology_init(&topo), 0);
  ASSERT_EQ(hwloc_topology_load(topo), 0);
  void* p = d[0]->host_pointer(d[0]->memory_base());
  std::memset(p, 1, 1 << 20);  // touch it, so pages exist
  hwloc_nodeset_t where = hwloc_bitmap_alloc();
  ASSERT_EQ(hwloc_get_area_memlocation(topo, p, 1 << 20, where, HWLOC_MEMBIND_BYNODESET), 0);
  hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(d[0]->info().numa_node));
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(hwloc_bitmap_isincluded(where, node->nodeset));
  hwloc_bitmap_free(where);
  hwloc_topology_destroy(topo);
}

TEST(SimDevice, WorkerThreadIsBoundToItsNodesCores) {
  auto d = make(1);
  hwloc_topology_t topo;
  ASSERT_EQ(hwloc_topology_init(&topo), 0);
  ASSERT_EQ(hwloc_topology_load(topo), 0);
  hwloc_cpuset_t bound = hwloc_bitmap_alloc();
  int rc = -1;
  std::thread([&] {
    d[0]->on_worker_start(0);
    rc = hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_THREAD);
  }).join();
  hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(d[0]->info().numa_node));
  ASSERT_NE(node, nullptr);
  ASSERT_EQ(rc, 0);
  EXPECT_TRUE(hwloc_bitmap_isincluded(bound, node->cpuset));
  hwloc_bitmap_free(bound);
  hwloc_topology_destroy(topo);
}

TEST(SimDevice, WriteReadCopyFillRoundTrip) {
  auto d = make(1);
  SimDevice& dev = *d[0];
  const auto base = dev.memory_base();
  const auto data = bytes(4096, 7);
  ASSERT_TRUE(dev.write(base + 100, data.data(), data.size()).ok());
  std::vector<std::byte> back(4096);
  ASSERT_TRUE(dev.read(base + 100, back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
  ASSERT_TRUE(dev.copy(base + 100, base + 10000, 4096).ok());
  ASSERT_TRUE(dev.read(base + 10000, back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
  // Overlapping copy within one range behaves like memmove.
  ASSERT_TRUE(dev.copy(base + 100, base + 101, 4095).ok());
  ASSERT_TRUE(dev.read(base + 101, back.data(), 4095).ok());
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + 4095, data.begin()));
  for (std::size_t pattern_size : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 128u}) {
    const auto pattern = bytes(pattern_size, static_cast<int>(pattern_size));
    ASSERT_TRUE(dev.fill(base + 512, 1024, pattern).ok());
    std::vector<std::byte> filled(1024);
    ASSERT_TRUE(dev.read(base + 512, filled.data(), filled.size()).ok());
    for (std::size_t i = 0; i < filled.size(); ++i) ASSERT_EQ(filled[i], pattern[i % pattern_size]);
  }
}

TEST(SimDevice, OutOfRangeOperationsFailWithAMessage) {
  auto d = make(1);
  SimDevice& dev = *d[0];
  const auto base = dev.memory_base();
  const auto end = base + dev.info().global_mem_size;
  std::vector<std::byte> buf(64);
  auto s = dev.read(end - 32, buf.data(), 64);
  EXPECT_EQ(s.code, -30);
  EXPECT_NE(s.message.find("outside device memory"), std::string::npos) << s.message;
  EXPECT_FALSE(dev.write(base - 1, buf.data(), 1).ok());
  EXPECT_FALSE(dev.copy(base, end, 1).ok());
  EXPECT_FALSE(dev.copy(UINT64_MAX, base, 1).ok());
  EXPECT_FALSE(dev.fill(end - 8, 16, std::span<const std::byte>(buf.data(), 8)).ok());
  EXPECT_FALSE(dev.fill(base, 10, std::span<const std::byte>(buf.data(), 4)).ok()) << "size not a multiple";
  EXPECT_FALSE(dev.on_allocate(end, 1).ok());
  EXPECT_EQ(dev.host_pointer(end + 1), nullptr);
  EXPECT_TRUE(dev.read(end - 64, buf.data(), 64).ok()) << "the last bytes are in range";
}

TEST(SimDevice, FailsTheNthAllocation) {
  SimOptions o;
  o.fail_allocation_number = 3;
  auto d = make(1, o);
  const auto base = d[0]->memory_base();
  EXPECT_TRUE(d[0]->on_allocate(base, 64).ok());
  EXPECT_TRUE(d[0]->on_allocate(base, 64).ok());
  auto third = d[0]->on_allocate(base, 64);
  EXPECT_EQ(third.code, -4);
  EXPECT_NE(third.message.find("injected"), std::string::npos);
  EXPECT_TRUE(d[0]->on_allocate(base, 64).ok());
}

TEST(SimDevice, TransferFailuresFollowTheProbabilityAndTheSeed) {
  auto failures = [](std::uint64_t seed) {
    SimOptions o;
    o.transfer_failure_probability = 0.1;
    o.fault_seed = seed;
    auto d = make(1, o);
    std::vector<bool> failed;
    std::byte b{};
    for (int i = 0; i < 4000; ++i) failed.push_back(!d[0]->write(d[0]->memory_base(), &b, 1).ok());
    return failed;
  };
  const auto a = failures(42), b = failures(42), c = failures(43);
  EXPECT_EQ(a, b) << "the same seed gives the same failures";
  EXPECT_NE(a, c);
  const auto n = std::count(a.begin(), a.end(), true);
  EXPECT_GT(n, 300);
  EXPECT_LT(n, 500);
}

// A fault lasts fault_burst transfers of its device; a peer copy is a
// transfer of both devices, and fails where either is down.
TEST(SimDevice, AFaultBurstFailsTheNextTransfersAtBothEndsOfAPeerCopy) {
  SimOptions o;
  o.peer_link = runtime::LinkCost{1e-6, 50e9};
  o.fail_transfer_number = 2;
  o.fault_burst = 3;
  auto d = make(2, o);
  std::byte b{};
  const auto base0 = d[0]->memory_base(), base1 = d[1]->memory_base();
  EXPECT_TRUE(d[0]->write(base0, &b, 1).ok());                            // device 0's 1
  EXPECT_FALSE(d[1]->copy_from_peer(*d[0], base0, base1, 1).ok());        // 0's 2: the fault
  const auto third = d[1]->copy_from_peer(*d[0], base0, base1, 1);        // 0's 3: the burst
  EXPECT_NE(third.message.find("sim0: peer copy out failed (injected: in a burst of 3)"), std::string::npos)
      << third.message;
  EXPECT_FALSE(d[0]->read(base0, &b, 1).ok());                             // 0's 4: the burst's end
  EXPECT_TRUE(d[1]->copy_from_peer(*d[0], base0, base1, 1).ok());         // 0's 5, 1's 1
  const auto in = d[1]->copy_from_peer(*d[0], base0, base1, 1);           // 0's 6, 1's 2: device 1's fault
  EXPECT_NE(in.message.find("sim1: peer copy in failed"), std::string::npos) << in.message;
  EXPECT_EQ(d[0]->faults_injected(), 3u);
  EXPECT_EQ(d[1]->faults_injected(), 1u);

  o.fault_burst = 0;
  std::vector<std::unique_ptr<SimDevice>> none;
  const auto bad = SimDevice::create(1, o, none);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message.find("fault_burst"), std::string::npos) << bad.message;
  EXPECT_TRUE(none.empty());
}

TEST(SimDevice, LinkModelMakesTransfersTakeTheirTime) {
  SimOptions o;
  o.model_link_time = true;
  o.host_link = {2e-3, 1e9};  // 2 ms latency
  auto d = make(1, o);
  std::vector<std::byte> buf(1 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(d[0]->write(d[0]->memory_base(), buf.data(), buf.size()).ok());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 2e-3 + (1 << 20) / 1e9);
  EXPECT_EQ(d[0]->bytes_transferred(), 1u << 20);
}

TEST(SimDevice, PeerCopiesOnlyWhereALinkExists) {
  auto plain = make(2);
  EXPECT_FALSE(plain[1]->peer_link(*plain[0]).has_value());
  EXPECT_FALSE(plain[1]->copy_from_peer(*plain[0], plain[0]->memory_base(), plain[1]->memory_base(), 1).ok());

  SimOptions o;
  o.peer_link = runtime::LinkCost{1e-6, 50e9};
  auto d = make(2, o);
  ASSERT_TRUE(d[1]->peer_link(*d[0]).has_value());
  EXPECT_FALSE(d[0]->peer_link(*d[0]).has_value()) << "no link to itself";
  const auto data = bytes(8192, 3);
  ASSERT_TRUE(d[0]->write(d[0]->memory_base() + 64, data.data(), data.size()).ok());
  ASSERT_TRUE(d[1]->copy_from_peer(*d[0], d[0]->memory_base() + 64, d[1]->memory_base() + 128, 8192).ok());
  std::vector<std::byte> back(8192);
  ASSERT_TRUE(d[1]->read(d[1]->memory_base() + 128, back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
  EXPECT_FALSE(d[1]->copy_from_peer(*d[0], d[1]->memory_base(), d[1]->memory_base(), 1).ok())
      << "a source address of the wrong device is out of range";
}

TEST(SimDevice, KernelsSeePointersIntoTheArena) {
  auto d = make(1);
  SimDevice& dev = *d[0];
  const auto a = dev.memory_base() + 256, b = dev.memory_base() + 4096;
  const std::vector<int> in{1, 2, 3, 4};
  ASSERT_TRUE(dev.write(a, in.data(), sizeof(int) * 4).ok());
  const std::vector<runtime::DeviceAddress> args{a, b};
  auto s = dev.run_kernel(
      [](std::span<void* const> p) {
        auto* x = static_cast<int*>(p[0]);
        auto* y = static_cast<int*>(p[1]);
        for (int i = 0; i < 4; ++i) y[i] = x[i] * 10;
        return runtime::Status{};
      },
      args, {});
  ASSERT_TRUE(s.ok()) << s.message;
  std::vector<int> out(4);
  ASSERT_TRUE(dev.read(b, out.data(), sizeof(int) * 4).ok());
  EXPECT_EQ(out, (std::vector<int>{10, 20, 30, 40}));
  const std::vector<runtime::DeviceAddress> bad{1};
  EXPECT_FALSE(dev.run_kernel([](std::span<void* const>) { return runtime::Status{}; }, bad, {}).ok());
  auto failing = dev.run_kernel(
      [](std::span<void* const>) { return runtime::Status::error(-5, "kernel says no"); }, args, {});
  EXPECT_EQ(failing.message, "kernel says no");
  // Local memory: aligned, disjoint, within the device's local size.
  const std::vector<std::uint64_t> locals{1000, 24};
  std::vector<void*> seen;
  ASSERT_TRUE(dev.run_kernel(
                     [&](std::span<void* const> p) {
                       seen.assign(p.begin(), p.end());
                       std::memset(p[2], 1, 1000);
                       std::memset(p[3], 2, 24);
                       return runtime::Status{};
                     },
                     args, locals)
                  .ok());
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(seen[2]) % 128, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(seen[3]) % 128, 0u);
  EXPECT_GE(static_cast<std::byte*>(seen[3]) - static_cast<std::byte*>(seen[2]), 1000);
  const std::vector<std::uint64_t> too_much{dev.info().local_mem_size + 1};
  EXPECT_EQ(dev.run_kernel([](std::span<void* const>) { return runtime::Status{}; }, args, too_much).code,
            runtime::cl::kOutOfResources);
}

TEST(SimDevice, BadOptionsAreRejected) {
  std::vector<std::unique_ptr<SimDevice>> out;
  SimOptions o;
  o.memory_size = 0;
  EXPECT_EQ(SimDevice::create(1, o, out).code, -30);
  o = SimOptions{};
  o.base_alignment = 100;
  EXPECT_NE(SimDevice::create(1, o, out).message.find("power of two"), std::string::npos);
  o = SimOptions{};
  o.transfer_failure_probability = 2;
  EXPECT_FALSE(SimDevice::create(1, o, out).ok());
  o = SimOptions{};
  o.worker_threads = 0;
  EXPECT_FALSE(SimDevice::create(1, o, out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(SimDevice, NativeAllocatorHandsOutDisjointAlignedRangesUntilFull) {
  SimOptions o;
  o.native_allocator = true;
  o.native_allocation_cost = {0, 1e15};  // free: this test is about placement
  auto d = make(1, o);
  EXPECT_TRUE(d[0]->has_native_allocator());
  auto a = d[0]->native_allocate(256 << 10);
  auto b = d[0]->native_allocate(512 << 10);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a % o.base_alignment, 0u);
  EXPECT_EQ(*b % o.base_alignment, 0u);
  EXPECT_TRUE(*a + (256 << 10) <= *b || *b + (512 << 10) <= *a) << "ranges overlap";
  // Both lie in device memory: the driver's operations accept them.
  const auto data = bytes(512 << 10, 3);
  ASSERT_TRUE(d[0]->write(*b, data.data(), data.size()).ok());
  EXPECT_FALSE(d[0]->native_allocate(512 << 10)) << "only 256 KiB are left";
  EXPECT_EQ(d[0]->native_allocations(), 2u);
  EXPECT_EQ(d[0]->native_bytes(), 768u << 10);
  d[0]->native_release(*b, 512 << 10);
  EXPECT_EQ(d[0]->native_bytes(), 256u << 10);
  EXPECT_TRUE(d[0]->native_allocate(512 << 10)) << "released space is reused";
  d[0]->native_release(*b + 1, 1);  // not a range it gave out: ignored
  EXPECT_EQ(d[0]->native_bytes(), 768u << 10);
}

TEST(SimDevice, NativeAllocationTakesTheCostModelsTime) {
  SimOptions o;
  o.native_allocator = true;
  o.native_allocation_cost = {1e-3, 1e9};  // 1 ms + 1 ms per MB
  auto d = make(1, o);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(d[0]->native_allocate(1 << 20));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 1e-3 + (1 << 20) / 1e9);
}

TEST(SimDevice, NativeAllocatorOffOrFailingGivesNothing) {
  auto plain = make(1);
  EXPECT_FALSE(plain[0]->has_native_allocator());
  EXPECT_FALSE(plain[0]->native_allocate(4096));
  SimOptions o;
  o.native_allocator = true;
  o.native_allocation_cost = {0, 1e15};
  o.fail_allocation_number = 2;
  auto d = make(1, o);
  EXPECT_TRUE(d[0]->native_allocate(4096));
  EXPECT_FALSE(d[0]->native_allocate(4096)) << "the injected failure";
  EXPECT_TRUE(d[0]->native_allocate(4096));
  EXPECT_FALSE(d[0]->native_allocate(2 << 20)) << "larger than the arena";
}

TEST(SimDevice, BadNativeAllocatorOptionsAreRejected) {
  std::vector<std::unique_ptr<SimDevice>> out;
  SimOptions o;
  o.native_allocator = true;
  o.native_allocation_cost = {1e-4, 0};
  EXPECT_NE(SimDevice::create(1, o, out).message.find("native_allocation_cost"), std::string::npos);
  o.native_allocation_cost = {1e-4, 1e9};
  o.memory_size = (1 << 20) + 1;
  EXPECT_NE(SimDevice::create(1, o, out).message.find("multiple of base_alignment"), std::string::npos);
  EXPECT_TRUE(out.empty());
}

// The memlayer PoCL device through the ICD loader: what it reports, and
// its failure paths (device memory full: buffers evicted, least recently
// used first; queued work waited for; a clean enqueue error when the
// command alone does not fit or the room is held by gated work; local
// memory exceeded). ctest runs it with POCL_DEVICES=memlayer and
// POCL_MEMLAYER0_PARAMETERS=global_mem=64M,local_mem=32K,compute_units=2,
// and the QueuedWork* tests alone with global_mem=8M.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "cl_check.hpp"

using namespace memlayer::cltest;

namespace {

constexpr cl_ulong kGlobal = 64 << 20;
constexpr cl_ulong kLocal = 32 << 10;

class PoclDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    auto devices = all_devices();
    ASSERT_EQ(devices.size(), 1u) << "run with POCL_DEVICES=memlayer";
    device_ = devices[0];
    cl_int err = CL_SUCCESS;
    ctx_ = Context(clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err));
    ASSERT_EQ(err, CL_SUCCESS);
    queue_ = Queue(clCreateCommandQueueWithProperties(ctx_.get(), device_, nullptr, &err));
    ASSERT_EQ(err, CL_SUCCESS);
  }
  template <class T>
  T info(cl_device_info what) {
    T v{};
    EXPECT_EQ(clGetDeviceInfo(device_, what, sizeof v, &v, nullptr), CL_SUCCESS);
    return v;
  }
  Mem buffer(std::size_t bytes) {
    cl_int err = CL_SUCCESS;
    Mem m(clCreateBuffer(ctx_.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
    EXPECT_EQ(err, CL_SUCCESS);
    return m;
  }
  cl_int write_pattern(cl_mem m, std::size_t bytes, std::uint32_t seed) {
    std::vector<std::uint32_t> v(bytes / 4);
    std::iota(v.begin(), v.end(), seed);
    return clEnqueueWriteBuffer(queue_.get(), m, CL_TRUE, 0, bytes, v.data(), 0, nullptr, nullptr);
  }
  bool has_pattern(cl_mem m, std::size_t bytes, std::uint32_t seed) {
    std::vector<std::uint32_t> v(bytes / 4);
    EXPECT_EQ(clEnqueueReadBuffer(queue_.get(), m, CL_TRUE, 0, bytes, v.data(), 0, nullptr, nullptr), CL_SUCCESS);
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != seed + i) return false;
    return true;
  }

  // c[i] = a[i] + b[i] over (a, b, c); the kernel keeps its program.
  Kernel sum3() {
    const char* src = R"CLC(
      kernel void sum3(global const uint* a, global const uint* b, global uint* c) {
        size_t i = get_global_id(0);
        c[i] = a[i] + b[i];
      }
    )CLC";
    std::vector<cl_device_id> devs{device_};
    Program program = build_program(ctx_.get(), devs, src);
    cl_int err = CL_SUCCESS;
    Kernel k(clCreateKernel(program.get(), "sum3", &err));
    EXPECT_EQ(err, CL_SUCCESS);
    return k;
  }

  // QueuedWorkLargerThanTheDeviceRuns' body (below).
  void queue_work_larger_than_the_device();

  // Five buffers of `block` bytes; the first four are written (seed i *
  // 1000) by writes that wait on `gate`: their storage is in use, not idle,
  // until the test opens it.
  struct GatedFill {
    Event gate;
    std::vector<Mem> bufs;
    std::vector<std::vector<std::uint32_t>> data;
  };
  void fill_behind_a_gate(std::size_t block, GatedFill& out) {
    for (int i = 0; i < 5; ++i) out.bufs.push_back(buffer(block));
    cl_int err = CL_SUCCESS;
    out.gate = Event(clCreateUserEvent(ctx_.get(), &err));
    ASSERT_EQ(err, CL_SUCCESS);
    out.data.assign(4, std::vector<std::uint32_t>(block / 4));
    for (std::uint32_t i = 0; i < 4; ++i) {
      std::iota(out.data[i].begin(), out.data[i].end(), i * 1000);
      cl_event g = out.gate.get();
      ASSERT_EQ(clEnqueueWriteBuffer(queue_.get(), out.bufs[i].get(), CL_FALSE, 0, block, out.data[i].data(), 1, &g,
                                     nullptr),
                CL_SUCCESS);
    }
  }

  cl_device_id device_ = nullptr;
  Context ctx_;
  Queue queue_;
};

TEST_F(PoclDevice, ReportsItsParameters) {
  EXPECT_EQ(info<cl_ulong>(CL_DEVICE_GLOBAL_MEM_SIZE), kGlobal);
  EXPECT_EQ(info<cl_ulong>(CL_DEVICE_LOCAL_MEM_SIZE), kLocal);
  EXPECT_EQ(info<cl_device_local_mem_type>(CL_DEVICE_LOCAL_MEM_TYPE), static_cast<cl_device_local_mem_type>(CL_LOCAL));
  EXPECT_EQ(info<cl_uint>(CL_DEVICE_MAX_COMPUTE_UNITS), 2u);
  EXPECT_EQ(info<cl_uint>(CL_DEVICE_MEM_BASE_ADDR_ALIGN), 128u * 8);  // in bits
  // OpenCL's floor for the largest allocation: min(memory, max(memory / 4, 128 MiB)).
  EXPECT_EQ(info<cl_ulong>(CL_DEVICE_MAX_MEM_ALLOC_SIZE), kGlobal);
  // Coarse-grained buffer SVM only (doc/svm.md).
  EXPECT_EQ(info<cl_device_svm_capabilities>(CL_DEVICE_SVM_CAPABILITIES),
            static_cast<cl_device_svm_capabilities>(CL_DEVICE_SVM_COARSE_GRAIN_BUFFER));
}

TEST_F(PoclDevice, FullMemoryEvictsIdleBuffersAndLosesNothing) {
  constexpr std::size_t kBlock = 16 << 20;  // four fill the device
  std::vector<Mem> bufs;
  for (int i = 0; i < 6; ++i) bufs.push_back(buffer(kBlock));
  const auto before = migration_stats();
  // Each buffer gets device memory at its first command; from the fifth on
  // the device is full, and idle buffers are written back to the host and
  // evicted to make room.
  for (std::uint32_t i = 0; i < 6; ++i) ASSERT_EQ(write_pattern(bufs[i].get(), kBlock, i * 1000), CL_SUCCESS) << i;
  // Reading an evicted buffer brings it back, evicting another.
  for (int round = 0; round < 2; ++round)
    for (std::uint32_t i = 0; i < 6; ++i) EXPECT_TRUE(has_pattern(bufs[i].get(), kBlock, i * 1000)) << i;
  const auto after = migration_stats();
  EXPECT_GE(after.evictions - before.evictions, 2u);
  EXPECT_GE(after.eviction_bytes_written_back - before.eviction_bytes_written_back, 2 * kBlock);
}

TEST_F(PoclDevice, EvictionTakesTheLeastRecentlyUsedBuffer) {
  constexpr std::size_t kBlock = 16 << 20;  // four fill the device
  std::vector<Mem> bufs;
  for (int i = 0; i < 5; ++i) bufs.push_back(buffer(kBlock));
  for (std::uint32_t i = 0; i < 4; ++i) ASSERT_EQ(write_pattern(bufs[i].get(), kBlock, i * 1000), CL_SUCCESS) << i;
  // The first buffer, created and written first, is used again: the
  // second is now the least recently used.
  ASSERT_TRUE(has_pattern(bufs[0].get(), kBlock, 0));
  const auto before = migration_stats();
  ASSERT_EQ(write_pattern(bufs[4].get(), kBlock, 4000), CL_SUCCESS);
  const auto evicted = migration_stats();
  ASSERT_EQ(evicted.evictions - before.evictions, 1u);
  EXPECT_EQ(evicted.eviction_bytes_written_back - before.eviction_bytes_written_back, kBlock);
  // The first is still on the device: reading it imports nothing.
  EXPECT_TRUE(has_pattern(bufs[0].get(), kBlock, 0));
  EXPECT_EQ(migration_stats().h2d_bytes - evicted.h2d_bytes, 0u) << "the recently used buffer was evicted";
  // The second was the one written back: reading it brings it back.
  const auto reread = migration_stats();
  EXPECT_TRUE(has_pattern(bufs[1].get(), kBlock, 1000));
  EXPECT_EQ(migration_stats().h2d_bytes - reread.h2d_bytes, kBlock);
}

// The device is full of buffers whose commands wait for a user event the
// test sets only later: their storage is evicted (kept until those
// commands finish), and the enqueue that needs it waits for them up to
// POCL_MEMLAYER_ROOM_WAIT_MS (ctest sets 500) and then fails cleanly
// instead of hanging. Once the event is set, everything runs and nothing
// is lost.
TEST_F(PoclDevice, WorkGatedByAUserEventFailsTheEnqueueAfterTheWaitLimitAndRecovers) {
  constexpr std::size_t kBlock = 16 << 20;
  GatedFill fill;
  ASSERT_NO_FATAL_FAILURE(fill_behind_a_gate(kBlock, fill));
  const Event& gate = fill.gate;
  const std::vector<Mem>& bufs = fill.bufs;
  // No room until the gate opens: the fifth fails at enqueue, and again.
  EXPECT_EQ(write_pattern(bufs[4].get(), kBlock, 4000), CL_MEM_OBJECT_ALLOCATION_FAILURE);
  EXPECT_EQ(write_pattern(bufs[4].get(), kBlock, 4000), CL_MEM_OBJECT_ALLOCATION_FAILURE);
  ASSERT_EQ(clSetUserEventStatus(gate.get(), CL_COMPLETE), CL_SUCCESS);
  ASSERT_EQ(clFinish(queue_.get()), CL_SUCCESS);
  // Now the four are done: the fifth finds room, and nothing is lost.
  ASSERT_EQ(write_pattern(bufs[4].get(), kBlock, 4000), CL_SUCCESS);
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_TRUE(has_pattern(bufs[i].get(), kBlock, i * 1000)) << i;
}

// Three host threads cycle through more buffers than the device holds:
// evictions happen while the other threads plan and enqueue, and every
// read sees what its thread wrote.
TEST_F(PoclDevice, EvictionWhileOtherThreadsEnqueue) {
  constexpr std::size_t kBlock = 8 << 20;  // 3 threads x 3 buffers = 72 MiB of 64
  constexpr int kThreads = 3;
  std::vector<Mem> bufs;
  for (int i = 0; i < kThreads * 3; ++i) bufs.push_back(buffer(kBlock));
  const auto before = migration_stats();
  std::vector<std::string> failures(kThreads);
  auto work = [&](int t) {
    cl_int err = CL_SUCCESS;
    Queue q(clCreateCommandQueueWithProperties(ctx_.get(), device_, nullptr, &err));
    std::vector<std::uint32_t> v(kBlock / 4), got(kBlock / 4);
    for (std::uint32_t i = 0; i < 24 && failures[t].empty(); ++i) {
      cl_mem m = bufs[t * 3 + i % 3].get();
      std::iota(v.begin(), v.end(), (t << 24) + i);
      err = clEnqueueWriteBuffer(q.get(), m, CL_TRUE, 0, kBlock, v.data(), 0, nullptr, nullptr);
      if (err == CL_SUCCESS) err = clEnqueueReadBuffer(q.get(), m, CL_TRUE, 0, kBlock, got.data(), 0, nullptr, nullptr);
      if (err != CL_SUCCESS)
        failures[t] = "OpenCL error " + std::to_string(err) + " at step " + std::to_string(i);
      else if (got != v)
        failures[t] = "read differs at step " + std::to_string(i);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(failures[t].empty()) << "thread " << t << ": " << failures[t];
  EXPECT_GE(migration_stats().evictions - before.evictions, 1u);
}

// A working set of 21/8 of the device (ctest: 21 MiB on 8 MiB), and
// commands queued without waiting on an out-of-order queue: kernels on
// three buffers, writes, migrations. Every resident buffer is held by a
// queued command most of the time, so an enqueue that needs room evicts
// busy buffers and waits for their commands to let go; none may fail.
// Each command waits for the last command on each of its buffers, so the
// result is that of running them in enqueue order.
void PoclDevice::queue_work_larger_than_the_device() {
  const std::size_t block = info<cl_ulong>(CL_DEVICE_GLOBAL_MEM_SIZE) / 8;
  const std::size_t n = block / 4;
  constexpr int kBuffers = 21, kRounds = 3;
  std::vector<cl_device_id> devs{device_};
  Program program = build_program(ctx_.get(), devs, R"CLC(
    kernel void combine(global const uint* a, global const uint* b, global uint* c) {
      size_t i = get_global_id(0);
      c[i] = c[i] * 3u + a[i] + b[i];
    }
  )CLC");
  cl_int err = CL_SUCCESS;
  Kernel combine(clCreateKernel(program.get(), "combine", &err));
  ASSERT_EQ(err, CL_SUCCESS);
  cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, 0};
  Queue q(clCreateCommandQueueWithProperties(ctx_.get(), device_, props, &err));
  ASSERT_EQ(err, CL_SUCCESS);

  std::vector<Mem> bufs;
  std::vector<std::vector<std::uint32_t>> model(kBuffers, std::vector<std::uint32_t>(n));
  std::vector<Event> last(kBuffers);
  auto after = [&](std::initializer_list<int> touched, std::vector<cl_event>& list) {
    list.clear();
    for (int b : touched)
      if (last[b].get() != nullptr && std::find(list.begin(), list.end(), last[b].get()) == list.end())
        list.push_back(last[b].get());
  };
  auto record = [&](std::initializer_list<int> touched, cl_event ev) {
    for (int b : touched) {
      clRetainEvent(ev);
      last[b] = Event(ev);
    }
    clReleaseEvent(ev);
  };
  std::vector<cl_event> waits;
  for (int b = 0; b < kBuffers; ++b) {
    bufs.push_back(buffer(block));
    std::iota(model[b].begin(), model[b].end(), static_cast<std::uint32_t>(b) << 20);
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueWriteBuffer(q.get(), bufs[b].get(), CL_FALSE, 0, block, model[b].data(), 0, nullptr, &ev),
              CL_SUCCESS) << b;
    record({b}, ev);
  }
  const auto before = migration_stats();
  for (int round = 0; round < kRounds; ++round) {
    for (int j = 0; j < kBuffers; ++j) {
      const int a = j, b = (j + 7) % kBuffers, c = (j + 1) % kBuffers;
      cl_mem args[] = {bufs[a].get(), bufs[b].get(), bufs[c].get()};
      for (cl_uint i = 0; i < 3; ++i) ASSERT_EQ(clSetKernelArg(combine.get(), i, sizeof(cl_mem), &args[i]), CL_SUCCESS);
      after({a, b, c}, waits);
      cl_event ev = nullptr;
      ASSERT_EQ(clEnqueueNDRangeKernel(q.get(), combine.get(), 1, nullptr, &n, nullptr, static_cast<cl_uint>(waits.size()),
                                       waits.data(), &ev),
                CL_SUCCESS)
          << "round " << round << ", kernel " << j;
      record({a, b, c}, ev);
      for (std::size_t i = 0; i < n; ++i) model[c][i] = model[c][i] * 3u + model[a][i] + model[b][i];
      if (j % 5 == 0) {  // moved to the device ahead of its next use
        cl_mem m = bufs[(j + 3) % kBuffers].get();
        after({(j + 3) % kBuffers}, waits);
        ASSERT_EQ(clEnqueueMigrateMemObjects(q.get(), 1, &m, 0, static_cast<cl_uint>(waits.size()), waits.data(), &ev),
                  CL_SUCCESS)
            << "round " << round << ", migration " << j;
        record({(j + 3) % kBuffers}, ev);
      }
    }
  }
  ASSERT_EQ(clFinish(q.get()), CL_SUCCESS);
  EXPECT_GT(migration_stats().evictions - before.evictions, static_cast<std::uint64_t>(kBuffers));
  std::vector<std::uint32_t> got(n);
  for (int b = 0; b < kBuffers; ++b) {
    ASSERT_EQ(clEnqueueReadBuffer(q.get(), bufs[b].get(), CL_TRUE, 0, block, got.data(), 0, nullptr, nullptr),
              CL_SUCCESS);
    EXPECT_TRUE(got == model[b]) << "buffer " << b << " differs from running the commands in enqueue order";
  }
}

TEST_F(PoclDevice, QueuedWorkLargerThanTheDeviceRuns) { queue_work_larger_than_the_device(); }

// An enqueue whose room is held by work gated on a user event waits for it,
// and runs once another thread opens the gate. A malformed
// POCL_MEMLAYER_ROOM_WAIT_MS is named on stderr at that wait, and the
// default limit applies.
TEST_F(PoclDevice, QueuedWorkGatedElsewhereIsWaitedForAndAMalformedLimitIsNamed) {
  const std::size_t block = info<cl_ulong>(CL_DEVICE_GLOBAL_MEM_SIZE) / 4;  // four fill the device
  GatedFill fill;
  ASSERT_NO_FATAL_FAILURE(fill_behind_a_gate(block, fill));
  const Event& gate = fill.gate;
  const std::vector<Mem>& bufs = fill.bufs;
  ASSERT_EQ(setenv("POCL_MEMLAYER_ROOM_WAIT_MS", "soon", 1), 0);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    clSetUserEventStatus(gate.get(), CL_COMPLETE);
  });
  ::testing::internal::CaptureStderr();
  const cl_int written = write_pattern(bufs[4].get(), block, 4000);
  const std::string said = ::testing::internal::GetCapturedStderr();
  opener.join();
  unsetenv("POCL_MEMLAYER_ROOM_WAIT_MS");
  EXPECT_EQ(written, CL_SUCCESS);
  EXPECT_NE(said.find("POCL_MEMLAYER_ROOM_WAIT_MS must be a number of milliseconds, not 'soon'; using 60000"),
            std::string::npos)
      << said;
  ASSERT_EQ(clFinish(queue_.get()), CL_SUCCESS);
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_TRUE(has_pattern(bufs[i].get(), block, i * 1000)) << i;
}

TEST_F(PoclDevice, OneCommandNeedingMoreThanTheDeviceFails) {
  constexpr std::size_t kBlock = 24 << 20;  // three need 72 MiB of 64
  Kernel k = sum3();
  ASSERT_NE(k.get(), nullptr);
  std::vector<Mem> bufs;
  for (int i = 0; i < 3; ++i) bufs.push_back(buffer(kBlock));
  for (std::uint32_t i = 0; i < 2; ++i) ASSERT_EQ(write_pattern(bufs[i].get(), kBlock, i * 7), CL_SUCCESS);
  for (cl_uint i = 0; i < 3; ++i) {
    cl_mem m = bufs[i].get();
    ASSERT_EQ(clSetKernelArg(k.get(), i, sizeof m, &m), CL_SUCCESS);
  }
  const std::size_t global = 1024;
  // The failed enqueue hands out no event: the command it had made is freed
  // with its event, not left behind never to complete.
  cl_event ev = nullptr;
  EXPECT_EQ(clEnqueueNDRangeKernel(queue_.get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr, &ev),
            CL_MEM_OBJECT_ALLOCATION_FAILURE);
  EXPECT_EQ(ev, nullptr);
  EXPECT_EQ(clFinish(queue_.get()), CL_SUCCESS);
  // The inputs are intact, and a command that fits still runs: the sum into
  // the second input (48 MiB in all).
  for (std::uint32_t i = 0; i < 2; ++i) EXPECT_TRUE(has_pattern(bufs[i].get(), kBlock, i * 7)) << i;
  cl_mem into = bufs[1].get();
  ASSERT_EQ(clSetKernelArg(k.get(), 2, sizeof into, &into), CL_SUCCESS);
  ASSERT_EQ(clEnqueueNDRangeKernel(queue_.get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
            CL_SUCCESS);
  std::vector<std::uint32_t> sums(global);
  ASSERT_EQ(clEnqueueReadBuffer(queue_.get(), into, CL_TRUE, 0, global * 4, sums.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  for (std::uint32_t i = 0; i < global; ++i) EXPECT_EQ(sums[i], i + (7 + i)) << i;
}

// A, X, B, Y (16 MiB each) fill the device in that order; X and Y can go,
// leaving two 16 MiB holes: a kernel on A, B and a new 32 MiB C fits the
// device but no hole. Its own buffers are moved (written back, evicted,
// placed again after C), and it runs on their bytes. The enqueue tries
// again once the first write-back has ended: with that buffer gone, its
// room and a hole beside it may hold C already, and the other stays.
TEST_F(PoclDevice, AKernelThatFitsTheDeviceButNoHoleMovesItsOwnBuffers) {
  constexpr std::size_t kBlock = 16 << 20;
  Kernel k = sum3();
  ASSERT_NE(k.get(), nullptr);
  std::vector<Mem> bufs;  // A, X, B, Y
  for (std::uint32_t i = 0; i < 4; ++i) {
    bufs.push_back(buffer(kBlock));
    ASSERT_EQ(write_pattern(bufs[i].get(), kBlock, i * 7), CL_SUCCESS) << i;
  }
  Mem c = buffer(2 * kBlock);
  const cl_mem args[] = {bufs[0].get(), bufs[2].get(), c.get()};
  for (cl_uint i = 0; i < 3; ++i) ASSERT_EQ(clSetKernelArg(k.get(), i, sizeof(cl_mem), &args[i]), CL_SUCCESS);
  const auto before = migration_stats();
  const std::size_t global = kBlock / 4;  // A's and B's elements, into C's first half
  ASSERT_EQ(clEnqueueNDRangeKernel(queue_.get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
            CL_SUCCESS);
  std::vector<std::uint32_t> sums(global);
  ASSERT_EQ(clEnqueueReadBuffer(queue_.get(), c.get(), CL_TRUE, 0, global * 4, sums.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  for (std::uint32_t i = 0; i < global; ++i)
    if (sums[i] != i + (14 + i)) FAIL() << "element " << i << ": " << sums[i];
  EXPECT_GE(migration_stats().evictions - before.evictions, 3u) << "X, Y, and A or B moved";
  for (std::uint32_t i : {1u, 3u}) EXPECT_TRUE(has_pattern(bufs[i].get(), kBlock, i * 7)) << i;
}

TEST_F(PoclDevice, MoreLocalMemoryThanTheDeviceHasIsRefusedAtEnqueue) {
  const char* src = R"CLC(
    kernel void with_arg(global uint* out, local uint* scratch) {
      size_t l = get_local_id(0);
      scratch[l] = (uint)l * 3u;
      barrier(CLK_LOCAL_MEM_FENCE);
      out[get_global_id(0)] = scratch[get_local_size(0) - 1 - l];
    }
    kernel void with_array(global uint* out) {
      local uint big[10000];  // 40000 bytes: more than the device's 32 KiB
      size_t l = get_local_id(0);
      big[l] = 1u;
      barrier(CLK_LOCAL_MEM_FENCE);
      out[get_global_id(0)] = big[0];
    }
  )CLC";
  std::vector<cl_device_id> devs{device_};
  Program program = build_program(ctx_.get(), devs, src);
  cl_int err = CL_SUCCESS;
  Kernel with_arg(clCreateKernel(program.get(), "with_arg", &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Kernel with_array(clCreateKernel(program.get(), "with_array", &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem out = buffer(256 * 4);
  cl_mem o = out.get();
  const std::size_t global = 256, local = 64;

  ASSERT_EQ(clSetKernelArg(with_arg.get(), 0, sizeof o, &o), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(with_arg.get(), 1, kLocal + 4, nullptr), CL_SUCCESS);
  EXPECT_EQ(clEnqueueNDRangeKernel(queue_.get(), with_arg.get(), 1, nullptr, &global, &local, 0, nullptr, nullptr),
            CL_OUT_OF_RESOURCES);
  ASSERT_EQ(clSetKernelArg(with_array.get(), 0, sizeof o, &o), CL_SUCCESS);
  EXPECT_EQ(clEnqueueNDRangeKernel(queue_.get(), with_array.get(), 1, nullptr, &global, &local, 0, nullptr, nullptr),
            CL_OUT_OF_RESOURCES);

  // What fits runs, and runs right: the device is not left in a bad state.
  ASSERT_EQ(clSetKernelArg(with_arg.get(), 1, local * 4, nullptr), CL_SUCCESS);
  ASSERT_EQ(clEnqueueNDRangeKernel(queue_.get(), with_arg.get(), 1, nullptr, &global, &local, 0, nullptr, nullptr),
            CL_SUCCESS);
  std::vector<std::uint32_t> got(global);
  ASSERT_EQ(clEnqueueReadBuffer(queue_.get(), o, CL_TRUE, 0, global * 4, got.data(), 0, nullptr, nullptr), CL_SUCCESS);
  for (std::size_t i = 0; i < global; ++i) EXPECT_EQ(got[i], (local - 1 - i % local) * 3) << i;
}

}  // namespace

// Failure paths through the ICD loader on two memlayer devices, on any PoCL
// the driver is built into: a command that fails calls the callbacks
// registered for CL_COMPLETE with its negative status, and so does a command
// on the other device that fails because it depended on it, and a callback
// registered after the failure (PoCL 3.1 called none of them, 7.1 called
// them with CL_COMPLETE: drivers/pocl/patches/pocl-*-callbacks-on-error.patch).
// A cancelled write leaves the buffer as it was; so do a write-back and
// links to what a command waits for that fail. Waits are bounded: a
// callback that never comes fails the test, it does not hang it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cl_check.hpp"

using namespace memlayer::cltest;

namespace {

struct Seen {
  std::atomic<int> calls{0};
  std::atomic<cl_int> status{1};
};

void CL_CALLBACK record(cl_event, cl_int status, void* seen) {
  auto* s = static_cast<Seen*>(seen);
  s->status.store(status);
  s->calls.fetch_add(1);
}

// True once `done()` is, false after 20 s: the bound on every wait here.
template <class Done>
bool within_bound(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// True once every one of `seen` was called, false after 20 s.
bool called(std::initializer_list<const Seen*> seen) {
  return within_bound([&] {
    return std::all_of(seen.begin(), seen.end(), [](const Seen* s) { return s->calls.load() > 0; });
  });
}

// True once `e` has ended (its status in `status`), false after 20 s.
bool ends(cl_event e, cl_int& status) {
  bool queried = true;
  return within_bound([&] {
    queried = clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr) == CL_SUCCESS;
    return !queried || status <= CL_COMPLETE;
  }) && queried;
}

// A write to `b` on device 0 gated on a user event, a read of `read_bytes`
// of it on device 1 (which the engine orders after the write), callbacks on
// both, then the gate set to -5: both must fail.
struct CancelledWrite {
  Event gate, write, read;
  Seen write_seen, read_seen;
};
void cancel_a_write(const DeviceSet& set, cl_mem b, std::size_t offset, std::size_t bytes, const void* data,
                    std::size_t read_bytes, void* out, CancelledWrite& c) {
  cl_int err = CL_SUCCESS;
  c.gate = Event(clCreateUserEvent(set.ctx.get(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  cl_event g = c.gate.get(), w = nullptr, r = nullptr;
  ASSERT_EQ(clEnqueueWriteBuffer(set.queues[0].get(), b, CL_FALSE, offset, bytes, data, 1, &g, &w), CL_SUCCESS);
  c.write = Event(w);
  ASSERT_EQ(clEnqueueReadBuffer(set.queues[1].get(), b, CL_FALSE, 0, read_bytes, out, 0, nullptr, &r), CL_SUCCESS);
  c.read = Event(r);
  ASSERT_EQ(clSetEventCallback(w, CL_COMPLETE, record, &c.write_seen), CL_SUCCESS);
  ASSERT_EQ(clSetEventCallback(r, CL_COMPLETE, record, &c.read_seen), CL_SUCCESS);
  ASSERT_EQ(clSetUserEventStatus(g, -5), CL_SUCCESS);
}

TEST(PoclFailure, CompleteCallbacksRunWithTheNegativeStatusOfAFailedCommand) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  constexpr std::size_t kBytes = 64 << 10;
  std::vector<std::uint8_t> sevens(kBytes, 7), data(4096, 42), out(kBytes);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, kBytes, sevens.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);

  // A command that succeeds: its callback sees CL_COMPLETE.
  Seen fine;
  {
    cl_event e = nullptr;
    ASSERT_EQ(clEnqueueReadBuffer(set.queues[0].get(), b.get(), CL_FALSE, 0, 64, out.data(), 0, nullptr, &e),
              CL_SUCCESS);
    Event done(e);
    ASSERT_EQ(clSetEventCallback(e, CL_COMPLETE, record, &fine), CL_SUCCESS);
    ASSERT_TRUE(called({&fine})) << "the callback of a command that completed never ran";
    EXPECT_EQ(fine.status.load(), CL_COMPLETE);
  }

  // A write gated on a user event that fails, and a read of the same bytes
  // on the other device, which the engine orders after the write.
  CancelledWrite c;
  ASSERT_NO_FATAL_FAILURE(cancel_a_write(set, b.get(), 0, data.size(), data.data(), kBytes, out.data(), c));
  cl_event w = c.write.get(), r = c.read.get();
  const Seen& write_seen = c.write_seen;
  const Seen& read_seen = c.read_seen;

  ASSERT_TRUE(called({&write_seen, &read_seen})) << "a failed command's CL_COMPLETE callback never ran (write: "
                                                 << write_seen.calls << " calls, read: " << read_seen.calls << ")";
  EXPECT_LT(write_seen.status.load(), 0);
  EXPECT_LT(read_seen.status.load(), 0);
  EXPECT_EQ(write_seen.calls.load(), 1);
  EXPECT_EQ(read_seen.calls.load(), 1);
  EXPECT_EQ(clWaitForEvents(1, &w), CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  cl_int status = CL_COMPLETE;
  ASSERT_EQ(clGetEventInfo(r, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr), CL_SUCCESS);
  EXPECT_LT(status, 0);

  // Registered after the failure: called at once, with the negative status.
  Seen late;
  ASSERT_EQ(clSetEventCallback(w, CL_COMPLETE, record, &late), CL_SUCCESS);
  ASSERT_TRUE(called({&late}));
  EXPECT_LT(late.status.load(), 0);
}

// A write cancelled by a failed user event, with a read of the same bytes
// queued behind it on the other device: both fail, and the buffer still
// holds what it held before, read on either device (memlayer's engine
// committed the write's version at enqueue and read back the bytes nobody
// wrote, before failed writers were undone: doc/runtime.md, failures).
TEST(PoclFailure, ACancelledWriteLeavesThePreviousContent) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  constexpr std::size_t kInts = 16 << 10;
  std::vector<cl_int> sevens(kInts, 7), data(1024, 42), out(kInts, 0);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, kInts * sizeof(cl_int), sevens.data(),
                       &err));
  ASSERT_EQ(err, CL_SUCCESS);
  ASSERT_EQ(clEnqueueReadBuffer(set.queues[0].get(), b.get(), CL_TRUE, 0, 64, out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);  // the content is on device 0 now too

  CancelledWrite c;
  ASSERT_NO_FATAL_FAILURE(cancel_a_write(set, b.get(), 4096, data.size() * sizeof(cl_int), data.data(),
                                         kInts * sizeof(cl_int), out.data(), c));
  ASSERT_TRUE(called({&c.write_seen, &c.read_seen})) << "the failed commands never ended";
  EXPECT_LT(c.write_seen.status.load(), 0);
  EXPECT_LT(c.read_seen.status.load(), 0);

  // With MEMLAYER_EXPECT_CANCELLED_WRITE_LOSS=1 (pocl71_failure_own_engine_cancelled_write:
  // PoCL 7.1's own engine, which reads back other bytes on device 1) the
  // test asserts that loss instead, so that it fails, and says so, should
  // 7.1's engine stop losing them.
  const char* expect_loss = std::getenv("MEMLAYER_EXPECT_CANCELLED_WRITE_LOSS");
  const bool loss_expected = expect_loss != nullptr && std::string(expect_loss) == "1";
  long lost = 0;
  for (std::size_t q = 0; q < 2; ++q) {
    std::fill(out.begin(), out.end(), 0);
    ASSERT_EQ(clEnqueueReadBuffer(set.queues[q].get(), b.get(), CL_TRUE, 0, kInts * sizeof(cl_int), out.data(), 0,
                                  nullptr, nullptr),
              CL_SUCCESS);
    const long kept = std::count(out.begin(), out.end(), 7);
    lost += static_cast<long>(kInts) - kept;
    if (!loss_expected) {
      EXPECT_EQ(kept, static_cast<long>(kInts)) << "read on device " << q;
    }
  }
  if (loss_expected) {
    EXPECT_GT(lost, 0) << "PoCL's engine no longer loses the content under a cancelled write: drop "
                          "MEMLAYER_EXPECT_CANCELLED_WRITE_LOSS from this test's ctest entry";
  }
}

// A command whose wait list holds an event that had failed before the
// enqueue fails, and so does what waits for it; nothing hangs (PoCL 3.1
// linked such a dependency as if it were still to come and the command
// waited forever; 7.1 skipped it and ran the command:
// drivers/pocl/patches/pocl-*-failed-dependency-fails-command.patch).
TEST(PoclFailure, ACommandWhoseDependencyFailedBeforeTheEnqueueFails) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  std::vector<cl_int> data(1024, 5);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, data.size() * sizeof(cl_int),
                       data.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Event gate(clCreateUserEvent(set.ctx.get(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  ASSERT_EQ(clSetUserEventStatus(gate.get(), -9), CL_SUCCESS);
  cl_event g = gate.get(), w = nullptr, m = nullptr;
  const std::vector<cl_int> other(256, 8);
  ASSERT_EQ(clEnqueueWriteBuffer(set.queues[0].get(), b.get(), CL_FALSE, 0, other.size() * sizeof(cl_int),
                                 other.data(), 1, &g, &w),
            CL_SUCCESS);
  Event write(w);
  ASSERT_EQ(clEnqueueMarkerWithWaitList(set.queues[1].get(), 1, &w, &m), CL_SUCCESS);
  Event marker(m);
  cl_int status = CL_COMPLETE;
  ASSERT_TRUE(ends(w, status)) << "the write never ended";
  EXPECT_LT(status, 0);
  ASSERT_TRUE(ends(m, status)) << "what waits for the write never ended";
  EXPECT_LT(status, 0);
  // (What the buffer holds afterwards: ACancelledWriteLeavesThePreviousContent.)
}

// Blocking reads, writes and maps report a dependency that failed while
// they waited — one in their wait list, or one the migration engine ordered
// them after — with CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST (PoCL
// returned CL_SUCCESS: drivers/pocl/patches/pocl-*-blocking-calls-report-failure.patch).
TEST(PoclFailure, BlockingCallsReportAFailedDependency) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  std::vector<cl_int> data(1024, 3), out(1024, 0);
  const std::size_t bytes = data.size() * sizeof(cl_int);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, data.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  // A user event that fails 100 ms into the blocking call `call`.
  auto failing_while = [&](auto call) {
    Event gate(clCreateUserEvent(set.ctx.get(), &err));
    EXPECT_EQ(err, CL_SUCCESS);
    cl_event g = gate.get();
    std::thread fail_it([g] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      clSetUserEventStatus(g, -4);
    });
    const cl_int result = call(g);
    fail_it.join();
    return result;
  };

  EXPECT_EQ(failing_while([&](cl_event g) {
              return clEnqueueReadBuffer(set.queues[0].get(), b.get(), CL_TRUE, 0, bytes, out.data(), 1, &g, nullptr);
            }),
            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  EXPECT_EQ(failing_while([&](cl_event g) {
              return clEnqueueWriteBuffer(set.queues[0].get(), b.get(), CL_TRUE, 0, bytes, data.data(), 1, &g,
                                          nullptr);
            }),
            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  void* p = nullptr;
  EXPECT_EQ(failing_while([&](cl_event g) {
              cl_int e = CL_SUCCESS;
              p = clEnqueueMapBuffer(set.queues[1].get(), b.get(), CL_TRUE, CL_MAP_READ, 0, bytes, 1, &g, nullptr, &e);
              return e;
            }),
            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  EXPECT_EQ(p, nullptr);
  // The application has no pointer to unmap: the failed map leaves no
  // mapping behind (a mapped buffer keeps its device storage for good).
  cl_uint maps = 1;
  ASSERT_EQ(clGetMemObjectInfo(b.get(), CL_MEM_MAP_COUNT, sizeof maps, &maps, nullptr), CL_SUCCESS);
  EXPECT_EQ(maps, 0u);

  // The same for an image's blocking read, write and map.
  const cl_image_format format{CL_RGBA, CL_UNSIGNED_INT8};
  cl_image_desc desc{};
  desc.image_type = CL_MEM_OBJECT_IMAGE2D;
  desc.image_width = 16;
  desc.image_height = 16;  // 16 x 16 x 4 bytes = `bytes`
  Mem image(clCreateImage(set.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, &format, &desc, data.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  const std::size_t origin[3] = {0, 0, 0}, region[3] = {16, 16, 1};
  EXPECT_EQ(failing_while([&](cl_event g) {
              return clEnqueueReadImage(set.queues[0].get(), image.get(), CL_TRUE, origin, region, 0, 0, out.data(), 1,
                                        &g, nullptr);
            }),
            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  EXPECT_EQ(failing_while([&](cl_event g) {
              return clEnqueueWriteImage(set.queues[0].get(), image.get(), CL_TRUE, origin, region, 0, 0, data.data(),
                                         1, &g, nullptr);
            }),
            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  EXPECT_EQ(failing_while([&](cl_event g) {
              cl_int e = CL_SUCCESS;
              std::size_t row_pitch = 0, slice_pitch = 0;
              p = clEnqueueMapImage(set.queues[1].get(), image.get(), CL_TRUE, CL_MAP_READ, origin, region, &row_pitch,
                                    &slice_pitch, 1, &g, nullptr, &e);
              return e;
            }),
            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  EXPECT_EQ(p, nullptr);
  maps = 1;
  ASSERT_EQ(clGetMemObjectInfo(image.get(), CL_MEM_MAP_COUNT, sizeof maps, &maps, nullptr), CL_SUCCESS);
  EXPECT_EQ(maps, 0u);

  // Implicit: a write of the same bytes on the other device, gated on a
  // user event that fails while the read blocks.
  Event write;
  EXPECT_EQ(failing_while([&](cl_event g) {
              cl_event w = nullptr;
              EXPECT_EQ(clEnqueueWriteBuffer(set.queues[0].get(), b.get(), CL_FALSE, 0, bytes, data.data(), 1, &g, &w),
                        CL_SUCCESS);
              write = Event(w);
              return clEnqueueReadBuffer(set.queues[1].get(), b.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr,
                                         nullptr);
            }),
            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);

  // And a blocking call with nothing failed still succeeds (what it reads
  // after the cancelled write: ACancelledWriteLeavesThePreviousContent).
  EXPECT_EQ(clEnqueueReadBuffer(set.queues[1].get(), b.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
}

// Run with device 0's transfers failing (POCL_MEMLAYER0_PARAMETERS=
// transfer_faults=1; ctest: pocl_failure_faults): a write there fails,
// nothing hangs, and the buffer keeps its content, read on device 1.
TEST(PoclFaults, AFaultyDevicesWritesFailAndLoseNothing) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  std::vector<cl_int> sevens(4096, 7), other(1024, 9), out(4096, 0);
  const std::size_t bytes = sevens.size() * sizeof(cl_int);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, sevens.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  for (int round = 0; round < 3; ++round) {
    cl_event w = nullptr;
    ASSERT_EQ(clEnqueueWriteBuffer(set.queues[0].get(), b.get(), CL_FALSE, 1024, other.size() * sizeof(cl_int),
                                   other.data(), 0, nullptr, &w),
              CL_SUCCESS);
    Event write(w);
    cl_int status = CL_COMPLETE;
    ASSERT_TRUE(ends(w, status)) << "the write never ended";
    EXPECT_LT(status, 0) << "device 0 fails every transfer";
    ASSERT_EQ(clEnqueueReadBuffer(set.queues[1].get(), b.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr, nullptr),
              CL_SUCCESS);
    EXPECT_EQ(out, sevens) << "round " << round;
  }
}

// Copies all `bytes` of `from` into `to` on `q` and waits (bounded): the
// copy's final status, or 1 when it never ended.
cl_int copy_and_wait(cl_command_queue q, cl_mem from, cl_mem to, std::size_t bytes) {
  cl_event c = nullptr;
  if (clEnqueueCopyBuffer(q, from, to, 0, 0, bytes, 0, nullptr, &c) != CL_SUCCESS) return 1;
  Event copy(c);
  cl_int status = 1;
  return ends(c, status) ? status : 1;
}

// Device 0's links to its peers fail every transfer
// (POCL_MEMLAYER0_PARAMETERS=peer_read_faults=1); its host link works.
// Bytes held on device 0 and at the host reach device 1 from the host copy
// once the copy from device 0 has failed its tries (memlayer's engine named
// the host copy as the other source: pocl_ml_migration_retry).
TEST(PoclPeerFaults, AMigrationWhosePeerSourceFailsIsMadeFromTheHostCopy) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  std::vector<cl_int> data(4096), out(4096, 0);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<cl_int>(i * 3 + 1);
  const std::size_t bytes = data.size() * sizeof(cl_int);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, data.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem on0(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  Mem on1(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  // b to device 0 (from the host: device 0's host link works): b is then
  // complete there and at the host.
  ASSERT_EQ(copy_and_wait(set.queues[0].get(), b.get(), on0.get(), bytes), CL_COMPLETE);
  migration_stats(true);
  // b to device 1: device to device from device 0 is the cheaper path.
  EXPECT_EQ(copy_and_wait(set.queues[1].get(), b.get(), on1.get(), bytes), CL_COMPLETE);
  const MigrationStats st = migration_stats();
  EXPECT_EQ(st.migrations_resourced, 1u);
  EXPECT_EQ(st.d2d_commands, 0u) << "the copy from device 0 never ran";
  EXPECT_EQ(st.h2d_bytes, bytes);
  ASSERT_EQ(clEnqueueReadBuffer(set.queues[1].get(), on1.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(out, data);
}

// With no other copy (the bytes were written on device 0 only), the command
// that needed them fails, and the bytes stay readable on device 0.
TEST(PoclPeerFaults, AMigrationWithNoOtherSourceFailsTheCommandAndLosesNothing) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  std::vector<cl_int> data(4096, 5), out(4096, 0);
  const std::size_t bytes = data.size() * sizeof(cl_int);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem on1(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  ASSERT_EQ(clEnqueueWriteBuffer(set.queues[0].get(), b.get(), CL_TRUE, 0, bytes, data.data(), 0, nullptr, nullptr),
            CL_SUCCESS);  // valid on device 0 only
  migration_stats(true);
  EXPECT_LT(copy_and_wait(set.queues[1].get(), b.get(), on1.get(), bytes), 0);
  EXPECT_EQ(migration_stats().migrations_resourced, 0u);
  ASSERT_EQ(clEnqueueReadBuffer(set.queues[0].get(), b.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(out, data);
}

// Device 0 has 1 MiB and fails every transfer (POCL_MEMLAYER0_PARAMETERS=
// global_mem=1M,transfer_faults=1, POCL_MEMLAYER_ROOM_WAIT_MS=500; ctest:
// pocl_failure_write_back_faults). A kernel there made the only copy of a's
// bytes; a kernel on b, which does not fit beside a, has a's bytes written
// back to the host copy first: a transfer that fails every try. The kernel
// on b then fails for want of room, and a's bytes stay where they are, read
// on device 1. (The adapter ran that write-back through the driver's `read`
// on the enqueuing thread, which cannot report a failure: the host copy was
// taken as valid and a's storage freed, its bytes lost.)
TEST(PoclWriteBackFaults, AWriteBackThatFailsKeepsTheOnlyCopy) {
  DeviceSet set = open_device_set("kernel void fill(global int* p, int base) { p[get_global_id(0)] = base + (int)get_global_id(0); }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  constexpr std::size_t kInts = 192 << 10;  // 768 KiB: two do not fit in 1 MiB
  constexpr std::size_t kBytes = kInts * sizeof(cl_int);
  constexpr cl_int kBase = 1000;
  cl_int err = CL_SUCCESS;
  Mem a(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, kBytes, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, kBytes, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Kernel fill(clCreateKernel(set.program.get(), "fill", &err));
  ASSERT_EQ(err, CL_SUCCESS);
  cl_command_queue q0 = set.queues[0].get();
  auto fill_on_device_0 = [&](cl_mem m, cl_int base) {
    const std::size_t global = kInts;
    cl_int e = clSetKernelArg(fill.get(), 0, sizeof m, &m);
    if (e == CL_SUCCESS) e = clSetKernelArg(fill.get(), 1, sizeof base, &base);
    if (e == CL_SUCCESS) e = clEnqueueNDRangeKernel(q0, fill.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr);
    const cl_int finished = clFinish(q0);
    return e != CL_SUCCESS ? e : finished;
  };
  ASSERT_EQ(fill_on_device_0(a.get(), kBase), CL_SUCCESS);  // a's bytes: on device 0 only

  const cl_int needs_room = bounded("the kernel that needs a's room", 120, [&] { return fill_on_device_0(b.get(), 5); });
  EXPECT_EQ(needs_room, CL_MEM_OBJECT_ALLOCATION_FAILURE) << "a's write-back fails every try: no room for b";

  std::vector<cl_int> out(kInts, 0);
  ASSERT_EQ(clEnqueueReadBuffer(set.queues[1].get(), a.get(), CL_TRUE, 0, kBytes, out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  std::size_t lost = 0;
  for (std::size_t i = 0; i < kInts; ++i) lost += out[i] != kBase + static_cast<cl_int>(i) ? 1 : 0;
  EXPECT_EQ(lost, 0u) << "of a's " << kInts << " ints, read on device 1";
}

// Run with POCL_MEMLAYER_TEST_LINKS=1 (ctest: pocl_failure_link_failures):
// the adapter links commands to one running event in all; every later link
// fails as out of host memory would (PoCL's pocl_create_event_sync, whose
// status the adapter dropped: the command ran without the order the engine
// had committed). A command whose links fail never runs out of order: one
// the engine committed fails without running, and is undone; a copy, or a
// user's wait list, fails the enqueue before anything is committed.
TEST(PoclLinkFailures, ACommandWhoseWaitsCannotBeLinkedNeverRunsOutOfOrder) {
  DeviceSet set = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
  ASSERT_EQ(set.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  std::vector<cl_int> first(4096, 1), second(4096, 2), out(4096, 0);
  const std::size_t bytes = first.size() * sizeof(cl_int);
  cl_int err = CL_SUCCESS;
  Mem b(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem c(clCreateBuffer(set.ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Event gate(clCreateUserEvent(set.ctx.get(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  cl_event g = gate.get();

  // The one link: the first write waits for the gate.
  cl_event e = nullptr;
  ASSERT_EQ(clEnqueueWriteBuffer(set.queues[0].get(), b.get(), CL_FALSE, 0, bytes, first.data(), 1, &g, &e),
            CL_SUCCESS);
  Event write1(e);

  // A write of the same bytes on device 1, which the engine orders after
  // the first: it fails, and runs neither before nor after it.
  ASSERT_EQ(clEnqueueWriteBuffer(set.queues[1].get(), b.get(), CL_FALSE, 0, bytes, second.data(), 0, nullptr, &e),
            CL_SUCCESS);
  Event write2(e);
  cl_int status = CL_COMPLETE;
  ASSERT_TRUE(ends(write2.get(), status)) << "the second write never ended";
  EXPECT_LT(status, 0) << "the second write ran before the first, whose gate is still closed";

  // A read on device 1: its copy from device 0 waits for the first write.
  e = nullptr;
  EXPECT_EQ(clEnqueueReadBuffer(set.queues[1].get(), b.get(), CL_FALSE, 0, bytes, out.data(), 0, nullptr, &e),
            CL_OUT_OF_HOST_MEMORY);
  Event read(e);
  EXPECT_EQ(e, nullptr);

  // The user's own wait list.
  e = nullptr;
  EXPECT_EQ(clEnqueueWriteBuffer(set.queues[1].get(), c.get(), CL_FALSE, 0, bytes, second.data(), 1, &g, &e),
            CL_OUT_OF_HOST_MEMORY);
  Event gated(e);
  EXPECT_EQ(e, nullptr);

  // The gate opens: the first write runs, and its bytes are b's. (Nothing
  // is running now: what follows needs no link.)
  ASSERT_EQ(clSetUserEventStatus(g, CL_COMPLETE), CL_SUCCESS);
  ASSERT_TRUE(ends(write1.get(), status)) << "the first write never ended";
  EXPECT_EQ(status, CL_COMPLETE);
  ASSERT_EQ(clFinish(set.queues[1].get()), CL_SUCCESS);
  ASSERT_EQ(clEnqueueReadBuffer(set.queues[0].get(), b.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(out, first);
}

}  // namespace

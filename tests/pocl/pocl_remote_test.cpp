// Memlayer devices behind PoCL 7.1's remote servers (doc/scale-out.md): a
// server that dies mid-run. Run as the client of a cluster of two servers
// with one device each (drivers/pocl/pocl-cluster.sh run ... --servers 2
// --devices memlayer), which names its state folder in POCL_CLUSTER_STATE:
// its `servers` file gives each server's PID, in device order.
//
// What a user needs then: the commands on the dead server's device end with
// an error (no hang: each wait is bounded by a watchdog), and the other
// server's buffers stay readable with every byte they held.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cl_check.hpp"

namespace {

using namespace memlayer::cltest;

const char* kSource = R"(
__kernel void bump(__global uint* a, uint rounds) {
  size_t i = get_global_id(0);
  uint v = a[i];
  for (uint r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
  a[i] = v;
})";

// Several contexts on one remote device, made, used and released in
// overlapping order, from two host threads (PoCL 7.1's client crashed in its
// writer thread on such a program: field notes; the writer then wrote into
// answered synchronous commands, patches/pocl-7.1-remote-client-writer-*).
// Runs before the server-loss case, which kills a server.
void several_contexts_case() {
  const std::vector<cl_device_id> devices = all_devices();
  ASSERT_FALSE(devices.empty());
  cl_device_id dev = devices[0];
  auto work = [dev](unsigned seed, std::string& failure) {
    for (int round = 0; round < 6 && failure.empty(); ++round) {
      cl_int err = CL_SUCCESS;
      std::vector<Context> ctxs;
      std::vector<Queue> queues;
      std::vector<Mem> bufs;
      for (int c = 0; c < 3; ++c) {
        ctxs.emplace_back(clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err));
        if (err != CL_SUCCESS) return void(failure = "clCreateContext: " + std::to_string(err));
        queues.emplace_back(clCreateCommandQueueWithProperties(ctxs.back().get(), dev, nullptr, &err));
        if (err != CL_SUCCESS) return void(failure = "clCreateCommandQueue: " + std::to_string(err));
        bufs.emplace_back(clCreateBuffer(ctxs.back().get(), CL_MEM_READ_WRITE, 4096 * 4, nullptr, &err));
        if (err != CL_SUCCESS) return void(failure = "clCreateBuffer: " + std::to_string(err));
      }
      for (int c = 0; c < 3; ++c) {
        std::vector<std::uint32_t> data(4096), got(4096);
        for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint32_t>(seed * 7919u + round * 31u + c * 4096u + i);
        if (clEnqueueWriteBuffer(queues[c].get(), bufs[c].get(), CL_FALSE, 0, 4096 * 4, data.data(), 0, nullptr,
                                 nullptr) != CL_SUCCESS ||
            clEnqueueReadBuffer(queues[c].get(), bufs[c].get(), CL_TRUE, 0, 4096 * 4, got.data(), 0, nullptr,
                                nullptr) != CL_SUCCESS)
          return void(failure = "a write or read failed");
        if (got != data) return void(failure = "context " + std::to_string(c) + " read other bytes");
      }
      // Released out of creation order: the middle context first.
      bufs[1].reset();
      queues[1].reset();
      ctxs[1].reset();
    }
  };
  std::string f0, f1;
  std::thread other(work, 2u, std::ref(f1));
  work(1u, f0);
  other.join();
  EXPECT_TRUE(f0.empty()) << f0;
  EXPECT_TRUE(f1.empty()) << f1;
}

TEST(RemoteServers, SeveralContextsOnOneRemoteDevice) {
  bounded("the several-contexts case", 120, [] {
    several_contexts_case();
    return 0;
  });
}

void lost_server_case() {
  const std::vector<ClusterServer> servers = cluster_servers();
  ASSERT_EQ(servers.size(), 2u) << "run under pocl-cluster.sh run --servers 2 --devices memlayer";
  DeviceSet s = open_device_set(kSource);
  ASSERT_EQ(s.devices.size(), 2u);
  cl_int err = CL_SUCCESS;
  Kernel bump(clCreateKernel(s.program.get(), "bump", &err));
  CL_CHECK(err);

  constexpr std::size_t kCount = 1 << 16;
  std::vector<std::uint32_t> a_bytes(kCount), b_bytes(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    a_bytes[i] = static_cast<std::uint32_t>(i * 2654435761u);
    b_bytes[i] = static_cast<std::uint32_t>(~i);
  }
  Mem a(clCreateBuffer(s.ctx.get(), CL_MEM_READ_WRITE, kCount * 4, nullptr, &err));
  CL_CHECK(err);
  Mem b(clCreateBuffer(s.ctx.get(), CL_MEM_READ_WRITE, kCount * 4, nullptr, &err));
  CL_CHECK(err);
  cl_command_queue q0 = s.queues[0].get(), q1 = s.queues[1].get();
  CL_CHECK(clEnqueueWriteBuffer(q0, a.get(), CL_TRUE, 0, kCount * 4, a_bytes.data(), 0, nullptr, nullptr));
  CL_CHECK(clEnqueueWriteBuffer(q1, b.get(), CL_TRUE, 0, kCount * 4, b_bytes.data(), 0, nullptr, nullptr));

  // Work queued on server 1's device; the server dies under it.
  cl_mem bm = b.get();
  const cl_uint rounds = 4096;
  CL_CHECK(clSetKernelArg(bump.get(), 0, sizeof bm, &bm));
  CL_CHECK(clSetKernelArg(bump.get(), 1, sizeof rounds, &rounds));
  std::vector<Event> events;
  std::size_t global = kCount;
  for (int i = 0; i < 16; ++i) {
    cl_event e = nullptr;
    CL_CHECK(clEnqueueNDRangeKernel(q1, bump.get(), 1, nullptr, &global, nullptr, 0, nullptr, &e));
    events.emplace_back(e);
  }
  CL_CHECK(clFlush(q1));
  ASSERT_EQ(kill(static_cast<pid_t>(servers[1].pid), SIGKILL), 0);

  // Each command on the lost device ends, and not as a success: the last
  // one was queued behind work the server never finished.
  // (clFinish may return at once with CL_DEVICE_NOT_AVAILABLE: the wait
  // for the last kernel is what must end.)
  bounded("clFinish on the lost server's queue", 60, [&] { return clFinish(q1); });
  const cl_int waited = bounded("a wait for the last kernel on the lost server", 60, [&] {
    cl_event e = events.back().get();
    return clWaitForEvents(1, &e);
  });
  // Failed, or refused for the lost device at once.
  EXPECT_TRUE(waited == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST || waited == CL_DEVICE_NOT_AVAILABLE)
      << "clWaitForEvents returned " << waited;
  // Either way the event itself ends, failed.
  const cl_int last = bounded("the last kernel's event to end", 60, [&] {
    cl_int status = CL_QUEUED;
    while (status > CL_COMPLETE) {
      CL_CHECK(clGetEventInfo(events.back().get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                              nullptr));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return status;
  });
  EXPECT_LT(last, 0) << "the last kernel on the lost server reports status " << last;

  // A new command for the lost device fails at once or ends failed.
  std::vector<std::uint32_t> got(kCount);
  const cl_int read_b = bounded("a read of a buffer last written on the lost server", 60, [&] {
    return clEnqueueReadBuffer(q1, b.get(), CL_TRUE, 0, kCount * 4, got.data(), 0, nullptr, nullptr);
  });
  EXPECT_NE(read_b, CL_SUCCESS) << "a read from the lost server succeeded";

  // The other server's buffer: every byte as written.
  const cl_int read_a = bounded("a read of the other server's buffer", 60, [&] {
    return clEnqueueReadBuffer(q0, a.get(), CL_TRUE, 0, kCount * 4, got.data(), 0, nullptr, nullptr);
  });
  ASSERT_EQ(read_a, CL_SUCCESS);
  EXPECT_EQ(got, a_bytes);
  // Leaving the scope releases the buffers, queues and context: calls to
  // the lost server too (PoCL 7.1's client waited for them forever).
}

TEST(RemoteServers, ALostServerFailsItsCommandsAndTheOtherKeepsItsBuffers) {
  bounded("the test, releases included", 180, [] {
    lost_server_case();
    return 0;
  });
}

}  // namespace

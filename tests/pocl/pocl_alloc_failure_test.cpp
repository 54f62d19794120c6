// Host memory running out inside memlayer's code in libpocl, through the
// ICD loader: the first commands on a fresh context (its engine, the
// buffer's record, this thread's scratch) meet each of their allocations
// failing in turn. tests/support/alloc_countdown.hpp replaces operator new
// for the whole process, libpocl and its drivers included, and counts this
// thread's allocations only. Each command fails with an OpenCL error or
// succeeds; an exception must never escape through PoCL's C frames (it
// would end the process), and a context that failed once works after.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "alloc_countdown.hpp"
#include "cl_check.hpp"

using namespace memlayer::cltest;
using memlayer::testing::fail_allocation;
using memlayer::testing::stop_failing;

namespace {

bool is_out_of_memory_error(cl_int err) {
  return err == CL_OUT_OF_HOST_MEMORY || err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE;
}

// One try on a fresh context from a fresh thread (its scratch is made at
// its first command too), with allocation `k` of the write and the read
// after it failing: true when one did fail.
bool try_with_failure(cl_device_id device, long k, const std::vector<std::uint8_t>& data) {
  bool hit = false;
  std::thread([&] {
    cl_int err = CL_SUCCESS;
    Context ctx(clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err));
    ASSERT_EQ(err, CL_SUCCESS);
    Queue q(clCreateCommandQueueWithProperties(ctx.get(), device, nullptr, &err));
    ASSERT_EQ(err, CL_SUCCESS);
    Mem buf(clCreateBuffer(ctx.get(), CL_MEM_READ_WRITE, data.size(), nullptr, &err));
    ASSERT_EQ(err, CL_SUCCESS);
    std::vector<std::uint8_t> back(data.size(), 0);
    fail_allocation(k);
    const cl_int write =
        clEnqueueWriteBuffer(q.get(), buf.get(), CL_TRUE, 0, data.size(), data.data(), 0, nullptr, nullptr);
    const cl_int read =
        write == CL_SUCCESS
            ? clEnqueueReadBuffer(q.get(), buf.get(), CL_TRUE, 0, back.size(), back.data(), 0, nullptr, nullptr)
            : CL_SUCCESS;
    hit = stop_failing();
    EXPECT_TRUE(write == CL_SUCCESS || (hit && is_out_of_memory_error(write))) << "allocation " << k << ": write "
                                                                               << write;
    EXPECT_TRUE(read == CL_SUCCESS || (hit && is_out_of_memory_error(read))) << "allocation " << k << ": read "
                                                                             << read;
    // The context works after the failure.
    ASSERT_EQ(clEnqueueWriteBuffer(q.get(), buf.get(), CL_TRUE, 0, data.size(), data.data(), 0, nullptr, nullptr),
              CL_SUCCESS)
        << "allocation " << k;
    ASSERT_EQ(clEnqueueReadBuffer(q.get(), buf.get(), CL_TRUE, 0, back.size(), back.data(), 0, nullptr, nullptr),
              CL_SUCCESS)
        << "allocation " << k;
    EXPECT_EQ(back, data) << "allocation " << k;
    EXPECT_EQ(clFinish(q.get()), CL_SUCCESS);
  }).join();
  return hit;
}

TEST(PoclAllocationFailure, TheFirstCommandsOnAContextFailCleanlyAtEachAllocation) {
  const std::vector<cl_device_id> devices = all_devices();
  ASSERT_FALSE(devices.empty()) << "no OpenCL devices";
  const std::vector<std::uint8_t> data(4096, 7);
  long k = 0;
  while (try_with_failure(devices[0], k, data)) {
    if (HasFailure() || ++k == 100000) break;
  }
  EXPECT_GT(k, 0) << "no allocation of memlayer's failed: the test shows nothing";
  std::printf("%ld allocations failed in turn, each cleanly\n", k);
}

}  // namespace

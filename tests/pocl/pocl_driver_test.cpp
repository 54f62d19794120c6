// The memlayer device driver alone, through the ICD loader, on any PoCL it
// is built into (3.1 or 7.1: nothing here needs memlayer's migration engine
// in PoCL's core). ctest runs it with POCL_DEVICES="memlayer memlayer",
// POCL_MEMLAYER0_PARAMETERS=global_mem=48M,local_mem=32K,compute_units=2,
// POCL_MEMLAYER1_PARAMETERS=global_mem=80M,local_mem=64K,compute_units=3
// and MEMLAYER_EXPECT_POCL_VERSION (e.g. "7.1"), optionally
// MEMLAYER_EXPECT_DEVICE_NAME (a part of CL_DEVICE_NAME): the platform must
// be that PoCL, with two devices that report those parameters, and kernels on both
// devices must compute what the host computes, with data moving between the
// two devices' separate memories by PoCL's own migration.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "cl_check.hpp"

#include <CL/cl_ext.h>  // CL_COMMAND_BUFFER_STATE_KHR

using namespace memlayer::cltest;

namespace {

const char* kSource = R"CLC(
kernel void affine(global uint* dst, global const uint* src, uint mul, uint add) {
  size_t i = get_global_id(0);
  dst[i] = src[i] * mul + add;
}
// Reverses each work-group's slice of src through local memory.
kernel void reverse_groups(global uint* dst, global const uint* src, local uint* scratch) {
  size_t l = get_local_id(0), n = get_local_size(0), g = get_group_id(0);
  scratch[l] = src[g * n + l];
  barrier(CLK_LOCAL_MEM_FENCE);
  dst[g * n + l] = scratch[n - 1 - l];
}
)CLC";

constexpr std::size_t kElements = 1 << 16;
constexpr std::size_t kBytes = kElements * sizeof(std::uint32_t);

std::string text_info(cl_device_id d, cl_device_info what) {
  std::size_t n = 0;
  EXPECT_EQ(clGetDeviceInfo(d, what, 0, nullptr, &n), CL_SUCCESS);
  std::string s(n, '\0');
  EXPECT_EQ(clGetDeviceInfo(d, what, n, s.data(), nullptr), CL_SUCCESS);
  if (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

template <class T>
T info(cl_device_id d, cl_device_info what) {
  T v{};
  EXPECT_EQ(clGetDeviceInfo(d, what, sizeof v, &v, nullptr), CL_SUCCESS);
  return v;
}

class PoclDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    set_ = open_device_set(kSource);
    ASSERT_EQ(set_.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  }
  Mem buffer(cl_mem_flags flags = CL_MEM_READ_WRITE, void* host = nullptr) {
    cl_int err = CL_SUCCESS;
    Mem m(clCreateBuffer(set_.ctx.get(), flags, kBytes, host, &err));
    EXPECT_EQ(err, CL_SUCCESS);
    return m;
  }
  Kernel kernel(const char* name) {
    cl_int err = CL_SUCCESS;
    Kernel k(clCreateKernel(set_.program.get(), name, &err));
    EXPECT_EQ(err, CL_SUCCESS);
    return k;
  }
  cl_command_queue queue(unsigned device) { return set_.queues[device].get(); }

  DeviceSet set_;
};

TEST_F(PoclDriver, IsTheExpectedPoclWithTwoMemlayerDevices) {
  cl_platform_id platform = nullptr;
  ASSERT_EQ(clGetDeviceInfo(set_.devices[0], CL_DEVICE_PLATFORM, sizeof platform, &platform, nullptr), CL_SUCCESS);
  std::size_t n = 0;
  ASSERT_EQ(clGetPlatformInfo(platform, CL_PLATFORM_VERSION, 0, nullptr, &n), CL_SUCCESS);
  std::string version(n, '\0');
  ASSERT_EQ(clGetPlatformInfo(platform, CL_PLATFORM_VERSION, n, version.data(), nullptr), CL_SUCCESS);
  if (const char* expected = std::getenv("MEMLAYER_EXPECT_POCL_VERSION")) {
    EXPECT_NE(version.find(std::string("PoCL ") + expected), std::string::npos) << version;
  }
  for (cl_device_id d : set_.devices) {
    const std::string name = text_info(d, CL_DEVICE_NAME);
    EXPECT_FALSE(name.empty());
    // PoCL 7.1 names a CPU device <driver>-<cpu>-<model>.
    if (const char* expected = std::getenv("MEMLAYER_EXPECT_DEVICE_NAME")) {
      EXPECT_NE(name.find(expected), std::string::npos) << name;
    }
    EXPECT_EQ(info<cl_bool>(d, CL_DEVICE_AVAILABLE), static_cast<cl_bool>(CL_TRUE));
    // Memory of its own: coarse-grained buffer SVM only (doc/svm.md).
    EXPECT_EQ(info<cl_device_svm_capabilities>(d, CL_DEVICE_SVM_CAPABILITIES),
              static_cast<cl_device_svm_capabilities>(CL_DEVICE_SVM_COARSE_GRAIN_BUFFER));
    EXPECT_EQ(info<cl_device_local_mem_type>(d, CL_DEVICE_LOCAL_MEM_TYPE),
              static_cast<cl_device_local_mem_type>(CL_LOCAL));
  }
}

TEST_F(PoclDriver, EachDeviceReportsItsOwnParameters) {
  // POCL_MEMLAYER0_PARAMETERS and POCL_MEMLAYER1_PARAMETERS (file comment).
  EXPECT_EQ(info<cl_ulong>(set_.devices[0], CL_DEVICE_GLOBAL_MEM_SIZE), cl_ulong{48} << 20);
  EXPECT_EQ(info<cl_ulong>(set_.devices[0], CL_DEVICE_LOCAL_MEM_SIZE), cl_ulong{32} << 10);
  EXPECT_EQ(info<cl_uint>(set_.devices[0], CL_DEVICE_MAX_COMPUTE_UNITS), 2u);
  EXPECT_EQ(info<cl_ulong>(set_.devices[1], CL_DEVICE_GLOBAL_MEM_SIZE), cl_ulong{80} << 20);
  EXPECT_EQ(info<cl_ulong>(set_.devices[1], CL_DEVICE_LOCAL_MEM_SIZE), cl_ulong{64} << 10);
  EXPECT_EQ(info<cl_uint>(set_.devices[1], CL_DEVICE_MAX_COMPUTE_UNITS), 3u);
  // OpenCL's floor for the largest allocation: min(memory, max(memory / 4, 128 MiB)).
  EXPECT_EQ(info<cl_ulong>(set_.devices[1], CL_DEVICE_MAX_MEM_ALLOC_SIZE), cl_ulong{80} << 20);
}

TEST_F(PoclDriver, KernelsOnBothDevicesComputeWhatTheHostDoes) {
  std::vector<std::uint32_t> input(kElements);
  std::iota(input.begin(), input.end(), 7u);
  Mem a = buffer(CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, input.data());
  Mem b = buffer();
  Mem c = buffer();
  Kernel affine = kernel("affine");
  Kernel reverse = kernel("reverse_groups");

  // Device 0: b = a * 3 + 5.
  const cl_uint mul = 3, add = 5;
  cl_mem am = a.get(), bm = b.get(), cm = c.get();
  ASSERT_EQ(clSetKernelArg(affine.get(), 0, sizeof bm, &bm), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 1, sizeof am, &am), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 2, sizeof mul, &mul), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 3, sizeof add, &add), CL_SUCCESS);
  const std::size_t global = kElements, local = 64;
  Event first;
  ASSERT_EQ(clEnqueueNDRangeKernel(queue(0), affine.get(), 1, nullptr, &global, &local, 0, nullptr, first.out()),
            CL_SUCCESS);

  // Device 1, after it: c = each 64-element group of b reversed, through
  // local memory; b moves from device 0's memory to device 1's.
  ASSERT_EQ(clSetKernelArg(reverse.get(), 0, sizeof cm, &cm), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(reverse.get(), 1, sizeof bm, &bm), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(reverse.get(), 2, local * sizeof(cl_uint), nullptr), CL_SUCCESS);
  cl_event wait = first.get();
  ASSERT_EQ(clEnqueueNDRangeKernel(queue(1), reverse.get(), 1, nullptr, &global, &local, 1, &wait, nullptr),
            CL_SUCCESS);

  std::vector<std::uint32_t> got_b(kElements), got_c(kElements);
  ASSERT_EQ(clEnqueueReadBuffer(queue(1), c.get(), CL_TRUE, 0, kBytes, got_c.data(), 0, nullptr, nullptr), CL_SUCCESS);
  ASSERT_EQ(clEnqueueReadBuffer(queue(0), b.get(), CL_TRUE, 0, kBytes, got_b.data(), 0, nullptr, nullptr), CL_SUCCESS);
  std::size_t wrong_b = 0, wrong_c = 0;
  for (std::size_t i = 0; i < kElements; ++i) {
    const std::uint32_t want_b = input[i] * mul + add;
    const std::size_t group = i / local, mirrored = group * local + (local - 1 - i % local);
    if (got_b[i] != want_b) ++wrong_b;
    if (got_c[i] != input[mirrored] * mul + add) ++wrong_c;
  }
  EXPECT_EQ(wrong_b, 0u);
  EXPECT_EQ(wrong_c, 0u);
}

TEST_F(PoclDriver, DataWrittenOnOneDeviceIsReadOnTheOtherAndBack) {
  std::vector<std::uint32_t> pattern(kElements);
  std::iota(pattern.begin(), pattern.end(), 1000u);
  Mem m = buffer();
  // Written through device 0's queue, changed by a kernel on device 1 in
  // place (affine x1 +1), read through device 0's queue.
  ASSERT_EQ(clEnqueueWriteBuffer(queue(0), m.get(), CL_TRUE, 0, kBytes, pattern.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  Kernel affine = kernel("affine");
  cl_mem mm = m.get();
  const cl_uint one = 1;
  ASSERT_EQ(clSetKernelArg(affine.get(), 0, sizeof mm, &mm), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 1, sizeof mm, &mm), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 2, sizeof one, &one), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 3, sizeof one, &one), CL_SUCCESS);
  const std::size_t global = kElements;
  ASSERT_EQ(clEnqueueNDRangeKernel(queue(1), affine.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
            CL_SUCCESS);
  ASSERT_EQ(clFinish(queue(1)), CL_SUCCESS);
  std::vector<std::uint32_t> got(kElements);
  ASSERT_EQ(clEnqueueReadBuffer(queue(0), m.get(), CL_TRUE, 0, kBytes, got.data(), 0, nullptr, nullptr), CL_SUCCESS);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kElements; ++i)
    if (got[i] != pattern[i] + 1) ++wrong;
  EXPECT_EQ(wrong, 0u);
}

// A command whose own buffers cannot all be placed on the device fails at
// enqueue with CL_MEM_OBJECT_ALLOCATION_FAILURE, OpenCL's name for it
// (PoCL 7.1 said CL_OUT_OF_RESOURCES:
// patches/pocl-7.1-allocation-failure-is-named.patch), and the buffers
// serve the next command that fits.
TEST_F(PoclDriver, ACommandWhoseBuffersCannotFitFailsWithAnAllocationFailure) {
  cl_ulong memory = 0;
  ASSERT_EQ(clGetDeviceInfo(set_.devices[0], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof memory, &memory, nullptr), CL_SUCCESS);
  cl_ulong largest = 0;
  ASSERT_EQ(clGetDeviceInfo(set_.devices[0], CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof largest, &largest, nullptr),
            CL_SUCCESS);
  // Two buffers, each allowed, together larger than device 0.
  const std::size_t each = static_cast<std::size_t>(std::min(largest, memory / 2 + (memory / 8)));
  ASSERT_GT(2 * each, memory);
  cl_int err = CL_SUCCESS;
  Mem a(clCreateBuffer(set_.ctx.get(), CL_MEM_READ_WRITE, each, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem b(clCreateBuffer(set_.ctx.get(), CL_MEM_READ_WRITE, each, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  cl_event e = nullptr;
  EXPECT_EQ(clEnqueueCopyBuffer(queue(0), a.get(), b.get(), 0, 0, each, 0, nullptr, &e),
            CL_MEM_OBJECT_ALLOCATION_FAILURE);
  EXPECT_EQ(e, nullptr);
  // Device 1 has room for both.
  const std::uint32_t seven = 7;
  ASSERT_EQ(clEnqueueFillBuffer(queue(1), a.get(), &seven, sizeof seven, 0, 4096, 0, nullptr, nullptr), CL_SUCCESS);
  ASSERT_EQ(clEnqueueCopyBuffer(queue(1), a.get(), b.get(), 0, 0, 4096, 0, nullptr, nullptr), CL_SUCCESS);
  std::vector<std::uint32_t> got(1024, 0);
  ASSERT_EQ(clEnqueueReadBuffer(queue(1), b.get(), CL_TRUE, 0, 4096, got.data(), 0, nullptr, nullptr), CL_SUCCESS);
  EXPECT_EQ(got, std::vector<std::uint32_t>(1024, 7));
}

// A mapping the host may read and write, changed and unmapped on device 0,
// is what device 1 reads next: the unmap writes the mapping back, so it is
// a write (for images PoCL 7.1 lost it: pocl_image_test.cpp,
// patches/pocl-7.1-read-write-map-is-a-write.patch).
TEST_F(PoclDriver, AReadWriteMapOnOneDeviceIsSeenOnTheOther) {
  std::vector<std::uint32_t> pattern(kElements);
  std::iota(pattern.begin(), pattern.end(), 7u);
  Mem m = buffer(CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, pattern.data());
  cl_int err = CL_SUCCESS;
  auto* p = static_cast<std::uint32_t*>(clEnqueueMapBuffer(queue(0), m.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                                           kBytes, 0, nullptr, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  for (std::size_t i = 0; i < kElements; ++i) {
    EXPECT_EQ(p[i], pattern[i]);
    p[i] = pattern[i] = pattern[i] * 3 + 1;
  }
  ASSERT_EQ(clEnqueueUnmapMemObject(queue(0), m.get(), p, 0, nullptr, nullptr), CL_SUCCESS);
  ASSERT_EQ(clFinish(queue(0)), CL_SUCCESS);
  std::vector<std::uint32_t> got(kElements);
  ASSERT_EQ(clEnqueueReadBuffer(queue(1), m.get(), CL_TRUE, 0, kBytes, got.data(), 0, nullptr, nullptr), CL_SUCCESS);
  EXPECT_EQ(got, pattern);
}

// A buffer made from host memory, cut into four quarter sub-buffers; a kernel
// on device 0 changes the third quarter in place; the whole buffer is read
// back. PoCL 7.1's own migration loses that write: to read the parent it
// builds an implicit sub-buffer over [half, end), which covers the user's
// third and fourth quarters, and migrates it from the stale host copy onto
// the device's fresh data (POCL_DEBUG=memory shows the piece).
// memlayer's engine (7.1's core too) loses nothing. With
// MEMLAYER_EXPECT_SUB_BUFFER_LOSS=1 (pocl71_driver_own_engine: PoCL 7.1's
// own engine, POCL_MEMLAYER_MIGRATION=0) the test asserts that loss
// instead, so that it fails, and says so, should 7.1's engine stop losing.
TEST_F(PoclDriver, AKernelsWriteToASubBufferIsReadThroughItsParent) {
  std::vector<std::uint32_t> model(kElements);
  std::iota(model.begin(), model.end(), 0u);
  Mem parent = buffer(CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, model.data());
  const std::size_t quarter = kElements / 4;
  std::vector<Mem> quarters;
  for (std::size_t q = 0; q < 4; ++q) {
    cl_buffer_region r{q * quarter * sizeof(std::uint32_t), quarter * sizeof(std::uint32_t)};
    cl_int err = CL_SUCCESS;
    quarters.emplace_back(
        clCreateSubBuffer(parent.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err));
    ASSERT_EQ(err, CL_SUCCESS);
  }
  Kernel affine = kernel("affine");
  cl_mem third = quarters[2].get();
  const cl_uint mul = 1, add = 1000000;
  ASSERT_EQ(clSetKernelArg(affine.get(), 0, sizeof third, &third), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 1, sizeof third, &third), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 2, sizeof mul, &mul), CL_SUCCESS);
  ASSERT_EQ(clSetKernelArg(affine.get(), 3, sizeof add, &add), CL_SUCCESS);
  ASSERT_EQ(clEnqueueNDRangeKernel(queue(0), affine.get(), 1, nullptr, &quarter, nullptr, 0, nullptr, nullptr),
            CL_SUCCESS);
  ASSERT_EQ(clFinish(queue(0)), CL_SUCCESS);
  for (std::size_t i = 2 * quarter; i < 3 * quarter; ++i) model[i] += add;

  std::vector<std::uint32_t> got(kElements);
  ASSERT_EQ(clEnqueueReadBuffer(queue(1), parent.get(), CL_TRUE, 0, kBytes, got.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kElements; ++i)
    if (got[i] != model[i]) ++wrong;
  const char* expect_loss = std::getenv("MEMLAYER_EXPECT_SUB_BUFFER_LOSS");
  if (expect_loss != nullptr && std::string(expect_loss) == "1") {
    EXPECT_GT(wrong, 0u) << "PoCL's migration no longer loses the sub-buffer write: "
                            "drop MEMLAYER_EXPECT_SUB_BUFFER_LOSS from this test's ctest entry";
  } else {
    EXPECT_EQ(wrong, 0u);
  }
}

// What a sub-buffer step moves, and that nothing is lost, in a context whose
// devices all honour byte-range migrations (memlayer's engine moves the
// sub-buffer's bytes) and in one with a device that moves whole buffers
// whatever range it is given (MEMLAYER_EXPECT_WHOLE_BUFFERS=1: the
// pocl71_driver_device_without_ranges entry, device 1 with
// migration_ranges=0): there the engine plans whole buffers for every
// device (doc/pocl-driver.md, the capability), so the same steps move whole
// parents, into and out of that device. Skipped where libpocl has no
// migration counters or runs PoCL's own engine.
TEST_F(PoclDriver, ASubBufferStepMovesWhatItsContextsDevicesCanMove) {
  const char* whole_env = std::getenv("MEMLAYER_EXPECT_WHOLE_BUFFERS");
  const bool whole = whole_env != nullptr && std::string(whole_env) == "1";
  const char* own = std::getenv("POCL_MEMLAYER_MIGRATION");
  const bool own_engine = (own != nullptr && std::string(own) == "0") || !find_migration_stats();
  // The ctest entry that sets MEMLAYER_EXPECT_WHOLE_BUFFERS runs this test for
  // it: a run without memlayer's engine there must not pass as a skip.
  if (own_engine && whole) FAIL() << "MEMLAYER_EXPECT_WHOLE_BUFFERS set, but memlayer's engine (its counters) is not there";
  if (own_engine) GTEST_SKIP() << "not memlayer's engine";
  std::vector<std::uint32_t> model(kElements);
  std::iota(model.begin(), model.end(), 0u);
  Mem parent = buffer(CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, model.data());
  const std::size_t quarter = kElements / 4, quarter_bytes = kBytes / 4;
  std::vector<Mem> quarters;
  for (std::size_t q = 0; q < 4; ++q) {
    cl_buffer_region r{q * quarter_bytes, quarter_bytes};
    cl_int err = CL_SUCCESS;
    quarters.emplace_back(clCreateSubBuffer(parent.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err));
    ASSERT_EQ(err, CL_SUCCESS);
  }
  Kernel affine = kernel("affine");
  // A kernel adding `add` to quarter q on device d.
  auto step = [&](unsigned d, std::size_t q, cl_uint add) {
    cl_mem m = quarters[q].get();
    const cl_uint mul = 1;
    ASSERT_EQ(clSetKernelArg(affine.get(), 0, sizeof m, &m), CL_SUCCESS);
    ASSERT_EQ(clSetKernelArg(affine.get(), 1, sizeof m, &m), CL_SUCCESS);
    ASSERT_EQ(clSetKernelArg(affine.get(), 2, sizeof mul, &mul), CL_SUCCESS);
    ASSERT_EQ(clSetKernelArg(affine.get(), 3, sizeof add, &add), CL_SUCCESS);
    ASSERT_EQ(clEnqueueNDRangeKernel(queue(d), affine.get(), 1, nullptr, &quarter, nullptr, 0, nullptr, nullptr),
              CL_SUCCESS);
    ASSERT_EQ(clFinish(queue(d)), CL_SUCCESS);
    for (std::size_t i = q * quarter; i < (q + 1) * quarter; ++i) model[i] += add;
  };
  const std::uint64_t expected = whole ? kBytes : quarter_bytes;

  // Into device 0 (it honours ranges) from the host copy.
  migration_stats(true);
  step(0, 2, 1000);
  EXPECT_EQ(migration_stats(true).moved(), expected) << "into device 0";
  // Into device 1 (without ranges in the whole-buffer run) from device 0.
  step(1, 2, 20000);
  EXPECT_EQ(migration_stats(true).moved(), expected) << "into device 1";
  // Out of device 1 into device 0.
  step(0, 2, 300000);
  EXPECT_EQ(migration_stats(true).moved(), expected) << "out of device 1";
  // Device 1 holds the rest complete: a step on another quarter there.
  step(1, 0, 4000000);

  std::vector<std::uint32_t> got(kElements);
  ASSERT_EQ(clEnqueueReadBuffer(queue(0), parent.get(), CL_TRUE, 0, kBytes, got.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(got, model);
  ASSERT_EQ(clEnqueueReadBuffer(queue(1), parent.get(), CL_TRUE, 0, kBytes, got.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(got, model);
}

// A command buffer (cl_khr_command_buffer, in PoCL's core) is executable
// again as soon as its run's event reads complete. PoCL 3.1 made it so in a
// callback run afterwards, PoCL 7.1 after publishing the status: a thread
// enqueuing it again on seeing the event complete was refused with
// CL_INVALID_OPERATION, here in about 1 run of 20, on PoCL's own CPU device
// too (PoCL 7.1's test_command_buffer failed that way, at random).
// patches/pocl-3.1- and pocl-7.1-command-buffer-is-executable-when-it-completes.patch.
TEST_F(PoclDriver, ACommandBufferIsExecutableAgainOnceItsRunReadsComplete) {
  const auto api = CommandBufferKhr::load(set_.devices[0]);
  ASSERT_TRUE(api) << "PoCL's core offers cl_khr_command_buffer on every device";
  using CommandBuffer = CommandBufferKhr::Buffer;
  const auto create = api->create;
  const auto finalize = api->finalize;
  const auto enqueue = api->enqueue;
  const auto get_info = api->get_info;
  const auto release = api->release;

  Mem b = buffer();
  cl_command_queue q = queue(0);
  cl_int err = CL_SUCCESS;
  CommandBuffer recorded = create(1, &q, nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  const std::uint32_t pattern = 0x5a0f5a0fu;
  err = api->with_properties
            ? reinterpret_cast<CommandBufferKhr::FillWithProperties>(api->fill)(
                  recorded, nullptr, nullptr, b.get(), &pattern, sizeof pattern, 0, kBytes, 0, nullptr, nullptr, nullptr)
            : reinterpret_cast<CommandBufferKhr::Fill>(api->fill)(recorded, nullptr, b.get(), &pattern, sizeof pattern,
                                                                   0, kBytes, 0, nullptr, nullptr, nullptr);
  ASSERT_EQ(err, CL_SUCCESS);
  ASSERT_EQ(finalize(recorded), CL_SUCCESS);

  constexpr int kRuns = 2000;
  int refused = 0, pending = 0;
  for (int run = 0; run < kRuns; ++run) {
    cl_event done = nullptr;
    const cl_int enqueued = enqueue(0, nullptr, recorded, 0, nullptr, &done);
    if (enqueued == CL_INVALID_OPERATION) {
      ++refused;
      ASSERT_EQ(clFinish(q), CL_SUCCESS);
      continue;
    }
    ASSERT_EQ(enqueued, CL_SUCCESS) << "run " << run;
    // Polled, not waited for: the enqueue below follows the status at once.
    cl_int status = CL_QUEUED;
    while (status > CL_COMPLETE) {
      ASSERT_EQ(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr), CL_SUCCESS);
    }
    ASSERT_EQ(clReleaseEvent(done), CL_SUCCESS);
    ASSERT_EQ(status, CL_COMPLETE) << "run " << run;
    cl_uint state = 0;
    ASSERT_EQ(get_info(recorded, CL_COMMAND_BUFFER_STATE_KHR, sizeof state, &state, nullptr), CL_SUCCESS);
    if (state != CL_COMMAND_BUFFER_STATE_EXECUTABLE_KHR) ++pending;
  }
  EXPECT_EQ(refused, 0) << "enqueues refused of " << kRuns;
  EXPECT_EQ(pending, 0) << "runs whose buffer was still pending once complete, of " << kRuns;
  ASSERT_EQ(release(recorded), CL_SUCCESS);
  std::vector<std::uint32_t> got(kElements);
  ASSERT_EQ(clEnqueueReadBuffer(q, b.get(), CL_TRUE, 0, kBytes, got.data(), 0, nullptr, nullptr), CL_SUCCESS);
  EXPECT_EQ(std::count(got.begin(), got.end(), pattern), static_cast<long>(kElements));
}

}  // namespace

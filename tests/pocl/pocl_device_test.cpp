// The memlayer PoCL device through the ICD loader: what it reports, and
// its failure paths (device memory full, local memory exceeded). ctest runs
// it with POCL_DEVICES=memlayer and
// POCL_MEMLAYER0_PARAMETERS=global_mem=64M,local_mem=32K,compute_units=2.
#include <gtest/gtest.h>

#include <numeric>
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
  EXPECT_EQ(info<cl_device_svm_capabilities>(CL_DEVICE_SVM_CAPABILITIES), 0u);
}

TEST_F(PoclDevice, FullMemoryFailsTheEnqueueCleanlyAndRecovers) {
  constexpr std::size_t kBlock = 16 << 20;  // four fill the device
  std::vector<Mem> bufs;
  for (int i = 0; i < 5; ++i) bufs.push_back(buffer(kBlock));
  for (std::uint32_t i = 0; i < 4; ++i) ASSERT_EQ(write_pattern(bufs[i].get(), kBlock, i * 1000), CL_SUCCESS);
  // The fifth gets its device memory at its first command: there is none left.
  EXPECT_EQ(write_pattern(bufs[4].get(), kBlock, 4000), CL_MEM_OBJECT_ALLOCATION_FAILURE);
  EXPECT_EQ(write_pattern(bufs[4].get(), kBlock, 4000), CL_MEM_OBJECT_ALLOCATION_FAILURE);  // and again
  for (std::uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(has_pattern(bufs[i].get(), kBlock, i * 1000)) << i;
  bufs[0].reset();  // its memory goes back to the device
  ASSERT_EQ(write_pattern(bufs[4].get(), kBlock, 4000), CL_SUCCESS);
  EXPECT_TRUE(has_pattern(bufs[4].get(), kBlock, 4000));
  for (std::uint32_t i = 1; i < 4; ++i) EXPECT_TRUE(has_pattern(bufs[i].get(), kBlock, i * 1000)) << i;
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

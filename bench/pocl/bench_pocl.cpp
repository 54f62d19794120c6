// PoCL's pthread device against memlayer devices on the same OpenCL
// workloads, side by side in one run. Run with
//   POCL_DEVICES="pthread memlayer memlayer" (./memlayer bench-pocl does)
// Device 0 is then pthread, 1 and 2 memlayer. Each benchmark takes the
// device index as its argument; the ping-pong needs the two memlayer ones.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "cl_check.hpp"

namespace {

using namespace memlayer::cltest;

const char* kSource = R"CLC(
kernel void touch(global uint* b) { b[get_global_id(0)] += 1u; }
kernel void args16(global uint* a0, global uint* a1, global uint* a2, global uint* a3,
                   global uint* a4, global uint* a5, global uint* a6, global uint* a7,
                   global uint* a8, global uint* a9, global uint* a10, global uint* a11,
                   global uint* a12, global uint* a13, global uint* a14, global uint* a15) {
  size_t i = get_global_id(0);
  a0[i] += a1[i] + a2[i] + a3[i] + a4[i] + a5[i] + a6[i] + a7[i]
         + a8[i] + a9[i] + a10[i] + a11[i] + a12[i] + a13[i] + a14[i] + a15[i];
}
)CLC";

DeviceSet& setup() {
  static DeviceSet s = open_device_set(kSource);
  return s;
}

std::string device_label(std::size_t i) {
  char name[256] = {};
  clGetDeviceInfo(setup().devices[i], CL_DEVICE_NAME, sizeof name - 1, name, nullptr);
  return std::string(name).rfind("memlayer", 0) == 0 ? "memlayer" : "pthread";
}

Mem make_buffer(std::size_t bytes) {
  cl_int err = CL_SUCCESS;
  Mem m(clCreateBuffer(setup().ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  check(err, "clCreateBuffer");
  return m;
}

// Create, first use (a 64 KiB write that makes the device allocate), release.
void BM_BufferChurn(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0));
  state.SetLabel(device_label(d));
  std::vector<char> data(64 << 10, 1);
  for (auto _ : state) {
    Mem m = make_buffer(data.size());
    CL_CHECK(clEnqueueWriteBuffer(setup().queues[d].get(), m.get(), CL_TRUE, 0, data.size(), data.data(), 0, nullptr,
                                  nullptr));
  }
  state.SetItemsProcessed(state.iterations());
}

// Small commands back to back: a 64-byte fill each, a clFinish every 256.
void BM_SmallCommand(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0));
  state.SetLabel(device_label(d));
  Mem m = make_buffer(4096);
  const cl_uint pattern = 7;
  cl_command_queue q = setup().queues[d].get();
  std::size_t n = 0;
  for (auto _ : state) {
    CL_CHECK(clEnqueueFillBuffer(q, m.get(), &pattern, sizeof pattern, (n % 64) * 64, 64, 0, nullptr, nullptr));
    if (++n % 256 == 0) CL_CHECK(clFinish(q));
  }
  CL_CHECK(clFinish(q));
  state.SetItemsProcessed(state.iterations());
}

// A kernel with 16 buffer arguments, 64 work-items; a clFinish every 64.
void BM_Kernel16Buffers(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0));
  state.SetLabel(device_label(d));
  cl_int err = CL_SUCCESS;
  Kernel k(clCreateKernel(setup().program.get(), "args16", &err));
  check(err, "clCreateKernel");
  std::vector<Mem> bufs;
  for (cl_uint i = 0; i < 16; ++i) {
    bufs.push_back(make_buffer(64 * 4));
    cl_mem m = bufs.back().get();
    CL_CHECK(clSetKernelArg(k.get(), i, sizeof m, &m));
  }
  cl_command_queue q = setup().queues[d].get();
  const std::size_t global = 64;
  std::size_t n = 0;
  for (auto _ : state) {
    CL_CHECK(clEnqueueNDRangeKernel(q, k.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr));
    if (++n % 64 == 0) CL_CHECK(clFinish(q));
  }
  CL_CHECK(clFinish(q));
  state.SetItemsProcessed(state.iterations());
}

// A buffer written by a kernel on device 1, then on device 2, and so on:
// every step migrates the whole buffer (PoCL versions whole buffers) from
// one memlayer device to the other (migrate_d2d).
void BM_PingPong(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  if (setup().devices.size() < 3) {
    state.SkipWithError("needs POCL_DEVICES=\"pthread memlayer memlayer\"");
    return;
  }
  cl_int err = CL_SUCCESS;
  Kernel k(clCreateKernel(setup().program.get(), "touch", &err));
  check(err, "clCreateKernel");
  Mem m = make_buffer(bytes);
  cl_mem mm = m.get();
  CL_CHECK(clSetKernelArg(k.get(), 0, sizeof mm, &mm));
  const std::size_t global = 1;  // the kernel touches one element: the time is the migration
  std::size_t side = 1;
  CL_CHECK(clEnqueueNDRangeKernel(setup().queues[side].get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr,
                                  nullptr));
  CL_CHECK(clFinish(setup().queues[side].get()));
  for (auto _ : state) {
    side = 3 - side;
    CL_CHECK(clEnqueueNDRangeKernel(setup().queues[side].get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr,
                                    nullptr));
    CL_CHECK(clFinish(setup().queues[side].get()));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// What the machine's memcpy moves, for the ping-pong's ratio.
void BM_Memcpy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

BENCHMARK(BM_BufferChurn)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_SmallCommand)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_Kernel16Buffers)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_PingPong)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();
BENCHMARK(BM_Memcpy)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();

}  // namespace


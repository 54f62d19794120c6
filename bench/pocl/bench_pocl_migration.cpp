// PoCL's two migration engines on the same build: memlayer's byte-range
// engine (POCL_MEMLAYER_MIGRATION=1) and PoCL's own whole-buffer versions
// (=0). One process runs one engine; `./memlayer bench-pocl-migration` runs
// the binary once per engine, on four memlayer devices:
//   POCL_DEVICES="memlayer memlayer memlayer memlayer"
//
// - KernelEnqueue/N: the cost of clEnqueueNDRangeKernel with N buffer
//   arguments already valid on the device (the planner's per-argument cost;
//   nothing migrates). Only the enqueue calls are timed: the kernels wait on
//   a user event until the timing stops.
// - SubBufferPingPong/S: a kernel changes one S-byte sub-buffer of a 64 MiB
//   parent on device 0, then on device 1, and so on. bytes_moved is what
//   the migration commands moved per step, each byte once whatever its path
//   (MigrationStats::moved; memlayer: S; PoCL 3.1: the parent).
// - FanOut: a 16 MiB buffer written on device 0 is read by kernels on
//   devices 1-3 at once: how long until all three have it.
// - EnqueueBehindQueued/D: 64 enqueues of a kernel reading 16 buffers
//   (`global const`, CL_MEM_READ_ONLY), with D such kernels already queued
//   on them behind a user event: the cost must not grow with D.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "cl_check.hpp"

namespace {

using namespace memlayer::cltest;

// kN: N buffer arguments; each work-item adds one to the first.
std::string kernel_source() {
  std::string src = R"CLC(
kernel void touch(global uint* b) { b[get_global_id(0)] += 1u; }
kernel void peek(global const uint* b, global uint* out) { out[0] = b[get_global_id(0)]; }
)CLC";
  src += "kernel void r16(";
  for (int i = 0; i < 16; ++i) src += (i ? ", " : "") + std::string("global const uint* a") + std::to_string(i);
  src += ") {}\n";
  for (int n : {1, 4, 16, 64}) {
    src += "kernel void k" + std::to_string(n) + "(";
    for (int i = 0; i < n; ++i) src += (i ? ", " : "") + std::string("global uint* a") + std::to_string(i);
    src += ") { a0[get_global_id(0)] += 1u; }\n";
  }
  return src;
}

DeviceSet& setup() {
  static DeviceSet s = open_device_set(kernel_source().c_str());
  return s;
}

std::string engine() {
  const char* v = std::getenv("POCL_MEMLAYER_MIGRATION");
  return v != nullptr && std::string(v) == "0" ? "pocl engine" : "memlayer engine";
}

bool enough_devices(benchmark::State& state, std::size_t n) {
  if (setup().devices.size() >= n) return true;
  state.SkipWithError("needs POCL_DEVICES with 4 memlayer devices");
  return false;
}

Mem make_buffer(std::size_t bytes, cl_mem_flags flags = CL_MEM_READ_WRITE) {
  cl_int err = CL_SUCCESS;
  Mem m(clCreateBuffer(setup().ctx.get(), flags, bytes, nullptr, &err));
  check(err, "clCreateBuffer");
  return m;
}

Kernel make_kernel(const std::string& name) {
  cl_int err = CL_SUCCESS;
  Kernel k(clCreateKernel(setup().program.get(), name.c_str(), &err));
  check(err, "clCreateKernel");
  return k;
}

// Kernel `name` over `n` new buffers of 64 uints (`flags`), run once on
// device 0: every buffer is then valid there, and nothing migrates after.
Kernel kernel_on_device(const std::string& name, cl_uint n, cl_mem_flags flags, std::vector<Mem>& bufs) {
  Kernel k = make_kernel(name);
  for (cl_uint i = 0; i < n; ++i) {
    bufs.push_back(make_buffer(64 * 4, flags));
    cl_mem m = bufs.back().get();
    CL_CHECK(clSetKernelArg(k.get(), i, sizeof m, &m));
  }
  cl_command_queue q = setup().queues[0].get();
  const std::size_t global = 64;
  CL_CHECK(clEnqueueNDRangeKernel(q, k.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr));
  CL_CHECK(clFinish(q));
  return k;
}

// Times batches of 64 enqueues of `k` (64 work-items) on device 0, held
// back by a user event with `depth` more enqueued before each batch,
// untimed: only the enqueue calls are timed, not the kernels. Each
// enqueue names the event (`all_gated`: readers never wait for each other,
// so each must), else only the first of the batch.
void time_enqueues(benchmark::State& state, const Kernel& k, int depth, bool all_gated) {
  cl_command_queue q = setup().queues[0].get();
  const std::size_t global = 64;
  constexpr int kBatch = 64;
  for (auto _ : state) {
    cl_int err = CL_SUCCESS;
    Event gate(clCreateUserEvent(setup().ctx.get(), &err));
    check(err, "clCreateUserEvent");
    cl_event g = gate.get();
    auto enqueue = [&](bool gated) {
      CL_CHECK(clEnqueueNDRangeKernel(q, k.get(), 1, nullptr, &global, nullptr, gated ? 1 : 0, gated ? &g : nullptr,
                                      nullptr));
    };
    for (int i = 0; i < depth; ++i) enqueue(true);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) enqueue(all_gated || i == 0);
    const auto stop = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
    CL_CHECK(clSetUserEventStatus(g, CL_COMPLETE));
    CL_CHECK(clFinish(q));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_KernelEnqueue(benchmark::State& state) {
  const auto n = static_cast<cl_uint>(state.range(0));
  state.SetLabel(engine());
  std::vector<Mem> bufs;
  const Kernel k = kernel_on_device("k" + std::to_string(n), n, CL_MEM_READ_WRITE, bufs);
  time_enqueues(state, k, 0, false);
}

void BM_EnqueueBehindQueued(benchmark::State& state) {
  state.SetLabel(engine());
  std::vector<Mem> bufs;
  const Kernel k = kernel_on_device("r16", 16, CL_MEM_READ_ONLY, bufs);
  time_enqueues(state, k, static_cast<int>(state.range(0)), true);
}

// Total CPU per kernel, not only its enqueue: batches of 256 small kernels
// (64 work-items, N buffer arguments valid on the device: nothing
// migrates) on device 0's in-order queue, each batch ended by clFinish.
// Wall time, and the whole process's CPU time (user + system, every
// thread: PoCL's device workers too), so that cost moved to another thread
// still counts: CPU per kernel = the CPU column / 256.
void BM_KernelStream(benchmark::State& state) {
  const auto n = static_cast<cl_uint>(state.range(0));
  state.SetLabel(engine());
  std::vector<Mem> bufs;
  const Kernel k = kernel_on_device("k" + std::to_string(n), n, CL_MEM_READ_WRITE, bufs);
  cl_command_queue q = setup().queues[0].get();
  const std::size_t global = 64;
  constexpr int kBatch = 256;
  (void)find_migration_stats(true);
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i)
      CL_CHECK(clEnqueueNDRangeKernel(q, k.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr));
    CL_CHECK(clFinish(q));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  // The share of enqueues memlayer's engine took by its fast path (0 under
  // PoCL's own engine, which counts none).
  if (const auto st = find_migration_stats(); st && st->enqueues != 0)
    state.counters["fast_path_share"] = static_cast<double>(st->fast_path_enqueues) / static_cast<double>(st->enqueues);
}

// Enqueues from several threads at once on device 0, each with its own
// in-order queue, kernel object and 16 buffers (disjoint: nothing orders
// one thread's commands after another's): batches of 64 kernels, each
// ended by clFinish. Kernels per second over all threads (wall time) says
// how enqueueing scales; on a 2-core machine, past 2 threads they share a
// core with PoCL's device workers.
void BM_KernelEnqueueThreads(benchmark::State& state) {
  state.SetLabel(engine());
  std::vector<Mem> bufs;
  const Kernel k = kernel_on_device("k16", 16, CL_MEM_READ_WRITE, bufs);
  cl_int err = CL_SUCCESS;
  Queue q(clCreateCommandQueueWithProperties(setup().ctx.get(), setup().devices[0], nullptr, &err));
  check(err, "clCreateCommandQueueWithProperties");
  const std::size_t global = 64;
  constexpr int kBatch = 64;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i)
      CL_CHECK(clEnqueueNDRangeKernel(q.get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr, nullptr));
    CL_CHECK(clFinish(q.get()));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_SubBufferPingPong(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  state.SetLabel(engine());
  if (!enough_devices(state, 2)) return;
  constexpr std::size_t kParent = 64 << 20;
  Mem parent = make_buffer(kParent);
  cl_int err = CL_SUCCESS;
  cl_buffer_region region{kParent / 2, bytes};
  Mem sub(clCreateSubBuffer(parent.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err));
  check(err, "clCreateSubBuffer");
  Kernel k = make_kernel("touch");
  cl_mem s = sub.get();
  CL_CHECK(clSetKernelArg(k.get(), 0, sizeof s, &s));
  const std::size_t global = 1;  // the kernel touches one element: the time is the migration
  std::size_t side = 0;
  CL_CHECK(clEnqueueNDRangeKernel(setup().queues[side].get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr,
                                  nullptr));
  CL_CHECK(clFinish(setup().queues[side].get()));
  migration_stats(true);
  for (auto _ : state) {
    side = 1 - side;
    CL_CHECK(clEnqueueNDRangeKernel(setup().queues[side].get(), k.get(), 1, nullptr, &global, nullptr, 0, nullptr,
                                    nullptr));
    CL_CHECK(clFinish(setup().queues[side].get()));
  }
  const MigrationStats moved = migration_stats(true);
  state.counters["bytes_moved"] =
      benchmark::Counter(static_cast<double>(moved.moved()) / static_cast<double>(state.iterations()));
}

void BM_FanOut(benchmark::State& state) {
  state.SetLabel(engine());
  if (!enough_devices(state, 4)) return;
  constexpr std::size_t kBytes = 16 << 20;
  Mem m = make_buffer(kBytes);
  std::vector<Mem> outs;
  std::vector<Kernel> peeks;
  for (int d = 1; d < 4; ++d) {
    outs.push_back(make_buffer(4));
    peeks.push_back(make_kernel("peek"));
    cl_mem a = m.get(), o = outs.back().get();
    CL_CHECK(clSetKernelArg(peeks.back().get(), 0, sizeof a, &a));
    CL_CHECK(clSetKernelArg(peeks.back().get(), 1, sizeof o, &o));
  }
  Kernel touch = make_kernel("touch");
  cl_mem a = m.get();
  CL_CHECK(clSetKernelArg(touch.get(), 0, sizeof a, &a));
  const std::size_t global = 1;
  for (auto _ : state) {
    state.PauseTiming();
    CL_CHECK(clEnqueueNDRangeKernel(setup().queues[0].get(), touch.get(), 1, nullptr, &global, nullptr, 0, nullptr,
                                    nullptr));
    CL_CHECK(clFinish(setup().queues[0].get()));
    state.ResumeTiming();
    for (int d = 1; d < 4; ++d)
      CL_CHECK(clEnqueueNDRangeKernel(setup().queues[d].get(), peeks[d - 1].get(), 1, nullptr, &global, nullptr, 0,
                                      nullptr, nullptr));
    for (int d = 1; d < 4; ++d) CL_CHECK(clFinish(setup().queues[d].get()));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * kBytes));
}

BENCHMARK(BM_KernelEnqueue)->Arg(1)->Arg(4)->Arg(16)->Arg(64)->UseManualTime();
BENCHMARK(BM_KernelStream)->Arg(1)->Arg(4)->Arg(16)->Arg(64)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK(BM_KernelEnqueueThreads)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();
BENCHMARK(BM_SubBufferPingPong)->Arg(64 << 10)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_FanOut)->UseRealTime();
BENCHMARK(BM_EnqueueBehindQueued)->Arg(100)->Arg(1000)->Arg(10000)->Iterations(3)->UseManualTime();

}  // namespace


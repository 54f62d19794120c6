// The runtime's kernel enqueue cost per buffer argument, shaped like PoCL's
// BM_KernelEnqueue (bench/pocl/bench_pocl_migration.cpp) so the two read
// side by side: one sim device, N buffers already valid there (nothing
// migrates), batches of 64 enqueues held back by a user event so that only
// the enqueue calls are timed, not the kernels.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "memlayer/drivers/sim_device.hpp"
#include "memlayer/engine/detail/buffer_lock.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"

namespace {

using namespace memlayer;
using namespace memlayer::runtime;

template <class T>
T must(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().message.c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

// A context over one sim device with 64 MiB, room for every buffer here.
std::shared_ptr<Context> one_sim_device() {
  drivers::SimOptions options;
  options.memory_size = 64 << 20;
  std::vector<std::unique_ptr<drivers::SimDevice>> sims;
  if (Status s = drivers::SimDevice::create(1, options, sims); !s.ok()) {
    std::fprintf(stderr, "create the sim device: %s\n", s.message.c_str());
    std::exit(1);
  }
  std::vector<std::unique_ptr<DeviceDriver>> devices;
  devices.push_back(std::move(sims[0]));
  return must(Context::create(std::move(devices)), "create the context");
}

// A queue on `ctx`'s device and a kernel over `n` new buffers of 256
// bytes, run once: every buffer is then placed and valid on the device, and
// nothing migrates after. `ok` is false (the benchmark skipped) if that run
// failed.
struct KernelOnDevice {
  std::shared_ptr<Queue> q;
  std::vector<KernelArg> args;
  KernelFunction kernel = [](std::span<void* const>) { return Status{}; };
  bool ok = false;

  KernelOnDevice(benchmark::State& state, Context& ctx, std::size_t n) : q(must(ctx.create_queue(0), "create a queue")) {
    for (std::size_t i = 0; i < n; ++i) args.push_back({must(ctx.create_buffer(mem::kReadWrite, 256), "create a buffer")});
    ok = must(q->enqueue_kernel(kernel, args), "enqueue").wait() == cl::kComplete;
    if (!ok) state.SkipWithError("the first kernel failed");
  }

  // Each iteration: `batch` enqueues, then finish(). False on a failure
  // (the benchmark skipped).
  bool batches(benchmark::State& state, int batch) {
    for (auto _ : state) {
      for (int i = 0; i < batch; ++i) {
        if (auto e = q->enqueue_kernel(kernel, args); !e.ok()) {
          state.SkipWithError(e.error().message.c_str());
          return false;
        }
      }
      if (Status s = q->finish(); !s.ok()) {
        state.SkipWithError(s.message.c_str());
        return false;
      }
    }
    state.SetItemsProcessed(state.iterations() * batch);
    return true;
  }
};

// Batches of 64 kernels, the first behind a user event (so that none runs
// while the batch is enqueued), every buffer argument used as `access`.
void kernel_enqueue(benchmark::State& state, migration::Access access) {
  auto ctx = one_sim_device();
  KernelOnDevice k(state, *ctx, static_cast<std::size_t>(state.range(0)));
  if (!k.ok) return;
  for (KernelArg& a : k.args) a.access = access;
  constexpr int kBatch = 64;
  for (auto _ : state) {
    Event gate = ctx->create_user_event();
    const std::vector<Event> held{gate};
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) {
      auto e = k.q->enqueue_kernel(k.kernel, k.args, i == 0 ? std::span<const Event>(held) : std::span<const Event>());
      if (!e.ok()) {
        state.SkipWithError(e.error().message.c_str());
        break;
      }
    }
    const auto stop = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
    (void)gate.set_user_status(cl::kComplete);
    (void)k.q->finish();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_RuntimeKernelEnqueue(benchmark::State& state) { kernel_enqueue(state, migration::Access::read_write); }
BENCHMARK(BM_RuntimeKernelEnqueue)->Arg(1)->Arg(4)->Arg(16)->Arg(64)->UseManualTime();

// The same with every argument read only (a kernel's `const` buffers): each
// enqueue adds a reader to each buffer rather than writing it.
void BM_RuntimeKernelEnqueueRead(benchmark::State& state) { kernel_enqueue(state, migration::Access::read); }
BENCHMARK(BM_RuntimeKernelEnqueueRead)->Arg(1)->Arg(4)->Arg(16)->Arg(64)->UseManualTime();

// Enqueues from several threads at once, each with its own queue and its
// own N buffers on one shared context (commands on disjoint buffers never
// wait for each other's locks: engine.hpp): batches of 64 kernels, each
// batch ended by finish(). Kernels per second over all threads (wall time)
// says how enqueueing scales; on a 2-core machine, past 2 threads they
// share a core.
void BM_RuntimeKernelEnqueueThreads(benchmark::State& state) {
  static const std::shared_ptr<Context> ctx = one_sim_device();  // shared by every thread and run
  KernelOnDevice k(state, *ctx, static_cast<std::size_t>(state.range(0)));
  if (k.ok) k.batches(state, 64);
}

BENCHMARK(BM_RuntimeKernelEnqueueThreads)->Arg(16)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

// Total CPU per kernel, not only its enqueue: batches of 256 small kernels
// (N buffer arguments, nothing to migrate) on an in-order queue, each batch
// ended by finish(). Wall time, and the whole process's CPU time (user +
// system, every thread: the device's workers too), so that cost moved to
// another thread still counts: CPU per kernel = the CPU column / 256.
void BM_RuntimeKernelStream(benchmark::State& state) {
  auto ctx = one_sim_device();
  KernelOnDevice k(state, *ctx, static_cast<std::size_t>(state.range(0)));
  if (!k.ok || !k.batches(state, 256)) return;
  const ContextStats st = ctx->stats();
  state.counters["fast_path_share"] =
      st.enqueues ? static_cast<double>(st.fast_path) / static_cast<double>(st.enqueues) : 0.0;
}

BENCHMARK(BM_RuntimeKernelStream)->Arg(1)->Arg(4)->Arg(16)->Arg(64)->MeasureProcessCPUTime()->UseRealTime();

// The cost of one kernel enqueue with `depth` kernels already queued on the
// same buffers, each behind one user event (readers, writers, or both in
// turn), none of them run: an enqueue must cost the same whatever the depth (no
// list of queued readers scanned per enqueue). 16 buffer arguments; only
// the enqueues after the fill are timed, few enough that the depth stays
// about what it was.
void BM_RuntimeEnqueueBehindQueued(benchmark::State& state) {
  const auto depth = static_cast<std::size_t>(state.range(0));
  const int mix = static_cast<int>(state.range(1));  // 0: readers, 1: writers, 2: alternating
  auto ctx = one_sim_device();
  auto q = must(ctx->create_queue(0, true), "create a queue");  // out of order: no queue order to keep
  std::vector<KernelArg> reads, writes;
  for (std::size_t i = 0; i < 16; ++i) {
    Buffer b = must(ctx->create_buffer(mem::kReadWrite, 256), "create a buffer");
    reads.push_back({b, migration::Access::read});
    writes.push_back({b, migration::Access::read_write});
  }
  const KernelFunction kernel = [](std::span<void* const>) { return Status{}; };
  if (must(q->enqueue_kernel(kernel, writes), "enqueue").wait() != cl::kComplete) {
    state.SkipWithError("the first kernel failed");
    return;
  }
  Event gate = ctx->create_user_event();
  const std::vector<Event> held{gate};
  std::size_t n = 0;
  auto enqueue = [&] {
    const bool write = mix == 1 || (mix == 2 && n % 2 == 1);
    auto e = q->enqueue_kernel(kernel, write ? writes : reads, held);
    ++n;
    if (!e.ok()) state.SkipWithError(e.error().message.c_str());
    return e.ok();
  };
  while (n < depth)
    if (!enqueue()) return;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const bool ok = enqueue();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!ok) break;
  }
  (void)gate.set_user_status(cl::kComplete);
  (void)q->finish();
}

BENCHMARK(BM_RuntimeEnqueueBehindQueued)
    ->ArgsProduct({{100, 1000, 10000, 100000}, {0, 1, 2}})
    ->ArgNames({"depth", "mix"})
    ->Iterations(200)
    ->UseManualTime();

// What a buffer argument's lock costs, uncontended: 64 locks, each taken,
// its cache line written as an enqueue writes a buffer's (six stores), and
// let go. The engine's BufferLock (a store to unlock), against the same
// lock unlocked with an exchange (the engine's before 2026-12-03: a locked
// instruction, which waits for the stores before it) and std::mutex.
struct ExchangeUnlock {
  std::atomic<int> state{0};
  void lock() noexcept {
    int expected = 0;
    while (!state.compare_exchange_weak(expected, 1, std::memory_order_acquire, std::memory_order_relaxed)) expected = 0;
  }
  void unlock() noexcept {
    if (state.exchange(0, std::memory_order_release) == 2) std::abort();  // no waiter here
  }
};

template <class Lock>
void lock_pairs(benchmark::State& state) {
  // A process that has never had a second thread gets glibc's mutex
  // without its locked instructions: this one has had one, like every
  // program with a device worker.
  std::thread([] {}).join();
  struct alignas(64) Line {
    Lock lock;
    std::uint64_t fields[6] = {};
  };
  std::vector<Line> lines(64);
  for (auto _ : state) {
    for (Line& l : lines) {
      std::lock_guard g(l.lock);
      for (std::uint64_t& f : l.fields) ++f;
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 64);
}

void BM_BufferLockPair(benchmark::State& state) { lock_pairs<engine::detail::BufferLock>(state); }
void BM_ExchangeUnlockPair(benchmark::State& state) { lock_pairs<ExchangeUnlock>(state); }
void BM_StdMutexPair(benchmark::State& state) { lock_pairs<std::mutex>(state); }
BENCHMARK(BM_BufferLockPair);
BENCHMARK(BM_ExchangeUnlockPair);
BENCHMARK(BM_StdMutexPair);

}  // namespace

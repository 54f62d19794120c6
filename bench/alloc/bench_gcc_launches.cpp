// Benchmark 3 — the GCC nvptx case: every kernel launch needs a scratch
// block (the per-launch stack), and 4 host threads launch at once, 10^5
// launches in all. Three ways to get the block:
//   per_launch:   a native allocation per launch, freed after it (the
//                 plugin's first version: slow, and serialised in the driver);
//   locked_block: one block, held under a lock for the whole launch (the
//                 plugin's cache as first proposed: threads queue behind it,
//                 the reviewers' objection);
//   cache:        memlayer's BlockCache, one tag: each concurrent launch gets
//                 a block of its own, at most 4 idle ones kept.
// Reported: wall time for all launches, launches per second, and the peak of
// device memory held from the driver (peak_MiB).
#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "sim_native.hpp"

namespace memlayer::bench {
namespace {

constexpr std::uint64_t kScratch = 1 * MiB;
constexpr unsigned kThreads = 4;

// A short kernel: it writes 2 KiB of its scratch block, as a small stack
// would, and runs 20 us on the device, which the launching thread waits for
// (a blocking launch; the device runs other threads' kernels meanwhile, so
// it sleeps rather than spins on one of this machine's two cores).
runtime::Status launch(drivers::SimDevice& dev, runtime::DeviceAddress scratch) {
  static const runtime::KernelFunction kernel = [](std::span<void* const> p) {
    std::memset(p[0], 0x5a, 2 * KiB);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    return runtime::Status{};
  };
  const runtime::DeviceAddress args[1] = {scratch};
  return dev.run_kernel(kernel, args, {});
}

enum class Mode { per_launch, locked_block, cache };

template <Mode M>
void BM_Launches(benchmark::State& state) {
  const auto launches = static_cast<std::uint64_t>(state.range(0));
  std::uint64_t peak = 0;
  for (auto _ : state) {
    auto dev = native_sim(1 * GiB);
    bufalloc::HeapOptions h;
    h.segment_size = 4 * MiB;  // room for one block per thread
    Allocator alloc(M == Mode::cache ? Allocator::Kind::cache : Allocator::Kind::native, *dev, h);
    std::mutex block_mutex;
    Allocator::Block shared{};
    if (M == Mode::locked_block) shared = alloc.get(0, kScratch);
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const std::uint64_t mine = launches / kThreads + (t < launches % kThreads ? 1 : 0);
        for (std::uint64_t i = 0; i < mine; ++i) {
          if (M == Mode::locked_block) {
            std::lock_guard lock(block_mutex);
            if (!launch(*dev, shared.address).ok()) failed = true;
          } else {
            Allocator::Block b = alloc.get(0, kScratch);
            if (!launch(*dev, b.address).ok()) failed = true;
            alloc.put(0, b);
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    if (M == Mode::locked_block) alloc.put(0, shared);
    if (failed) state.SkipWithError("a launch failed");
    peak = std::max(peak, dev->native_peak_bytes());
  }
  state.counters["launches_per_s"] =
      benchmark::Counter(static_cast<double>(launches) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["peak_MiB"] = static_cast<double>(peak) / static_cast<double>(MiB);
}

void launches(benchmark::internal::Benchmark* b) {
  // 1000: the ctest smoke.
  b->Arg(1000)->Arg(100000)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Launches<Mode::per_launch>)->Name("gcc/per_launch")->Apply(launches);
BENCHMARK(BM_Launches<Mode::locked_block>)->Name("gcc/locked_block")->Apply(launches);
BENCHMARK(BM_Launches<Mode::cache>)->Name("gcc/cache")->Apply(launches);

}  // namespace
}  // namespace memlayer::bench

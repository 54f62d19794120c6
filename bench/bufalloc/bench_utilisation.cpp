// B. Utilisation at the first failed allocation.
//
// Each step frees a uniformly random live block with probability 1/3, else
// allocates a log-uniform size; the run stops at the first failed allocation.
// Utilisation = live requested bytes (the raw sizes, before any rounding)
// divided by the region size. The random stream depends only on the seed and
// the live count, which is the same for every allocator until one fails, so
// all allocators see identical requests up to their own failure.
// Counters: util_pct (mean over seeds), util_min_pct, live (blocks at the
// failure, mean), steps (mean).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "allocators.hpp"
#include "best_fit.hpp"
#include "registry.hpp"
#ifdef MEMLAYER_BENCH_HAVE_POCL
#include "pocl_adapter.hpp"
#endif

namespace memlayer::bench {
namespace {

struct FillResult {
  double utilisation = 0.0;
  std::size_t live = 0;
  std::size_t steps = 0;
  bool free_failed = false;
};

template <BenchAllocator A>
FillResult fill_until_failure(const UtilWorkload& workload, std::uint64_t seed) {
  A allocator(kBase, workload.region);
  Rng rng(seed);
  std::vector<std::pair<typename A::Block, Size>> live;
  Size live_bytes = 0;
  FillResult result;
  for (;; ++result.steps) {
    if (!live.empty() && rng.index(3) == 0) {
      const std::size_t victim = rng.index(live.size());
      if (!allocator.free(live[victim].first)) {
        result.free_failed = true;
        break;
      }
      live_bytes -= live[victim].second;
      live[victim] = live.back();
      live.pop_back();
      continue;
    }
    const Size size = rng.log_uniform(workload.min_size, workload.max_size);
    const auto address = allocator.allocate(size);
    if (!address) break;
    live.emplace_back(*address, size);
    live_bytes += size;
  }
  result.utilisation = static_cast<double>(live_bytes) / static_cast<double>(workload.region);
  result.live = live.size();
  return result;
}

template <BenchAllocator A>
void utilisation(benchmark::State& state, const UtilWorkload& workload, int seeds) {
  double sum = 0.0;
  double min = 1.0;
  double live = 0.0;
  double steps = 0.0;
  for (auto _ : state) {
    for (int s = 0; s < seeds; ++s) {
      const FillResult r = fill_until_failure<A>(workload, 1000 + static_cast<std::uint64_t>(s));
      if (r.free_failed) {
        state.SkipWithError("free of a live block failed");
        return;
      }
      sum += r.utilisation;
      min = std::min(min, r.utilisation);
      live += static_cast<double>(r.live);
      steps += static_cast<double>(r.steps);
    }
  }
  const double n = seeds;
  state.counters["util_pct"] = 100.0 * sum / n;
  state.counters["util_min_pct"] = 100.0 * min;
  state.counters["live"] = live / n;
  state.counters["steps"] = steps / n;
  state.counters["seeds"] = n;
}

template <BenchAllocator A>
void register_util(const UtilWorkload& workload, const char* name, int seeds) {
  benchmark::RegisterBenchmark(benchmark_name(util_workload_name(workload), name).c_str(),
                               [&workload, seeds](benchmark::State& state) {
                                 utilisation<A>(state, workload, seeds);
                               })
      // One pass over all seeds: the figure is a property of the workload,
      // repeating it would only give the same number again.
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

void register_utilisation_benchmarks(const RunConfig& config) {
  for (const UtilWorkload* workload : {&kUtilSmall, &kUtilLarge}) {
    register_util<MemlayerAllocator>(*workload, kMemlayer, config.util_seeds);
    register_util<BaselineAllocator>(*workload, kBaseline, config.util_seeds);
#ifdef MEMLAYER_BENCH_HAVE_POCL
    register_util<PoclAllocator>(*workload, kPocl, config.util_seeds);
#endif
    register_util<BestFitAllocator>(*workload, kBestFit, config.util_seeds);
  }
}

}  // namespace memlayer::bench

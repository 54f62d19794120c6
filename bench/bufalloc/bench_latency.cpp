// A. alloc+free pair latency at 10^3, 10^4 and 10^5 live blocks.
//
// Every pair is timed on its own so the tail (p99.9) is visible, not just the
// mean. Google Benchmark's own time per iteration includes the two clock
// reads; the counters are the figures to read:
//   batch_ns                          mean per pair over a second, untimed-per-pair
//                                     run of as many pairs: no clock reads inside,
//                                     so the figure is the allocator's alone
//   mean_ns, p50_ns, p999_ns, max_ns  per pair, clock reads included
//   timer_ns                          an empty pair (two clock reads), the floor
//   faults                            minor page faults during the timed pairs
//   slow_pct, holes                   memlayer and before only: fallback searches, free blocks
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
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

using Clock = std::chrono::steady_clock;
static_assert(Clock::is_steady);

constexpr std::uint64_t kPairSeed = 0x6d656d6c61796572;  // "memlayer"

double percentile(std::vector<std::int64_t>& samples, double q) {
  if (samples.empty()) return 0.0;
  const auto rank = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(rank), samples.end());
  return static_cast<double>(samples[rank]);
}

/// The cost of the measurement itself, so a reader can tell allocator time
/// from clock time in the tens-of-nanoseconds range.
double timer_overhead_ns() {
  constexpr int kReps = 100000;
  std::int64_t total = 0;
  for (int i = 0; i < kReps; ++i) {
    const auto t0 = Clock::now();
    const auto t1 = Clock::now();
    total += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  return static_cast<double>(total) / kReps;
}

long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

template <class A>
void prefill_mode(A& allocator, bool on) {
  if constexpr (requires { allocator.set_prefill(on); }) allocator.set_prefill(on);
}

template <class A>
std::uint64_t slow_searches(const A& allocator) {
  if constexpr (requires { allocator.stats(); }) return allocator.stats().slow_searches;
  return 0;
}

// Untimed pairs k in [begin, end) of the trace: free the victim's block,
// allocate the new size in its place. False if either fails.
template <BenchAllocator A>
bool run_pairs(A& allocator, std::vector<typename A::Block>& blocks, const PairTrace& trace, std::size_t begin,
               std::size_t end) {
  for (std::size_t k = begin; k < end; ++k) {
    typename A::Block& slot = blocks[trace.victim[k]];
    const bool freed = allocator.free(slot);
    const auto address = allocator.allocate(trace.size[k]);
    if (!freed || !address) return false;
    slot = *address;
  }
  return true;
}

template <BenchAllocator A>
void pair_latency(benchmark::State& state, std::size_t live, std::size_t warmup) {
  const auto pairs = static_cast<std::size_t>(state.max_iterations);
  // Untimed warm-up pairs first: right after the pre-fill an allocator is
  // still growing into its steady state (its hole count rises from zero, its
  // bookkeeping tables finish growing and take their first page faults).
  // Then the timed pairs twice over: pair by pair (the tail) and as one
  // batch (the mean without clock reads).
  const PairTrace trace = make_pair_trace(live, warmup + 2 * pairs, kPairSeed);
  A allocator(kBase, kPairRegion);
  std::vector<typename A::Block> blocks;
  blocks.reserve(live);
  prefill_mode(allocator, true);
  for (const Size size : trace.prefill) {
    const auto address = allocator.allocate(size);
    if (!address) {
      state.SkipWithError("pre-fill did not fit in the region");
      return;
    }
    blocks.push_back(*address);
  }
  prefill_mode(allocator, false);
  if (!run_pairs(allocator, blocks, trace, 0, warmup)) {
    state.SkipWithError("warm-up: a free or an allocation failed");
    return;
  }

  std::vector<std::int64_t> samples(pairs);  // zero-filled: its pages are touched here
  const std::uint64_t slow_before = slow_searches(allocator);
  const long faults_before = minor_page_faults();
  std::size_t i = 0;
  for (auto _ : state) {
    const std::uint32_t victim = trace.victim[warmup + i];
    // Read outside the timed span: at 10^5 live this lookup is itself a cache
    // miss, and it belongs to the harness, not to the allocator.
    const typename A::Block old = blocks[victim];
    benchmark::DoNotOptimize(old);
    const auto t0 = Clock::now();
    const bool freed = allocator.free(old);
    const auto address = allocator.allocate(trace.size[warmup + i]);
    const auto t1 = Clock::now();
    if (!freed || !address) {
      state.SkipWithError(freed ? "allocation failed" : "free of a live block failed");
      break;
    }
    blocks[victim] = *address;
    samples[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    ++i;
  }
  const long faults = minor_page_faults() - faults_before;
  samples.resize(i);

  const std::size_t batch_begin = warmup + i;
  const auto b0 = Clock::now();
  const bool batch_ok = run_pairs(allocator, blocks, trace, batch_begin, batch_begin + i);
  const auto b1 = Clock::now();
  if (!batch_ok) {
    state.SkipWithError("batch run: a free or an allocation failed");
    return;
  }
  state.counters["batch_ns"] =
      i == 0 ? 0.0
             : static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b1 - b0).count()) /
                   static_cast<double>(i);

  const double total = static_cast<double>(std::accumulate(samples.begin(), samples.end(), std::int64_t{0}));
  state.counters["mean_ns"] = i == 0 ? 0.0 : total / static_cast<double>(i);
  state.counters["p50_ns"] = percentile(samples, 0.5);
  state.counters["p999_ns"] = percentile(samples, 0.999);
  state.counters["max_ns"] = samples.empty() ? 0.0 : static_cast<double>(*std::max_element(samples.begin(), samples.end()));
  state.counters["timer_ns"] = timer_overhead_ns();
  state.counters["live"] = static_cast<double>(live);
  // First touches of bookkeeping memory the allocator grew into during the
  // timed pairs: each costs a microsecond or more and lands in the tail.
  state.counters["faults"] = static_cast<double>(faults);
  if constexpr (requires { allocator.stats(); }) {
    // Where the time goes when a row looks slow: fallback searches and holes.
    state.counters["slow_pct"] =
        i == 0 ? 0.0 : 100.0 * static_cast<double>(slow_searches(allocator) - slow_before) / static_cast<double>(i);
    state.counters["holes"] = static_cast<double>(allocator.stats().free_blocks);
  }
  if constexpr (requires { allocator.check(); }) {
    // Fast numbers from corrupted bookkeeping would be worthless.
    if (const std::string broken = allocator.check(); !broken.empty()) {
      state.SkipWithError(("invariant check failed after the pairs: " + broken).c_str());
    }
  }
}

template <BenchAllocator A>
void register_pair(std::size_t live, std::size_t warmup, const char* name, benchmark::IterationCount pairs,
                   int repetitions) {
  auto* bench = benchmark::RegisterBenchmark(benchmark_name(pair_workload_name(live), name).c_str(),
                                             [live, warmup](benchmark::State& state) { pair_latency<A>(state, live, warmup); });
  // Fixed counts: the trace is generated to length, every allocator runs the
  // same pairs, and PoCL's O(n) walks stay within the time budget.
  bench->Iterations(pairs)->Unit(benchmark::kNanosecond);
  if (repetitions > 1) {
    // On a small shared machine one unlucky repetition (a neighbour's cache
    // traffic, a preemption) can double a row; the summary reads the median.
    bench->Repetitions(repetitions)->DisplayAggregatesOnly(true);
  }
}

}  // namespace

void register_latency_benchmarks(const RunConfig& config) {
  const benchmark::IterationCount scale = config.quick ? 10 : 1;
  const int reps = config.latency_repetitions;
  for (const std::size_t live : {std::size_t{1000}, std::size_t{10000}, std::size_t{100000}}) {
    // Warm-up: live/2 pairs, enough for the hole count to settle and for
    // memlayer's address index to finish a growth that the pre-fill began.
    const std::size_t warmup = live / 2;
    register_pair<MemlayerAllocator>(live, warmup, kMemlayer, 1'000'000 / scale, reps);
    register_pair<BaselineAllocator>(live, warmup, kBaseline, 1'000'000 / scale, reps);
#ifdef MEMLAYER_BENCH_HAVE_POCL
    // PoCL walks the chunk list on alloc and free, a few ns per live block,
    // so the pair count shrinks with n to keep each repetition near a second
    // (5000 pairs still resolve a p99.9: it is the 5th slowest).
    const benchmark::IterationCount pocl_pairs = live == 1000 ? 200'000 : live == 10000 ? 50'000 : 5'000;
    // Its warm-up is capped for time; a shorter one leaves it fewer holes to
    // walk, which only flatters PoCL.
    register_pair<PoclAllocator>(live, std::min<std::size_t>(warmup, 2000), kPocl, pocl_pairs / scale, reps);
#endif
    register_pair<BestFitAllocator>(live, warmup, kBestFit, 1'000'000 / scale, reps);
  }
}

}  // namespace memlayer::bench

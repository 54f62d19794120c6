// Benchmark 1 — allocation latency against size, 1 KiB to 1 GiB: the MAM
// paper's figure 8, with its three contenders side by side.
//   native: one native call per allocation (the sim's cost model: 100 us +
//           size at 15 GiB/s, so it grows with size as cudaMalloc does);
//   heap:   DeviceHeap, 64 MiB segments, cache cap 2 GiB (a freed segment
//           stays cached, so a block larger than a segment is reused too);
//   cache:  BlockCache over that heap, one tag.
// Each iteration is one allocate + free in steady state (the loop of a
// program that allocates at one site again and again); the first, cold
// allocation is not timed. Time is wall time.
#include "sim_native.hpp"

namespace memlayer::bench {
namespace {

template <Allocator::Kind K>
void BM_AllocLatency(benchmark::State& state) {
  const auto size = static_cast<std::uint64_t>(state.range(0));
  auto dev = native_sim(4 * GiB);
  bufalloc::HeapOptions h;
  h.segment_size = 64 * MiB;
  h.cache_cap = 2 * GiB;
  Allocator alloc(K, *dev, h);
  alloc.put(1, alloc.get(1, size));  // warm: the segment / cached block exists
  const std::uint64_t calls_before = dev->native_allocations();
  for (auto _ : state) {
    Allocator::Block b = alloc.get(1, size);
    benchmark::DoNotOptimize(b.address);
    alloc.put(1, b);
  }
  state.counters["bytes"] = static_cast<double>(size);
  state.counters["native_calls_per_iter"] =
      benchmark::Counter(static_cast<double>(dev->native_allocations() - calls_before),
                         benchmark::Counter::kAvgIterations);
}

BENCHMARK(BM_AllocLatency<Allocator::Kind::native>)->Name("latency/native")->Apply(latency_sizes);
BENCHMARK(BM_AllocLatency<Allocator::Kind::heap>)->Name("latency/heap")->Apply(latency_sizes);
BENCHMARK(BM_AllocLatency<Allocator::Kind::cache>)->Name("latency/cache")->Apply(latency_sizes);

}  // namespace
}  // namespace memlayer::bench

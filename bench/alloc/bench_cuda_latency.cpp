// Benchmark 1 on a real GPU: cuMemAlloc + cuMemFree against the heap and
// the cache over cuMemAlloc'd segments, 1 KiB to 1 GiB. Built with the CUDA
// driver; each row reports an error (and measures nothing) where there is
// no GPU.
#include "memlayer/drivers/cuda_device.hpp"
#include "sim_native.hpp"

namespace memlayer::bench {
namespace {

template <Allocator::Kind K>
void BM_CudaLatency(benchmark::State& state) {
  std::vector<std::unique_ptr<drivers::CudaDevice>> gpus;
  const runtime::Status s = drivers::CudaDevice::create({}, gpus, {0});
  if (!s.ok()) {
    state.SkipWithError(s.message.c_str());
    for (auto _ : state) {
    }
    return;
  }
  const auto size = static_cast<std::uint64_t>(state.range(0));
  bufalloc::HeapOptions h;
  h.segment_size = 64 * MiB;
  h.cache_cap = 2 * GiB;
  Allocator alloc(K, *gpus[0], h);
  alloc.put(1, alloc.get(1, size));
  for (auto _ : state) {
    Allocator::Block b = alloc.get(1, size);
    benchmark::DoNotOptimize(b.address);
    alloc.put(1, b);
  }
  state.counters["bytes"] = static_cast<double>(size);
}

BENCHMARK(BM_CudaLatency<Allocator::Kind::native>)->Name("cuda_latency/native")->Apply(latency_sizes);
BENCHMARK(BM_CudaLatency<Allocator::Kind::heap>)->Name("cuda_latency/heap")->Apply(latency_sizes);
BENCHMARK(BM_CudaLatency<Allocator::Kind::cache>)->Name("cuda_latency/cache")->Apply(latency_sizes);

}  // namespace
}  // namespace memlayer::bench

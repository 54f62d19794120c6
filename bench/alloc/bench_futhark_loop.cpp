// Benchmark 2 — the Futhark case: a loop whose every iteration allocates its
// buffers, runs a short kernel on them and frees them. Speedup of the heap
// and the cache over one native allocation per buffer.
//
// Two levels:
//   loop/<native|heap|cache>/S: three blocks of S bytes from the allocator,
//     a kernel (the sim's run_kernel) that writes 4 KiB of each, freed;
//   runtime/<per_buffer|heap>/S: through memlayer's runtime: two buffers of
//     S bytes created, a kernel that writes every byte of both (so nothing
//     migrates), waited for, released. per_buffer is the runtime configured
//     to call the driver once per buffer (segment = granularity, no cache).
#include <algorithm>
#include <cstring>

#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"
#include "sim_native.hpp"

namespace memlayer::bench {
namespace {

constexpr std::uint64_t kTouched = 4 * KiB;

template <Allocator::Kind K>
void BM_Loop(benchmark::State& state) {
  const auto size = static_cast<std::uint64_t>(state.range(0));
  auto dev = native_sim(1 * GiB);
  Allocator alloc(K, *dev);
  const runtime::KernelFunction kernel = [size](std::span<void* const> p) {
    for (void* buf : p) std::memset(buf, 1, std::min(size, kTouched));
    return runtime::Status{};
  };
  auto iteration = [&] {
    Allocator::Block blocks[3];
    for (std::uint64_t site = 0; site < 3; ++site) blocks[site] = alloc.get(site, size);
    const runtime::DeviceAddress args[3] = {blocks[0].address, blocks[1].address, blocks[2].address};
    const bool ok = dev->run_kernel(kernel, args, {}).ok();
    for (std::uint64_t site = 0; site < 3; ++site) alloc.put(site, blocks[site]);
    return ok;
  };
  iteration();  // untimed: the first iteration pays for the heap's first segment
  for (auto _ : state)
    if (!iteration()) state.SkipWithError("kernel failed");
  state.counters["native_calls"] = static_cast<double>(dev->native_allocations());
}

template <bool PerBuffer>
void BM_Runtime(benchmark::State& state) {
  const auto size = static_cast<std::uint64_t>(state.range(0));
  std::vector<std::unique_ptr<runtime::DeviceDriver>> devices;
  auto sim = native_sim(1 * GiB);
  drivers::SimDevice* dev = sim.get();
  devices.push_back(std::move(sim));
  runtime::ContextOptions options;
  if (PerBuffer) {
    options.device_heap.segment_size = options.device_heap.granularity;
    options.device_heap.cache_cap = 0;
  }
  auto ctx = runtime::Context::create(std::move(devices), options).value();
  auto queue = ctx->create_queue(0).value();
  const runtime::KernelFunction kernel = [size](std::span<void* const> p) {
    for (void* buf : p) std::memset(buf, 1, size);
    return runtime::Status{};
  };
  auto iteration = [&] {
    runtime::Buffer a = ctx->create_buffer(runtime::mem::kReadWrite, size).value();
    runtime::Buffer b = ctx->create_buffer(runtime::mem::kReadWrite, size).value();
    const std::vector<runtime::KernelArg> args{{a, migration::Access::overwrite}, {b, migration::Access::overwrite}};
    return queue->enqueue_kernel(kernel, args).ok() && queue->finish().ok();
  };
  iteration();  // untimed, as above
  for (auto _ : state)
    if (!iteration()) state.SkipWithError("kernel failed");
  state.counters["native_calls"] = static_cast<double>(dev->native_allocations());
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(static_cast<std::int64_t>(64 * KiB))->Arg(static_cast<std::int64_t>(1 * MiB))->Arg(static_cast<std::int64_t>(16 * MiB));
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Loop<Allocator::Kind::native>)->Name("loop/native")->Apply(sizes);
BENCHMARK(BM_Loop<Allocator::Kind::heap>)->Name("loop/heap")->Apply(sizes);
BENCHMARK(BM_Loop<Allocator::Kind::cache>)->Name("loop/cache")->Apply(sizes);
BENCHMARK(BM_Runtime<true>)->Name("runtime/per_buffer")->Apply(sizes);
BENCHMARK(BM_Runtime<false>)->Name("runtime/heap")->Apply(sizes);

}  // namespace
}  // namespace memlayer::bench

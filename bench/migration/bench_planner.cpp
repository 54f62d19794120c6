// memlayer-bench-planner: what planning costs at enqueue time, in ns per
// buffer argument: plan() + commit() for one use of one buffer.
//   no_migration: the argument is already valid where the command runs
//                 (the common case: the target is <= 100 ns per argument)
//   migration:    a write on one device, then a read of the same range on
//                 another: two arguments, the second planning a copy (staged
//                 through the host, or direct); ns_per_arg is the pair / 2
// against the number of devices and the number of spans the buffer is cut
// into (by earlier sub-buffer writes). Events finish as soon as they are
// made, as they would in a steady stream, so the reader lists stay short.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "memlayer/migration/range_versions.hpp"

using namespace memlayer::migration;

namespace {

constexpr std::uint64_t kBufferSize = 1 << 20;

EventOps finished_at_once() {
  EventOps ops;
  ops.finished = [](void*, Event) { return true; };
  return ops;
}

// Cuts a buffer into `spans` spans, each last written on device 1 + i % devices.
void cut(RangeVersions& b, unsigned devices, std::uint64_t spans, std::uintptr_t& next_event) {
  LinkCostModel cost;
  Plan plan;
  const std::uint64_t step = kBufferSize / spans;
  for (std::uint64_t i = 0; i < spans; ++i) {
    const std::vector<Use> uses{{i * step, step, Access::overwrite}};
    const Location at = 1 + static_cast<Location>(i % devices);
    b.plan(uses, at, cost, plan);
    b.commit(plan, {}, uses, at, reinterpret_cast<Event>(next_event += 16));
  }
}

void no_migration(benchmark::State& state) {
  const auto devices = static_cast<unsigned>(state.range(0));
  const auto spans = static_cast<std::uint64_t>(state.range(1));
  const EventOps ops = finished_at_once();
  std::uintptr_t next_event = 0;
  RangeVersions b(kBufferSize, LocationSet::of(kHost), ops);
  cut(b, devices, spans, next_event);
  LinkCostModel cost;
  Plan plan;
  // One span's range, read on the device that wrote it: valid there already.
  const std::vector<Use> uses{{0, kBufferSize / spans, Access::read}};
  for (auto _ : state) {
    b.plan(uses, 1, cost, plan);
    b.commit(plan, {}, uses, 1, reinterpret_cast<Event>(next_event += 16));
    benchmark::DoNotOptimize(plan.wait.data());
  }
  if (!plan.copies.empty()) state.SkipWithError("the no-migration path planned a copy");
  state.counters["spans"] = static_cast<double>(b.span_count());
}

void migration(benchmark::State& state) {
  const auto devices = static_cast<unsigned>(state.range(0));
  const auto spans = static_cast<std::uint64_t>(state.range(1));
  const EventOps ops = finished_at_once();
  std::uintptr_t next_event = 0;
  RangeVersions b(kBufferSize, LocationSet::of(kHost), ops);
  cut(b, devices, spans, next_event);
  LinkCostModel cost;
  for (Location d = 1; d <= devices; ++d)
    for (Location e = 1; e <= devices; ++e)
      if (d != e && (d + e) % 2 == 0) cost.set_direct(d, e, {1e-6, 50e9});
  Plan plan;
  std::vector<Event> copy_events;
  const std::uint64_t range = kBufferSize / spans;
  Location at = 1;
  std::uint64_t copies = 0;
  const std::vector<Use> write{{0, range, Access::overwrite}};
  const std::vector<Use> read{{0, range, Access::read}};
  for (auto _ : state) {
    b.plan(write, at, cost, plan);
    b.commit(plan, {}, write, at, reinterpret_cast<Event>(next_event += 16));
    const Location reader = devices == 1 ? kHost : 1 + at % devices;
    b.plan(read, reader, cost, plan);
    copy_events.resize(plan.copies.size());
    for (Event& e : copy_events) e = reinterpret_cast<Event>(next_event += 16);
    b.commit(plan, copy_events, read, reader, reinterpret_cast<Event>(next_event += 16));
    copies += plan.copies.size();
    at = reader == kHost ? 1 : reader;
  }
  state.counters["copies_per_read"] =
      benchmark::Counter(static_cast<double>(copies), benchmark::Counter::kAvgIterations);
  state.counters["ns_per_arg"] = benchmark::Counter(
      2, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void grid(benchmark::internal::Benchmark* b) {
  for (int devices : {1, 2, 4, 8})
    for (int spans : {1, 16, 256}) b->Args({devices, spans});
  b->ArgNames({"devices", "spans"});
}

}  // namespace

BENCHMARK(no_migration)->Apply(grid);
BENCHMARK(migration)->Apply(grid);
BENCHMARK_MAIN();

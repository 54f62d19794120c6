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
  ops.status = [](void*, Event) { return 1; };
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

// What both benchmarks start from: a buffer cut into state.range(1) spans
// over state.range(0) devices.
struct Setup {
  explicit Setup(const benchmark::State& state)
      : devices(static_cast<unsigned>(state.range(0))), spans(static_cast<std::uint64_t>(state.range(1))) {
    cut(b, devices, spans, next_event);
  }
  Event fresh_event() { return reinterpret_cast<Event>(next_event += 16); }

  unsigned devices;
  std::uint64_t spans;
  EventOps ops = finished_at_once();
  std::uintptr_t next_event = 0;
  RangeVersions b{kBufferSize, LocationSet::of(kHost), ops};
  LinkCostModel cost;
  Plan plan;
};

void no_migration(benchmark::State& state) {
  Setup s(state);
  // One span's range, read on the device that wrote it: valid there already.
  const std::vector<Use> uses{{0, kBufferSize / s.spans, Access::read}};
  for (auto _ : state) {
    s.b.plan(uses, 1, s.cost, s.plan);
    s.b.commit(s.plan, {}, uses, 1, s.fresh_event());
    benchmark::DoNotOptimize(s.plan.wait.data());
  }
  if (!s.plan.copies.empty()) state.SkipWithError("the no-migration path planned a copy");
  state.counters["spans"] = static_cast<double>(s.b.span_count());
}

void migration(benchmark::State& state) {
  Setup s(state);
  for (Location d = 1; d <= s.devices; ++d)
    for (Location e = 1; e <= s.devices; ++e)
      if (d != e && (d + e) % 2 == 0) s.cost.set_direct(d, e, {1e-6, 50e9});
  std::vector<Event> copy_events;
  const std::uint64_t range = kBufferSize / s.spans;
  const std::vector<Use> write{{0, range, Access::overwrite}};
  const std::vector<Use> read{{0, range, Access::read}};
  Location at = 1;
  std::uint64_t copies = 0;
  for (auto _ : state) {
    s.b.plan(write, at, s.cost, s.plan);
    s.b.commit(s.plan, {}, write, at, s.fresh_event());
    const Location reader = s.devices == 1 ? kHost : 1 + at % s.devices;
    s.b.plan(read, reader, s.cost, s.plan);
    copy_events.resize(s.plan.copies.size());
    for (Event& e : copy_events) e = s.fresh_event();
    s.b.commit(s.plan, copy_events, read, reader, s.fresh_event());
    copies += s.plan.copies.size();
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

// RefBatch (engine/src/ref_batch.hpp): the net count per event, handed to
// the host once per event, never a release before a retain it followed.
#include "ref_batch.hpp"

#include "events_only_host.hpp"

#include <gtest/gtest.h>

#include <array>
#include <utility>
#include <vector>

namespace {

using memlayer::engine::Event;
using memlayer::engine::RefBatch;

// Records every retain and release; nothing else is called by RefBatch.
class CountingHost final : public memlayer::engine::testing::EventsOnlyHost {
 public:
  std::vector<std::pair<Event, long>> calls;  // +count for retain, -count for release

  void retain(Event e, std::uint32_t count) noexcept override { calls.emplace_back(e, static_cast<long>(count)); }
  void release(Event e, std::uint32_t count) noexcept override { calls.emplace_back(e, -static_cast<long>(count)); }
  memlayer::engine::EventStatus status(Event) const noexcept override { return memlayer::engine::EventStatus::running; }

  long net(Event e) const {
    long n = 0;
    for (const auto& [x, c] : calls) n += x == e ? c : 0;
    return n;
  }
};

// Distinct fake events (never dereferenced).
std::array<int, 1000> g_events;
Event event(std::size_t i) { return &g_events[i]; }

TEST(RefBatch, HandsTheHostOneNetCountPerEvent) {
  CountingHost host;
  RefBatch batch;
  batch.begin(host);
  for (int i = 0; i < 64; ++i) {  // a command takes itself and drops its predecessor per argument
    batch.count(event(0), +1);
    batch.count(event(1), -1);
    batch.count(event(0), +1);
    batch.count(event(1), -1);
  }
  batch.count(event(1), +1);  // kept as a wait
  batch.count(event(2), +1);
  batch.count(event(2), -1);  // nets to nothing: no call
  EXPECT_TRUE(host.calls.empty()) << "counts reached the host before flush()";
  batch.flush();
  ASSERT_EQ(host.calls.size(), 2u);
  EXPECT_EQ(host.net(event(0)), 128);
  EXPECT_EQ(host.net(event(1)), -127);
  EXPECT_FALSE(batch.active());
  batch.begin(host);
  batch.flush();
  EXPECT_EQ(host.calls.size(), 2u) << "a second flush applied the first batch again";
}

// With its table full, a batch applies counts of new events at once; a count
// for an event that already has a deferred entry must still join it: applied
// at once, a release could free an event whose retain is still deferred.
TEST(RefBatch, AnEventWithADeferredCountStaysDeferredWhenTheTableIsFull) {
  CountingHost host;
  RefBatch batch;
  batch.begin(host);
  batch.count(event(0), +1);
  for (std::size_t i = 1; i < 600; ++i) batch.count(event(i), -1);  // many distinct: the table fills up
  const std::size_t applied_at_once = host.calls.size();
  EXPECT_GT(applied_at_once, 0u) << "the table never filled: the test does not reach the full path";
  batch.count(event(0), -1);
  for (std::size_t i = applied_at_once; i < host.calls.size(); ++i)
    EXPECT_NE(host.calls[i].first, event(0)) << "event 0's release went out before its deferred retain";
  batch.flush();
  EXPECT_EQ(host.net(event(0)), 0);
  for (std::size_t i = 1; i < 600; ++i) EXPECT_EQ(host.net(event(i)), -1) << i;
}

}  // namespace

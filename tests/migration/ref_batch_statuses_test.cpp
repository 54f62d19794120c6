// migration::RefBatch's remembered statuses (memlayer/migration/ref_batch.hpp):
// an answer is recalled only within the batch that looked it up, and never
// for an event whose last counted reference may have gone.
#include "memlayer/migration/ref_batch.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

namespace {

using memlayer::migration::Event;
using memlayer::migration::RefBatch;

std::array<int, 600> g_events;  // distinct fake events, never dereferenced
Event event(std::size_t i) { return &g_events[i]; }

std::vector<std::pair<Event, int>> g_applied;
void apply(void*, Event e, int delta) noexcept { g_applied.emplace_back(e, delta); }

TEST(RefBatchStatuses, AStatusIsRecalledWithinItsBatchOnly) {
  RefBatch batch;
  batch.begin(nullptr, apply);
  int s = 0;
  EXPECT_FALSE(batch.recall(event(0), s));
  batch.remember(event(0), -2);
  batch.remember(event(1), 1);  // the last remembered, and event 0 still there
  ASSERT_TRUE(batch.recall(event(0), s));
  EXPECT_EQ(s, -2);
  ASSERT_TRUE(batch.recall(event(1), s));
  EXPECT_EQ(s, 1);
  EXPECT_FALSE(batch.recall(nullptr, s)) << "no event, yet a status was recalled";
  batch.flush();
  batch.begin(nullptr, apply);
  EXPECT_FALSE(batch.recall(nullptr, s)) << "no event, yet a status was recalled";
  EXPECT_FALSE(batch.recall(event(0), s)) << "a status outlived its batch";
  EXPECT_FALSE(batch.recall(event(1), s)) << "the status remembered last outlived its batch";
  batch.flush();
}

// With its table of counts full, a release of an event not yet counted is
// applied at once and may free the event: whatever status was remembered
// for it, the last one looked up included, must go with it (an event made
// later at the same address would read the old answer).
TEST(RefBatchStatuses, AReleaseAppliedAtOnceForgetsTheEventsStatus) {
  g_applied.clear();
  RefBatch batch;
  batch.begin(nullptr, apply);
  for (std::size_t i = 1; i < 599; ++i) batch.count(event(i), +1);  // fills the table: later ones apply at once
  ASSERT_FALSE(g_applied.empty()) << "the table never filled: the test does not reach the full path";
  batch.remember(event(0), 0);
  int s = 1;
  ASSERT_TRUE(batch.recall(event(0), s));
  EXPECT_EQ(s, 0);
  const std::size_t before = g_applied.size();
  batch.count(event(0), -1);
  ASSERT_EQ(g_applied.size(), before + 1) << "the release was deferred: the test does not reach the full path";
  EXPECT_FALSE(batch.recall(event(0), s)) << "the status of an event released at once was still recalled";
  batch.flush();
}

}  // namespace

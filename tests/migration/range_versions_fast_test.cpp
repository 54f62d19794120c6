// RangeVersions' fast path (fast_prepare() / fast_commit()), case by case:
// the steady state a read enters, what ends it, and what a queue of readers
// costs in status looks.
#include "planner_fixture.hpp"

using namespace memlayer::migration;
using memlayer::migration::testing::ev;

namespace {

class RangeVersionsFastTest : public memlayer::migration::testing::PlannerTest {
 protected:
  // Planner::fast(), its waits in waits_.
  bool fast(const Use& use, Location at, Event command) { return Planner::fast(use, at, command, &waits_); }

  // A buffer of 4096 bytes valid on the host, read on device 1 (the copy
  // there is ev(1000)), then read there by fast reads ev(2) .. ev(last),
  // each completed (as is the copy) by the time the reader list is
  // pruned, at 9 readers (the copy reads the host's bytes: it is the
  // first), with ev(8): the copy's event goes then, and the reads at 1 from
  // ev(9) on are in the steady state a read enters. The host and device 1
  // hold the buffer.
  void read_on_device_1(int last) {
    make(4096);
    run({kWholeRead}, 1, ev(1));
    set(ev(1), EventStatus::completed);
    set(ev(1000), EventStatus::completed);
    for (int i = 2; i <= last; ++i) {
      set(ev(i), EventStatus::completed);
      ASSERT_TRUE(fast(kWholeRead, 1, ev(i))) << "read " << i;
      EXPECT_FALSE(waits_for(waits_, ev(i - 1))) << "readers never wait for readers";
    }
  }

  static constexpr Use kWholeRead{0, 4096, Access::read};
  static constexpr Use kWholeWrite{0, 4096, Access::read_write};
  std::vector<Event> waits_;
};

}  // namespace

// The steady state a read enters holds both copies (host and device 1). A
// write there must not take the steady write, which keeps one holder: the
// host's copy is stale after it, and a failure of the write puts the copy
// before it back.
TEST_F(RangeVersionsFastTest, AWriteWhereReadsAreSteadyStillDropsTheOtherCopy) {
  // The readers (all completed) are pruned with ev(8) and ev(17): none is
  // left for the write to wait for, so nothing keeps it off the steady
  // write but the second copy.
  read_on_device_1(17);
  ASSERT_TRUE(buffer_->valid_at(kHost, 0, 4096));
  ASSERT_TRUE(fast(kWholeWrite, 1, ev(19)));
  EXPECT_TRUE(waits_.empty());
  EXPECT_TRUE(buffer_->valid_at(1, 0, 4096));
  EXPECT_FALSE(buffer_->valid_at(kHost, 0, 1)) << "the host's copy is stale after the write at 1";
  // A second write there is steady: it waits for the first only.
  ASSERT_TRUE(fast(kWholeWrite, 1, ev(20)));
  EXPECT_EQ(waits_, std::vector<Event>{ev(19)});
  // Both fail (the second never ran): the content before them comes back,
  // held on the host (device 1's bytes may be half written).
  set(ev(19), EventStatus::failed);
  set(ev(20), EventStatus::cancelled);
  Plan p = plan({kWholeRead}, kHost);
  EXPECT_TRUE(p.copies.empty()) << "the host's copy is the content before the failed writes";
  EXPECT_TRUE(buffer_->valid_at(kHost, 0, 4096));
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

// The steady state a read enters ends when anything else changes the
// buffer: once device 1's copy is evicted, a read there must be declined.
TEST_F(RangeVersionsFastTest, TheSteadyStateAReadEntersEndsWithAnEviction) {
  read_on_device_1(12);
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  EXPECT_TRUE(p.copies.empty()) << "the host holds it too";
  buffer_->commit_evict(p, {}, 1);
  ASSERT_FALSE(buffer_->valid_at(1, 0, 1));
  EXPECT_FALSE(fast(kWholeRead, 1, ev(13))) << "a read of what device 1 no longer holds";
  EXPECT_TRUE(fast(kWholeRead, kHost, ev(14))) << "the host's copy is there";
}

// A read in the steady state waits for the last writer, and is declined
// once that writer has failed (its content must be undone first).
TEST_F(RangeVersionsFastTest, ASteadyReadWaitsForTheLastWriterAndDeclinesOnceItFailed) {
  make(4096);
  run({kWholeWrite}, 1, ev(1));  // running
  ASSERT_TRUE(fast(kWholeRead, 1, ev(2)));
  EXPECT_EQ(waits_, std::vector<Event>{ev(1)});
  ASSERT_TRUE(fast(kWholeRead, 1, ev(3))) << "the steady state";
  EXPECT_EQ(waits_, std::vector<Event>{ev(1)});
  set(ev(1), EventStatus::failed);
  EXPECT_FALSE(fast(kWholeRead, 1, ev(4)));
}

// A copy that failed elsewhere (device 2's) is nothing a read at 1 uses:
// the steady state serves it, and the next plan() drops the failed copy.
TEST_F(RangeVersionsFastTest, AFailedCopyElsewhereLeavesSteadyReadsAlone) {
  read_on_device_1(12);
  run({kWholeRead}, 2, ev(13));  // the copy to device 2 is ev(1001)
  ASSERT_TRUE(buffer_->valid_at(2, 0, 4096));
  ASSERT_TRUE(fast(kWholeRead, 1, ev(14))) << "the steady state again (plan() left it)";
  set(ev(1001), EventStatus::failed);
  set(ev(13), EventStatus::cancelled);
  ASSERT_TRUE(fast(kWholeRead, 1, ev(15)));
  EXPECT_TRUE(waits_.empty()) << "nothing to wait for at 1: " << waits_.size();
  plan({kWholeRead}, kHost);
  EXPECT_FALSE(buffer_->valid_at(2, 0, 1)) << "plan() dropped the failed copy";
  EXPECT_TRUE(buffer_->valid_at(1, 0, 4096));
}

// Readers queued behind something (none finishes) cost about one status
// look each in all: the prune as the list doubles looks at its older half
// (and on while done), not at every reader. Counted, not timed.
TEST_F(RangeVersionsFastTest, AQueueOfReadersCostsAboutOneStatusLookPerReader) {
  make(4096);  // never written: no last writer to look at
  constexpr int kReaders = 4096;
  const int before = events_.status_calls;
  for (int i = 1; i <= kReaders; ++i) ASSERT_TRUE(fast(kWholeRead, kHost, ev(i)));
  const int looks = events_.status_calls - before;
  EXPECT_GE(looks, kReaders / 2) << "the lists were pruned";
  EXPECT_LE(looks, kReaders + kReaders / 8) << "about one look per reader added";
  for (int i = 1; i <= kReaders; ++i) set(ev(i), EventStatus::completed);
}

// The prune looks at fewer readers, but the list stays short while the
// readers finish, even behind one that does not: completed readers go.
TEST_F(RangeVersionsFastTest, CompletedReadersBehindOneStillRunningAreDropped) {
  make(4096);
  ASSERT_TRUE(fast(kWholeRead, kHost, ev(1)));  // runs throughout
  for (int i = 2; i <= 5000; ++i) {
    ASSERT_TRUE(fast(kWholeRead, kHost, ev(i)));
    set(ev(i), EventStatus::completed);
  }
  Plan w = plan({kWholeWrite}, kHost);
  EXPECT_TRUE(waits_for(w.wait, ev(1)));
  EXPECT_LE(w.wait.size(), 17u) << "a write waits for the readers kept";
  set(ev(1), EventStatus::completed);
}

// RangeVersions, case by case: what is copied, from where, and what waits
// for what.
#include "planner_fixture.hpp"

using namespace memlayer::migration;
using memlayer::migration::testing::ev;

namespace {

// Every test here starts with no event finished (those that need it say so).
class RangeVersionsTest : public memlayer::migration::testing::PlannerTest {};

}  // namespace

TEST_F(RangeVersionsTest, FirstReadOnADeviceCopiesFromTheHost) {
  make(4096);
  Plan p = run({{0, 4096, Access::read}}, 1, ev(1));
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].src, kHost);
  EXPECT_EQ(p.copies[0].dst, 1u);
  EXPECT_EQ(p.copies[0].size, 4096u);
  EXPECT_TRUE(buffer_->valid_at(1, 0, 4096));
  EXPECT_TRUE(buffer_->valid_at(kHost, 0, 4096));
  // A second read there copies nothing and waits for the copy that filled it.
  Plan again = run({{0, 4096, Access::read}}, 1, ev(2));
  EXPECT_TRUE(again.copies.empty());
  EXPECT_TRUE(waits_for(again.wait, ev(1000)));
  EXPECT_FALSE(waits_for(again.wait, ev(1))) << "readers never wait for readers";
}

TEST_F(RangeVersionsTest, OverwriteMigratesNothing) {
  make(4096);
  Plan p = run({{0, 4096, Access::overwrite}}, 1, ev(1));
  EXPECT_TRUE(p.copies.empty());
  EXPECT_TRUE(buffer_->valid_at(1, 0, 4096));
  EXPECT_FALSE(buffer_->valid_at(kHost, 0, 1));
}

TEST_F(RangeVersionsTest, PartialWriteMigratesOnlyStaleBytes) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));       // newest everywhere on device 1
  run({{1024, 1024, Access::overwrite}}, 2, ev(2));    // newest [1024, 2048) on device 2
  // A "write" (not every byte written) on device 2 over [0, 4096) needs the
  // rest from device 1, and only the rest.
  Plan p = run({{0, 4096, Access::write}}, 2, ev(3));
  std::uint64_t moved_to_2 = 0;
  for (const Copy& c : p.copies)
    if (c.dst == 2) {
      moved_to_2 += c.size;
      EXPECT_TRUE(c.offset + c.size <= 1024 || c.offset >= 2048) << "moved bytes device 2 already had";
    }
  EXPECT_EQ(moved_to_2, 3072u);
}

TEST_F(RangeVersionsTest, DisjointSubBuffersWrittenOnTwoDevicesStayValid) {
  make(2048);
  run({{0, 1024, Access::overwrite}}, 1, ev(1));
  run({{1024, 1024, Access::overwrite}}, 2, ev(2));
  EXPECT_TRUE(buffer_->valid_at(1, 0, 1024));
  EXPECT_TRUE(buffer_->valid_at(2, 1024, 1024));
  EXPECT_FALSE(buffer_->valid_at(1, 1024, 1));
  // Reading the parent on device 1 moves only device 2's half.
  Plan p = run({{0, 2048, Access::read}}, 1, ev(3));
  EXPECT_EQ(p.bytes_moved(), 2 * 1024u) << "staged through the host: two legs of 1024 bytes";
  for (const Copy& c : p.copies) EXPECT_EQ(c.offset, 1024u);
  EXPECT_TRUE(buffer_->valid_at(1, 0, 2048));
  EXPECT_TRUE(buffer_->valid_at(2, 1024, 1024));
}

TEST_F(RangeVersionsTest, DirectLinkPreferredOverStaging) {
  cost_.set_direct(2, 1, {1e-6, 100e9});
  make(2048);
  run({{0, 2048, Access::overwrite}}, 2, ev(1));
  Plan p = run({{0, 2048, Access::read}}, 1, ev(2));
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].src, 2u);
  EXPECT_EQ(p.copies[0].dst, 1u);
  EXPECT_TRUE(waits_for(p.copies[0].wait, ev(1)));
  EXPECT_FALSE(buffer_->valid_at(kHost, 0, 1)) << "a direct copy does not touch the host copy";
}

TEST_F(RangeVersionsTest, CheapestSourceWins) {
  cost_.set_direct(2, 3, {1e-6, 1e9});    // slow
  cost_.set_direct(1, 3, {1e-6, 100e9});  // fast
  make(1 << 20);
  run({{0, 1 << 20, Access::overwrite}}, 1, ev(1));
  run({{0, 1 << 20, Access::read}}, 2, ev(2));  // now valid on 1, host and 2
  Plan p = run({{0, 1 << 20, Access::read}}, 3, ev(3));
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].src, 1u);
}

TEST_F(RangeVersionsTest, StagingExportsOnceForEveryImporter) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  Plan first = run({{0, 4096, Access::read}}, 2, ev(2));
  ASSERT_EQ(first.copies.size(), 2u);
  EXPECT_EQ(first.copies[0].src, 1u);
  EXPECT_EQ(first.copies[0].dst, kHost);
  EXPECT_EQ(first.copies[1].after, 0);
  const Event exported = ev(1000);
  Plan second = run({{0, 4096, Access::read}}, 3, ev(3));
  ASSERT_EQ(second.copies.size(), 1u) << "the host copy serves the second importer";
  EXPECT_EQ(second.copies[0].src, kHost);
  EXPECT_TRUE(waits_for(second.copies[0].wait, exported));
  EXPECT_FALSE(waits_for(second.copies[0].wait, ev(1001))) << "importers do not wait for each other";
}

TEST_F(RangeVersionsTest, ReadersOnManyDevicesImportInParallel) {
  make(4096);
  std::vector<Plan> plans;
  for (Location d = 1; d <= 4; ++d) plans.push_back(run({{0, 4096, Access::read}}, d, ev(static_cast<int>(d))));
  for (const Plan& p : plans) {
    ASSERT_EQ(p.copies.size(), 1u);
    EXPECT_EQ(p.copies[0].src, kHost);
    EXPECT_TRUE(p.copies[0].wait.empty()) << "each import depends on the source only";
  }
}

TEST_F(RangeVersionsTest, WriterWaitsForLastWriterAndEveryReaderSince) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  run({{0, 4096, Access::read}}, 1, ev(2));
  run({{0, 100, Access::read}}, 1, ev(3));
  Plan w = run({{0, 4096, Access::overwrite}}, 1, ev(4));
  EXPECT_TRUE(waits_for(w.wait, ev(1)));
  EXPECT_TRUE(waits_for(w.wait, ev(2)));
  EXPECT_TRUE(waits_for(w.wait, ev(3)));
  Plan r = run({{0, 4096, Access::read}}, 1, ev(5));
  EXPECT_TRUE(waits_for(r.wait, ev(4)));
  EXPECT_FALSE(waits_for(r.wait, ev(2)));
}

TEST_F(RangeVersionsTest, WriteElsewhereWaitsForCopiesOutOfTheOldVersion) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  run({{0, 4096, Access::read}}, 2, ev(2));  // copies out of device 1 (via the host)
  Plan w = run({{0, 4096, Access::overwrite}}, 1, ev(3));
  EXPECT_TRUE(waits_for(w.wait, ev(1000))) << "the export out of device 1 must finish first";
  EXPECT_TRUE(waits_for(w.wait, ev(2)));
}

TEST_F(RangeVersionsTest, UsesOfOneCommandAreCombined) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  // Read [0, 2048) and overwrite [1024, 3072) on device 2 in one command: the
  // overlap is read_write, so [0, 2048) is fetched and [2048, 3072) is not.
  Plan p = run({{0, 2048, Access::read}, {1024, 2048, Access::overwrite}}, 2, ev(2));
  std::uint64_t to_2 = 0;
  for (const Copy& c : p.copies)
    if (c.dst == 2) {
      to_2 += c.size;
      EXPECT_LT(c.offset, 2048u);
    }
  EXPECT_EQ(to_2, 2048u);
  EXPECT_TRUE(buffer_->valid_at(2, 0, 3072));
  EXPECT_FALSE(buffer_->valid_at(1, 1024, 1)) << "the command wrote [1024, 3072)";
  EXPECT_TRUE(buffer_->valid_at(1, 0, 1024)) << "[0, 1024) was only read";
}

TEST_F(RangeVersionsTest, SameBufferTwiceReadAndOverwriteIsAWrite) {
  make(1024);
  run({{0, 1024, Access::overwrite}}, 1, ev(1));
  Plan p = run({{0, 1024, Access::read}, {0, 1024, Access::overwrite}}, 2, ev(2));
  EXPECT_FALSE(p.copies.empty()) << "the read part needs the data";
  EXPECT_FALSE(buffer_->valid_at(1, 0, 1)) << "and it counts as a write";
}

TEST_F(RangeVersionsTest, SpansMergeBackAfterAWholeWrite) {
  make(4096);
  for (int i = 0; i < 8; ++i) run({{static_cast<std::uint64_t>(i) * 512, 512, Access::overwrite}}, 1 + i % 3, ev(i + 1));
  EXPECT_GE(buffer_->span_count(), 8u);
  run({{0, 4096, Access::overwrite}}, 2, ev(20));
  EXPECT_EQ(buffer_->span_count(), 1u);
}

// The merge pass is skipped when a write rewrites exactly one existing
// span; these are the cases where it must still run, on existing
// boundaries (no split happens).
TEST_F(RangeVersionsTest, SpansMergeWhenOneWriteCoversSeveralExistingSpans) {
  make(4096);
  run({{0, 2048, Access::overwrite}}, 1, ev(1));
  run({{2048, 2048, Access::overwrite}}, 2, ev(2));
  ASSERT_EQ(buffer_->span_count(), 2u);
  // Two uses by one command, one per span (a buffer passed twice).
  run({{0, 2048, Access::read_write}, {2048, 2048, Access::overwrite}}, 1, ev(3));
  EXPECT_EQ(buffer_->span_count(), 1u);
  run({{0, 2048, Access::overwrite}}, 2, ev(4));
  run({{2048, 2048, Access::overwrite}}, 1, ev(5));
  ASSERT_EQ(buffer_->span_count(), 2u);
  // One use over both spans.
  run({{0, 4096, Access::read_write}}, 1, ev(6));
  EXPECT_EQ(buffer_->span_count(), 1u);
  EXPECT_TRUE(buffer_->valid_at(1, 0, 4096));
}

TEST_F(RangeVersionsTest, AWriteOfOneSpanLeavesItsNeighboursApart) {
  make(4096);
  run({{0, 1024, Access::overwrite}}, 1, ev(1));
  run({{1024, 1024, Access::overwrite}}, 1, ev(2));
  run({{2048, 2048, Access::overwrite}}, 1, ev(3));
  ASSERT_EQ(buffer_->span_count(), 3u);
  run({{1024, 1024, Access::read_write}}, 1, ev(4));
  EXPECT_EQ(buffer_->span_count(), 3u) << "each span has its own version";
  std::vector<std::uint64_t> versions;
  buffer_->walk([&](const SpanInfo& s) { versions.push_back(s.version); });
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_NE(versions[0], versions[1]);
  EXPECT_NE(versions[1], versions[2]);
}

TEST_F(RangeVersionsTest, EvictionWritesBackOnlyTheOnlyCopies) {
  ops_.status = [](void*, Event) { return 1; };  // the copies have arrived (else they may still fail)
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  run({{0, 1024, Access::read}}, 2, ev(2));  // [0, 1024) now also on the host and device 2
  EXPECT_EQ(buffer_->bytes_only_at(1), 3072u);
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].src, 1u);
  EXPECT_EQ(p.copies[0].dst, kHost);
  EXPECT_EQ(p.copies[0].offset, 1024u);
  EXPECT_EQ(p.copies[0].size, 3072u);
  EXPECT_TRUE(waits_for(p.wait, ev(2))) << "the storage outlives its readers";
  buffer_->commit_evict(p, std::vector<Event>{ev(50)}, 1);
  EXPECT_FALSE(buffer_->valid_at(1, 0, 1));
  EXPECT_TRUE(buffer_->valid_at(kHost, 0, 4096));
  EXPECT_EQ(buffer_->bytes_only_at(1), 0u);
  // The next read on device 1 fetches it again, after the write-back.
  Plan r = run({{0, 4096, Access::read}}, 1, ev(3));
  ASSERT_FALSE(r.copies.empty());
}

// fast_commit() of a whole write leaves a steady state that the next
// fast_prepare() at that location takes without looking at the span
// again, until anything else changes the buffer: after the copy there is
// evicted, nothing is valid there, and the fast path must decline.
TEST_F(RangeVersionsTest, TheFastPathsSteadyStateEndsWithAnEviction) {
  ops_.status = [](void*, Event) { return 1; };  // everything has completed
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));  // valid at 1 only
  const Use whole{0, 4096, Access::read_write};
  std::vector<Event> waits;
  auto fast = [&](Event command) { return Planner::fast(whole, 1, command, &waits); };
  ASSERT_TRUE(fast(ev(2)));
  EXPECT_TRUE(waits_for(waits, ev(1)));
  ASSERT_TRUE(fast(ev(3))) << "the steady state";
  EXPECT_TRUE(waits_for(waits, ev(2)));
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  ASSERT_EQ(p.copies.size(), 1u);
  buffer_->commit_evict(p, std::vector<Event>{ev(50)}, 1);
  ASSERT_FALSE(buffer_->valid_at(1, 0, 1));
  // (A read: a write would decline for the write-back's read as well.)
  EXPECT_FALSE(buffer_->fast_prepare({0, 4096, Access::read}, 1)) << "a read of what device 1 no longer holds";
  // The general steps bring it back; the fast path serves the next write.
  Plan r = run({whole}, 1, ev(4));
  ASSERT_FALSE(r.copies.empty());
  EXPECT_TRUE(fast(ev(5)));
}

// A plan whose write-backs cover only part of what the evicted location
// alone holds is refused before anything changes (references included:
// the fixture checks them balanced).
TEST_F(RangeVersionsTest, AnEvictionThatWouldLoseBytesIsRefusedAndChangesNothing) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  ASSERT_EQ(p.copies.size(), 1u);
  p.copies[0].size = 1024;  // [1024, 4096) left unwritten-back
  const std::size_t spans = buffer_->span_count();
  EXPECT_THROW(buffer_->commit_evict(p, std::vector<Event>{ev(50)}, 1), std::invalid_argument);
  EXPECT_EQ(buffer_->bytes_only_at(1), 4096u);
  EXPECT_FALSE(buffer_->valid_at(kHost, 0, 1)) << "the write-back was not recorded either";
  EXPECT_EQ(buffer_->span_count(), spans);
  EXPECT_THROW(buffer_->commit_evict(p, {}, 1), std::invalid_argument) << "one event per copy";
}

TEST_F(RangeVersionsTest, FinishedEventsArePruned) {
  ops_.status = [](void*, Event) { return 1; };  // everything has completed
  make(4096);
  for (int i = 1; i <= 20; ++i) run({{0, 4096, Access::read}}, kHost, ev(i));
  Plan w;
  buffer_->plan({{{0, 4096, Access::overwrite}}}, kHost, cost_, w);
  EXPECT_LE(w.wait.size(), 8u) << "finished readers are dropped from the lists";
}

TEST_F(RangeVersionsTest, WalkReportsVersionsAndHolders) {
  make(1000);
  run({{100, 200, Access::overwrite}}, 3, ev(1));
  std::vector<SpanInfo> spans;
  buffer_->walk([&](const SpanInfo& s) { spans.push_back(s); });
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[1].offset, 100u);
  EXPECT_EQ(spans[1].size, 200u);
  EXPECT_TRUE(spans[1].valid.contains(3));
  EXPECT_EQ(spans[1].valid.count(), 1u);
  EXPECT_GT(spans[1].version, spans[0].version);
  EXPECT_EQ(spans[0].version, spans[2].version);
}

TEST_F(RangeVersionsTest, BadConstructionIsRejected) {
  EXPECT_THROW(RangeVersions(0, LocationSet::of(kHost), ops_), std::invalid_argument);
  EXPECT_THROW(RangeVersions(16, LocationSet{}, ops_), std::invalid_argument);
  make(16);
  Plan p;
  EXPECT_THROW(buffer_->plan_evict(kHost, cost_, p), std::invalid_argument);
  buffer_->plan({{{0, 16, Access::read}}}, 1, cost_, p);
  EXPECT_THROW(buffer_->commit(p, {}, {{{0, 16, Access::read}}}, 1, ev(1)), std::invalid_argument);
}

// doc/migration.md's worked example, step by step.
TEST_F(RangeVersionsTest, TheWorkedExampleOfTheDocs) {
  make(2048);
  run({{0, 1024, Access::overwrite}}, 1, ev(1));
  run({{1024, 1024, Access::overwrite}}, 2, ev(2));
  Plan p3 = run({{0, 2048, Access::read}}, 1, ev(3));  // copies get events 1000, 1001
  ASSERT_EQ(p3.copies.size(), 2u);
  EXPECT_EQ(p3.copies[0].src, 2u);
  EXPECT_EQ(p3.copies[0].dst, kHost);
  EXPECT_EQ(p3.copies[0].offset, 1024u);
  EXPECT_EQ(p3.copies[1].after, 0);
  EXPECT_TRUE(waits_for(p3.copies[0].wait, ev(2)));
  EXPECT_TRUE(waits_for(p3.wait, ev(1)) && waits_for(p3.wait, ev(2)));
  EXPECT_EQ(p3.bytes_moved(), 2048u);
  Plan p4 = run({{1024, 1024, Access::read}}, 3, ev(4));  // copy event 1002
  ASSERT_EQ(p4.copies.size(), 1u);
  EXPECT_EQ(p4.copies[0].src, kHost);
  EXPECT_TRUE(waits_for(p4.copies[0].wait, ev(1000)));
  Plan p5 = run({{0, 2048, Access::overwrite}}, 2, ev(5));
  EXPECT_TRUE(p5.copies.empty());
  for (Event e : {ev(1), ev(2), ev(3), ev(4), ev(1000), ev(1001), ev(1002)})
    EXPECT_TRUE(waits_for(p5.wait, e)) << e;
  EXPECT_EQ(buffer_->span_count(), 1u);
}

TEST_F(RangeVersionsTest, UndefinedContentIsValidAnywhereUntilWritten) {
  make(4096, LocationSet::all());
  // Nobody gave the bytes: no location needs a copy of them.
  Plan first = run({{0, 4096, Access::read}}, 3, ev(1));
  EXPECT_TRUE(first.copies.empty());
  EXPECT_TRUE(buffer_->valid_at(7, 0, 4096));
  EXPECT_EQ(buffer_->bytes_only_at(3), 0u);
  // Dropping a location's copy writes nothing back, and it stays valid there.
  Plan evict;
  buffer_->plan_evict(3, cost_, evict);
  EXPECT_TRUE(evict.copies.empty());
  EXPECT_TRUE(waits_for(evict.wait, ev(1))) << "the storage outlives its reader";
  buffer_->commit_evict(evict, {}, 3);
  EXPECT_TRUE(buffer_->valid_at(3, 0, 4096));
  // A partial write defines its bytes only: a reader elsewhere fetches
  // exactly them, and nothing of the still undefined rest.
  run({{1024, 512, Access::overwrite}}, 1, ev(2));
  Plan read = run({{0, 4096, Access::read}}, 2, ev(3));
  ASSERT_EQ(read.copies.size(), 2u) << "staged through the host: no direct path";
  EXPECT_EQ(read.copies[0].offset, 1024u);
  EXPECT_EQ(read.copies[0].size, 512u);
  EXPECT_EQ(read.bytes_moved(), 1024u);
  int spans = 0;
  buffer_->walk([&](const SpanInfo& s) {
    ++spans;
    if (s.offset == 1024) EXPECT_FALSE(s.valid == LocationSet::all());
    else EXPECT_TRUE(s.valid == LocationSet::all()) << "undefined bytes at " << s.offset;
  });
  EXPECT_EQ(spans, 3);
}

// A chain of writers over the whole buffer, all completed once the last has:
// their undo records go with one status look, not one per record (a
// long queue of writers would otherwise cost its length at the next plan).
TEST_F(RangeVersionsTest, RecordsOfWritersAllCompletedGoWithOneLook) {
  make(256);
  constexpr int kWriters = 200;
  for (int i = 1; i <= kWriters; ++i) run({{0, 256, Access::overwrite}}, 1, ev(i));
  auto names_recorded = [&] {
    std::vector<Event> names;
    buffer_->events(names);
    std::sort(names.begin(), names.end());
    return static_cast<int>(std::unique(names.begin(), names.end()) - names.begin());
  };
  EXPECT_EQ(names_recorded(), kWriters) << "each writer's undo record names it";
  for (int i = 1; i <= kWriters; ++i) set(ev(i), EventStatus::completed);
  events_.status_calls = 0;
  Plan p = run({{0, 256, Access::read}}, 1, ev(kWriters + 1));
  EXPECT_LE(events_.status_calls, 4);
  // Each writer it did not ask about is told to the runtime, which can
  // settle it (the engine's command table gives its event back).
  std::vector<Event> told = events_.told_completed;
  std::sort(told.begin(), told.end());
  told.erase(std::unique(told.begin(), told.end()), told.end());
  EXPECT_EQ(static_cast<int>(told.size()), kWriters);
  EXPECT_TRUE(p.copies.empty());
  EXPECT_EQ(names_recorded(), 2) << "only the last writer and the new reader are left";
}

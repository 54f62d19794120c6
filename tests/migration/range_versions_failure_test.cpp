// RangeVersions when commands fail after their enqueue: what a failed
// writer, copy or reader leaves behind (range_versions.hpp, "Failures").
#include "planner_fixture.hpp"

using namespace memlayer::migration;
using memlayer::migration::testing::ev;

namespace {

class Failures : public memlayer::migration::testing::PlannerTest {
 protected:
  Failures() {
    cost_.set_direct(1, 2, {1e-6, 100e9});
    cost_.set_direct(2, 1, {1e-6, 100e9});
  }
  static bool waits_for_any_of(const Plan& p, std::initializer_list<Event> events) {
    for (Event e : events) {
      if (waits_for(p.wait, e)) return true;
      for (const Copy& c : p.copies)
        if (waits_for(c.wait, e)) return true;
    }
    return false;
  }
};

}  // namespace

TEST_F(Failures, ACancelledWriteLeavesThePreviousContentWhereItWas) {
  make(4096);
  run({{0, 4096, Access::read}}, 1, ev(1));  // the content at host and device 1 (copy 1000)
  set(ev(1), EventStatus::completed);
  set(ev(1000), EventStatus::completed);
  run({{0, 1024, Access::overwrite}}, 2, ev(2));
  set(ev(2), EventStatus::cancelled);

  // Device 1 still holds every byte: nothing moves, nothing waits for the write.
  Plan r = run({{0, 4096, Access::read}}, 1, ev(3));
  EXPECT_TRUE(r.copies.empty());
  EXPECT_FALSE(waits_for_any_of(r, {ev(2)}));
  EXPECT_TRUE(buffer_->valid_at(1, 0, 4096));
  EXPECT_TRUE(buffer_->valid_at(kHost, 0, 4096));
  EXPECT_FALSE(buffer_->valid_at(2, 0, 1)) << "the cancelled write made nothing valid on device 2";
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

TEST_F(Failures, AWriterThatFailedWhileRunningSpoilsOnlyItsOwnCopy) {
  make(4096);
  run({{0, 4096, Access::read}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  set(ev(1000), EventStatus::completed);
  run({{0, 4096, Access::read_write}}, 1, ev(2));
  set(ev(2), EventStatus::failed);

  // Device 1's copy may be half written: read there, the bytes come again
  // from the host, which kept the content before the failed writer.
  Plan r = run({{0, 4096, Access::read}}, 1, ev(3));
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].src, kHost);
  EXPECT_EQ(r.copies[0].size, 4096u);
  EXPECT_FALSE(waits_for_any_of(r, {ev(2)}));
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

TEST_F(Failures, WritersQueuedBehindAFailedOneAreUndoneWithIt) {
  make(4096);
  run({{0, 2048, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);  // [0, 2048) now only on device 1
  Plan w2 = run({{0, 4096, Access::read_write}}, 1, ev(2));
  Plan w3 = run({{1024, 1024, Access::read_write}}, 2, ev(3));
  EXPECT_TRUE(waits_for(w3.wait, ev(2)));
  // The first queued writer fails; the one behind it has not heard yet.
  set(ev(2), EventStatus::cancelled);

  // Back to ev(1)'s content: [0, 2048) on device 1, the rest on the host
  // and on device 1 too, where ev(2)'s import (copy 1000) brought it.
  Plan r = run({{0, 4096, Access::read}}, 1, ev(4));
  EXPECT_TRUE(r.copies.empty());
  EXPECT_TRUE(waits_for(r.wait, ev(1000)));
  EXPECT_FALSE(waits_for_any_of(r, {ev(2), ev(3)}));
  EXPECT_TRUE(buffer_->valid_at(kHost, 2048, 2048));
  EXPECT_FALSE(buffer_->valid_at(kHost, 0, 1));
  EXPECT_FALSE(buffer_->valid_at(2, 1024, 1));
  set(ev(3), EventStatus::cancelled);  // as the runtime would, later
}

TEST_F(Failures, AWriterFailingAfterAnEarlierOneCompletedGoesBackOnlyToThatOne) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  run({{0, 4096, Access::read_write}}, 2, ev(2));  // copies ev(1)'s bytes 1 -> 2 (copy 1000)
  set(ev(1), EventStatus::completed);
  set(ev(1000), EventStatus::completed);
  set(ev(2), EventStatus::failed);

  // ev(1)'s content on device 1 is current again; device 2 got the copy
  // but ev(2) failed there, so only device 1 holds it.
  Plan r = run({{0, 4096, Access::read}}, 1, ev(3));
  EXPECT_TRUE(r.copies.empty());
  EXPECT_FALSE(waits_for_any_of(r, {ev(2)}));
  EXPECT_FALSE(buffer_->valid_at(2, 0, 1));
  EXPECT_FALSE(buffer_->valid_at(kHost, 0, 1)) << "the host never held ev(1)'s bytes";
}

TEST_F(Failures, AFailedCopyIsNoLongerASource) {
  make(4096);
  run({{0, 4096, Access::read}}, 1, ev(1));  // copy 1000: host -> 1
  set(ev(1000), EventStatus::failed);
  set(ev(1), EventStatus::cancelled);

  // Device 2 fetches from the host, not from device 1 (a direct link
  // would be cheaper, had device 1's copy arrived).
  Plan r = run({{0, 4096, Access::read}}, 2, ev(2));
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].src, kHost);
  EXPECT_FALSE(waits_for_any_of(r, {ev(1000), ev(1)}));
  // And device 1 fetches again.
  Plan again = run({{0, 4096, Access::read}}, 1, ev(3));
  ASSERT_EQ(again.copies.size(), 1u);
  EXPECT_EQ(again.copies[0].dst, 1u);
}

TEST_F(Failures, AWriterDoesNotWaitForAReaderThatFailed) {
  make(4096);
  run({{0, 4096, Access::read}}, kHost, ev(1));
  run({{0, 4096, Access::read}}, kHost, ev(2));
  set(ev(1), EventStatus::failed);
  Plan w = run({{0, 4096, Access::overwrite}}, kHost, ev(3));
  EXPECT_FALSE(waits_for(w.wait, ev(1))) << "waiting for a failed event would fail the writer";
  EXPECT_TRUE(waits_for(w.wait, ev(2)));
}

TEST_F(Failures, ContentHeldOnlyWhereAWriterFailedIsLostAndSaysSo) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  run({{0, 1024, Access::read_write}}, 1, ev(2));
  set(ev(2), EventStatus::failed);

  // [0, 1024) was only on device 1, where ev(2) failed half-way: undefined
  // now, valid anywhere (nothing copies it); the rest is untouched.
  Plan r = run({{0, 4096, Access::read}}, 2, ev(3));
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].src, 1u);
  EXPECT_EQ(r.copies[0].offset, 1024u);
  EXPECT_EQ(buffer_->bytes_lost(), 1024u);
  EXPECT_FALSE(waits_for_any_of(r, {ev(2)}));
}

TEST_F(Failures, EvictionWritesBackBytesWhoseOtherCopyIsStillInFlight) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  run({{0, 4096, Access::read}}, 2, ev(2));  // copy 1000: 1 -> 2, not arrived yet
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  ASSERT_EQ(p.copies.size(), 1u) << "the copy to device 2 may still fail";
  EXPECT_EQ(p.copies[0].dst, kHost);
  buffer_->commit_evict(p, std::vector<Event>{ev(50)}, 1);
  set(ev(1000), EventStatus::failed);
  set(ev(2), EventStatus::cancelled);
  set(ev(50), EventStatus::completed);
  Plan r = run({{0, 4096, Access::read}}, 2, ev(3));
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].src, kHost);
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

// Evicting the only copy of what a queued writer's failure goes back to
// writes it back to the host copy first, where the host copy's bytes serve
// nothing else; the writer's failure then finds it there.
TEST_F(Failures, UndoContentOnlyInEvictedStorageIsWrittenBackFirst) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  run({{0, 4096, Access::overwrite}}, 2, ev(2));  // device 1 holds what ev(2) would go back to
  EXPECT_FALSE(buffer_->undo_only_at(1)) << "it can be written back: nothing is lost";
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  EXPECT_TRUE(p.copies.empty()) << "device 1 holds no current bytes";
  buffer_->plan_undo_write_backs(1, p);
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_TRUE(p.copies[0].undo);
  EXPECT_EQ(p.copies[0].src, 1u);
  EXPECT_EQ(p.copies[0].dst, kHost);
  EXPECT_EQ(p.copies[0].size, 4096u);
  buffer_->commit_evict(p, std::vector<Event>{ev(50)}, 1);
  set(ev(2), EventStatus::cancelled);
  set(ev(50), EventStatus::completed);
  Plan r = run({{0, 4096, Access::read}}, 2, ev(3));
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].src, kHost) << "the content before ev(2), written back";
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

// Where the host copy's bytes are a queued writer's, the content before it
// cannot go there: evicting its only copy would lose it should the writer
// fail (undo_only_at(): eviction takes that storage last).
TEST_F(Failures, UndoContentWhoseHostBytesAreInUseIsNotWrittenBack) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  run({{0, 4096, Access::overwrite}}, kHost, ev(2));
  EXPECT_TRUE(buffer_->undo_only_at(1)) << "device 1 holds the only copy of what ev(2) would go back to";
  EXPECT_FALSE(buffer_->undo_only_at(2));
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  buffer_->plan_undo_write_backs(1, p);
  EXPECT_TRUE(p.copies.empty());
  set(ev(2), EventStatus::completed);
  run({{0, 4096, Access::read}}, 2, ev(3));  // settles
  EXPECT_FALSE(buffer_->undo_only_at(1));
}

TEST_F(Failures, ACompletedWriterReusesTheUndoStateAndDropsItsReferences) {
  make(4096);
  for (int i = 1; i <= 50; ++i) {
    run({{0, 4096, Access::read_write}}, 1 + static_cast<Location>(i % 2), ev(i));
    set(ev(i), EventStatus::completed);
    for (int c = 1000; c < next_copy_; ++c) set(ev(c), EventStatus::completed);
  }
  int held = 0;
  for (auto& [e, n] : events_.refs) held += n;
  EXPECT_LE(held, 8) << "finished writers' undo states must not pile up";
}

// A copy names the other complete copies of its bytes with a path to its
// destination, which a runtime may read instead when its source fails
// (Copy::also); a copy still in flight is not one of them.
TEST_F(Failures, ACopyNamesTheOtherCompleteCopiesItCouldReadInstead) {
  cost_.set_direct(1, 3, {1e-6, 100e9});
  make(4096);
  run({{0, 4096, Access::read}}, 1, ev(1));  // host -> 1: copy 1000
  Plan to2 = run({{0, 4096, Access::read}}, 2, ev(2));
  ASSERT_EQ(to2.copies.size(), 1u);
  EXPECT_EQ(to2.copies[0].src, 1u) << "the direct link is the cheapest";
  EXPECT_EQ(to2.copies[0].also, LocationSet::of(kHost)) << "device 1's own copy is the source, not an alternative";

  Plan to3 = plan({{0, 4096, Access::read}}, 3);
  ASSERT_EQ(to3.copies.size(), 1u);
  EXPECT_EQ(to3.copies[0].src, 1u);
  EXPECT_EQ(to3.copies[0].also, LocationSet::of(kHost)) << "device 2 has no path to 3";
  cost_.set_direct(2, 3, {1e-6, 100e9});
  EXPECT_EQ(plan({{0, 4096, Access::read}}, 3).copies[0].also, LocationSet::of(kHost))
      << "device 2's copy (1001) is still in flight";
  set(ev(1001), EventStatus::completed);
  LocationSet both = LocationSet::of(kHost);
  both.insert(2);
  EXPECT_EQ(plan({{0, 4096, Access::read}}, 3).copies[0].also, both);

  // A copy over two spans names only what holds both.
  run({{0, 1024, Access::overwrite}}, 2, ev(3));
  set(ev(3), EventStatus::completed);
  Plan mixed = plan({{0, 4096, Access::read}}, 3);
  ASSERT_EQ(mixed.copies.size(), 2u) << "the new bytes from 2, the rest from 1";
  EXPECT_EQ(mixed.copies[0].src, 2u);
  EXPECT_TRUE(mixed.copies[0].also.empty()) << "only device 2 holds the new bytes";
  EXPECT_EQ(mixed.copies[1].also, both);
}

// Writing back before evicting (commit_write_back): the device keeps its
// copy until the write-back has completed, so one that fails loses nothing.
TEST_F(Failures, AWriteBackThatFailsBeforeTheEvictionLosesNothing) {
  using WriteBack = RangeVersions::WriteBack;
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  EXPECT_EQ(buffer_->write_back_needed(1), WriteBack::waiting) << "its writer has not finished";
  set(ev(1), EventStatus::completed);
  EXPECT_EQ(buffer_->write_back_needed(1), WriteBack::ready);
  EXPECT_EQ(buffer_->write_back_needed(2), WriteBack::none) << "nothing held there";

  Plan p;
  buffer_->plan_evict(1, cost_, p);
  ASSERT_EQ(p.copies.size(), 1u);
  const std::vector<Event> write_back{ev(50)};
  buffer_->commit_write_back(p, write_back);
  EXPECT_TRUE(buffer_->valid_at(1, 0, 4096)) << "the device keeps its copy";
  EXPECT_EQ(buffer_->write_back_needed(1), WriteBack::ready) << "until the write-back has completed";
  set(ev(50), EventStatus::failed);
  EXPECT_FALSE(buffer_->valid_at(kHost, 0, 4096)) << "a failed write-back is no copy";
  Plan again;
  buffer_->plan_evict(1, cost_, again);
  ASSERT_EQ(again.copies.size(), 1u) << "written back again";
  EXPECT_FALSE(waits_for(again.copies[0].wait, ev(50)));
  EXPECT_EQ(buffer_->bytes_lost(), 0u);

  buffer_->commit_write_back(again, std::vector<Event>{ev(51)});
  set(ev(51), EventStatus::completed);
  EXPECT_EQ(buffer_->write_back_needed(1), WriteBack::none);
  Plan evict;
  buffer_->plan_evict(1, cost_, evict);
  EXPECT_TRUE(evict.copies.empty());
  buffer_->commit_evict(evict, {}, 1);
  EXPECT_FALSE(buffer_->valid_at(1, 0, 4096));
  EXPECT_TRUE(buffer_->valid_at(kHost, 0, 4096));
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

// An import still making the host's bytes (a reader there) while the
// device holding them is evicted: a write-back of the same bytes would
// write the host copy beside the import, or after it while a reader there
// reads them (both raced under ThreadSanitizer in the stress runs). Nothing
// is written back; the storage goes after the import, which reads it.
TEST_F(Failures, AnEvictionLeavesBytesStillBeingImportedToTheHostToTheImport) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  const Plan read = run({{0, 4096, Access::read}}, kHost, ev(2));  // imports: copy 1000, still running
  ASSERT_EQ(read.copies.size(), 1u);
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  EXPECT_TRUE(p.copies.empty()) << "nothing written back beside the import";
  EXPECT_TRUE(waits_for(p.wait, ev(1000))) << "the storage outlives the import, which reads it";
  buffer_->commit_evict(p, {}, 1);
  EXPECT_FALSE(buffer_->valid_at(1, 0, 4096));
  EXPECT_TRUE(buffer_->valid_at(kHost, 0, 4096)) << "being made valid there";
  set(ev(1000), EventStatus::completed);
  const Plan again = run({{0, 4096, Access::read}}, kHost, ev(3));
  EXPECT_TRUE(again.copies.empty());
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

// The same import failing after the eviction: its bytes are lost, as a
// failed write-back's are (a write-back after the import would have failed
// with it), and counted.
TEST_F(Failures, AnImportThatFailsAfterItsSourceWasEvictedLosesItsBytes) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  run({{0, 4096, Access::read}}, kHost, ev(2));  // imports: copy 1000
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  buffer_->commit_evict(p, {}, 1);
  set(ev(1000), EventStatus::failed);
  run({{0, 4096, Access::read}}, kHost, ev(3));
  EXPECT_EQ(buffer_->bytes_lost(), 4096u);
}

// An import that failed before the eviction: the device holds the only
// copy again, and it is written back.
TEST_F(Failures, AnEvictionAfterAFailedImportWritesTheBytesBack) {
  make(4096);
  run({{0, 4096, Access::overwrite}}, 1, ev(1));
  set(ev(1), EventStatus::completed);
  run({{0, 4096, Access::read}}, kHost, ev(2));  // imports: copy 1000
  set(ev(1000), EventStatus::failed);
  Plan p;
  buffer_->plan_evict(1, cost_, p);
  ASSERT_EQ(p.copies.size(), 1u) << "device 1 holds the only copy again";
  EXPECT_EQ(p.copies[0].src, 1u);
  EXPECT_EQ(p.copies[0].dst, kHost);
  EXPECT_EQ(p.copies[0].size, 4096u);
  buffer_->commit_evict(p, std::vector<Event>{ev(50)}, 1);
  EXPECT_EQ(buffer_->bytes_lost(), 0u);
}

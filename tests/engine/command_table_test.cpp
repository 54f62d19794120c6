// CommandTable (engine/src/command_table.hpp): names instead of counted
// references. A completed slot gives its event back and reads "completed"
// for good; a failed one keeps it until no record names it; the host is
// never asked about an event the table does not hold, even while other
// threads finish, look up and recycle slots.
#include "command_table.hpp"

#include "events_only_host.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <vector>

namespace {

using memlayer::engine::CommandTable;
using memlayer::engine::Event;
using memlayer::engine::EventStatus;

// Events whose references and status are atomics; a status asked of an
// event with no reference held counts as a violation (a host may have
// freed it).
struct FakeEvent {
  std::atomic<int> refs{0};
  std::atomic<int> status{0};  // EventStatus as int
};

class AtomicHost final : public memlayer::engine::testing::EventsOnlyHost {
 public:
  std::atomic<int> unheld_status{0}, over_released{0};
  mutable std::atomic<int> status_calls{0};

  void retain(Event e, std::uint32_t count) noexcept override { ev(e).refs += static_cast<int>(count); }
  void release(Event e, std::uint32_t count) noexcept override {
    if (ev(e).refs.fetch_sub(static_cast<int>(count)) < static_cast<int>(count)) ++over_released;
  }
  EventStatus status(Event e) const noexcept override {
    ++status_calls;
    if (ev(e).refs.load() <= 0) ++const_cast<AtomicHost*>(this)->unheld_status;
    return static_cast<EventStatus>(ev(e).status.load());
  }

 private:
  static FakeEvent& ev(Event e) { return *static_cast<FakeEvent*>(e); }
};

void finish(FakeEvent& e, EventStatus s) { e.status.store(static_cast<int>(s)); }

TEST(CommandTable, ACompletedCommandsEventGoesBackAndItsNameReadsCompletedForGood) {
  AtomicHost host;
  CommandTable table(host);
  FakeEvent a;
  const Event name = table.make(&a, CommandTable::Ref::retain);
  ASSERT_NE(name, nullptr);
  EXPECT_NE(name, static_cast<Event>(&a)) << "a name, not the host's event";
  EXPECT_EQ(a.refs, 1);
  EXPECT_EQ(table.status(name), EventStatus::running);
  const Event waited = table.retain_host(name);
  EXPECT_EQ(waited, static_cast<Event>(&a));
  EXPECT_EQ(a.refs, 2);
  host.release(waited, 1);

  finish(a, EventStatus::completed);
  EXPECT_EQ(table.status(name), EventStatus::completed);
  EXPECT_EQ(a.refs, 0) << "the table gave the event back once it saw it complete";
  EXPECT_EQ(table.holding(), 0u);
  // The slot is recycled: the old name still reads completed, never the
  // new command's status, and names nothing to wait for.
  FakeEvent b;
  const Event next = table.make(&b, CommandTable::Ref::retain);
  EXPECT_NE(next, name);
  EXPECT_EQ(table.status(name), EventStatus::completed);
  EXPECT_EQ(table.retain_host(name), nullptr);
  EXPECT_EQ(table.status(next), EventStatus::running);
  EXPECT_EQ(host.unheld_status, 0);
}

// The planner derives that a command completed (migration::EventOps::
// completed): its slot gives the event back with no status asked of the
// host, and the name reads completed for good. A name final already, or
// recycled, is left as it is.
TEST(CommandTable, ACompletionLearnedOtherwiseGivesTheEventBackWithoutAskingTheHost) {
  AtomicHost host;
  CommandTable table(host);
  FakeEvent a, b;
  const Event first = table.make(&a, CommandTable::Ref::retain);
  const Event second = table.make(&b, CommandTable::Ref::retain);
  finish(a, EventStatus::completed);
  table.learned(first, EventStatus::completed);
  EXPECT_EQ(a.refs, 0) << "given back at once";
  EXPECT_EQ(host.status_calls, 0);
  EXPECT_EQ(table.status(first), EventStatus::completed);
  EXPECT_EQ(host.status_calls, 0) << "a recycled slot answers without the host";
  table.learned(first, EventStatus::completed);  // again: the slot is another's, or free
  EXPECT_EQ(table.status(second), EventStatus::running);
  EXPECT_EQ(b.refs, 1) << "the other command keeps its event";
  finish(b, EventStatus::failed);
  EXPECT_EQ(table.status(second), EventStatus::failed);
  table.learned(second, EventStatus::completed);  // final already: stays failed, keeps its event
  EXPECT_EQ(table.status(second), EventStatus::failed);
  EXPECT_EQ(b.refs, 1);
  EXPECT_EQ(host.unheld_status, 0);
}

// A slot made `told` (its host tells how the command ends: Host::tells_ends)
// reads running with no call of the host until it is told. Told failed, it
// reads failed and keeps its event (a command that waits for it must fail
// with it); told completed, it gives the event back.
TEST(CommandTable, AToldSlotIsNeverAskedAndReadsWhatItIsTold) {
  AtomicHost host;
  CommandTable table(host);
  FakeEvent a, b;
  const Event done = table.make(&a, CommandTable::Ref::retain, true);
  const Event broken = table.make(&b, CommandTable::Ref::retain, true);
  finish(a, EventStatus::completed);  // not told yet
  finish(b, EventStatus::failed);
  EXPECT_EQ(table.status(done), EventStatus::running);
  EXPECT_EQ(table.status(broken), EventStatus::running);
  EXPECT_EQ(host.status_calls, 0) << "a told slot was asked about";
  table.learned(broken, EventStatus::running);  // not an end
  EXPECT_EQ(table.status(broken), EventStatus::running);
  table.learned(broken, EventStatus::failed);
  EXPECT_EQ(table.status(broken), EventStatus::failed);
  EXPECT_EQ(b.refs, 1) << "a failed command's event goes only once no record names it";
  EXPECT_EQ(table.failed_kept(), 1u);
  table.learned(done, EventStatus::completed);
  EXPECT_EQ(a.refs, 0);
  EXPECT_EQ(table.status(done), EventStatus::completed);
  EXPECT_EQ(host.status_calls, 0);
}

TEST(CommandTable, AFailedCommandKeepsItsEventUntilNoRecordNamesIt) {
  AtomicHost host;
  CommandTable table(host);
  FakeEvent failed, cancelled;
  const Event f = table.make(&failed, CommandTable::Ref::retain);
  const Event c = table.make(&cancelled, CommandTable::Ref::retain);
  finish(failed, EventStatus::failed);
  finish(cancelled, EventStatus::cancelled);
  EXPECT_EQ(table.status(f), EventStatus::failed);
  EXPECT_EQ(table.status(c), EventStatus::cancelled);
  EXPECT_EQ(table.failed_kept(), 2u);
  EXPECT_EQ(failed.refs, 1) << "a command waiting for it must still get the event, to fail with it";
  const Event w = table.retain_host(f);
  EXPECT_EQ(w, static_cast<Event>(&failed));
  host.release(w, 1);

  std::vector<Event> candidates;
  table.failed_names(candidates);
  std::sort(candidates.begin(), candidates.end());
  ASSERT_EQ(candidates.size(), 2u);
  const std::vector<Event> named{c};  // a record still names the cancelled one
  table.recycle_unnamed(candidates, named);
  EXPECT_EQ(failed.refs, 0);
  EXPECT_EQ(cancelled.refs, 1);
  EXPECT_EQ(table.failed_kept(), 1u);
  EXPECT_EQ(table.status(c), EventStatus::cancelled);
  EXPECT_EQ(table.status(f), EventStatus::completed) << "recycled: long gone";
}

// A lease (what an enqueue hands its caller to wait for) holds the slot's
// own reference, whatever the command does meanwhile: completed, its
// event goes back only when the lease ends; failed, a sweep that finds no
// record naming it leaves it while leased, and takes it at the next sweep.
TEST(CommandTable, ALeasedEventStaysUntilTheLeaseEndsWhateverItsCommandDoes) {
  AtomicHost host;
  CommandTable table(host);
  FakeEvent done, failed;
  const Event d = table.make(&done, CommandTable::Ref::retain, true);
  const Event f = table.make(&failed, CommandTable::Ref::retain, true);
  EXPECT_EQ(table.lease_host(d), static_cast<Event>(&done));
  EXPECT_EQ(table.lease_host(f), static_cast<Event>(&failed));
  EXPECT_EQ(done.refs, 1) << "a lease takes no reference of its own";
  finish(done, EventStatus::completed);
  finish(failed, EventStatus::failed);
  table.learned(d, EventStatus::completed);
  table.learned(f, EventStatus::failed);
  EXPECT_EQ(done.refs, 1) << "given back while leased";
  EXPECT_EQ(table.status(d), EventStatus::completed);

  std::vector<Event> candidates;
  table.failed_names(candidates);
  ASSERT_EQ(candidates, std::vector<Event>{f});
  table.recycle_unnamed(candidates, {});
  EXPECT_EQ(failed.refs, 1) << "recycled while leased";
  EXPECT_EQ(table.status(f), EventStatus::failed);
  EXPECT_EQ(table.failed_kept(), 1u);

  table.end_lease(d);
  EXPECT_EQ(done.refs, 0) << "the lease ended, its completed event is still held";
  EXPECT_EQ(table.lease_host(d), nullptr) << "a completed command leases nothing";
  table.end_lease(f);
  EXPECT_EQ(failed.refs, 1) << "a failed one waits for the next sweep";
  table.recycle_unnamed(candidates, {});
  EXPECT_EQ(failed.refs, 0);
  EXPECT_EQ(table.failed_kept(), 0u);
  EXPECT_EQ(host.over_released, 0);
}

TEST(CommandTable, ADiscardedNameAndTheTableItselfGiveEveryEventBack) {
  AtomicHost host;
  std::array<FakeEvent, 3> events;
  {
    CommandTable table(host);
    const Event unused = table.make(&events[0], CommandTable::Ref::retain);
    table.discard(unused);
    EXPECT_EQ(events[0].refs, 0);
    (void)table.make(&events[1], CommandTable::Ref::retain);
    events[2].refs = 1;  // adopted: the caller hands its reference over
    (void)table.make(&events[2], CommandTable::Ref::adopt);
    finish(events[2], EventStatus::failed);
    EXPECT_EQ(table.holding(), 2u);
  }
  for (const FakeEvent& e : events) EXPECT_EQ(e.refs, 0);
  EXPECT_EQ(host.over_released, 0);
}

// Commands that complete with nobody asking (a buffer not used again) are
// found when the free slots run out, rather than held for ever.
TEST(CommandTable, CommandsNobodyAsksAboutAreFoundWhenSlotsRunOut) {
  AtomicHost host;
  std::vector<FakeEvent> events(20000);
  CommandTable table(host);
  for (FakeEvent& e : events) {
    (void)table.make(&e, CommandTable::Ref::retain);
    finish(e, EventStatus::completed);
  }
  EXPECT_LT(table.holding(), 4096u + 64u) << "the table grew instead of looking again";
  EXPECT_EQ(host.unheld_status, 0);
}

// Threads make names, finish their events, and look names up (their own
// and the others', stale ones too) all at once: the host is never asked
// about an event the table no longer holds, and every reference comes back.
TEST(CommandTable, ConcurrentLooksNeverReachAnEventGivenBack) {
  AtomicHost host;
  constexpr int kThreads = 4, kPerThread = 20000;
  std::vector<FakeEvent> events(kThreads * kPerThread);
  std::vector<std::atomic<Event>> names(events.size());
  std::atomic<int> unheld_leases{0};
  std::atomic<bool> done{false};
  {
    CommandTable table(host);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const std::size_t k = static_cast<std::size_t>(t) * kPerThread + static_cast<std::size_t>(i);
          const bool told = k % 2 == 0;  // its end told (Host::tells_ends), else asked
          names[k].store(table.make(&events[k], CommandTable::Ref::retain, told));
          if (k >= 3) {
            const std::size_t other = (k * 7919) % k;  // someone's earlier name, maybe recycled
            if (Event n = names[other].load()) {
              (void)table.status(n);
              if (Event e = table.retain_host(n)) host.release(e, 1);
              // A lease, racing with the sweeper below: while it lasts,
              // the table's reference holds the event.
              if (Event e = table.lease_host(n)) {
                if (static_cast<FakeEvent*>(e)->refs.load() <= 0) ++unheld_leases;
                table.end_lease(n);
              }
            }
            const bool completes = i % 97 != 0;
            const EventStatus end = completes ? EventStatus::completed : EventStatus::failed;
            finish(events[k - 3], end);
            // The host's tell, or what the planner derives (every writer
            // before a completed one completed), racing with the looks above.
            if ((k - 3) % 2 == 0) table.learned(names[k - 3].load(), end);
            else if (completes && i % 3 == 0) table.learned(names[k - 3].load(), EventStatus::completed);
          }
          (void)table.status(names[k].load());
        }
      });
    }
    // Sweeps as Engine::sweep_failed makes them, with no record naming
    // anything: every failed slot not leased or looked at goes.
    std::thread sweeper([&] {
      std::vector<Event> candidates;
      while (!done.load()) {
        candidates.clear();
        table.failed_names(candidates);
        table.recycle_unnamed(candidates, {});
      }
    });
    for (std::thread& th : threads) th.join();
    done.store(true);
    sweeper.join();
  }
  EXPECT_EQ(unheld_leases, 0) << "a leased event was given back during its lease";
  EXPECT_EQ(host.unheld_status, 0);
  EXPECT_EQ(host.over_released, 0);
  for (const FakeEvent& e : events) ASSERT_EQ(e.refs, 0);
}

}  // namespace

// RangeVersions when host memory runs out while it settles a failed writer
// (range_versions.hpp: failures): the plan() that puts the writer's undo
// records back is tried with each of its allocations failing in turn (this
// binary's operator new counts down: alloc_countdown.hpp). Each such plan()
// must throw std::bad_alloc and nothing else, and leave the buffer as
// before or with whole records put back: tried again without the failure,
// it and every plan after it must come out exactly as in a run where no
// allocation failed, and every event reference must be dropped in the end
// (planner_fixture.hpp checks). A record lost on the way, a hole in the
// spans or a reference held twice shows up there.
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "alloc_countdown.hpp"
#include "planner_fixture.hpp"

using namespace memlayer::migration;
using memlayer::migration::testing::ev;

namespace {

// The planner fixture, with its reference counts (a map that allocates)
// kept out of the countdown: a runtime counts references without failing.
class Buffer : public memlayer::migration::testing::Planner {
 public:
  Buffer() {
    ops_.retain = [](void* c, Event e) {
      const memlayer::testing::AllocationsSucceed unfailing;
      ++static_cast<Events*>(c)->refs[e];
    };
    ops_.release = [](void* c, Event e) {
      const memlayer::testing::AllocationsSucceed unfailing;
      --static_cast<Events*>(c)->refs[e];
    };
    cost_.set_direct(1, 2, {1e-6, 100e9});
    cost_.set_direct(2, 1, {1e-6, 100e9});
  }
};

std::string name(Event e) { return std::to_string(reinterpret_cast<std::uintptr_t>(e) / 16); }

std::string describe(LocationSet set) {
  std::string s = "{";
  set.for_each([&](Location l) { s += " " + std::to_string(l); });
  return s + " }";
}

std::string describe(const Plan& p) {
  std::ostringstream os;
  os << "waits";
  for (Event e : p.wait) os << " " << name(e);
  for (const Copy& c : p.copies) {
    os << "; copy " << c.src << " -> " << c.dst << " [" << c.offset << ", +" << c.size << ") after " << c.after
       << " also " << describe(c.also) << " waits";
    for (Event e : c.wait) os << " " << name(e);
  }
  return os.str() + "\n";
}

// What later plans can see of a buffer: each version and where it is valid
// (spans cut into identical halves read as one), the bytes lost, and which
// locations undo records name.
std::string describe(const RangeVersions& v) {
  std::ostringstream os;
  std::vector<SpanInfo> spans;
  v.walk([&](const SpanInfo& s) {
    if (!spans.empty() && spans.back().version == s.version && spans.back().valid == s.valid)
      spans.back().size += s.size;
    else
      spans.push_back(s);
  });
  for (const SpanInfo& s : spans)
    os << "[" << s.offset << ", +" << s.size << ") v" << s.version << " at " << describe(s.valid) << "; ";
  os << "lost " << v.bytes_lost() << "; wide undo records " << v.wide_records() << "; undo content only at";
  for (Location l = 0; l < 4; ++l)
    if (v.undo_only_at(l)) os << " " << l;
  return os.str() + "\n";
}

struct Case {
  std::function<void(Buffer&)> build;  // the history, ending with a failed writer
  std::vector<Use> uses;               // the plan that settles it
  Location at;
  std::function<void(Buffer&)> finish;  // what the runtime reports next
};

// Commits the settling plan, reports what happens next and reads every byte
// at each location: what all those plans said, and the buffer after them.
std::string go_on(Buffer& b, const Case& c) {
  std::string seen = describe(b.run(c.uses, c.at, ev(900)));
  c.finish(b);
  for (Location l = 0; l < 3; ++l)
    seen += describe(b.run({{0, b.buffer_->size(), Access::read}}, l, ev(901 + static_cast<int>(l))));
  return seen + describe(*b.buffer_);
}

// Tries case `c`'s settling plan with allocation 0, 1, ... failing until it
// allocates no more. `whole`: the plan settles in one step (one record put
// back), so a failed one leaves the buffer as it was or settled, no third
// way. Returns how many allocations the plan made.
long plan_through_failures(const Case& c, bool whole) {
  // With no allocation failing: the buffer before and after the settling
  // plan, and what follows it.
  Buffer unfailed;
  c.build(unfailed);
  const std::string before = describe(*unfailed.buffer_);
  Plan p;
  unfailed.buffer_->plan(c.uses, c.at, unfailed.cost_, p);
  const std::string settled = describe(*unfailed.buffer_);
  EXPECT_NE(settled, before) << "the plan settled nothing: the test tries no failure while settling";
  Buffer reference;
  c.build(reference);
  const std::string expected = go_on(reference, c);

  for (long k = 0;; ++k) {
    Buffer b;
    c.build(b);
    const auto refs_before = b.events_.refs;
    bool threw = false;
    Plan attempt;
    memlayer::testing::fail_allocation(k);
    try {
      b.buffer_->plan(c.uses, c.at, b.cost_, attempt);
    } catch (const std::bad_alloc&) {
      threw = true;
    } catch (const std::exception& e) {
      memlayer::testing::stop_failing();
      ADD_FAILURE() << "allocation " << k << ": plan() threw " << e.what();
      return k;
    }
    const bool failed = memlayer::testing::stop_failing();
    EXPECT_EQ(threw, failed) << "allocation " << k;
    if (!failed) {
      EXPECT_EQ(go_on(b, c), expected);
      return k;
    }
    const std::string after = describe(*b.buffer_);
    if (whole) {
      EXPECT_TRUE(after == before || after == settled) << "allocation " << k << " failed: half settled\nbefore: "
                                                        << before << "settled: " << settled << "left: " << after;
      if (after == before) {
        EXPECT_EQ(b.events_.refs, refs_before) << "allocation " << k << ": references changed";
      }
    }
    EXPECT_EQ(go_on(b, c), expected) << "allocation " << k
                                     << " failed, then the same plan and the ones after went otherwise";
    if (::testing::Test::HasFailure()) return k;
  }
}

}  // namespace

// One writer, whose undo record holds more readers than a span keeps
// inline, is put back whole: cancelled (its location keeps the content
// before it), or failed while running (its location does not).
TEST(RestoreOutOfMemory, AFailedWritersRecordIsPutBackWholeOrNotAtAll) {
  for (const EventStatus outcome : {EventStatus::cancelled, EventStatus::failed}) {
    const Case c{[outcome](Buffer& b) {
                   b.make(4096);
                   b.run({{0, 4096, Access::read}}, 1, ev(1));  // copy 1000: host -> 1
                   b.set(ev(1), EventStatus::completed);
                   b.set(ev(1000), EventStatus::completed);
                   b.run({{1024, 1024, Access::read}}, 1, ev(2));
                   b.run({{1024, 1024, Access::read}}, kHost, ev(3));
                   b.run({{1024, 1024, Access::read}}, 2, ev(4));  // three readers and a copy
                   b.run({{1024, 1024, Access::read_write}}, 2, ev(5));
                   b.set(ev(5), outcome);
                 },
                 {{0, 4096, Access::read}},
                 1,
                 [](Buffer& b) {
                   for (int e : {2, 3, 4, 900, 1001}) b.set(ev(e), EventStatus::completed);
                 }};
    const long allocations = plan_through_failures(c, true);
    ASSERT_FALSE(::testing::Test::HasFailure()) << "writer " << static_cast<int>(outcome);
    EXPECT_GT(allocations, 0) << "the plan allocated nothing: the test tried no failure";
  }
}

// Writers queued behind a failed one, not yet reported failed: putting the
// failed writer's records back cuts the spans at their ends, drops the newer
// records over the same bytes and splits those that reach beyond them on
// both sides into two: seven records, the first of whose copies of the
// content before holds more readers than a span keeps inline, and as many
// records as the list has room for before.
TEST(RestoreOutOfMemory, NewerRecordsOverAFailedWritersBytesAreCutWholeOrNotAtAll) {
  const Case c{[](Buffer& b) {
                 b.make(4096);
                 b.run({{0, 2048, Access::write}}, kHost, ev(1));
                 b.run({{0, 3072, Access::read_write}}, 1, ev(2));  // two records: [0, 2048), [2048, 3072)
                 b.set(ev(1), EventStatus::cancelled);
                 b.run({{1024, 3072, Access::write}}, 2, ev(3));
                 b.run({{1024, 3072, Access::read}}, kHost, ev(11));
                 b.run({{1024, 3072, Access::read}}, 1, ev(12));
                 b.run({{1024, 3072, Access::read}}, 2, ev(13));
                 b.set(ev(2), EventStatus::cancelled);
                 for (int w = 4; w <= 10; ++w)  // one record each over [1024, 4096)
                   b.run({{1024, 3072, Access::overwrite}}, 1 + static_cast<Location>(w % 2), ev(w));
               },
               {{0, 2048, Access::write}},
               2,
               [](Buffer& b) {
                 for (int e = 3; e <= 10; ++e) b.set(ev(e), EventStatus::cancelled);  // they waited for ev(2)
                 for (int e : {11, 12, 13, 900}) b.set(ev(e), EventStatus::completed);
                 for (int e = 1000; e < 1010; ++e) b.set(ev(e), EventStatus::completed);
               }};
  EXPECT_GT(plan_through_failures(c, false), 0);
}

// Writes over a span that has a reader move the span whole into the pool of
// wide undo records (range_versions.hpp: Undo). With their writers queued
// (none finishes), each such write needs a place more in the pool: the
// pool grows geometrically, so a queue of them allocates a few times, not
// once or twice per write (which also moved every pooled span each time:
// a cost per enqueue that grew with the writers queued).
TEST(RecordRoom, QueuedWideRecordsAllocateAFewTimesNotOncePerWrite) {
  Buffer b;
  RangeVersions& v = b.make(4096);
  const Use read{0, 4096, Access::read};
  const Use write{0, 4096, Access::read_write};
  int next = 1;
  auto fast = [&](const Use& u) { return b.fast(u, kHost, ev(next++)); };
  auto rounds = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(fast(read)) << "read " << i;
      ASSERT_TRUE(fast(write)) << "write " << i;
    }
  };
  ASSERT_TRUE(fast(write));
  rounds(100);
  constexpr long kArmed = 1L << 40;
  memlayer::testing::fail_allocation(kArmed);
  rounds(800);
  const long made = kArmed - memlayer::testing::stop_counting();
  EXPECT_EQ(v.wide_records(), 900u);
  EXPECT_LT(made, 40) << "allocations for 800 wide records more";
}

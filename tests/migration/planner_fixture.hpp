// The fixture of the planner's case tests (range_versions_test.cpp,
// range_versions_failure_test.cpp): one RangeVersions over events that are
// small integers dressed as pointers, their references counted (and checked
// balanced at the end), their status whatever the test sets (running until
// then). Planner is the same outside a fixture, for a test that builds one
// buffer per attempt (range_versions_alloc_failure_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "memlayer/migration/range_versions.hpp"

namespace memlayer::migration::testing {

inline Event ev(int id) { return reinterpret_cast<Event>(static_cast<std::uintptr_t>(id) * 16); }

class Planner {
 public:
  struct Events {
    std::map<Event, int> refs;
    std::map<Event, EventStatus> status;  // absent: running
    int status_calls = 0;                 // how often the planner asked
    std::vector<Event> told_completed;    // what EventOps::completed was told
  };

  Planner() {
    ops_.context = &events_;
    ops_.retain = [](void* c, Event e) { ++static_cast<Events*>(c)->refs[e]; };
    ops_.release = [](void* c, Event e) { --static_cast<Events*>(c)->refs[e]; };
    ops_.status = [](void* c, Event e) {
      ++static_cast<Events*>(c)->status_calls;
      const auto& st = static_cast<Events*>(c)->status;
      auto it = st.find(e);
      return static_cast<int>(it == st.end() ? EventStatus::running : it->second);
    };
    ops_.completed = [](void* c, Event e) { static_cast<Events*>(c)->told_completed.push_back(e); };
  }
  Planner(const Planner&) = delete;  // ops_ points at events_
  Planner& operator=(const Planner&) = delete;
  ~Planner() {
    buffer_.reset();
    for (auto& [e, n] : events_.refs) EXPECT_EQ(n, 0) << "unbalanced references to event " << e;
  }

  RangeVersions& make(std::uint64_t size, LocationSet valid = LocationSet::of(kHost)) {
    buffer_.emplace(size, valid, ops_);
    return *buffer_;
  }
  Plan plan(std::vector<Use> uses, Location at) {
    Plan p;
    buffer_->plan(uses, at, cost_, p);
    return p;
  }
  // plan + commit with fresh copy events numbered from next_copy_.
  Plan run(std::vector<Use> uses, Location at, Event command) {
    Plan p = plan(uses, at);
    std::vector<Event> copy_events;
    for (std::size_t i = 0; i < p.copies.size(); ++i) copy_events.push_back(ev(next_copy_++));
    buffer_->commit(p, copy_events, uses, at, command);
    return p;
  }
  void set(Event e, EventStatus s) { events_.status[e] = s; }
  // The fast path's two steps (fast_prepare(), then fast_commit()) for
  // `use` by `command` at `at`, the waits it reports in `waits` (cleared
  // first) if given; false, with nothing recorded, when fast_prepare()
  // declines.
  bool fast(const Use& use, Location at, Event command, std::vector<Event>* waits = nullptr) {
    if (waits != nullptr) waits->clear();
    if (!buffer_->fast_prepare(use, at)) return false;
    buffer_->fast_commit(use, at, command, [&](Event e) {
      if (waits != nullptr) waits->push_back(e);
    });
    return true;
  }

  static bool waits_for(const std::vector<Event>& list, Event e) {
    return std::find(list.begin(), list.end(), e) != list.end();
  }

  Events events_;
  EventOps ops_;
  LinkCostModel cost_;
  std::optional<RangeVersions> buffer_;
  int next_copy_ = 1000;
};

class PlannerTest : public ::testing::Test, protected Planner {};

}  // namespace memlayer::migration::testing

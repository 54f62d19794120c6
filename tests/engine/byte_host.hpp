// A complete engine::Host over plain byte arrays, for the engine's tests.
//
// Each device location is a fixed-size byte array whose space a bufalloc
// Region hands out (so a small one fills up and the engine must evict;
// freed storage is fenced, or with defer_frees kept until its users finish,
// as memlayer's runtime and PoCL do); the
// host copy of a buffer is a byte vector of its own. Events are tasks in a
// dependency graph: copies, commands, and the fences that guard freed
// storage. Nothing runs by itself: the test calls run_some() / run_all(),
// which execute ready tasks in a random order, so every schedule the
// dependencies allow can happen. Every reference the engine takes is
// counted, and every contract of host.hpp is checked as it is used.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "memlayer/bufalloc/region.hpp"
#include "memlayer/engine/engine.hpp"

namespace memlayer::engine::testing {

using migration::kHost;

struct Task {
  enum class Kind : std::uint8_t { command, copy, fence, user };
  int id = 0;
  Kind kind = Kind::command;
  std::function<void()> work;  // empty for commands a test runs itself, and fences
  std::function<void()> half_work;  // a failure half-way: what it writes before it fails
  std::function<void()> other_work;  // a copy from one of CopyRequest::also instead
  std::vector<Task*> deps;
  bool submitted = false, discarded = false, done = false;
  EventStatus outcome = EventStatus::running;  // once done
  int refs = 0;  // the engine's references
  CommandName name = CommandName::none;  // the engine's, told as it ends (ByteHost::tell)
  [[nodiscard]] bool failed() const { return done && outcome != EventStatus::completed; }
};

/// Faults the host injects as tasks run (each with its probability):
/// `cancel`: a command or copy fails before it starts (writes nothing);
/// `fail`: it fails half-way (a copy writes half its bytes, a command runs
/// its half_work, else all of its work). A task whose dependency failed fails
/// too, without running (engine/host.hpp requires it); fences free storage
/// whatever their dependencies did.
/// `resource`: a copy that names other sources (CopyRequest::also) reads
/// from one of them, picked at random, instead of its own (as a host whose
/// transfer from the source keeps failing does); what it reads must be the
/// same bytes.
struct Faults {
  double cancel = 0, fail = 0, resource = 0;
  bool report_failed = false;
};

/// A buffer's host-side object (the cookie).
struct HostBuffer {
  std::vector<std::uint8_t> host_copy;
  bool being_destroyed = false;
};

class ByteHost final : public Host {
 public:
  ByteHost(unsigned devices, std::uint64_t device_bytes, std::uint64_t seed)
      : memory_(devices + 1), rng_(seed) {
    for (unsigned d = 1; d <= devices; ++d) {
      memory_[d].assign(device_bytes, 0xEE);
      regions_.push_back(bufalloc::Region::create(0, device_bytes, bufalloc::RegionOptions{64}).value());
    }
  }

  // ---- Host ----
  void retain(Event e, std::uint32_t count) noexcept override {
    ++reference_calls;
    task(e).refs += static_cast<int>(count);
  }
  // Only for the command an enqueue records, before the host starts it
  // (Host::retain_unshared).
  void retain_unshared(Event e) noexcept override {
    const Task& t = task(e);
    EXPECT_EQ(t.kind, Task::Kind::command) << "task " << t.id << ": only a command's event comes in unshared";
    EXPECT_FALSE(t.submitted) << "task " << t.id << " was counted unshared after it started";
    ++unshared_retains;
    retain(e, 1);
  }
  void release(Event e, std::uint32_t count) noexcept override {
    ++reference_calls;
    Task& t = task(e);
    EXPECT_GE(t.refs, static_cast<int>(count)) << "task " << t.id << " released more often than retained";
    t.refs -= static_cast<int>(count);
  }
  bool tells_ends() const noexcept override { return tells; }
  EventStatus status(Event e) const noexcept override {
    ++status_calls;
    const Task& t = *static_cast<const Task*>(e);
    // A host may free an event nobody holds: the engine asks only about
    // those it holds a reference to (its command table's slots).
    EXPECT_GT(t.refs, 0) << "the status of task " << t.id << " was asked with no reference held";
    return reported(t);
  }
  EventStatus reported(const Task& t) const {
    if (!t.done) return EventStatus::running;
    // Like PoCL, which keeps no record of whether a failed command started.
    if (faults.report_failed && t.outcome == EventStatus::cancelled) return EventStatus::failed;
    return t.outcome;
  }

  Allocation allocate(Location at, void* cookie, std::uint64_t size) override {
    Allocation a;
    if (at == kHost) {
      auto& bytes = static_cast<HostBuffer*>(cookie)->host_copy;
      if (bytes.size() != size) bytes.assign(size, 0xCC);
      a.outcome = Allocation::Outcome::ok;
      a.handle = reinterpret_cast<std::uintptr_t>(bytes.data());
      return a;
    }
    if (fail_allocations) {
      a.message = "refused by the test";
      return a;
    }
    collect();
    // Room for the lists first: out of memory below, no storage is leaked.
    a.fences.reserve(quarantine_.size());
    a.room_after.reserve(deferred_.size());
    auto r = regions_[at - 1].allocate(size, 64);
    if (!r) {
      a.outcome = Allocation::Outcome::full;
      a.message = r.error().message();
      for (const Quarantine& q : deferred_) {
        if (q.at != at) continue;
        a.room_after.push_back(q.fence);
        ++q.fence->refs;  // handed to the engine (once the list holds it)
      }
      return a;
    }
    a.outcome = Allocation::Outcome::ok;
    // The engine names storage by address, so this host frees by address
    // (the region's address index), as a C API user would.
    const bufalloc::Address address = r.value().address;
    a.handle = address;
    ++live_storage;
    for (const Quarantine& q : quarantine_) {
      if (q.at == at && !q.fence->done && q.offset < address + size && address < q.offset + q.size) {
        a.fences.push_back(q.fence);
        ++q.fence->refs;  // handed to the engine (once the list holds it)
      }
    }
    return a;
  }

  // As memlayer's runtime does (lib/src/engine_host.cpp): the region names
  // the cheapest hole, the candidates' last use breaking ties.
  bool hole_victims(Location at, std::uint64_t size, std::span<const EvictionCandidate> candidates,
                    std::vector<std::size_t>& victims) override {
    ++hole_questions;
    if (!answers_holes) return false;
    std::vector<std::pair<StorageHandle, std::size_t>> by_address;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      EXPECT_TRUE(is_live_storage(at, candidates[i])) << "a candidate names storage this host does not hold for a buffer";
      by_address.emplace_back(candidates[i].storage, i);
    }
    std::sort(by_address.begin(), by_address.end());
    auto find = [&](bufalloc::Address a) -> const std::size_t* {
      auto it = std::lower_bound(by_address.begin(), by_address.end(), std::make_pair(a, std::size_t{0}));
      return it != by_address.end() && it->first == a ? &it->second : nullptr;
    };
    auto hole = regions_[at - 1].cheapest_hole(
        size, 64,
        [&](const bufalloc::BlockInfo& b) -> std::optional<std::uint64_t> {
          const std::size_t* i = find(b.address);
          if (i == nullptr) return std::nullopt;
          return candidates[*i].last_use;
        },
        [&](const bufalloc::BlockInfo& b) { victims.push_back(*find(b.address)); });
    return hole.ok();
  }

  std::uint64_t capacity(Location at) const noexcept override {
    return at == kHost ? UINT64_MAX : memory_[at].size();
  }

  void free(Location at, void*, StorageHandle storage, std::uint64_t size,
            std::span<const Event> after) noexcept override {
    if (at == kHost) return;
    if (on_free) std::exchange(on_free, nullptr)();
    Task& fence = new_task();
    fence.kind = Task::Kind::fence;
    for (Event e : after) {
      // The engine must still hold what it names (a real host would read a freed event).
      EXPECT_GT(task(e).refs, 0) << "free() named task " << task(e).id << ", which nobody holds";
      fence.deps.push_back(&task(e));
    }
    fence.submitted = true;
    // Kept while a user has not finished; with none, freed at once, as
    // host.hpp asks (and PoCL's host does).
    if (defer_frees && !std::all_of(fence.deps.begin(), fence.deps.end(), [](const Task* d) { return d->done; })) {
      deferred_.push_back({at, storage, size, &fence});
      return;
    }
    --live_storage;
    EXPECT_TRUE(regions_[at - 1].free(storage).ok());
    if (!defer_frees) quarantine_.push_back({at, storage, size, &fence});
  }

  CopyHandle create_copy(const CopyRequest& r) override {
    if (on_create_copy) std::exchange(on_create_copy, nullptr)();
    if (refuse_copies > 0) {
      --refuse_copies;
      return {};
    }
    if (refuse_copy_after == 0) {
      refuse_copy_after = -1;
      return {};
    }
    if (refuse_copy_after > 0) --refuse_copy_after;
    Task& t = new_task();
    t.deps.reserve(r.after.size());  // submit_copy() must not fail
    std::uint8_t* from = bytes(r.src, r.src_storage) + r.offset;
    std::uint8_t* to = bytes(r.dst, r.dst_storage) + r.offset;
    const std::uint64_t n = r.size;
    t.kind = Task::Kind::copy;
    t.work = [from, to, n] { std::memmove(to, from, n); };
    t.half_work = [from, to, n] { std::memmove(to, from, n / 2); };
    if (!r.also.empty()) {
      const CopySource& other = r.also[rng_() % r.also.size()];
      EXPECT_NE(other.at, r.src);
      EXPECT_NE(other.at, r.dst);
      const std::uint8_t* alt = bytes(other.at, other.storage) + r.offset;
      t.other_work = [alt, to, n] { std::memmove(to, alt, n); };
    }
    t.refs = 1;  // the handle's, once nothing can fail any more
    ++copies_created;
    moved += n;
    CopyHandle h;
    h.event = &t;
    return h;
  }
  void submit_copy(CopyHandle copy, std::span<const Event> deps) noexcept override {
    Task& t = task(copy.event);
    EXPECT_FALSE(t.submitted || t.discarded);
    for (Event e : deps) {
      if (task(e).failed() && task(e).kind != Task::Kind::fence) ++failed_waits;
      t.deps.push_back(&task(e));
    }
    t.submitted = true;
    --t.refs;
  }
  void discard_copy(CopyHandle copy) noexcept override {
    Task& t = task(copy.event);
    EXPECT_FALSE(t.submitted || t.discarded);
    t.discarded = true;
    ++copies_discarded;
    --t.refs;
  }
  const migration::CostModel& cost_model() const noexcept override { return cost; }

  // ---- the test's side ----
  std::uint8_t* bytes(Location at, StorageHandle h) {
    if (at == kHost) return reinterpret_cast<std::uint8_t*>(static_cast<std::uintptr_t>(h));
    return memory_[at].data() + h;
  }

  /// A command's event; `work` runs when its dependencies have.
  Task& command(std::function<void()> work) {
    Task& t = new_task();
    t.work = std::move(work);
    return t;
  }
  /// Starts command `t` after the engine's `waits` and the test's own
  /// `user_waits`. The engine must never name an event that had failed
  /// already (range_versions.hpp: a failure known at enqueue is not waited
  /// for): failed_waits counts any it does.
  void start(Task& t, std::span<const Event> waits, std::span<Task* const> user_waits = {}) {
    for (Event e : waits) {
      if (task(e).failed()) ++failed_waits;
      t.deps.push_back(&task(e));
    }
    for (Task* u : user_waits) t.deps.push_back(u);
    t.submitted = true;
  }
  /// A user event: done when the test ends it (end_user).
  Task& user_event() {
    Task& t = new_task();
    t.kind = Task::Kind::user;
    return t;
  }
  void end_user(Task& t, bool ok) {
    t.done = true;
    t.outcome = ok ? EventStatus::completed : EventStatus::cancelled;
  }

  /// Runs up to `n` ready tasks, chosen at random.
  void run_some(int n) {
    for (int i = 0; i < n; ++i)
      if (!run_one()) return;
  }
  void run_all() {
    while (run_one()) {
    }
    for (const Task& t : tasks_) {
      if (t.submitted) {
        EXPECT_TRUE(t.done) << "task " << t.id << " never became ready: a dependency cycle";
      }
    }
  }
  /// With defer_frees: frees the storage whose users have all finished.
  void collect() {
    std::erase_if(deferred_, [&](const Quarantine& q) {
      if (!q.fence->done) return false;
      --live_storage;
      EXPECT_TRUE(regions_[q.at - 1].free(q.offset).ok());
      return true;
    });
  }
  /// Runs ready tasks until every one of `events` is done; false if they
  /// never can be.
  bool run_until_done(std::span<const Event> events) {
    for (;;) {
      bool all = true;
      for (Event e : events) all = all && task(e).done;
      if (all) return true;
      if (!run_one()) return false;
    }
  }
  [[nodiscard]] int outstanding_refs() const {
    int n = 0;
    for (const Task& t : tasks_) n += t.refs;
    return n;
  }

  migration::LinkCostModel cost;
  bool fail_allocations = false;
  /// Whether hole_victims() answers (else the engine evicts by rank alone).
  bool answers_holes = true;
  int hole_questions = 0;
  /// Like PoCL: free() keeps storage whose `after` events are unfinished
  /// until they have finished (collected at the next allocate), and a `full`
  /// allocation names those events as room_after.
  bool defer_frees = false;
  int refuse_copy_after = -1;  // >= 0: make that many copies, then refuse one
  int refuse_copies = 0;       // refuse the next this many
  /// Runs once, at the next create_copy(): while the enqueue that makes the
  /// copy holds its buffers' locks.
  std::function<void()> on_create_copy;
  /// Runs once, at the next free() of device storage, before it is freed.
  std::function<void()> on_free;
  int copies_created = 0, copies_discarded = 0;
  int reference_calls = 0;  // retain() and release() calls, whatever their count
  int unshared_retains = 0;  // retain_unshared() calls (each a retain() call too)
  bool tells = false;  // tells_ends(): set before the engine is made
  /// With `tells`: the engine told how each command with a name ends, as
  /// run_one() ends it (Engine::ended).
  Engine* tell = nullptr;
  mutable long status_calls = 0;
  Faults faults;
  int failed_waits = 0;  // waits the engine named on events that had failed already
  int injected = 0;      // faults injected
  int cancelled_by_deps = 0;
  int resourced = 0;  // copies made from another source (Faults::resource)
  std::uint64_t moved = 0;
  int live_storage = 0;

 private:
  struct Quarantine {
    Location at;
    std::uint64_t offset, size;
    Task* fence;
  };
  static Task& task(Event e) { return *static_cast<Task*>(e); }
  // A candidate names storage this host handed out and has not taken back.
  bool is_live_storage(Location at, const EvictionCandidate& c) const {
    return c.cookie != nullptr && c.size > 0 && std::none_of(deferred_.begin(), deferred_.end(), [&](const Quarantine& q) {
             return q.at == at && q.offset == c.storage;
           });
  }
  Task& new_task() {
    tasks_.emplace_back();
    tasks_.back().id = static_cast<int>(tasks_.size());
    return tasks_.back();
  }
  bool ready(const Task& t) const {
    if (!t.submitted || t.done) return false;
    for (const Task* d : t.deps)
      if (!d->done) return false;
    return true;
  }
  bool run_one() {
    std::vector<Task*> ready_now;
    for (Task& t : tasks_)
      if (ready(t)) ready_now.push_back(&t);
    if (ready_now.empty()) return false;
    Task* t = ready_now[rng_() % ready_now.size()];
    t->done = true;
    t->outcome = EventStatus::completed;
    const bool dep_failed = std::any_of(t->deps.begin(), t->deps.end(), [](const Task* d) { return d->failed(); });
    if (t->kind == Task::Kind::fence) {
      // frees storage whatever its dependencies did
    } else if (dep_failed) {
      t->outcome = EventStatus::cancelled;
      ++cancelled_by_deps;
    } else if (std::uniform_real_distribution<double>(0, 1)(rng_) < faults.cancel) {
      t->outcome = EventStatus::cancelled;
      ++injected;
    } else if (std::uniform_real_distribution<double>(0, 1)(rng_) < faults.fail) {
      if (t->half_work) t->half_work();
      else if (t->work) t->work();
      t->outcome = EventStatus::failed;
      ++injected;
    } else if (t->other_work && std::uniform_real_distribution<double>(0, 1)(rng_) < faults.resource) {
      t->other_work();
      ++resourced;
    } else if (t->work) {
      t->work();
    }
    if (tell != nullptr && t->name != CommandName::none) tell->ended(t->name, reported(*t));
    return true;
  }

  std::vector<std::vector<std::uint8_t>> memory_;  // by location; [0] unused
  std::vector<bufalloc::Region> regions_;          // [d - 1] for device d
  std::deque<Task> tasks_;                         // stable addresses
  std::vector<Quarantine> quarantine_;
  std::vector<Quarantine> deferred_;  // defer_frees: storage still allocated
  std::mt19937_64 rng_;
};

}  // namespace memlayer::engine::testing

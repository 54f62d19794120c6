// The planner against a reference model, under arbitrary legal schedules.
//
// Every command and every planned copy becomes a node of a dependency graph,
// with exactly the edges the planner asked for (nothing else orders them: no
// queues, no user wait lists). The graph is then executed in a random
// topological order, interleaved with the enqueues, moving real bytes between
// per-location byte arrays. Because the planner alone must order conflicting
// accesses in enqueue order, every read — in any such schedule — must see
// exactly what a sequential run of the commands in enqueue order sees.
// This checks field-notes §3 properties 1-5, 6 (uses combined), 7's
// write-invalidate, 10 (eviction), 14 (minimality: nothing is copied to a
// location that holds the valid bytes) and the bookkeeping of event
// references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "memlayer/migration/range_versions.hpp"

using namespace memlayer::migration;

namespace {

constexpr std::uint64_t kSize = 2048;

struct Node {
  enum Kind { copy, command, evict_free } kind = command;
  std::vector<int> deps;  // node ids that must run first
  // copy
  Location src = 0, dst = 0;
  std::uint64_t offset = 0, size = 0;
  // command
  Location at = 0;
  std::vector<Use> uses;
  std::uint8_t stamp = 0;                 // the byte value this command writes
  std::vector<std::uint8_t> expected;     // what its reads must see (reads only)
  bool done = false;
};

class Model {
 public:
  explicit Model(std::uint64_t seed, unsigned devices, bool direct_links)
      : rng_(seed), devices_(devices), memory_(devices + 1, std::vector<std::uint8_t>(kSize, 0)),
        reference_(kSize, 0) {
    ops_.context = this;
    ops_.retain = [](void* self, Event e) { ++static_cast<Model*>(self)->refs_[id_of(e)]; };
    ops_.release = [](void* self, Event e) {
      auto& refs = static_cast<Model*>(self)->refs_;
      ASSERT_GT(refs[id_of(e)], 0) << "released an event it did not hold";
      --refs[id_of(e)];
    };
    ops_.status = [](void* self, Event e) -> int { return static_cast<Model*>(self)->nodes_[id_of(e)].done; };
    versions_.emplace(kSize, LocationSet::of(kHost), ops_);
    for (Location d = 1; d <= devices_; ++d) {
      for (Location e = 1; e <= devices_; ++e)
        if (d != e && direct_links && rng_() % 2 == 0) cost_.set_direct(d, e, {1e-6, 50e9});
    }
  }

  ~Model() { versions_.reset(); }  // it releases into refs_, so it goes first

  void run(int commands) {
    for (int i = 0; i < commands; ++i) {
      if (rng_() % 25 == 0 && devices_ > 0) {
        evict(1 + static_cast<Location>(rng_() % devices_));
      } else {
        enqueue_random_command();
      }
      if (::testing::Test::HasFatalFailure()) return;
      execute_some(static_cast<int>(rng_() % 4));
    }
    execute_some(1 << 30);
    for (const Node& n : nodes_) ASSERT_TRUE(n.done) << "a node never became ready: a dependency cycle";
    // Every byte of the final content, read at every location, is the reference.
    for (Location l = 0; l <= devices_; ++l) {
      enqueue(l, {Use{0, kSize, Access::read}});
      execute_some(1 << 30);
    }
    EXPECT_GT(reads_checked_, 0);
  }

  void expect_balanced_references() {
    versions_.reset();
    for (auto& [id, count] : refs_) EXPECT_EQ(count, 0) << "event " << id << " leaked " << count << " references";
  }

  std::uint64_t bytes_copied() const { return bytes_copied_; }

 private:
  static int id_of(Event e) { return static_cast<int>(reinterpret_cast<std::uintptr_t>(e) / 8 - 1); }
  static Event event_of(int id) { return reinterpret_cast<Event>(static_cast<std::uintptr_t>(id + 1) * 8); }

  Use random_use() {
    const std::uint64_t a = rng_() % kSize, b = rng_() % kSize;
    std::uint64_t lo = std::min(a, b), hi = std::max(a, b) + 1;
    if (rng_() % 4 == 0) lo = 0, hi = kSize;  // whole buffer
    if (rng_() % 4 == 0) lo = lo / 256 * 256, hi = std::min<std::uint64_t>(kSize, lo + 256);  // a "sub-buffer"
    static constexpr Access kinds[] = {Access::read, Access::write, Access::read_write, Access::overwrite};
    return Use{lo, hi - lo, kinds[rng_() % 4]};
  }

  void enqueue_random_command() {
    const Location at = static_cast<Location>(rng_() % (devices_ + 1));
    std::vector<Use> uses{random_use()};
    if (rng_() % 5 == 0) uses.push_back(random_use());  // the same buffer twice
    enqueue(at, uses);
  }

  void enqueue(Location at, const std::vector<Use>& uses) {
    versions_->plan(uses, at, cost_, plan_);
    // Minimality: no copy lands where any of its bytes are already valid.
    for (const Copy& c : plan_.copies) {
      versions_->walk([&](const SpanInfo& s) {
        const bool overlaps = s.offset < c.offset + c.size && c.offset < s.offset + s.size;
        EXPECT_FALSE(overlaps && s.valid.contains(c.dst)) << "a copy to location " << c.dst << " at offset "
                                                          << c.offset << " that already holds the bytes";
      });
    }
    std::vector<Event> copy_events;
    std::vector<int> copy_ids;
    for (std::size_t i = 0; i < plan_.copies.size(); ++i) {
      const Copy& c = plan_.copies[i];
      Node n;
      n.kind = Node::copy;
      n.src = c.src, n.dst = c.dst, n.offset = c.offset, n.size = c.size;
      for (Event e : c.wait) n.deps.push_back(id_of(e));
      if (c.after >= 0) n.deps.push_back(copy_ids[static_cast<std::size_t>(c.after)]);
      copy_ids.push_back(add(std::move(n)));
      copy_events.push_back(event_of(copy_ids.back()));
      bytes_copied_ += c.size;
    }
    Node cmd;
    cmd.kind = Node::command;
    cmd.at = at;
    cmd.uses = uses;
    cmd.stamp = static_cast<std::uint8_t>(1 + nodes_.size() % 255);
    for (Event e : plan_.wait) cmd.deps.push_back(id_of(e));
    cmd.deps.insert(cmd.deps.end(), copy_ids.begin(), copy_ids.end());
    // The sequential reference: reads see the content before this command,
    // writes then apply in enqueue order.
    cmd.expected = reference_;
    apply_writes(cmd, reference_);
    const int id = add(std::move(cmd));
    versions_->commit(plan_, copy_events, uses, at, event_of(id));
  }

  void evict(Location at) {
    versions_->plan_evict(at, cost_, plan_);
    std::vector<Event> copy_events;
    std::vector<int> copy_ids;
    for (const Copy& c : plan_.copies) {
      Node n;
      n.kind = Node::copy;
      n.src = c.src, n.dst = c.dst, n.offset = c.offset, n.size = c.size;
      for (Event e : c.wait) n.deps.push_back(id_of(e));
      copy_ids.push_back(add(std::move(n)));
      copy_events.push_back(event_of(copy_ids.back()));
    }
    // Freeing the storage: after the write-backs and what the planner lists,
    // and -- the runtime's own bookkeeping, not the planner's -- after every
    // earlier command or copy that touched this storage at all.
    Node free_node;
    free_node.kind = Node::evict_free;
    free_node.at = at;
    for (Event e : plan_.wait) free_node.deps.push_back(id_of(e));
    free_node.deps.insert(free_node.deps.end(), users_[at].begin(), users_[at].end());
    if (auto it = pending_free_.find(at); it != pending_free_.end()) free_node.deps.push_back(it->second);
    users_[at].clear();
    free_node.deps.insert(free_node.deps.end(), copy_ids.begin(), copy_ids.end());
    const int free_id = add(std::move(free_node));
    versions_->commit_evict(plan_, copy_events, at);
    // Storage reuse: whatever next fills this location must wait for the free.
    pending_free_[at] = free_id;
  }

  int add(Node n) {
    // A location whose storage was freed is re-filled only after the free.
    auto after_free = [&](Location l) {
      if (auto it = pending_free_.find(l); it != pending_free_.end()) n.deps.push_back(it->second);
    };
    if (n.kind == Node::copy) after_free(n.dst);
    if (n.kind == Node::command) after_free(n.at);
    const int id = static_cast<int>(nodes_.size());
    if (n.kind == Node::copy) users_[n.src].push_back(id), users_[n.dst].push_back(id);
    if (n.kind == Node::command) users_[n.at].push_back(id);
    nodes_.push_back(std::move(n));
    return id;
  }

  // A "write" leaves every fourth 8-byte chunk alone: those bytes must keep
  // their old content, which is why partial writes migrate first.
  static bool writes_byte(Access a, std::uint64_t offset_in_use) {
    return a != Access::write || (offset_in_use / 8) % 4 != 3;
  }
  void apply_writes(const Node& cmd, std::vector<std::uint8_t>& mem) const {
    for (const Use& u : cmd.uses) {
      if (!writes(u.access)) continue;
      for (std::uint64_t i = 0; i < u.size; ++i)
        if (writes_byte(u.access, i)) mem[u.offset + i] = cmd.stamp;
    }
  }

  void execute(Node& n) {
    if (n.kind == Node::copy) {
      std::memcpy(memory_[n.dst].data() + n.offset, memory_[n.src].data() + n.offset, n.size);
    } else if (n.kind == Node::evict_free) {
      std::fill(memory_[n.at].begin(), memory_[n.at].end(), 0xEE);  // the storage is gone
    } else {
      std::vector<std::uint8_t>& mem = memory_[n.at];
      for (const Use& u : n.uses) {
        if (!reads_old_content(u.access)) continue;
        for (std::uint64_t i = u.offset; i < u.offset + u.size; ++i) {
          if (mem[i] != n.expected[i] && std::getenv("MODEL_DEBUG")) dump(i);
          ASSERT_EQ(mem[i], n.expected[i]) << "a read at location " << n.at << " saw a wrong byte at offset " << i;
        }
        ++reads_checked_;
      }
      apply_writes(n, mem);
    }
    n.done = true;
  }

  void dump(std::uint64_t byte) const {
    for (std::size_t k = 0; k < nodes_.size(); ++k) {
      const Node& n = nodes_[k];
      bool touches = n.kind == Node::evict_free;
      if (n.kind == Node::copy) touches = n.offset <= byte && byte < n.offset + n.size;
      for (const Use& u : n.uses) touches = touches || (u.offset <= byte && byte < u.offset + u.size);
      if (!touches) continue;
      std::fprintf(stderr, "node %zu kind %d at %u src %u dst %u [%llu,+%llu) done %d deps:", k, n.kind, n.at, n.src,
                   n.dst, (unsigned long long)n.offset, (unsigned long long)n.size, n.done);
      for (int d : n.deps) std::fprintf(stderr, " %d", d);
      for (const Use& u : n.uses)
        std::fprintf(stderr, " use[%llu,+%llu) a%d", (unsigned long long)u.offset, (unsigned long long)u.size,
                     static_cast<int>(u.access));
      std::fprintf(stderr, "\n");
    }
  }

  // Runs up to `budget` nodes whose dependencies are done, picked at random.
  void execute_some(int budget) {
    while (budget-- > 0) {
      std::vector<int> ready;
      for (int i = first_pending_; i < static_cast<int>(nodes_.size()); ++i) {
        const Node& n = nodes_[static_cast<std::size_t>(i)];
        if (n.done) continue;
        if (std::all_of(n.deps.begin(), n.deps.end(), [&](int d) { return nodes_[static_cast<std::size_t>(d)].done; }))
          ready.push_back(i);
      }
      if (ready.empty()) return;
      execute(nodes_[static_cast<std::size_t>(ready[rng_() % ready.size()])]);
      if (::testing::Test::HasFatalFailure()) return;
      while (first_pending_ < static_cast<int>(nodes_.size()) && nodes_[static_cast<std::size_t>(first_pending_)].done)
        ++first_pending_;
    }
  }

  std::mt19937_64 rng_;
  unsigned devices_;
  EventOps ops_;
  LinkCostModel cost_;
  std::optional<RangeVersions> versions_;
  Plan plan_;
  std::vector<Node> nodes_;
  std::vector<std::vector<std::uint8_t>> memory_;  // [location][byte]
  std::vector<std::uint8_t> reference_;
  std::map<int, int> refs_;
  std::map<Location, int> pending_free_;
  std::map<Location, std::vector<int>> users_;
  int first_pending_ = 0;
  int reads_checked_ = 0;
  std::uint64_t bytes_copied_ = 0;
};

struct Config {
  std::uint64_t seed;
  unsigned devices;
  bool direct_links;
};

class RangeVersionsModel : public ::testing::TestWithParam<Config> {};

}  // namespace

TEST_P(RangeVersionsModel, EveryScheduleReadsWhatSequentialOrderWrote) {
  const Config c = GetParam();
  Model m(c.seed, c.devices, c.direct_links);
  m.run(10000);
  if (HasFatalFailure()) return;
  m.expect_balanced_references();
}

INSTANTIATE_TEST_SUITE_P(Configs, RangeVersionsModel,
                         ::testing::Values(Config{1, 1, false}, Config{2, 2, false}, Config{3, 2, true},
                                           Config{4, 4, true}, Config{5, 4, false}, Config{6, 8, true},
                                           Config{7, 3, true}, Config{8, 0, false}),
                         [](const auto& test) {
                           return "seed" + std::to_string(test.param.seed) + "_dev" +
                                  std::to_string(test.param.devices) +
                                  (test.param.direct_links ? "_d2d" : "_viahost");
                         });

// The engine against a reference model, under arbitrary legal schedules.
//
// Random commands (reads, partial writes, read-writes, overwrites, copies
// within and between buffers) at random locations go through the engine
// into a ByteHost whose devices are too small for every buffer at once, so
// storage is evicted, written back, freed and reused all the time. The
// resulting graph of copies, commands and storage fences runs in a random
// order interleaved with the enqueues, moving real bytes. Nothing but the
// engine's dependencies orders anything, so every read must see exactly what
// a sequential run in enqueue order sees, in every schedule: that covers the
// planner's ordering, eviction write-backs, storage reuse behind fences,
// and all-or-nothing enqueues. Every event reference the engine takes must
// be dropped by the end.
//
// With faults on, the host also fails commands and copies (before they start
// or half-way) and the test fails some user events that gate commands. What
// a read must see is then known only once every command enqueued before it
// has ended: those commands in order, skipping the ones that were cancelled
// and leaving undefined what a command that failed half-way was to write
// (and what the engine reports lost). (A read may run before an earlier
// writer has ended: one queued behind a failure, doomed to fail with it,
// which the engine no longer orders anything after.) So reads keep what
// they saw, and the log of commands is replayed at the end to check them.
// The test also checks that the engine never makes a command wait for an
// event that had failed already, and that after every fault every buffer
// reads back whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <tuple>
#include <vector>

#include "byte_host.hpp"

using namespace memlayer;
using namespace memlayer::engine;
using engine::testing::ByteHost;
using engine::testing::Faults;
using engine::testing::HostBuffer;
using engine::testing::Task;
using migration::Access;
using migration::kHost;

namespace {

struct ModelBuffer {
  HostBuffer cookie;
  std::unique_ptr<Buffer> tracked;
  std::uint64_t lost = 0;  // tracked->bytes_lost() when last looked at
};

/// One buffer's content in the model: bytes, and which are defined.
struct Content {
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> known;  // 0: undefined (nobody wrote it, or a failure spoilt it)
  void forget(std::uint64_t off, std::uint64_t n) {
    std::fill(known.begin() + static_cast<long>(off), known.begin() + static_cast<long>(off + n), 0);
  }
};
using World = std::vector<Content>;  // by buffer

/// The commands in enqueue order, replayed once they have all ended: a read
/// sees the content after every command enqueued before it, skipping the
/// cancelled ones (they wrote nothing and the engine undoes them),
/// forgetting what a command that failed half-way was to write, and
/// forgetting a whole buffer where the engine reported content lost.
class Log {
 public:
  struct Write {
    std::size_t buffer;
    std::uint64_t offset, size;
  };
  explicit Log(World initial) : settled_(std::move(initial)) {}

  void command(const Task& task, std::vector<Write> writes, std::function<void(World&)> apply) {
    entries_.push_back({&task, std::move(writes), std::move(apply), 0});
  }
  void lost(std::size_t buffer) { entries_.push_back({nullptr, {}, {}, buffer}); }
  [[nodiscard]] std::size_t position() const { return entries_.size(); }

  /// The content as a read enqueued at `position` must see it. Positions
  /// must come in order, once every command before them has ended.
  const World& at(std::size_t position) {
    for (; folded_ < position; ++folded_) {
      EXPECT_TRUE(entries_[folded_].task == nullptr || entries_[folded_].task->done);
      replay(entries_[folded_], settled_);
    }
    return settled_;
  }

 private:
  struct Entry {
    const Task* task;  // nullptr: content of `lost_buffer` was lost here
    std::vector<Write> writes;
    std::function<void(World&)> apply;
    std::size_t lost_buffer;
  };
  static void replay(const Entry& e, World& w) {
    if (e.task == nullptr) {
      w[e.lost_buffer].forget(0, w[e.lost_buffer].bytes.size());
    } else if (!e.task->failed()) {
      e.apply(w);
    } else if (e.task->outcome == EventStatus::failed) {
      for (const Write& x : e.writes) w[x.buffer].forget(x.offset, x.size);
    }  // cancelled: as if never enqueued
  }
  World settled_;  // entries_[0, folded_) applied to the initial content
  std::size_t folded_ = 0;
  std::vector<Entry> entries_;
};

struct Config {
  std::uint64_t seed;
  unsigned devices;
  bool direct_links;
  bool defer_frees = false;  // a host like PoCL (ByteHost::defer_frees)
  Faults faults{};
  std::uint64_t device_bytes = 12 << 10;  // 3-12 of the 8 buffers; any two fit
  // 8 KiB: any two still fit, but often in no hole (Transaction::compact)
  bool kernels = false;  // most ranges whole buffers, as kernel arguments: the engine's fast path
};

// gtest prints a parameter it cannot name as raw bytes (padding included).
void PrintTo(const Config& c, std::ostream* os) {
  *os << "seed " << c.seed << ", " << c.devices << " devices" << (c.direct_links ? ", direct links" : "")
      << (c.defer_frees ? ", deferred frees" : "") << (c.faults.cancel + c.faults.fail > 0 ? ", faults" : "")
      << (c.faults.resource > 0 ? ", re-sourced copies" : "");
}

// Each configuration runs with the engine's fast path on (the default) and
// forced off: both must pass, deciding the same. One of the two runs has a
// host that tells the engine how each command ends (Host::tells_ends: the
// engine never asks about those), the other one that is asked (which run,
// by the seed: both fast-path settings meet both hosts across the configs).
class EngineModel : public ::testing::TestWithParam<std::tuple<Config, bool>> {};

TEST_P(EngineModel, EveryScheduleReadsWhatSequentialOrderWrote) {
  const Config cfg = std::get<0>(GetParam());
  const bool fast_path = std::get<1>(GetParam());
  const bool faulty = cfg.faults.cancel + cfg.faults.fail > 0;
  const bool tells = (cfg.seed + (fast_path ? 1 : 0)) % 2 == 0;
  SCOPED_TRACE(tells ? "the host tells how commands end" : "the host is asked how commands end");
  std::mt19937_64 rng(cfg.seed);
  ByteHost host(cfg.devices, cfg.device_bytes, cfg.seed * 7 + 1);
  host.tells = tells;
  host.defer_frees = cfg.defer_frees;
  host.faults = cfg.faults;
  for (unsigned a = 1; a <= cfg.devices && cfg.direct_links; ++a)
    for (unsigned b = 1; b <= cfg.devices; ++b)
      if (a != b) host.cost.set_direct(a, b, {1e-6, 50e9});
  std::uint64_t mismatches = 0, checked = 0, failed_enqueues = 0, busy = 0, final_reads_failed = 0;
  std::uint64_t commands = 0, commands_failed = 0, gates_failed = 0;
  EngineStats st{};
  {
    Engine engine(host);
    engine.set_fast_path(fast_path);
    if (tells) host.tell = &engine;
    Submission sub;
    std::vector<std::unique_ptr<ModelBuffer>> buffers;
    World initial;
    for (int i = 0; i < 8; ++i) {
      auto m = std::make_unique<ModelBuffer>();
      const std::uint64_t size = 1024 + rng() % (4096 - 1024);
      const bool given = i % 2 == 0;
      Content c{std::vector<std::uint8_t>(size), std::vector<std::uint8_t>(size, given ? 1 : 0)};
      for (auto& b : c.bytes) b = static_cast<std::uint8_t>(rng());
      if (given) m->cookie.host_copy = c.bytes;
      m->tracked = std::make_unique<Buffer>(engine, &m->cookie, size, given);
      buffers.push_back(std::move(m));
      initial.push_back(std::move(c));
    }
    std::vector<std::uint64_t> sizes;
    for (const Content& c : initial) sizes.push_back(c.bytes.size());
    Log log(std::move(initial));
    std::vector<Task*> gates, tasks;
    auto end_gates = [&] {
      for (Task* g : gates) {
        const bool ok = !faulty || rng() % 4 != 0;
        gates_failed += !ok;
        host.end_user(*g, ok);
      }
      gates.clear();
    };

    // Enqueues one command; `act` runs with its uses' bytes, `apply` is its
    // effect on the model, `writes` what it may write; `position`, if given,
    // gets its place in the log. False if the enqueue failed.
    auto enqueue = [&](const std::vector<BufferUse>& uses, Location at,
                       std::function<void(std::vector<std::uint8_t*>)> act, std::vector<Log::Write> writes,
                       std::function<void(World&)> apply, bool gated, std::size_t* position = nullptr) {
      auto pointers = std::make_shared<std::vector<std::uint8_t*>>();
      std::optional<EnqueueError> err;
      Task* cmd = nullptr;
      // A full device whose storage frees itself as queued work finishes:
      // run that work (a real host waits for it) and enqueue again.
      for (int attempt = 0; attempt < 8; ++attempt) {
        cmd = &host.command([pointers, act] { act(*pointers); });
        err = engine.enqueue(uses, at, cmd, sub);
        if (!err || err->code != EnqueueError::Code::device_busy) break;
        ++busy;
        end_gates();  // what it waits for may wait for them
        EXPECT_FALSE(sub.waits().empty());
        EXPECT_TRUE(host.run_until_done(sub.waits()));
      }
      if (err) {
        ++failed_enqueues;
        ADD_FAILURE() << "enqueue failed: " << err->message;
        return false;
      }
      cmd->name = sub.command();
      for (std::size_t i = 0; i < uses.size(); ++i)
        pointers->push_back(host.bytes(at, sub.storage()[i]) + uses[i].use.offset);
      // Content the engine found lost while planning (a failure) is
      // undefined from here on, this command included.
      for (std::size_t i = 0; i < buffers.size(); ++i) {
        const std::uint64_t lost = buffers[i]->tracked->bytes_lost();
        if (lost != buffers[i]->lost) log.lost(i), buffers[i]->lost = lost;
      }
      if (position != nullptr) *position = log.position();
      std::vector<Task*> user_waits;
      if (gated && !gates.empty()) user_waits.push_back(gates[rng() % gates.size()]);
      host.start(*cmd, sub.waits(), user_waits);
      if (!writes.empty()) log.command(*cmd, std::move(writes), std::move(apply));
      tasks.push_back(cmd);
      ++commands;
      return true;
    };
    // A read of [off, off + n) of buffer `a`: what it saw is checked at the end.
    struct Seen {
      std::size_t position, buffer;
      std::uint64_t offset;
      std::vector<std::uint8_t> bytes;
    };
    std::vector<Seen> seen;
    auto read = [&](std::size_t a, std::uint64_t off, std::uint64_t n, Location at, bool gated) {
      auto position = std::make_shared<std::size_t>(0);
      auto act = [&seen, a, off, n, position](std::vector<std::uint8_t*> p) {
        seen.push_back({*position, a, off, std::vector<std::uint8_t>(p[0], p[0] + n)});
      };
      return enqueue({{buffers[a]->tracked.get(), {off, n, Access::read}}}, at, act, {}, {}, gated, position.get());
    };

    for (int step = 0; step < 3000; ++step) {
      Location at = static_cast<Location>(rng() % (cfg.devices + 1));
      if (cfg.kernels && rng() % 8 != 0) at = 1;  // a stream of kernels on one device, now and then others
      const std::size_t ai = rng() % buffers.size(), bi = rng() % buffers.size();
      const std::uint64_t size = sizes[ai];
      std::uint64_t off = rng() % size, n = 1 + rng() % (size - off);
      // A quarter of the ranges are "sub-buffers" (256 bytes, aligned): used
      // again, a range is then often one span (RangeVersions' exact-span path).
      // Another quarter are whole buffers, as kernel arguments mostly are:
      // the steady state the engine's fast path takes.
      if (cfg.kernels && rng() % 8 != 0) {
        off = 0, n = size;
      } else if (const auto shape = rng() % 4; shape == 0) {
        off = off / 256 * 256, n = std::min<std::uint64_t>(256, size - off);
      } else if (shape == 1) {
        off = 0, n = size;
      }
      const int kind = static_cast<int>(rng() % 6);
      const bool gated = rng() % 6 == 0;
      Buffer* a = buffers[ai]->tracked.get();
      if (kind == 0) {
        read(ai, off, n, at, gated);
      } else if (kind == 1 || kind == 2) {  // overwrite, or a write of every other byte
        const bool all = kind == 1;
        std::vector<std::uint8_t> data(n);
        for (auto& x : data) x = static_cast<std::uint8_t>(rng());
        auto act = [data, all](std::vector<std::uint8_t*> p) {
          for (std::uint64_t i = 0; i < data.size(); ++i)
            if (all || i % 2 == 0) p[0][i] = data[i];
        };
        auto apply = [ai, data, all, off](World& w) {
          for (std::uint64_t i = 0; i < data.size(); ++i)
            if (all || i % 2 == 0) w[ai].bytes[off + i] = data[i], w[ai].known[off + i] = 1;
        };
        enqueue({{a, {off, n, all ? Access::overwrite : Access::write}}}, at, act, {{ai, off, n}}, apply, gated);
      } else if (kind == 3) {  // read_write: every byte + 1
        auto act = [n](std::vector<std::uint8_t*> p) {
          for (std::uint64_t i = 0; i < n; ++i) ++p[0][i];
        };
        auto apply = [ai, off, n](World& w) {
          for (std::uint64_t i = 0; i < n; ++i) ++w[ai].bytes[off + i];
        };
        enqueue({{a, {off, n, Access::read_write}}}, at, act, {{ai, off, n}}, apply, gated);
      } else if (kind == 4) {  // copy a's range into b, within one buffer only where the ranges are apart
        if (n > sizes[bi]) continue;
        const std::uint64_t to = rng() % (sizes[bi] - n + 1);
        if (ai == bi && off < to + n && to < off + n) continue;
        auto act = [n](std::vector<std::uint8_t*> p) { std::memmove(p[1], p[0], n); };
        auto apply = [ai, bi, off, to, n](World& w) {
          for (std::uint64_t i = 0; i < n; ++i)
            w[bi].bytes[to + i] = w[ai].bytes[off + i], w[bi].known[to + i] = w[ai].known[off + i];
        };
        enqueue({{a, {off, n, Access::read}}, {buffers[bi]->tracked.get(), {to, n, Access::overwrite}}}, at, act,
                {{bi, to, n}}, apply, gated);
      } else if (gates.size() < 3) {  // a user event that gates later commands for a while
        gates.push_back(&host.user_event());
      }
      if (!gates.empty() && rng() % 10 == 0) end_gates();
      host.run_some(static_cast<int>(rng() % 6));
    }
    end_gates();
    host.run_all();
    for (const Task* t : tasks) commands_failed += t->failed();

    // After whatever failed, every buffer reads back whole, everywhere.
    host.faults = {};
    const std::size_t before_final = tasks.size();
    for (std::size_t i = 0; i < buffers.size(); ++i) read(i, 0, sizes[i], static_cast<Location>(i % (cfg.devices + 1)), false);
    host.run_all();
    for (std::size_t i = before_final; i < tasks.size(); ++i) final_reads_failed += tasks[i]->failed();
    std::stable_sort(seen.begin(), seen.end(), [](const Seen& x, const Seen& y) { return x.position < y.position; });
    for (const Seen& r : seen) {
      const Content& c = log.at(r.position)[r.buffer];
      for (std::uint64_t i = 0; i < r.bytes.size(); ++i) {
        if (!c.known[r.offset + i]) continue;
        ++checked;
        if (r.bytes[i] != c.bytes[r.offset + i]) ++mismatches;
      }
    }

    st = engine.stats();
    EXPECT_EQ(st.enqueues, commands + busy + failed_enqueues);
    if (fast_path) {
      // With room for every buffer, a stream of kernels is mostly steady state.
      const bool steady = cfg.kernels && cfg.device_bytes >= (16 << 10);
      EXPECT_GT(st.fast_path, steady ? st.enqueues / (faulty ? 3 : 2) : 0) << "too few enqueues took the fast path to test it";
    } else {
      EXPECT_EQ(st.fast_path, 0u) << "the fast path was forced off";
    }
    if (cfg.device_bytes < (16 << 10)) {
      EXPECT_GT(st.evictions, 100u) << "the devices were meant to be too small";
      EXPECT_GT(st.write_backs, 10u);
    }
    if (cfg.defer_frees) {
      EXPECT_GT(busy, 0u) << "no enqueue ever had to wait for room";
    }
    if (cfg.device_bytes <= (8 << 10)) {
      EXPECT_GT(st.compactions, 0u) << "no command had to move its own buffers to make a hole";
    }
    sub.clear();
    buffers.clear();
    host.run_all();  // the fences of the buffers' last storage
    host.collect();
    host.tell = nullptr;  // the engine goes
  }
  EXPECT_EQ(failed_enqueues, 0u);
  EXPECT_EQ(mismatches, 0u) << "of " << checked << " bytes read";
  EXPECT_GT(checked, 10000u);
  EXPECT_EQ(host.failed_waits, 0) << "the engine named events that had failed already";
  EXPECT_EQ(final_reads_failed, 0u) << "a failure spread to commands enqueued after it was over";
  if (faulty) {
    EXPECT_GT(host.injected, 20);
    std::printf("%llu commands, %d faults injected, %llu user events failed, %llu commands failed (%d through "
                "dependencies), %llu bytes lost, %llu bytes checked\n",
                static_cast<unsigned long long>(commands), host.injected, static_cast<unsigned long long>(gates_failed),
                static_cast<unsigned long long>(commands_failed), host.cancelled_by_deps,
                static_cast<unsigned long long>(st.bytes_lost), static_cast<unsigned long long>(checked));
    if (cfg.faults.fail == 0 && !cfg.faults.report_failed && cfg.device_bytes >= (16 << 10)) {
      EXPECT_EQ(st.bytes_lost, 0u) << "nothing fails half-way and nothing is evicted: nothing may be lost";
    }
  }
  if (cfg.faults.resource > 0) {
    EXPECT_GT(host.resourced, 50) << "too few copies named another source to test them";
    std::printf("%d copies made from another source\n", host.resourced);
  }
  EXPECT_EQ(host.outstanding_refs(), 0) << "event references the engine never dropped";
  EXPECT_EQ(host.live_storage, 0) << "device storage never given back";
}

INSTANTIATE_TEST_SUITE_P(Configs, EngineModel,
                         ::testing::Combine(::testing::Values(Config{1, 1, false}, Config{2, 2, false}, Config{3, 3, false},
                                           Config{4, 3, true}, Config{5, 2, true}, Config{6, 3, false},
                                           Config{7, 2, false, true}, Config{8, 3, true, true},
                                           // faults: cancelled and half-done commands and copies
                                           Config{9, 2, true, false, {0.02, 0.02}},
                                           Config{10, 3, false, false, {0.02, 0.02}},
                                           Config{11, 3, true, true, {0.02, 0.02}},
                                           Config{12, 1, false, false, {0.05, 0.0}},
                                           // room for everything: a cancellation loses nothing
                                           Config{13, 3, true, false, {0.05, 0.0}, 64 << 10},
                                           Config{14, 2, false, false, {0.05, 0.0}, 64 << 10},
                                           // copies read from another source the engine named
                                           Config{15, 3, true, false, {0.0, 0.0, 0.5}},
                                           Config{16, 4, true, true, {0.0, 0.0, 0.5}},
                                           Config{17, 2, true, false, {0.0, 0.0, 0.5}, 64 << 10},
                                           Config{18, 4, true, false, {0.02, 0.02, 0.3}},
                                           // a host that reports every failure as `failed` (PoCL)
                                           Config{19, 3, true, true, {0.02, 0.02, 0.0, true}},
                                           Config{20, 3, true, false, {0.05, 0.0, 0.0, true}, 64 << 10},
                                           Config{21, 2, false, true, {0.03, 0.01, 0.0, true}},
                                           // devices where two buffers fit, but often in no hole
                                           Config{22, 3, true, false, {}, 8 << 10},
                                           Config{23, 2, false, true, {}, 8 << 10},
                                           Config{24, 3, true, false, {0.02, 0.02}, 8 << 10},
                                           // mostly whole buffers: the fast path's steady state, and its misses
                                           Config{25, 2, true, false, {}, 12 << 10, true},
                                           Config{26, 3, false, true, {0.02, 0.02}, 12 << 10, true},
                                           Config{27, 2, true, false, {}, 64 << 10, true},
                                           Config{28, 3, true, false, {0.05, 0.0, 0.0, true}, 64 << 10, true}),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<Config, bool>>& p) {
                           const Config& c = std::get<0>(p.param);
                           return "seed" + std::to_string(c.seed) + "_dev" + std::to_string(c.devices) +
                                  (c.direct_links ? "_d2d" : "") + (c.defer_frees ? "_deferred" : "") +
                                  (c.faults.cancel + c.faults.fail > 0 ? "_faults" : "") +
                                  (c.faults.resource > 0 ? "_resourced" : "") + (c.faults.report_failed ? "_as_pocl" : "") + (c.device_bytes >= (16 << 10) ? "_roomy" : "") +
                                  (c.device_bytes <= (8 << 10) ? "_tight" : "") + (c.kernels ? "_kernels" : "") +
                                  (std::get<1>(p.param) ? "" : "_slow_path");
                         });

}  // namespace

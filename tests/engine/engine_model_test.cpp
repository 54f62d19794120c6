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
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <vector>

#include "byte_host.hpp"

using namespace memlayer;
using namespace memlayer::engine;
using engine::testing::ByteHost;
using engine::testing::HostBuffer;
using engine::testing::Task;
using migration::Access;
using migration::kHost;

namespace {

struct ModelBuffer {
  HostBuffer cookie;
  std::unique_ptr<Buffer> tracked;
  std::vector<std::uint8_t> bytes;  // the content in enqueue order
  std::vector<std::uint8_t> known;  // 0: undefined (nobody wrote it)
};

struct Config {
  std::uint64_t seed;
  unsigned devices;
  bool direct_links;
  bool defer_frees = false;  // a host like PoCL (ByteHost::defer_frees)
};

// gtest prints a parameter it cannot name as raw bytes (padding included).
void PrintTo(const Config& c, std::ostream* os) {
  *os << "seed " << c.seed << ", " << c.devices << " devices" << (c.direct_links ? ", direct links" : "")
      << (c.defer_frees ? ", deferred frees" : "");
}

class EngineModel : public ::testing::TestWithParam<Config> {};

TEST_P(EngineModel, EveryScheduleReadsWhatSequentialOrderWrote) {
  const Config cfg = GetParam();
  std::mt19937_64 rng(cfg.seed);
  constexpr std::uint64_t kDeviceBytes = 12 << 10;  // 3-12 of the 8 buffers; any two fit
  ByteHost host(cfg.devices, kDeviceBytes, cfg.seed * 7 + 1);
  host.defer_frees = cfg.defer_frees;
  for (unsigned a = 1; a <= cfg.devices && cfg.direct_links; ++a)
    for (unsigned b = 1; b <= cfg.devices; ++b)
      if (a != b) host.cost.set_direct(a, b, {1e-6, 50e9});
  std::uint64_t mismatches = 0, checked = 0, failed_enqueues = 0, busy = 0;
  {
    Engine engine(host);
    Submission sub;
    std::vector<std::unique_ptr<ModelBuffer>> buffers;
    for (int i = 0; i < 8; ++i) {
      auto m = std::make_unique<ModelBuffer>();
      const std::uint64_t size = 1024 + rng() % (4096 - 1024);
      const bool given = i % 2 == 0;
      m->bytes.resize(size);
      m->known.assign(size, given ? 1 : 0);
      for (auto& b : m->bytes) b = static_cast<std::uint8_t>(rng());
      if (given) m->cookie.host_copy = m->bytes;
      m->tracked = std::make_unique<Buffer>(engine, &m->cookie, size, given);
      buffers.push_back(std::move(m));
    }

    for (int step = 0; step < 3000; ++step) {
      const Location at = static_cast<Location>(rng() % (cfg.devices + 1));
      ModelBuffer& a = *buffers[rng() % buffers.size()];
      ModelBuffer& b = *buffers[rng() % buffers.size()];
      const std::uint64_t size = a.bytes.size();
      const std::uint64_t off = rng() % size, n = 1 + rng() % (size - off);
      const int kind = static_cast<int>(rng() % 5);
      std::vector<BufferUse> uses;
      // What the command does once it runs, given its uses' bytes.
      std::function<void(std::vector<std::uint8_t*>)> act;
      // What the model does at enqueue, if the enqueue succeeds.
      std::function<void()> model;
      if (kind == 0) {  // read: checked against the model as of now
        uses.push_back({a.tracked.get(), {off, n, Access::read}});
        std::vector<std::uint8_t> expect(a.bytes.begin() + off, a.bytes.begin() + off + n);
        std::vector<std::uint8_t> known(a.known.begin() + off, a.known.begin() + off + n);
        act = [&, expect, known](std::vector<std::uint8_t*> p) {
          for (std::uint64_t i = 0; i < expect.size(); ++i) {
            if (!known[i]) continue;
            ++checked;
            if (p[0][i] != expect[i]) ++mismatches;
          }
        };
      } else if (kind == 1 || kind == 2) {  // overwrite, or a write of every other byte
        const bool all = kind == 1;
        uses.push_back({a.tracked.get(), {off, n, all ? Access::overwrite : Access::write}});
        std::vector<std::uint8_t> data(n);
        for (auto& x : data) x = static_cast<std::uint8_t>(rng());
        act = [data, all](std::vector<std::uint8_t*> p) {
          for (std::uint64_t i = 0; i < data.size(); ++i)
            if (all || i % 2 == 0) p[0][i] = data[i];
        };
        model = [&a, data, all, off] {
          for (std::uint64_t i = 0; i < data.size(); ++i)
            if (all || i % 2 == 0) a.bytes[off + i] = data[i], a.known[off + i] = 1;
        };
      } else if (kind == 3) {  // read_write: every byte + 1
        uses.push_back({a.tracked.get(), {off, n, Access::read_write}});
        act = [n](std::vector<std::uint8_t*> p) {
          for (std::uint64_t i = 0; i < n; ++i) ++p[0][i];
        };
        model = [&a, off, n] {
          for (std::uint64_t i = 0; i < n; ++i) ++a.bytes[off + i];
        };
      } else {  // copy a's range into b, within one buffer only where the ranges are apart
        if (n > b.bytes.size()) continue;
        const std::uint64_t to = rng() % (b.bytes.size() - n + 1);
        if (&a == &b && off < to + n && to < off + n) continue;
        uses.push_back({a.tracked.get(), {off, n, Access::read}});
        uses.push_back({b.tracked.get(), {to, n, Access::overwrite}});
        act = [n](std::vector<std::uint8_t*> p) { std::memmove(p[1], p[0], n); };
        model = [&a, &b, off, to, n] {
          for (std::uint64_t i = 0; i < n; ++i) b.bytes[to + i] = a.bytes[off + i], b.known[to + i] = a.known[off + i];
        };
      }

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
        ASSERT_FALSE(sub.waits().empty());
        ASSERT_TRUE(host.run_until_done(sub.waits()));
      }
      if (err) {
        ++failed_enqueues;
        ADD_FAILURE() << "enqueue failed: " << err->message;
        continue;
      }
      Task& cmd_task = *cmd;
      for (std::size_t i = 0; i < uses.size(); ++i)
        pointers->push_back(host.bytes(at, sub.storage()[i]) + uses[i].use.offset);
      host.start(cmd_task, sub.waits());
      if (model) model();
      host.run_some(static_cast<int>(rng() % 6));
    }
    host.run_all();
    const EngineStats st = engine.stats();
    EXPECT_GT(st.evictions, 100u) << "the devices were meant to be too small";
    EXPECT_GT(st.write_backs, 10u);
    if (cfg.defer_frees) {
      EXPECT_GT(busy, 0u) << "no enqueue ever had to wait for room";
    }
    sub.clear();
    buffers.clear();
    host.run_all();  // the fences of the buffers' last storage
    host.collect();
  }
  EXPECT_EQ(failed_enqueues, 0u);
  EXPECT_EQ(mismatches, 0u) << "of " << checked << " bytes read";
  EXPECT_GT(checked, 10000u);
  EXPECT_EQ(host.outstanding_refs(), 0) << "event references the engine never dropped";
  EXPECT_EQ(host.live_storage, 0) << "device storage never given back";
}

INSTANTIATE_TEST_SUITE_P(Configs, EngineModel,
                         ::testing::Values(Config{1, 1, false}, Config{2, 2, false}, Config{3, 3, false},
                                           Config{4, 3, true}, Config{5, 2, true}, Config{6, 3, false},
                                           Config{7, 2, false, true}, Config{8, 3, true, true}),
                         [](const ::testing::TestParamInfo<Config>& p) {
                           return "seed" + std::to_string(p.param.seed) + "_dev" + std::to_string(p.param.devices) +
                                  (p.param.direct_links ? "_d2d" : "") + (p.param.defer_frees ? "_deferred" : "");
                         });

}  // namespace

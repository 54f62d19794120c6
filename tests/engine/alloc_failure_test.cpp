// An enqueue is all or nothing when the host's memory runs out too: every
// allocation an enqueue makes is made to fail in turn (this binary's
// operator new counts down: alloc_countdown.hpp), and each such enqueue
// must return an error and leave every buffer as it was (its spans, their
// versions and holders, its storage), with no exception escaping and no
// buffer left locked. A scripted run exercises what the engine records:
// imports into two devices, sub-range writes that split spans, readers
// beyond the inline two, undo records, and copies; and writers that
// failed, which the next enqueue puts back. The same runs with the host
// throwing from each call that may fail (allocate, create_copy) in turn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "alloc_countdown.hpp"
#include "bounded.hpp"
#include "byte_host.hpp"

using namespace memlayer;
using namespace memlayer::engine;
using engine::testing::ByteHost;
using engine::testing::HostBuffer;
using engine::testing::Task;
using migration::Access;
using migration::EventStatus;
using migration::kHost;
using memlayer::testing::bounded;

namespace {

constexpr const char* kHostFailure = "the test's host failed";

// The test's host, with no allocation failing inside the calls a host must
// not fail (host.hpp: free, submit_copy, the noexcept ones), as a real
// host's do not: ByteHost allocates its bookkeeping there. `throws_left`
// counts down the calls that may fail (allocate, hole_victims, create_copy): the one
// that reaches 0 throws, as a host whose own code fails might.
class MustNotFail final : public Host {
 public:
  explicit MustNotFail(ByteHost& host) : host_(host) {}
  void retain(Event e, std::uint32_t n) noexcept override { host_.retain(e, n); }
  void retain_unshared(Event e) noexcept override { host_.retain_unshared(e); }
  void release(Event e, std::uint32_t n) noexcept override { host_.release(e, n); }
  EventStatus status(Event e) const noexcept override { return host_.status(e); }
  Allocation allocate(Location at, void* cookie, std::uint64_t size) override {
    may_throw();
    return host_.allocate(at, cookie, size);
  }
  void free(Location at, void* cookie, StorageHandle storage, std::uint64_t size,
            std::span<const Event> after) noexcept override {
    const Suspend s;
    host_.free(at, cookie, storage, size, after);
  }
  bool can_evict(void* cookie, Location at) const noexcept override { return host_.can_evict(cookie, at); }
  bool hole_victims(Location at, std::uint64_t size, std::span<const EvictionCandidate> candidates,
                    std::vector<std::size_t>& victims) override {
    may_throw();
    return host_.hole_victims(at, size, candidates, victims);
  }
  CopyHandle create_copy(const CopyRequest& r) override {
    may_throw();
    return host_.create_copy(r);
  }
  void submit_copy(CopyHandle copy, std::span<const Event> deps) noexcept override {
    const Suspend s;
    host_.submit_copy(std::move(copy), deps);
  }
  void discard_copy(CopyHandle copy) noexcept override {
    const Suspend s;
    host_.discard_copy(std::move(copy));
  }
  const migration::CostModel& cost_model() const noexcept override { return host_.cost_model(); }

  long throws_left = -1;  // negative: none throws

 private:
  void may_throw() {
    if (throws_left >= 0 && throws_left-- == 0) throw std::runtime_error(kHostFailure);
  }
  using Suspend = memlayer::testing::AllocationsSucceed;
  ByteHost& host_;
};

struct SpanState {
  std::uint64_t offset, size, version;
  std::uint64_t valid;  // LocationSet's bits
  friend bool operator==(const SpanState&, const SpanState&) = default;
};

struct BufferState {
  std::vector<SpanState> spans;
  std::vector<bool> storage;  // by location
  friend bool operator==(const BufferState&, const BufferState&) = default;
};

void PrintTo(const BufferState& b, std::ostream* os) {
  for (const SpanState& s : b.spans)
    *os << "[" << s.offset << ", +" << s.size << ") v" << s.version << " at 0x" << std::hex << s.valid << std::dec << "; ";
  *os << "storage";
  for (bool st : b.storage) *os << " " << st;
}

class AllocationFailure : public ::testing::Test {
 protected:
  explicit AllocationFailure(std::uint64_t device_bytes = 64 << 10) : host_(3, device_bytes, 1) {}
  ~AllocationFailure() override {
    host_.run_all();
    sub_.clear();
    buffers_.clear();
    cookies_.clear();
    engine_.reset();
    EXPECT_EQ(host_.outstanding_refs(), 0) << "event references the engine never dropped";
  }

  Buffer& make(std::uint64_t size) {
    cookies_.push_back(std::make_unique<HostBuffer>());
    cookies_.back()->host_copy.assign(size, 0x5A);
    buffers_.push_back(std::make_unique<Buffer>(*engine_, cookies_.back().get(), size, true));
    return *buffers_.back();
  }

  std::vector<BufferState> snapshot() const {
    std::vector<BufferState> all;
    for (const auto& b : buffers_) {
      BufferState s;
      b->walk([&](const migration::SpanInfo& i) {
        std::uint64_t bits = 0;
        i.valid.for_each([&](Location l) { bits |= std::uint64_t{1} << l; });
        // Where the spans are cut is no content: neighbours alike are one.
        if (!s.spans.empty() && s.spans.back().version == i.version && s.spans.back().valid == bits)
          s.spans.back().size += i.size;
        else
          s.spans.push_back({i.offset, i.size, i.version, bits});
      });
      for (Location at = 0; at <= 3; ++at) s.storage.push_back(b->has_storage(at));
      all.push_back(std::move(s));
    }
    return all;
  }

  // What an eviction made on the way may change and keep (it is committed
  // at once: doc/engine.md): where bytes are and the storage; not a version.
  static std::vector<BufferState> versions_only(std::vector<BufferState> all) {
    for (BufferState& b : all) {
      b.storage.clear();
      for (SpanState& x : b.spans) x.valid = 0;
      std::vector<SpanState> merged;
      for (const SpanState& x : b.spans) {
        if (!merged.empty() && merged.back().version == x.version) merged.back().size += x.size;
        else merged.push_back(x);
      }
      b.spans = std::move(merged);
    }
    return all;
  }

  std::uint64_t bytes_lost() const {
    std::uint64_t n = 0;
    for (const auto& b : buffers_) n += b->bytes_lost();
    return n;
  }

  // What fails in turn: an allocation (operator new), or a host call that
  // throws (MustNotFail::throws_left).
  enum class Fault : std::uint8_t { out_of_memory, host_throws };

  // Enqueues `uses` at `at` with the k-th allocation (or host call)
  // failing, for k = 0, 1, ... until an enqueue succeeds: each failed one
  // must change nothing (with `evicting`, nothing but what evictions moved;
  // or it may leave the buffers in one of the `settled` states: settling
  // failed writers changes no content, range_versions.hpp) and leave every
  // buffer unlocked. The command also waits for `gate`. Returns how many
  // allocations (host calls) the enqueue made.
  long enqueue_through_failures(const std::vector<BufferUse>& uses, Location at, bool evicting = false,
                                Fault fault = Fault::out_of_memory,
                                const std::vector<std::vector<BufferState>>& settled = {},
                                std::span<Task* const> gate = {}) {
    for (long k = 0;; ++k) {
      const auto before = snapshot();
      const int storage = host_.live_storage;
      const std::uint64_t lost = bytes_lost();
      const std::uint64_t fast = engine_->stats().fast_path;
      Task& cmd = host_.command(nullptr);
      std::optional<EnqueueError> failed;
      bool escaped = false;
      if (fault == Fault::out_of_memory) memlayer::testing::fail_allocation(k);
      else guarded_.throws_left = k;
      try {
        failed = engine_->enqueue(uses, at, &cmd, sub_);
      } catch (...) {
        escaped = true;
      }
      const bool ran_out = fault == Fault::out_of_memory ? memlayer::testing::stop_failing()
                                                         : std::exchange(guarded_.throws_left, -1) < 0;
      if (escaped) {
        // The engine's state is undefined now (its buffers may stay
        // locked): end here rather than hang in the destructors.
        std::fprintf(stderr, "FAILED: failure %ld: an exception escaped the enqueue\n", k);
        std::fflush(stderr);
        std::_Exit(1);
      }
      if (!failed) {
        EXPECT_FALSE(ran_out) << "failure " << k << " happened, yet the enqueue succeeded";
        host_.start(cmd, sub_.waits(), gate);
        sub_.clear();  // its references to the waits: the next attempt starts from none
        return k;
      }
      EXPECT_TRUE(ran_out) << "failure " << k << ": " << failed->message;
      if (fault == Fault::out_of_memory) {
        EXPECT_EQ(failed->code, EnqueueError::Code::host_out_of_memory) << failed->message;
      } else {
        EXPECT_EQ(failed->code, EnqueueError::Code::host_failed) << failed->message;
        EXPECT_NE(failed->message.find(kHostFailure), std::string::npos) << failed->message;
      }
      // Every buffer's lock is free again: snapshot() takes each.
      const auto after = bounded("a snapshot after a failed enqueue", 60, [&] { return snapshot(); });
      if (evicting) {
        EXPECT_EQ(versions_only(after), versions_only(before)) << "failure " << k << ": a version changed";
        EXPECT_EQ(bytes_lost(), 0u) << "failure " << k;
      } else {
        const bool settling = std::find(settled.begin(), settled.end(), after) != settled.end();
        EXPECT_TRUE(after == before || settling) << "failure " << k << ": a version, holder or storage changed\n"
                                                 << ::testing::PrintToString(before) << "\n became\n"
                                                 << ::testing::PrintToString(after);
        EXPECT_EQ(host_.live_storage, storage) << "failure " << k;
        EXPECT_EQ(bytes_lost(), lost) << "failure " << k;
      }
      // Failed in the fast path's check pass or not, it is no enqueue the
      // fast path took (EngineStats::fast_path).
      EXPECT_EQ(engine_->stats().fast_path, fast) << "failure " << k << ": counted as taken by the fast path";

      EXPECT_TRUE(sub_.waits().empty());
      host_.start(cmd, {});  // the host's own command, never used by the engine
      if (::testing::Test::HasFailure()) return k;
    }
  }

  // A scripted run of what the engine records, each enqueue through every
  // failure of `fault` in turn.
  void script(Fault fault) {
    Buffer& a = make(8192);
    Buffer& b = make(8192);
    struct Step {
      std::vector<BufferUse> uses;
      Location at;
    };
    const std::vector<Step> steps = {
        {{{&a, {0, 8192, Access::read}}}, 1},                                          // import: a copy, a storage
        {{{&a, {1024, 2048, Access::read_write}}, {&b, {0, 4096, Access::read}}}, 2},  // splits, two buffers
        {{{&a, {0, 8192, Access::read}}}, 3},                                          // pieces from two sources
        {{{&a, {512, 512, Access::read}}}, 1},
        {{{&a, {512, 512, Access::read}}}, 2},
        {{{&a, {512, 512, Access::read}}}, 3},  // a third reader: beyond the inline two
        {{{&a, {0, 8192, Access::overwrite}}, {&b, {4096, 4096, Access::write}}}, 1},  // `a` one span again
        // The fast path (engine.hpp): a writer, readers beyond the inline
        // two (room made in its check pass), a writer after them.
        {{{&a, {0, 8192, Access::read_write}}}, 1},
        {{{&a, {0, 8192, Access::read}}}, 1},
        {{{&a, {0, 8192, Access::read}}}, 1},
        {{{&a, {0, 8192, Access::read}}}, 1},
        {{{&a, {0, 8192, Access::write}}}, 1},
        {{{&b, {0, 8192, Access::read_write}}, {&a, {100, 200, Access::read}}}, kHost},
    };
    long failures = 0;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      failures += enqueue_through_failures(steps[i].uses, steps[i].at, false, fault);
      ASSERT_FALSE(HasFailure()) << "step " << i;
      if (i % 2 == 1) host_.run_all();  // some records end, others stay unfinished
    }
    EXPECT_GT(failures, 0) << "no enqueue allocated: the test tried no failure";
    EXPECT_GE(engine_->stats().fast_path, 4u) << "the script was to go through the fast path";
    // What the successful enqueues made still runs to its end: no dependency
    // on a copy or command a failed attempt left behind (run_all checks that
    // every submitted task became ready).
    host_.run_all();
  }

  ByteHost host_;
  MustNotFail guarded_{host_};
  std::unique_ptr<Engine> engine_ = std::make_unique<Engine>(guarded_);
  Submission sub_;
  std::vector<std::unique_ptr<HostBuffer>> cookies_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_F(AllocationFailure, EveryFailedAllocationFailsTheEnqueueAndChangesNothing) { script(Fault::out_of_memory); }

TEST_F(AllocationFailure, EveryHostExceptionFailsTheEnqueueAndChangesNothing) { script(Fault::host_throws); }

// Writers that fail: the next enqueue on their bytes puts back what they
// wrote over (RangeVersions::restore), the newest first, while host memory
// runs out at each allocation in turn. A failed enqueue may keep what it
// settled, whole (each writer put back, or not), as settling changes no
// content the host could see; nothing may be lost and no reference kept.
TEST_F(AllocationFailure, FailedWritersArePutBackWholeOrNotAtAll) {
  Buffer& a = make(8192);
  enqueue_through_failures({{&a, {0, 8192, Access::read}}}, 1);
  enqueue_through_failures({{&a, {2048, 4096, Access::read}}}, 2);
  enqueue_through_failures({{&a, {2048, 4096, Access::read}}}, 3);
  ASSERT_FALSE(HasFailure());
  host_.run_all();
  const auto original = snapshot();
  // Overwrites (no copy, so putting one back is exactly the state before
  // it), the first gated on a user event that fails, the second behind it.
  Task& gate = host_.user_event();
  const std::vector<Task*> gated{&gate};
  enqueue_through_failures({{&a, {1024, 4096, Access::overwrite}}}, 2, false, Fault::out_of_memory, {}, gated);
  const auto first_written = snapshot();
  enqueue_through_failures({{&a, {1024, 4096, Access::overwrite}}}, 1);
  ASSERT_FALSE(HasFailure());
  host_.end_user(gate, false);
  host_.run_all();  // both writers fail: the second waited for the first

  const long allocations =
      enqueue_through_failures({{&a, {0, 8192, Access::read}}}, 3, false, Fault::out_of_memory, {first_written, original});
  ASSERT_FALSE(HasFailure());
  EXPECT_GT(allocations, 0);
  host_.run_all();
  EXPECT_EQ(bytes_lost(), 0u);
  // Both writers undone: the versions are those before them.
  EXPECT_EQ(versions_only(snapshot()), versions_only(original));
}

// Devices with room for two of the buffers: the third evicts one, whose
// bytes are only on the device and still being written there (write-backs
// that wait for the writer, committed at once, the storage freed now), or
// are valid on the host too (nothing to write back).
class AllocationFailureUnderPressure : public AllocationFailure {
 protected:
  AllocationFailureUnderPressure() : AllocationFailure(16 << 10) {}

  void evictions(Fault fault) {
    Buffer& a = make(8192);
    Buffer& b = make(8192);
    Buffer& c = make(8192);
    long failures = 0;
    failures += enqueue_through_failures({{&a, {0, 8192, Access::read_write}}}, 1, false, fault);
    failures += enqueue_through_failures({{&b, {0, 8192, Access::read_write}}}, 1, false, fault);
    // Not run: a's and b's newest bytes are still being made on device 1.
    failures += enqueue_through_failures({{&c, {0, 8192, Access::read}}}, 1, true, fault);
    ASSERT_FALSE(HasFailure());
    host_.run_all();
    // Clean now: a buffer also valid on the host goes without a write-back.
    failures += enqueue_through_failures({{&a, {0, 8192, Access::read}}}, 1, true, fault);
    failures += enqueue_through_failures({{&b, {0, 4096, Access::read}}, {&c, {0, 4096, Access::read}}}, 2, true, fault);
    ASSERT_FALSE(HasFailure());
    host_.run_all();
    EXPECT_GT(engine_->stats().evictions, 0u) << "nothing was evicted: the test tried no eviction";
    EXPECT_GT(failures, 0);
    EXPECT_EQ(bytes_lost(), 0u);
  }
};

TEST_F(AllocationFailureUnderPressure, EvictionsOnTheWayLoseNothing) { evictions(Fault::out_of_memory); }

TEST_F(AllocationFailureUnderPressure, EvictionsOnTheWayLoseNothingWhenTheHostThrows) {
  evictions(Fault::host_throws);
}

// A victim whose complete bytes are being written back keeps its storage
// until they are (Transaction::write_back), so an enqueue that needs the
// room meanwhile fails device_busy, naming the write-back. Looking at that
// victim records the write-back to wait for, which allocates: running out
// of memory there must not leave the victim, or the buffer looked at
// before it, locked. Each attempt has a Submission of its own, whose
// empty scratch allocates all it records.
TEST_F(AllocationFailureUnderPressure, NoVictimStaysLockedWhenAnEnqueueRunsOutWhileLookingAtIt) {
  Buffer& a = make(8192);
  Buffer& b = make(8192);
  Buffer& c = make(8192);
  enqueue_through_failures({{&a, {0, 8192, Access::read_write}}}, 1);
  enqueue_through_failures({{&b, {0, 8192, Access::read_write}}}, 1);
  host_.run_all();  // a's and b's bytes are complete on device 1, and only there
  const std::vector<BufferUse> use_c = {{&c, {0, 8192, Access::read}}};
  {
    Task& cmd = host_.command(nullptr);
    const auto failed = engine_->enqueue(use_c, 1, &cmd, sub_);
    host_.start(cmd, {});
    ASSERT_TRUE(failed && failed->code == EnqueueError::Code::device_busy) << "a write-back was to be started";
    sub_.clear();
  }
  bool busy = false;
  long k = 0;
  for (; !busy && !HasFailure(); ++k) {
    const auto before = versions_only(snapshot());
    Submission attempt;
    Task& cmd = host_.command(nullptr);
    std::optional<EnqueueError> failed;
    memlayer::testing::fail_allocation(k);
    try {
      failed = engine_->enqueue(use_c, 1, &cmd, attempt);
    } catch (...) {
      std::fprintf(stderr, "FAILED: allocation %ld: an exception escaped the enqueue\n", k);
      std::fflush(stderr);
      std::_Exit(1);
    }
    const bool ran_out = memlayer::testing::stop_failing();
    host_.start(cmd, {});  // never used by the engine: the enqueue failed
    ASSERT_TRUE(failed) << "the write-backs have not run: there is no room yet";
    const auto after = bounded("a snapshot after a failed enqueue", 60, [&] { return snapshot(); });
    EXPECT_EQ(versions_only(after), versions_only(before)) << "allocation " << k << ": a version changed";
    if (ran_out) {
      EXPECT_EQ(failed->code, EnqueueError::Code::host_out_of_memory) << failed->message;
    } else {
      EXPECT_EQ(failed->code, EnqueueError::Code::device_busy) << failed->message;
      EXPECT_FALSE(attempt.waits().empty()) << "device_busy names what to wait for";
      busy = true;
    }
  }
  EXPECT_GT(k, 1) << "no allocation failed: the test tried no failure";
  host_.run_all();  // the write-backs end: now the room comes
  enqueue_through_failures(use_c, 1, true);
  host_.run_all();
  EXPECT_GT(engine_->stats().write_backs, 0u);
  EXPECT_EQ(bytes_lost(), 0u);
}

}  // namespace

// The runtime's enqueue is all or nothing when the host's memory runs out
// (doc/runtime.md, memory pressure; doc/engine.md, all or nothing): every
// allocation the test thread makes while a script of commands is enqueued
// is made to fail in turn (this binary's operator new counts down:
// alloc_countdown.hpp). Each
// enqueue that meets the failure must return an error with a message; no
// exception may escape and nothing may terminate; and afterwards every
// command that was enqueued completes and every byte of every buffer is what
// the commands that were enqueued made of it. The script reaches the paths
// that run after the engine has committed a command (the queue's order, the
// command's wiring), an eviction whose storage still has users queued
// (EngineHost::free fences it, with more users than its fence was made with
// room for) and hidden copies between two devices (EngineHost::create_copy,
// submit_copy).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "alloc_countdown.hpp"
#include "memlayer/drivers/sim_device.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"


using namespace memlayer;
using namespace memlayer::runtime;
using migration::Access;

namespace {

constexpr std::uint64_t kSize = 4096;  // each buffer; two fit on device 0
constexpr auto kWatchdog = std::chrono::seconds(60);

using Bytes = std::vector<std::uint8_t>;

Bytes filled(int seed) {
  Bytes v(kSize);
  for (std::size_t i = 0; i < kSize; ++i) v[i] = static_cast<std::uint8_t>(i * 13 + static_cast<std::size_t>(seed));
  return v;
}

// out[i] = in[i] + add: a kernel over (in: read, out: overwrite).
KernelFunction add_kernel(std::uint8_t add) {
  return [add](std::span<void* const> p) {
    const auto* in = static_cast<const std::uint8_t*>(p[0]);
    auto* out = static_cast<std::uint8_t*>(p[1]);
    for (std::size_t i = 0; i < kSize; ++i) out[i] = static_cast<std::uint8_t>(in[i] + add);
    return Status{};
  };
}

Bytes plus(const Bytes& in, std::uint8_t add) {
  Bytes out(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = static_cast<std::uint8_t>(in[i] + add);
  return out;
}

// Device 0 holds two buffers (an eviction makes room for a third); device 1
// has room for all. No peer link: a copy between them goes through the
// host copy (a write-back from one, then a copy to the other).
std::shared_ptr<Context> make_context() {
  std::vector<std::unique_ptr<DeviceDriver>> drivers;
  for (std::uint64_t memory : {2 * kSize, 16 * kSize}) {
    drivers::SimOptions o;
    o.memory_size = memory;
    std::vector<std::unique_ptr<drivers::SimDevice>> one;
    const Status s = drivers::SimDevice::create(1, o, one);
    EXPECT_TRUE(s.ok()) << s.message;
    drivers.push_back(std::move(one.at(0)));
  }
  auto made = Context::create(std::move(drivers));
  EXPECT_TRUE(made.ok()) << made.error().message;
  return made.value();
}

// One run of the script with the `fail_at`-th allocation of the test thread
// failing (counted from 0). Returns whether that allocation was reached.
bool run_script(const long n) {
  SCOPED_TRACE("allocation " + std::to_string(n) + " fails");
  long fail_at = n;
  auto ctx = make_context();
  auto q0 = ctx->create_queue(0).value();
  auto q1 = ctx->create_queue(1).value();
  Bytes a = filled(1), e = filled(2), b = filled(3), zero(kSize, 0);
  Buffer A = ctx->create_buffer(mem::kReadWrite | mem::kCopyHostPtr, kSize, a.data()).value();
  Buffer E = ctx->create_buffer(mem::kReadWrite | mem::kCopyHostPtr, kSize, e.data()).value();
  Buffer B = ctx->create_buffer(mem::kReadWrite | mem::kCopyHostPtr, kSize, zero.data()).value();
  Buffer C = ctx->create_buffer(mem::kReadWrite | mem::kCopyHostPtr, kSize, zero.data()).value();
  Event gate = ctx->create_user_event();
  const std::vector<Event> gated{gate};
  // What each buffer must hold at the end: a command whose enqueue failed
  // changed nothing.
  Bytes want_a = a, want_b = zero, want_c = zero;
  std::vector<Event> enqueued;

  // One enqueue with the countdown armed. An error must say something; an
  // exception must not come out at all.
  auto step = [&](const char* what, const std::function<Result<Event>()>& enqueue) {
    memlayer::testing::fail_allocation(fail_at);
    std::optional<Result<Event>> r;
    try {
      r.emplace(enqueue());
    } catch (const std::exception& x) {
      memlayer::testing::stop_counting();
      fail_at = -1;
      ADD_FAILURE() << what << ": an exception escaped the enqueue: " << x.what();
      return false;
    }
    fail_at = memlayer::testing::stop_counting();  // what is left of the countdown for the next step
    if (!r->ok()) {
      EXPECT_FALSE(r->error().message.empty()) << what << ": an error without a message";
      return false;
    }
    enqueued.push_back(r->value());
    return true;
  };

  // Arguments and kernels are made before the countdown is armed: only the
  // enqueue's own allocations are counted (a kernel is moved in, not copied).
  const std::vector<KernelArg> e_read{{E, Access::read}};
  const std::vector<KernelArg> b_to_c{{B, Access::read}, {C, Access::overwrite}};
  const std::vector<KernelArg> c_to_a{{C, Access::read}, {A, Access::overwrite}};
  const std::vector<KernelArg> a_to_b{{A, Access::read}, {B, Access::overwrite}};
  const KernelFunction reads = [](std::span<void* const>) { return Status{}; };
  std::vector<KernelFunction> gated_reads(5, reads);
  KernelFunction reads_again = reads;
  KernelFunction plus1 = add_kernel(1), plus2 = add_kernel(2), plus3 = add_kernel(3);

  // Readers of E on device 0 held back by the gate: E keeps queued users,
  // more than EngineHost::free()'s fence has room for when it is made.
  for (KernelFunction& k : gated_reads)
    step("read E on device 0", [&] { return q0->enqueue_kernel(std::move(k), e_read, gated); });
  // B written on device 1, C made from it there.
  if (step("write B on device 1", [&] { return q1->enqueue_write(B, 0, kSize, b.data(), false); })) want_b = b;
  if (step("C = B + 1 on device 1", [&] { return q1->enqueue_kernel(std::move(plus1), b_to_c); }))
    want_c = plus(want_b, 1);
  // A made from C on device 0: C comes from device 1 (hidden copies) and
  // device 0 is full, so E goes while its reader is still queued.
  if (step("A = C + 2 on device 0", [&] { return q0->enqueue_kernel(std::move(plus2), c_to_a); }))
    want_a = plus(want_c, 2);
  // E back on device 0 (A or C goes), then B made from A there.
  step("read E again on device 0", [&] { return q0->enqueue_kernel(std::move(reads_again), e_read); });
  if (step("B = A + 3 on device 0", [&] { return q0->enqueue_kernel(std::move(plus3), a_to_b); }))
    want_b = plus(want_a, 3);
  const bool reached = fail_at < 0;
  if (!reached) {
    // The script reached what it is for: E evicted (its readers still held
    // back by the gate), then A or C; copies through the host copy.
    const ContextStats stats = ctx->stats();
    EXPECT_GE(stats.evictions, 2u);
    EXPECT_GE(stats.copies_to_host, 1u);
    EXPECT_GE(stats.copies_from_host, 1u);
  }

  // With the countdown off: every command enqueued ends, and so do reads of
  // every buffer on both devices, all within the watchdog's time.
  EXPECT_TRUE(gate.set_user_status(cl::kComplete).ok());
  auto finished = std::async(std::launch::async, [&] {
    for (const Event& ev : enqueued) EXPECT_EQ(ev.wait(), cl::kComplete) << ev.error_message();
    const std::vector<std::pair<const Buffer*, const Bytes*>> all{{&A, &want_a}, {&E, &e}, {&B, &want_b}, {&C, &want_c}};
    for (Queue* q : {q0.get(), q1.get()}) {
      for (auto [buffer, want] : all) {
        Bytes got(kSize, 0xEE);
        auto r = q->enqueue_read(*buffer, 0, kSize, got.data(), true);
        EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
        EXPECT_TRUE(got == *want) << "buffer " << buffer->id() << " read on device " << q->device();
      }
    }
  });
  if (finished.wait_for(kWatchdog) != std::future_status::ready) {
    std::fprintf(stderr, "allocation %ld fails: the commands did not finish within %lld s (a hang)\n", n,
                 static_cast<long long>(kWatchdog.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  finished.get();
  return reached;
}

TEST(RuntimeAllocationFailure, EveryEnqueueIsAllOrNothing) {
  long n = 0;
  for (; n < 100000; ++n) {
    const bool reached = run_script(n);
    if (::testing::Test::HasFailure()) FAIL() << "allocation " << n << " of the script's enqueues failed the test";
    if (!reached) break;  // the whole script ran without meeting the failure
  }
  EXPECT_GT(n, 50) << "the script made fewer allocations than expected";
}

}  // namespace

namespace {

// A host out of memory for good while an enqueue evicts: the enqueue fails
// with kOutOfHostMemory at once, whichever of its allocations is the first
// to fail: the eviction's write-back included (EngineHost::create_copy),
// which is no "busy" location to wait and try again for (a write-back
// refused for a buffer being destroyed is: engine/room_wait.hpp).
TEST(RuntimeAllocationFailure, AnEnqueueOutOfHostMemoryForGoodFailsAtOnce) {
  using Clock = std::chrono::steady_clock;
  for (long n = 0;; ++n) {
    SCOPED_TRACE("allocations fail from " + std::to_string(n) + " on");
    ContextOptions options;
    options.room_wait = std::chrono::milliseconds(2000);
    std::vector<std::unique_ptr<DeviceDriver>> drivers;
    drivers::SimOptions o;
    o.memory_size = 2 * kSize;
    std::vector<std::unique_ptr<drivers::SimDevice>> one;
    ASSERT_TRUE(drivers::SimDevice::create(1, o, one).ok());
    drivers.push_back(std::move(one.at(0)));
    auto ctx = Context::create(std::move(drivers), options).value();
    auto q = ctx->create_queue(0).value();
    Bytes zero(kSize, 0), got(kSize, 0);
    // A and B written on the device only: evicting either writes it back.
    Buffer A = ctx->create_buffer(mem::kReadWrite, kSize, nullptr).value();
    Buffer B = ctx->create_buffer(mem::kReadWrite, kSize, nullptr).value();
    Buffer C = ctx->create_buffer(mem::kReadWrite | mem::kCopyHostPtr, kSize, zero.data()).value();
    const Bytes a = filled(1), b = filled(2);
    ASSERT_TRUE(q->enqueue_write(A, 0, kSize, a.data(), true).ok());
    ASSERT_TRUE(q->enqueue_write(B, 0, kSize, b.data(), true).ok());
    KernelFunction reads = [](std::span<void* const>) { return Status{}; };
    const std::vector<KernelArg> c_read{{C, Access::read}};

    memlayer::testing::fail_allocations_from(n);
    const auto start = Clock::now();
    Result<Event> r = q->enqueue_kernel(std::move(reads), c_read);
    const auto took = Clock::now() - start;
    const bool failed_within = memlayer::testing::stop_counting() < 0;
    if (r.ok()) {
      ASSERT_FALSE(failed_within) << "an enqueue that met the failure succeeded";
      EXPECT_EQ(r.value().wait(), cl::kComplete);
      EXPECT_GE(ctx->stats().evictions, 1u);
      EXPECT_GT(n, 3) << "the enqueue made fewer allocations than expected";
      break;  // the whole enqueue ran without meeting the failure
    }
    EXPECT_EQ(r.error().code, cl::kOutOfHostMemory) << r.error().message;
    EXPECT_LT(took, std::chrono::milliseconds(1000)) << "it waited for room: " << r.error().message;
    // Nothing changed: A and B still read back whole.
    ASSERT_TRUE(q->enqueue_read(A, 0, kSize, got.data(), true).ok());
    EXPECT_EQ(got, a);
    ASSERT_TRUE(q->enqueue_read(B, 0, kSize, got.data(), true).ok());
    EXPECT_EQ(got, b);
    if (HasFailure()) return;
  }
}

}  // namespace

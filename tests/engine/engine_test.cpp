// The engine case by case: all-or-nothing enqueues, eviction choices and
// write-backs, undefined content, storage handed back after its users.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "byte_host.hpp"
#include "memlayer/engine/room_wait.hpp"

using namespace memlayer;
using namespace memlayer::engine;
using engine::testing::ByteHost;
using engine::testing::HostBuffer;
using engine::testing::Task;
using migration::Access;
using migration::kHost;

namespace {

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() : host_(2, 8 << 10, 1) {}
  ~EngineTest() override {
    sub_.clear();
    buffers_.clear();
    cookies_.clear();
    engine_.reset();
    EXPECT_EQ(host_.outstanding_refs(), 0) << "event references the engine never dropped";
  }

  Buffer& make(std::uint64_t size, bool host_content) {
    cookies_.push_back(std::make_unique<HostBuffer>());
    if (host_content) cookies_.back()->host_copy.assign(size, 0x5A);
    buffers_.push_back(std::make_unique<Buffer>(*engine_, cookies_.back().get(), size, host_content));
    return *buffers_.back();
  }

  // Enqueues one command; on success starts it and returns its task.
  Task* enqueue(std::vector<BufferUse> uses, Location at, std::optional<EnqueueError>* error = nullptr) {
    Task& cmd = host_.command(nullptr);
    auto failed = engine_->enqueue(uses, at, &cmd, sub_);
    if (error != nullptr) *error = failed;
    if (failed) return nullptr;
    host_.start(cmd, sub_.waits());
    return &cmd;
  }

  // The same for a command that also waits for `gate` (a user event):
  // queued until the test ends the gate. Never fails.
  Task& enqueue_behind(Task& gate, std::vector<BufferUse> uses, Location at) {
    Task& cmd = host_.command(nullptr);
    const auto failed = engine_->enqueue(uses, at, &cmd, sub_);
    EXPECT_FALSE(failed) << failed->message;
    const std::vector<Task*> gated{&gate};
    host_.start(cmd, sub_.waits(), gated);
    return cmd;
  }

  // 1,100 writers of all of `a` (64 bytes) on device 1, more than the undo
  // records a buffer keeps, ended failed without running (the runtime
  // fails a node at once when any dependency fails); then `a` is
  // destroyed and a buffer filling device 1 placed over its storage: that
  // command, returned, must wait for whatever still uses the storage.
  Task* forget_writers_then_reuse(Buffer& a) {
    std::vector<Task*> writers;
    for (int i = 0; i < 1100; ++i) {
      writers.push_back(enqueue({{&a, {0, 64, Access::read_write}}}, 1));
      EXPECT_NE(writers.back(), nullptr) << "writer " << i;
      if (writers.back() == nullptr) return nullptr;
      sub_.clear();
    }
    for (Task* t : writers) {  // failed without running: they wrote nothing
      t->done = true;
      t->outcome = EventStatus::cancelled;
    }
    buffers_.erase(std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.get() == &a; }));
    Buffer& b = make(8 << 10, false);  // the whole device: over a's storage
    Task* next = enqueue({{&b, {0, 8 << 10, Access::overwrite}}}, 1);
    EXPECT_NE(next, nullptr);
    sub_.clear();
    return next;
  }

  // Overwrites all of `b` with `v` on device 1: a command the host runs
  // when the test runs its tasks.
  void write(Buffer& b, std::uint8_t v) {
    Task& cmd = host_.command(nullptr);
    ASSERT_FALSE(engine_->enqueue({{{&b, {0, b.size(), Access::overwrite}}}}, 1, &cmd, sub_));
    std::uint8_t* at = host_.bytes(1, sub_.storage()[0]);
    cmd.work = [at, v, n = b.size()] { std::memset(at, v, n); };
    host_.start(cmd, sub_.waits());
    sub_.clear();
  }

  // Device 1 (8 KiB) filled by two 4 KiB buffers, both also on the host,
  // and a command on the second and a new 4 KiB buffer there: only the
  // first can make room for it.
  struct TwoResident {
    Buffer& first;
    Buffer& second;
    Buffer& fresh;
    std::vector<BufferUse> command;
  };
  TwoResident fill_with_two() {
    Buffer& first = make(4096, true);
    Buffer& second = make(4096, true);
    EXPECT_NE(enqueue({{&first, {0, 4096, Access::read}}}, 1), nullptr);
    EXPECT_NE(enqueue({{&second, {0, 4096, Access::read}}}, 1), nullptr);
    host_.run_all();
    Buffer& fresh = make(4096, false);
    return {first, second, fresh, {{&second, {0, 4096, Access::read}}, {&fresh, {0, 4096, Access::overwrite}}}};
  }

  // Device 1 (8 KiB) filled by two 4 KiB buffers whose bytes (0xA1, 0xB2)
  // are only there: evicting either writes it back.
  std::pair<Buffer&, Buffer&> fill_with_two_only_there() {
    Buffer& a = make(4096, false);
    Buffer& b = make(4096, false);
    write(a, 0xA1);
    write(b, 0xB2);
    host_.run_all();
    return {a, b};
  }

  // Enqueues `uses` at device 1 from another thread, now (while this one
  // is inside a host call, holding what the engine holds there).
  std::optional<EnqueueError> enqueue_from_another_thread(const std::vector<BufferUse>& uses, Submission& sub) {
    std::optional<EnqueueError> failed;
    std::thread([&] { failed = engine_->enqueue(uses, 1, &host_.command(nullptr), sub); }).join();
    return failed;
  }

  // Enqueues `uses` at device 1 with `sub`, which must succeed, and runs everything.
  void enqueue_and_run(const std::vector<BufferUse>& uses, Submission& sub) {
    Task& cmd = host_.command(nullptr);
    const auto failed = engine_->enqueue(uses, 1, &cmd, sub);
    ASSERT_FALSE(failed) << failed->message;
    host_.start(cmd, sub.waits());
    sub.clear();
    host_.run_all();
  }

  ByteHost host_;
  std::unique_ptr<Engine> engine_ = std::make_unique<Engine>(host_);
  Submission sub_;
  std::vector<std::unique_ptr<HostBuffer>> cookies_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_F(EngineTest, UndefinedContentNeverMigrates) {
  Buffer& b = make(4096, false);
  for (Location at : {1u, 2u, kHost, 1u}) ASSERT_NE(enqueue({{&b, {0, 4096, Access::read}}}, at), nullptr);
  host_.run_all();
  EXPECT_EQ(host_.copies_created, 0) << "uninitialised bytes were copied";
  EXPECT_EQ(engine_->stats().bytes_migrated, 0u);
  // Given content does migrate.
  Buffer& given = make(4096, true);
  ASSERT_NE(enqueue({{&given, {0, 4096, Access::read}}}, 1), nullptr);
  EXPECT_EQ(engine_->stats().bytes_migrated, 4096u);
}

// A kernel with many buffer arguments is named in hundreds of records
// (planner records, storage users, waits): the host sees one reference
// taken for its command (the command table's) and one for its wait.
TEST_F(EngineTest, AnEnqueueHandsTheHostOneReferenceCountPerEvent) {
  constexpr int kBuffers = 64;
  std::vector<BufferUse> uses;
  for (int i = 0; i < kBuffers; ++i) uses.push_back({&make(64, false), {0, 64, Access::read_write}});
  Task* first = enqueue(uses, 1);
  ASSERT_NE(first, nullptr);
  const int calls_before = host_.reference_calls;
  const int unshared_before = host_.unshared_retains;
  Task* second = enqueue(uses, 1);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(host_.unshared_retains - unshared_before, 1)
      << "the new command's reference, taken while the event is the host's alone (Host::retain_unshared)";
  // The wait is leased from the command table (CommandTable::lease_host),
  // not counted: no host call for it, now or at clear().
  EXPECT_EQ(host_.reference_calls - calls_before, 1) << "one retain of the new command, none for its wait";
  // The new command waits for the old one once, not once per buffer.
  ASSERT_EQ(sub_.waits().size(), 1u);
  EXPECT_EQ(sub_.waits()[0], first);
  host_.run_all();
}

// A failed command must read "failed" while a record names it (its undo
// is still to be put back; what waits for it must fail), so the engine's
// command table keeps its event; once no buffer names it, the event goes
// back to the host (Engine::sweep_failed), not only when the engine goes.
TEST_F(EngineTest, AFailedCommandsEventGoesBackOnceNoBufferNamesIt) {
  std::vector<Task*> failed;
  for (int i = 0; i < 300; ++i) {
    Buffer& b = make(64, false);
    Task& gate = host_.user_event();
    Task& writer = enqueue_behind(gate, {{&b, {0, 64, Access::read_write}}}, 1);
    sub_.clear();
    host_.end_user(gate, false);
    host_.run_all();
    ASSERT_TRUE(writer.failed());
    failed.push_back(&writer);
    ASSERT_NE(enqueue({{&b, {0, 64, Access::read}}}, 1), nullptr);  // sees the failure, puts b back
    host_.run_all();
    buffers_.pop_back();  // nothing names the writer any more
  }
  EXPECT_EQ(failed.front()->refs, 0) << "the first failed command's event is still held";
  int held = 0;
  for (const Task* t : failed) held += t->refs > 0 ? 1 : 0;
  EXPECT_LE(held, 256) << "failed commands' events pile up";
}

// A host's completion path tells the engine (Engine::ended): the
// engine's reference to the event goes back there and then, not at a later
// enqueue's look, and the command reads completed without asking the host.
TEST_F(EngineTest, ACommandToldCompletedGivesItsEventBackAtOnce) {
  Buffer& b = make(4096, false);
  Task* writer = enqueue({{&b, {0, 4096, Access::read_write}}}, 1);
  ASSERT_NE(writer, nullptr);
  const CommandName name = sub_.command();
  ASSERT_NE(name, CommandName::none);
  sub_.clear();
  EXPECT_EQ(sub_.command(), CommandName::none) << "clear() keeps the last command's name";
  host_.run_all();
  ASSERT_TRUE(writer->done);
  EXPECT_EQ(writer->refs, 1) << "the command table's reference";

  engine_->ended(name, EventStatus::running);  // not an end: nothing happens
  EXPECT_EQ(writer->refs, 1);
  engine_->ended(name, EventStatus::completed);
  EXPECT_EQ(writer->refs, 0) << "told completed, the engine still holds the event";
  engine_->ended(name, EventStatus::completed);  // again, and a name of nothing: nothing happens
  engine_->ended(name, EventStatus::failed);
  engine_->ended(CommandName::none, EventStatus::completed);
  EXPECT_EQ(writer->refs, 0);

  // The next command over b neither waits for the writer nor asks about it.
  const long looks = host_.status_calls;
  Task* reader = enqueue({{&b, {0, 4096, Access::read}}}, 1);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(sub_.waits().empty());
  EXPECT_EQ(host_.status_calls, looks) << "the host was asked about a command it said had completed";
  EXPECT_NE(sub_.command(), name) << "a recycled name names the new command, under a new generation";
  host_.run_all();
}

// An engine over `host` and one 64-byte buffer of undefined content, for
// the tests of how commands' ends reach the engine.
struct OneBuffer {
  explicit OneBuffer(ByteHost& h) : host(h), engine(h), b(engine, &cookie, 64, false) {}
  // Enqueues a command using bytes [0, size) at device 1 with `access`,
  // names it (Task::name), starts it after `gates`, and returns it; `bytes`
  // is where it runs.
  Task& enqueue(Access access, std::span<Task* const> gates = {}, std::uint64_t size = 64) {
    Task& t = host.command(nullptr);
    EXPECT_FALSE(engine.enqueue({{{&b, {0, size, access}}}}, 1, &t, sub));
    t.name = sub.command();
    bytes = host.bytes(1, sub.storage()[0]);
    host.start(t, sub.waits(), gates);
    sub.clear();
    return t;
  }
  ByteHost& host;
  Engine engine;
  HostBuffer cookie;
  Buffer b;
  Submission sub;
  std::uint8_t* bytes = nullptr;
};

// The undo records of writers that all completed go with one look
// (RangeVersions::trim_from_first), and their writers are told to the
// command table, which gives their events back, unless the host tells the
// engine of every end itself (Host::tells_ends): then the
// table waits for the host, and those events stay held until it tells.
TEST(EngineCompletions, ThePlannerTellsTheTableOnlyWhenTheHostDoesNot) {
  for (const bool tells : {false, true}) {
    SCOPED_TRACE(tells ? "the host tells completions" : "the host does not");
    ByteHost host(1, 8 << 10, 1);
    host.tells = tells;
    std::vector<Task*> writers;
    {
      OneBuffer o(host);
      for (int i = 0; i < 12; ++i) writers.push_back(&o.enqueue(Access::read_write));
      host.run_all();
      // Half the buffer: the general pipeline, whose plan drops the records.
      o.enqueue(Access::read_write, {}, 32);
      host.run_all();
      // The oldest and the newest writer were looked at; the ten between
      // were not.
      int held = 0;
      for (int i = 1; i < 11; ++i) held += writers[i]->refs > 0 ? 1 : 0;
      EXPECT_EQ(held, tells ? 10 : 0) << "writers the engine was not told of and still holds";
      for (const Task* w : writers) o.engine.ended(w->name, EventStatus::completed);
      for (const Task* w : writers) EXPECT_EQ(w->refs, 0) << "told completed, task " << w->id << " is still held";
    }
  }
}

// What an enqueue hands back to wait for stays alive until the caller
// lets go of it (Submission::clear), whatever its command does meanwhile,
// with no host reference taken for it: the command table keeps its own
// while the wait is leased (CommandTable::lease_host; a failed command's
// slot, swept meanwhile, the CommandTable tests cover).
TEST(EngineWaits, AWaitStaysAliveUntilTheSubmissionIsClearedWithNoHostReference) {
  ByteHost host(1, 8 << 10, 1);
  host.tells = true;
  OneBuffer o(host);
  host.tell = &o.engine;
  Task& gate = host.user_event();
  const std::vector<Task*> gated{&gate};
  Task& writer = o.enqueue(Access::read_write, gated);
  Task& reader = host.command(nullptr);
  const int calls = host.reference_calls;
  ASSERT_FALSE(o.engine.enqueue({{{&o.b, {0, 64, Access::read}}}}, 1, &reader, o.sub));
  EXPECT_EQ(host.reference_calls - calls, 1) << "the reader's own retain, and none for its wait";
  ASSERT_EQ(o.sub.waits().size(), 1u);
  EXPECT_EQ(o.sub.waits()[0], &writer);
  const std::vector<Event> waits(o.sub.waits().begin(), o.sub.waits().end());
  // The writer completes, told to the engine, while the wait is held.
  host.end_user(gate, true);
  ASSERT_TRUE(host.run_until_done(std::vector<Event>{&writer}));
  ASSERT_EQ(writer.outcome, EventStatus::completed);
  EXPECT_GT(writer.refs, 0) << "the waited event went back to the host while the wait was held";
  host.start(reader, waits);
  o.sub.clear();
  EXPECT_EQ(writer.refs, 0) << "the wait was let go of, yet the engine still holds the event";
  host.run_all();
}

// A host that tells how each command ends (Host::tells_ends) is never
// asked about the engine's commands: a queue of writers none of which has
// run costs no status call (an asked host: one per enqueue, the
// QueuedWritersCostOneStatusLookPerEnqueue test). A failure it tells is
// undone at the next enqueue, as one the engine asked about.
TEST(EngineEnds, AHostThatTellsEndsIsNeverAskedAndItsFailuresAreUndone) {
  ByteHost host(1, 8 << 10, 1);
  host.tells = true;
  {
    OneBuffer o(host);
    host.tell = &o.engine;
    auto write = [&](Access access, std::uint8_t value, std::span<Task* const> gates) {
      Task& t = o.enqueue(access, gates);
      t.work = [at = o.bytes, value] { std::memset(at, value, 64); };
    };
    write(Access::overwrite, 0x11, {});
    host.run_all();
    Task* gate = &host.user_event();
    for (int i = 0; i < 20; ++i) write(Access::read_write, 0x22, i == 0 ? std::span(&gate, 1) : std::span<Task*>());
    EXPECT_EQ(host.status_calls, 0) << "the host was asked about commands whose ends it tells";

    host.end_user(*gate, false);  // the 20 writers fail, told as they end
    host.run_all();
    int read = -1;
    Task& reader = o.enqueue(Access::read);
    reader.work = [at = o.bytes, &read] { read = at[0]; };
    host.run_all();
    EXPECT_FALSE(reader.failed()) << "the reader waited for a failed writer: the failures told were not undone";
    EXPECT_EQ(host.failed_waits, 0);
    EXPECT_EQ(read, 0x11) << "the content before the failed writers";
    EXPECT_EQ(host.status_calls, 0);
    host.tell = nullptr;
  }
  EXPECT_EQ(host.outstanding_refs(), 0);
}

// A host that says it tells ends but misses them: once the command table's
// free slots run out it asks the host about the slots still running
// (CommandTable::look_again), so the completed commands' events go back
// and the table stops growing.
TEST(EngineEnds, EndsTheHostMissedAreFoundWhenTheSlotsRunOut) {
  ByteHost host(1, 8 << 10, 1);
  host.tells = true;  // and host.tell stays null: it tells nothing
  OneBuffer o(host);
  for (int i = 0; i < 10000; ++i) {
    o.enqueue(Access::read_write);
    host.run_all();
  }
  EXPECT_GT(host.status_calls, 0);
  EXPECT_LT(host.outstanding_refs(), 4200) << "events of completed commands the engine never gave back";
}

// A failed enqueue names no command: there is nothing to tell.
TEST_F(EngineTest, AFailedEnqueueNamesNoCommand) {
  Buffer& b = make(16 << 10, false);  // larger than device 1
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue({{&b, {0, b.size(), Access::read_write}}}, 1, &error), nullptr);
  ASSERT_TRUE(error);
  EXPECT_EQ(sub_.command(), CommandName::none);
}

TEST_F(EngineTest, AFailedEnqueueLeavesNoStorageNoVersionNoCopy) {
  Buffer& small = make(4096, true);
  ASSERT_NE(enqueue({{&small, {0, 4096, Access::read}}}, 1), nullptr);
  host_.run_all();
  const int storage = host_.live_storage, created = host_.copies_created;
  // Writes `small` on device 2 (a copy would bring it there) but also needs
  // a buffer larger than the device.
  Buffer& huge = make(16 << 10, false);
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue({{&small, {0, 4096, Access::read_write}}, {&huge, {0, 16 << 10, Access::read}}}, 2, &error),
            nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, EnqueueError::Code::device_full);
  EXPECT_NE(error->message.find("16384-byte"), std::string::npos) << error->message;
  EXPECT_EQ(host_.live_storage, storage) << "storage placed for the failed command stayed";
  EXPECT_FALSE(small.has_storage(2));
  EXPECT_FALSE(huge.has_storage(2));
  EXPECT_TRUE(small.valid_at(1, 0, 4096)) << "a version changed";
  EXPECT_TRUE(small.valid_at(kHost, 0, 4096));
  EXPECT_FALSE(small.valid_at(2, 0, 4096));
  EXPECT_EQ(host_.copies_created, created) << "the copy for `small` is made only once every buffer is placed";
  EXPECT_TRUE(sub_.waits().empty());
}

// A command whose own buffers together exceed the device fails at once,
// naming the sizes: nothing evicted for it, no device_busy to wait on
// (with defer_frees, as in PoCL, an eviction under queued work would
// have made one), every byte where it was.
TEST_F(EngineTest, ACommandLargerThanTheDeviceFailsAtOnceEvictingNothing) {
  host_.defer_frees = true;
  Buffer& resident = make(4096, true);
  Task* user = enqueue({{&resident, {0, 4096, Access::read_write}}}, 1);  // not run: its storage stays busy
  ASSERT_NE(user, nullptr);
  Buffer& a = make(4096, true);
  Buffer& b = make(6144, true);
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue({{&a, {0, 4096, Access::read}}, {&b, {0, 6144, Access::read}}}, 1, &error), nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, EnqueueError::Code::device_full) << error->message;
  for (const char* part : {"10240 bytes", "4096-byte", "6144-byte", "8192"})
    EXPECT_NE(error->message.find(part), std::string::npos) << part << " not in: " << error->message;
  EXPECT_EQ(engine_->stats().evictions, 0u) << "evicted for a command that could never fit";
  EXPECT_TRUE(resident.has_storage(1));
  EXPECT_TRUE(sub_.waits().empty()) << "nothing to wait for: waiting cannot make room";
  // One of them alone fits, next to the resident buffer.
  ASSERT_NE(enqueue({{&a, {0, 4096, Access::read}}}, 1), nullptr);
  host_.run_all();
  EXPECT_TRUE(resident.valid_at(1, 0, 4096));
}

// Device 1 (8 KiB) holds A, X, B, Y (2 KiB each, in that order); X and Y
// can go, leaving two 2 KiB holes: a command on A, B and a new 4 KiB C fits
// the device but no hole. Its own buffers are moved: written back (their
// bytes were only there; the enqueue waits for that), evicted, and
// everything placed again, the largest first; their bytes come back.
TEST_F(EngineTest, ACommandThatFitsTheDeviceButNoHoleMovesItsOwnBuffers) {
  Buffer& a = make(2048, false);
  Buffer& x = make(2048, true);
  Buffer& b = make(2048, false);
  Buffer& y = make(2048, true);
  write(a, 0xA1);
  ASSERT_NE(enqueue({{&x, {0, 2048, Access::read}}}, 1), nullptr);
  write(b, 0xB2);
  ASSERT_NE(enqueue({{&y, {0, 2048, Access::read}}}, 1), nullptr);
  host_.run_all();
  Buffer& c = make(4096, false);
  const std::vector<BufferUse> uses = {
      {&a, {0, 2048, Access::read}}, {&b, {0, 2048, Access::read_write}}, {&c, {0, 4096, Access::overwrite}}};
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue(uses, 1, &error), nullptr);
  ASSERT_TRUE(error.has_value());
  ASSERT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
  EXPECT_NE(error->message.find("holes"), std::string::npos) << error->message;
  const std::vector<Event> write_backs(sub_.waits().begin(), sub_.waits().end());
  EXPECT_EQ(write_backs.size(), 2u) << "A's and B's bytes, valid only on the device";
  ASSERT_TRUE(host_.run_until_done(write_backs));
  sub_.clear();
  Task* cmd = enqueue(uses, 1, &error);
  ASSERT_NE(cmd, nullptr) << error->message;
  const std::vector<StorageHandle> at(sub_.storage().begin(), sub_.storage().end());
  host_.run_all();
  EXPECT_GE(engine_->stats().compactions, 1u);
  EXPECT_EQ(engine_->stats().bytes_lost, 0u);
  EXPECT_FALSE(x.has_storage(1));
  EXPECT_FALSE(y.has_storage(1));
  const std::uint8_t* a_bytes = host_.bytes(1, at[0]);
  const std::uint8_t* b_bytes = host_.bytes(1, at[1]);
  EXPECT_TRUE(std::all_of(a_bytes, a_bytes + 2048, [](std::uint8_t v) { return v == 0xA1; })) << "A's bytes";
  EXPECT_TRUE(std::all_of(b_bytes, b_bytes + 2048, [](std::uint8_t v) { return v == 0xB2; })) << "B's bytes";
}

// Free space cut into 1 KiB holes (A1's and A3's storage, given back when
// they went) between resident buffers whose bytes are only on the device,
// A5, A7, A0 the least recently used: a 3 KiB buffer needs A2 evicted, the
// one buffer between the two holes. Evicting by rank alone takes A5, A7,
// A0 and A6, the first three of whose ranges join no hole (issue 33): four
// write-backs and evictions where one does. With `answers_holes` off the
// engine does exactly that (the rank order it falls back on), which shows
// what the host's answer saves.
class EngineHoleTest : public EngineTest, public ::testing::WithParamInterface<bool> {
 protected:
  // The device of these tests: A0-A7, 1 KiB each and written there, used
  // in the order A5, A7, A0, A6, A4, A2 (the least recently used first),
  // then A1 and A3 released, leaving two 1 KiB holes. With the host
  // answering holes or not (the test's parameter).
  std::vector<Buffer*> cut_into_holes() {
    host_.answers_holes = GetParam();
    std::vector<Buffer*> a;
    for (int i = 0; i < 8; ++i) {
      a.push_back(&make(1024, false));
      write(*a.back(), static_cast<std::uint8_t>(0xA0 + i));
      EXPECT_TRUE(a.back()->has_storage(1));
    }
    host_.run_all();
    for (int i : {5, 7, 0, 6, 4, 2}) EXPECT_NE(enqueue({{a[i], {0, 1024, Access::read}}}, 1), nullptr);
    sub_.clear();
    host_.run_all();
    buffers_[1].reset();
    buffers_[3].reset();
    return a;
  }
  // Enqueues `uses` until it is not device_busy, waiting for what it names.
  Task* enqueue_waiting(const std::vector<BufferUse>& uses) {
    for (int tries = 0; tries < 16; ++tries) {
      std::optional<EnqueueError> error;
      if (Task* cmd = enqueue(uses, 1, &error)) return cmd;
      EXPECT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
      if (error->code != EnqueueError::Code::device_busy) return nullptr;
      const std::vector<Event> waits(sub_.waits().begin(), sub_.waits().end());
      EXPECT_TRUE(host_.run_until_done(waits));
      sub_.clear();
    }
    ADD_FAILURE() << "still device_busy after 16 tries";
    return nullptr;
  }
};

TEST_P(EngineHoleTest, EvictionFreesTheBuffersBetweenHolesNotTheLeastRecentlyUsed) {
  const bool holes = GetParam();
  const std::vector<Buffer*> a = cut_into_holes();
  ASSERT_FALSE(HasFailure());
  Buffer& c = make(3072, false);
  Task* cmd = enqueue_waiting({{&c, {0, 3072, Access::overwrite}}});
  ASSERT_NE(cmd, nullptr);
  const StorageHandle placed = sub_.storage()[0];
  host_.run_all();
  const EngineStats st = engine_->stats();
  if (!holes) {
    // What eviction by rank alone did (the figures this test was written against).
    EXPECT_EQ(st.evictions, 4u);
    EXPECT_EQ(st.bytes_written_back, 4096u);
    EXPECT_GT(host_.hole_questions, 0) << "the engine never asked for a hole";
    return;
  }
  EXPECT_EQ(st.evictions, 1u) << "A2 only";
  EXPECT_EQ(st.write_backs, 1u);
  EXPECT_EQ(st.bytes_written_back, 1024u);
  EXPECT_EQ(placed, 1024u) << "A1's hole, A2's storage and A3's hole";
  EXPECT_FALSE(a[2]->has_storage(1));
  for (int i : {0, 4, 5, 6, 7}) EXPECT_TRUE(a[i]->has_storage(1)) << "A" << i << " was evicted for nothing";
  EXPECT_TRUE(a[2]->valid_at(kHost, 0, 1024));
  const auto& saved = cookies_[2]->host_copy;
  EXPECT_TRUE(std::all_of(saved.begin(), saved.end(), [](std::uint8_t v) { return v == 0xA2; })) << "A2's bytes";
  EXPECT_EQ(st.bytes_lost, 0u);
}

// The same device, but the command reads A2 as well: a hole through it is
// no use. A4 and A5, with A3's hole, make the cheapest one left: two
// neighbouring buffers evicted, not the four least recently used.
TEST_P(EngineHoleTest, AHoleThroughTheCommandsOwnBufferIsNotChosen) {
  const bool holes = GetParam();
  const std::vector<Buffer*> a = cut_into_holes();
  ASSERT_FALSE(HasFailure());
  Buffer& c = make(3072, false);
  ASSERT_NE(enqueue_waiting({{a[2], {0, 1024, Access::read}}, {&c, {0, 3072, Access::overwrite}}}), nullptr);
  const StorageHandle placed = sub_.storage()[1];
  host_.run_all();
  const EngineStats st = engine_->stats();
  if (!holes) {
    EXPECT_EQ(st.evictions, 4u);  // A5, A7, A0, A6
    return;
  }
  EXPECT_EQ(st.evictions, 2u) << "A4 and A5 only";
  EXPECT_EQ(st.bytes_written_back, 2048u);
  EXPECT_EQ(placed, 3072u) << "A3's hole and A4's and A5's storage";
  EXPECT_TRUE(a[2]->has_storage(1));
  EXPECT_FALSE(a[4]->has_storage(1));
  EXPECT_FALSE(a[5]->has_storage(1));
  for (int i : {0, 6, 7}) EXPECT_TRUE(a[i]->has_storage(1)) << "A" << i << " was evicted for nothing";
}

// The engine's order between kinds of victim holds: A2, between the two
// holes, has bytes only on the device; A4 and A5 are held at the host too.
// Their hole costs more bytes but nothing to write back, so it is asked
// for first and taken (no write-back, no device_busy).
TEST_F(EngineHoleTest, AHoleOfCleanBuffersGoesBeforeOneThatMustBeWrittenBack) {
  std::vector<Buffer*> a;
  for (int i = 0; i < 8; ++i) {
    const bool clean = i == 4 || i == 5;
    a.push_back(&make(1024, clean));
    if (clean) ASSERT_NE(enqueue({{a.back(), {0, 1024, Access::read}}}, 1), nullptr);
    else write(*a.back(), static_cast<std::uint8_t>(0xA0 + i));
    sub_.clear();
  }
  host_.run_all();
  buffers_[1].reset();
  buffers_[3].reset();
  Buffer& c = make(3072, false);
  std::optional<EnqueueError> error;
  ASSERT_NE(enqueue({{&c, {0, 3072, Access::overwrite}}}, 1, &error), nullptr) << error->message;
  EXPECT_EQ(sub_.storage()[0], 3072u);
  host_.run_all();
  const EngineStats st = engine_->stats();
  EXPECT_EQ(st.evictions, 2u);
  EXPECT_EQ(st.write_backs, 0u);
  EXPECT_TRUE(a[2]->has_storage(1));
  EXPECT_FALSE(a[4]->has_storage(1));
  EXPECT_FALSE(a[5]->has_storage(1));
}

INSTANTIATE_TEST_SUITE_P(HolesOrRank, EngineHoleTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Holes" : "RankOnly"; });

TEST_F(EngineTest, ACopyTheHostCannotMakeFailsTheEnqueueCleanly) {
  Buffer& a = make(2048, true);
  Buffer& b = make(2048, true);
  for (int made : {0, 1}) {
    host_.refuse_copy_after = made;  // `made` copies are made, then one is refused
    std::optional<EnqueueError> error;
    EXPECT_EQ(enqueue({{&a, {0, 2048, Access::read}}, {&b, {0, 2048, Access::read}}}, 1, &error), nullptr);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, EnqueueError::Code::host_out_of_memory);
    EXPECT_NE(error->message.find("2048 bytes from the host copy to location 1"), std::string::npos)
        << error->message;
    EXPECT_EQ(host_.copies_discarded, made) << "a copy made for the failed command was not dropped";
    EXPECT_EQ(host_.live_storage, 0);
    EXPECT_FALSE(a.valid_at(1, 0, 2048));
    EXPECT_FALSE(b.valid_at(1, 0, 2048));
  }
  host_.run_all();  // the dropped copy must not run: run_all checks only started tasks
  ASSERT_NE(enqueue({{&a, {0, 2048, Access::read}}, {&b, {0, 2048, Access::read}}}, 1), nullptr);
  host_.run_all();
  EXPECT_TRUE(a.valid_at(1, 0, 2048));
  EXPECT_EQ(host_.copies_created, 1 + 2);
}

TEST_F(EngineTest, EvictionWritesBackTheLeastRecentlyUsedBeforeItEvictsIt) {
  // Device 1 (8 KiB) holds two 4 KiB buffers whose only copies are there.
  auto [dirty_old, dirty_new] = fill_with_two_only_there();
  Buffer& clean = make(4096, true);
  // Full, and both would lose bytes: the least recently used is written
  // back first, keeping its storage, and the enqueue waits for that.
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue({{&clean, {0, 4096, Access::read}}}, 1, &error), nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
  ASSERT_EQ(sub_.waits().size(), 1u) << "the write-back";
  EXPECT_TRUE(dirty_old.has_storage(1));
  EXPECT_TRUE(dirty_new.has_storage(1));
  EXPECT_FALSE(clean.has_storage(1));
  EXPECT_EQ(engine_->stats().write_backs, 1u);
  EXPECT_EQ(engine_->stats().evictions, 0u);
  const std::vector<Event> write_back(sub_.waits().begin(), sub_.waits().end());
  ASSERT_TRUE(host_.run_until_done(write_back));
  sub_.clear();
  // Written back: now it goes, with nothing more to copy.
  ASSERT_NE(enqueue({{&clean, {0, 4096, Access::read}}}, 1), nullptr);
  EXPECT_FALSE(dirty_old.has_storage(1));
  EXPECT_TRUE(dirty_old.valid_at(kHost, 0, 4096));
  EXPECT_EQ(engine_->stats().evictions, 1u);
  EXPECT_EQ(engine_->stats().write_backs, 1u);
  // Now `clean` (valid at the host too) goes before dirty_new, although used later.
  Buffer& next = make(4096, false);
  ASSERT_NE(enqueue({{&next, {0, 4096, Access::read}}}, 1), nullptr);
  EXPECT_FALSE(clean.has_storage(1));
  EXPECT_TRUE(dirty_new.has_storage(1));
  EXPECT_EQ(engine_->stats().evictions, 2u);
  EXPECT_EQ(engine_->stats().write_backs, 1u) << "nothing to write back for a clean copy";
  host_.run_all();
}

// The only buffer that could make room is being written back for another
// enqueue: this one waits for that write-back too (device_busy), it does not
// fail as if nothing could ever be evicted (device_full).
TEST_F(EngineTest, AnEnqueueWaitsForAWriteBackAnotherEnqueueStarted) {
  auto [dirty_a, dirty_b] = fill_with_two_only_there();
  Buffer& first = make(4096, true);
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue({{&first, {0, 4096, Access::read}}}, 1, &error), nullptr);
  ASSERT_TRUE(error.has_value());
  ASSERT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
  const std::vector<Event> write_back(sub_.waits().begin(), sub_.waits().end());
  ASSERT_EQ(write_back.size(), 1u);
  sub_.clear();
  // dirty_b is this command's own; dirty_a is being saved by the first.
  Buffer& second = make(4096, true);
  error.reset();
  EXPECT_EQ(enqueue({{&dirty_b, {0, 4096, Access::read}}, {&second, {0, 4096, Access::read}}}, 1, &error), nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
  EXPECT_EQ(std::vector<Event>(sub_.waits().begin(), sub_.waits().end()), write_back);
  sub_.clear();
  ASSERT_TRUE(host_.run_until_done(write_back));
  ASSERT_NE(enqueue({{&dirty_b, {0, 4096, Access::read}}, {&second, {0, 4096, Access::read}}}, 1), nullptr);
  EXPECT_FALSE(dirty_a.has_storage(1));
  EXPECT_TRUE(dirty_a.valid_at(kHost, 0, 4096));
  host_.run_all();
}

// A write-back that fails loses nothing: the bytes stay where they are,
// with their storage, and the next try writes them back again.
TEST_F(EngineTest, AFailedWriteBackKeepsTheStorageAndTheBytes) {
  Buffer& dirty_old = make(4096, false);
  Buffer& dirty_new = make(4096, false);
  ASSERT_NE(enqueue({{&dirty_old, {0, 4096, Access::overwrite}}}, 1), nullptr);
  const StorageHandle old_storage = sub_.storage()[0];
  host_.run_all();
  std::fill_n(host_.bytes(1, old_storage), 4096, 0x42);  // what the command wrote
  ASSERT_NE(enqueue({{&dirty_new, {0, 4096, Access::overwrite}}}, 1), nullptr);
  host_.run_all();
  Buffer& clean = make(4096, true);
  std::optional<EnqueueError> error;
  for (bool fail : {true, true, false}) {
    EXPECT_EQ(enqueue({{&clean, {0, 4096, Access::read}}}, 1, &error), nullptr);
    ASSERT_TRUE(error.has_value());
    ASSERT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
    host_.faults.cancel = fail ? 1.0 : 0.0;
    const std::vector<Event> write_back(sub_.waits().begin(), sub_.waits().end());
    ASSERT_TRUE(host_.run_until_done(write_back));
    sub_.clear();
    host_.faults.cancel = 0;
    if (!fail) break;
    EXPECT_TRUE(dirty_old.has_storage(1));
    EXPECT_TRUE(dirty_old.valid_at(1, 0, 4096));
    EXPECT_FALSE(dirty_old.valid_at(kHost, 0, 4096)) << "the failed write-back is no copy";
    EXPECT_EQ(dirty_old.bytes_lost(), 0u);
  }
  ASSERT_NE(enqueue({{&clean, {0, 4096, Access::read}}}, 1), nullptr);
  EXPECT_FALSE(dirty_old.has_storage(1));
  ASSERT_TRUE(dirty_old.valid_at(kHost, 0, 4096));
  const std::vector<std::uint8_t> expected(4096, 0x42);
  EXPECT_EQ(cookies_[0]->host_copy, expected);
  EXPECT_EQ(engine_->stats().write_backs, 3u);
  EXPECT_EQ(engine_->stats().evictions, 1u);
  EXPECT_EQ(engine_->stats().bytes_lost, 0u);
  host_.run_all();
}

// Storage that holds the only copy of what a queued writer's failure goes
// back to (its undo record) is evicted last: a clean buffer used later goes
// first, and when the writer fails, its buffer reads back as it was.
TEST_F(EngineTest, EvictionKeepsTheOnlyCopyOfContentAQueuedWriterMayGoBackTo) {
  Buffer& old_content = make(4096, false);
  ASSERT_NE(enqueue({{&old_content, {0, 4096, Access::overwrite}}}, 1), nullptr);
  const StorageHandle storage = sub_.storage()[0];
  host_.run_all();
  std::fill_n(host_.bytes(1, storage), 4096, 0x42);  // what the command wrote: only on device 1
  // A writer at the host, gated: until it ends, device 1 holds the only
  // copy of what its failure goes back to (and no current bytes), and the
  // host copy's bytes are the writer's (that content cannot be written
  // back there).
  Task& gate = host_.user_event();
  Task& writer = host_.command(nullptr);
  const std::vector<BufferUse> overwrite{{&old_content, {0, 4096, Access::overwrite}}};
  ASSERT_FALSE(engine_->enqueue(overwrite, kHost, &writer, sub_));
  const std::vector<Task*> gated{&gate};
  host_.start(writer, sub_.waits(), gated);
  Buffer& clean = make(4096, true);  // valid at the host, used on device 1 after old_content
  Task* reader = enqueue({{&clean, {0, 4096, Access::read}}}, 1);
  ASSERT_NE(reader, nullptr);
  ASSERT_TRUE(host_.run_until_done(std::vector<Event>{reader}));
  Buffer& next = make(4096, true);  // device 1 is full: one of the two goes
  ASSERT_NE(enqueue({{&next, {0, 4096, Access::read}}}, 1), nullptr);
  EXPECT_EQ(engine_->stats().evictions, 1u);
  EXPECT_FALSE(clean.has_storage(1)) << "the clean buffer, although used later";
  EXPECT_TRUE(old_content.has_storage(1));
  host_.end_user(gate, false);  // the writer never runs: old_content goes back to device 1's bytes
  host_.run_all();
  ASSERT_TRUE(writer.failed());
  ASSERT_NE(enqueue({{&old_content, {0, 4096, Access::read}}}, kHost), nullptr);
  host_.run_all();
  EXPECT_EQ(old_content.bytes_lost(), 0u);
  EXPECT_EQ(engine_->stats().bytes_lost, 0u);
  EXPECT_EQ(cookies_[0]->host_copy, std::vector<std::uint8_t>(4096, 0x42));
}

// When every buffer that could go holds the only copy of what a queued
// writer's failure goes back to, that content is written back to the host
// copy before its storage goes (the storage kept until then, as for the
// current bytes), and the writers' failure finds it there.
TEST_F(EngineTest, EvictionWritesBackWhatAQueuedWritersFailureGoesBackTo) {
  Task& gate = host_.user_event();
  const std::vector<Task*> gated{&gate};
  std::vector<Buffer*> held;
  for (std::uint8_t i = 0; i < 2; ++i) {  // device 1 full of them
    Buffer& b = make(4096, false);
    Task* made = enqueue({{&b, {0, 4096, Access::overwrite}}}, 1);
    ASSERT_NE(made, nullptr);
    const StorageHandle storage = sub_.storage()[0];
    ASSERT_TRUE(host_.run_until_done(std::vector<Event>{made}));
    std::fill_n(host_.bytes(1, storage), 4096, static_cast<std::uint8_t>(0x42 + i));  // only on device 1
    Task& writer = host_.command(nullptr);  // on device 2, gated
    const std::vector<BufferUse> overwrite{{&b, {0, 4096, Access::overwrite}}};
    ASSERT_FALSE(engine_->enqueue(overwrite, 2, &writer, sub_));
    host_.start(writer, sub_.waits(), gated);
    held.push_back(&b);
  }
  // As the runtime does: on device_busy, wait for the write-backs and try again.
  Buffer& next = make(4096, true);
  std::optional<EnqueueError> error;
  for (int attempt = 0; attempt < 3 && enqueue({{&next, {0, 4096, Access::read}}}, 1, &error) == nullptr; ++attempt) {
    ASSERT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
    const std::vector<Event> write_backs(sub_.waits().begin(), sub_.waits().end());
    ASSERT_TRUE(host_.run_until_done(write_backs));
    sub_.clear();
  }
  ASSERT_TRUE(next.has_storage(1));
  EXPECT_EQ(engine_->stats().evictions, 1u);
  host_.end_user(gate, false);  // the writers never run: each buffer goes back to its content before
  host_.run_all();
  for (std::uint8_t i = 0; i < 2; ++i) {
    ASSERT_NE(enqueue({{held[i], {0, 4096, Access::read}}}, kHost), nullptr);
    host_.run_all();
    EXPECT_EQ(cookies_[i]->host_copy, std::vector<std::uint8_t>(4096, static_cast<std::uint8_t>(0x42 + i)));
  }
  EXPECT_EQ(engine_->stats().bytes_lost, 0u);
}

TEST_F(EngineTest, BuffersACommandUsesAreNeverEvictedForIt) {
  Buffer& a = make(4096, false);
  Buffer& b = make(4096, false);
  Buffer& c = make(4096, false);
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue({{&a, {0, 4096, Access::overwrite}}, {&b, {0, 4096, Access::overwrite}},
                     {&c, {0, 4096, Access::overwrite}}},
                    1, &error),
            nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, EnqueueError::Code::device_full);
  EXPECT_EQ(host_.live_storage, 0);
  EXPECT_EQ(engine_->stats().evictions, 0u);
}

// Eviction never waits for a buffer's lock: one another thread's enqueue
// holds at that instant is passed over. When that leaves nothing to evict,
// the location is not full (device_full would fail a command that fits)
// but busy, with nothing to wait for: the room is there once that enqueue
// lets go (issue 33: the runtime's stress at 8x refused hundreds of
// commands so, "nothing more can be evicted" with the victims locked).
TEST_F(EngineTest, AVictimAnotherEnqueueHoldsMakesTheLocationBusyNotFull) {
  TwoResident d1 = fill_with_two();
  Buffer& x = d1.first;
  Submission other_sub;
  std::optional<EnqueueError> while_held;
  // X's read on device 2 makes a copy while it holds X's lock: then
  // another thread enqueues its command on device 1, where only X could
  // make room.
  host_.on_create_copy = [&] { while_held = enqueue_from_another_thread(d1.command, other_sub); };
  ASSERT_NE(enqueue({{&x, {0, 4096, Access::read}}}, 2), nullptr);
  ASSERT_TRUE(while_held.has_value()) << "it could not have placed the new buffer";
  EXPECT_EQ(while_held->code, EnqueueError::Code::device_busy) << while_held->message;
  EXPECT_NE(while_held->message.find("other threads"), std::string::npos) << while_held->message;
  EXPECT_TRUE(other_sub.waits().empty()) << "nothing to wait for but the lock";
  EXPECT_EQ(engine_->stats().evictions, 0u);
  ASSERT_NO_FATAL_FAILURE(enqueue_and_run(d1.command, other_sub));  // tried again, X goes
  EXPECT_FALSE(x.has_storage(1));
  EXPECT_TRUE(d1.second.has_storage(1));
  EXPECT_TRUE(d1.fresh.has_storage(1));
  EXPECT_TRUE(x.valid_at(2, 0, 4096));
}

// A victim whose write-back the host refuses (Host::create_copy: memlayer's
// runtime refuses it for a buffer being destroyed, whose storage goes back
// as soon as the enqueue lets go of it) leaves the location busy, not
// full: tried again, the write-back is made, and once it has run the
// command that fits gets its room (the runtime's stress at 8x refused
// such commands "nothing more can be evicted").
TEST_F(EngineTest, AVictimWhoseWriteBackIsRefusedMakesTheLocationBusyNotFull) {
  host_.answers_holes = false;  // the rank order
  auto [a, b] = fill_with_two_only_there();
  Buffer& c = make(4096, false);
  const std::vector<BufferUse> uses = {{&c, {0, 4096, Access::overwrite}}};
  host_.refuse_copies = 2;
  std::optional<EnqueueError> error;
  EXPECT_EQ(enqueue(uses, 1, &error), nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
  EXPECT_TRUE(sub_.waits().empty());
  // Tried again as a host does (room_wait.hpp): refused once more, then
  // the write-back is made, then A goes.
  int tries = 0;
  while (enqueue(uses, 1, &error) == nullptr) {
    ASSERT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
    ASSERT_LT(++tries, 3);
    const std::vector<Event> waits(sub_.waits().begin(), sub_.waits().end());
    ASSERT_TRUE(host_.run_until_done(waits));
    sub_.clear();
  }
  host_.run_all();
  EXPECT_EQ(engine_->stats().bytes_lost, 0u);
  EXPECT_EQ(engine_->stats().evictions, 1u);
  EXPECT_TRUE(a.valid_at(kHost, 0, 4096) || b.valid_at(kHost, 0, 4096)) << "written back";
}

// Bytes a host reader is still importing when the device holding their
// only copy must make room: the buffer goes with nothing written back, its
// storage reused after the import (a write-back of the same bytes would
// write the host copy while that reader may be reading it: the runtime's
// stress at 8x raced so under ThreadSanitizer).
TEST_F(EngineTest, AnEvictionWritesNothingBackBesideAnImportToTheHost) {
  host_.answers_holes = false;  // the rank order
  auto [a, b] = fill_with_two_only_there();
  ASSERT_NE(enqueue({{&a, {0, 4096, Access::read}}}, kHost), nullptr);  // imports, not run yet
  ASSERT_NE(enqueue({{&b, {0, 4096, Access::read}}}, kHost), nullptr);
  sub_.clear();
  const int imports = host_.copies_created;
  Buffer& c = make(4096, false);
  std::optional<EnqueueError> error;
  ASSERT_NE(enqueue({{&c, {0, 4096, Access::overwrite}}}, 1, &error), nullptr) << error->message;
  EXPECT_EQ(host_.copies_created, imports) << "no write-back beside the imports";
  host_.run_all();
  EXPECT_EQ(engine_->stats().write_backs, 0u);
  EXPECT_EQ(engine_->stats().bytes_written_back, 0u);
  EXPECT_EQ(engine_->stats().evictions, 1u);
  EXPECT_EQ(engine_->stats().bytes_lost, 0u);
  EXPECT_EQ(cookies_[0]->host_copy, std::vector<std::uint8_t>(4096, 0xA1));
  EXPECT_EQ(cookies_[1]->host_copy, std::vector<std::uint8_t>(4096, 0xB2));
}

// A buffer being destroyed gives its storage back before it leaves the
// engine's registry, under its own lock: an eviction meanwhile finds it
// locked (busy), never the storage held by no buffer it can see (full:
// the runtime's stress at 8x refused a command that fit so, with a buffer
// released by another thread).
TEST_F(EngineTest, ABufferBeingDestroyedMakesTheLocationBusyNotFull) {
  TwoResident d1 = fill_with_two();
  Submission other_sub;
  std::optional<EnqueueError> while_freeing;
  host_.on_free = [&] { while_freeing = enqueue_from_another_thread(d1.command, other_sub); };
  auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.get() == &d1.first; });
  it->reset();  // the first is destroyed: its storage goes back
  ASSERT_TRUE(while_freeing.has_value()) << "it could not have placed the new buffer";
  EXPECT_EQ(while_freeing->code, EnqueueError::Code::device_busy) << while_freeing->message;
  EXPECT_TRUE(other_sub.waits().empty());
  ASSERT_NO_FATAL_FAILURE(enqueue_and_run(d1.command, other_sub));
  EXPECT_EQ(engine_->stats().evictions, 0u) << "the first one's storage made the room";
  EXPECT_TRUE(d1.fresh.has_storage(1));
}

// How a host waits for room after device_busy (room_wait.hpp): for any
// one named event, not all; not at all with none named; and for at most
// the limit over all tries.
TEST_F(EngineTest, ARoomWaitEndsAtTheFirstFinishedEventAndAtItsLimit) {
  Task& gated = host_.command(nullptr);  // never started: a command behind a user event
  Task& done = host_.command(nullptr);
  host_.start(done, {});
  host_.run_all();
  ASSERT_TRUE(done.done);
  // Held, as a Submission holds what waits() names.
  host_.retain(&gated, 1);
  host_.retain(&done, 1);
  RoomWait room(host_);
  const auto limit = std::chrono::milliseconds(100);
  const std::vector<Event> both = {&gated, &done};
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(room.wait(both, limit)) << "one of them has finished";
  EXPECT_TRUE(room.wait({}, limit)) << "none named: try again";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  const std::vector<Event> only_gated = {&gated};
  EXPECT_FALSE(room.wait(only_gated, limit));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(room.wait(both, std::chrono::hours(1))) << "the first wait's limit, over every try";
  EXPECT_FALSE(room.wait({}, limit));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  host_.release(&gated, 1);
  host_.release(&done, 1);
}

TEST_F(EngineTest, StorageIsReusedOnlyAfterItsUsersFinish) {
  Buffer& a = make(8192, true);
  Task* reader = enqueue({{&a, {0, 8192, Access::read}}}, 1);
  ASSERT_NE(reader, nullptr);
  // Not run yet. A new buffer evicts `a` (valid at the host: nothing to
  // write back); the new storage (the same bytes) waits for a's users.
  Buffer& b = make(8192, false);
  Task* next = enqueue({{&b, {0, 8192, Access::overwrite}}}, 1);
  ASSERT_NE(next, nullptr);
  EXPECT_FALSE(sub_.waits().empty()) << "placed over storage still in use, with nothing to wait for";
  // Whether `t` waits for `other`, directly or through other tasks (the
  // host's fence on the reused storage).
  std::function<bool(const Task*, const Task*)> waits_for = [&](const Task* t, const Task* other) {
    return std::any_of(t->deps.begin(), t->deps.end(),
                       [&](const Task* d) { return d == other || waits_for(d, other); });
  };
  EXPECT_TRUE(waits_for(next, reader)) << "the overwrite of the reused storage may run before its reader";
  for (int step = 0; step < 100 && !next->done; ++step) {  // one ready task at a time, picked at random
    host_.run_some(1);
    if (next->done) {
      EXPECT_TRUE(reader->done) << "the overwrite ran before the reader of the same storage";
    }
  }
  host_.run_all();
  EXPECT_TRUE(reader->done);
}

// A writer the fast path took is no user of its storage (its undo record
// names it, with where it runs: Buffer::users_at): storage it has still to
// write, evicted, must still make what is placed there wait for it. Here
// nothing else covers it: the newest bytes are made on device 2 by an
// overwrite (no copy reads device 1), so device 1's stale copy has no
// reader and no filler the planner would name.
TEST_F(EngineTest, StorageAFastPathWriterHasStillToWriteIsReusedOnlyAfterIt) {
  Buffer& a = make(4096, true);
  ASSERT_NE(enqueue({{&a, {0, 4096, Access::read}}}, 1), nullptr);
  host_.run_all();
  Task& gate = host_.user_event();
  const std::uint64_t fast_before = engine_->stats().fast_path;
  Task& writer = enqueue_behind(gate, {{&a, {0, 4096, Access::read_write}}}, 1);
  ASSERT_EQ(engine_->stats().fast_path, fast_before + 1) << "the writer did not take the fast path";
  sub_.clear();
  ASSERT_NE(enqueue({{&a, {0, 4096, Access::overwrite}}}, 2), nullptr);
  sub_.clear();
  Buffer& b = make(8192, false);  // device 1 holds 8 KiB: a's storage there goes
  Task* next = enqueue({{&b, {0, 8192, Access::overwrite}}}, 1);
  ASSERT_NE(next, nullptr);
  EXPECT_FALSE(a.has_storage(1));
  std::function<bool(const Task*, const Task*)> waits_for = [&](const Task* t, const Task* other) {
    return std::any_of(t->deps.begin(), t->deps.end(),
                       [&](const Task* d) { return d == other || waits_for(d, other); });
  };
  EXPECT_TRUE(waits_for(next, &writer)) << "placed over storage the gated writer will still write";
  host_.end_user(gate, true);
  host_.run_all();
}

// The fast path lists no reader among a storage's users: the span names
// it, or the undo record of a writer after it, and the command table where
// it runs (Buffer::users_at). Storage a queued reader has still to read is
// reused only after it, in either case: `written_after` puts a writer
// elsewhere after the reader, which takes the span's readers into its
// record, and the storage goes by eviction; else it goes with the buffer,
// destroyed (an eviction's plan waits for a span's readers itself:
// RangeVersions::plan_evict).
class EngineReaderStorageTest : public EngineTest, public ::testing::WithParamInterface<bool> {};

TEST_P(EngineReaderStorageTest, StorageAFastPathReaderHasStillToReadIsReusedOnlyAfterIt) {
  const bool written_after = GetParam();
  Buffer& a = make(4096, true);
  ASSERT_NE(enqueue({{&a, {0, 4096, Access::read}}}, 1), nullptr);
  host_.run_all();
  Task& gate = host_.user_event();
  const std::uint64_t fast_before = engine_->stats().fast_path;
  Task& reader = enqueue_behind(gate, {{&a, {0, 4096, Access::read}}}, 1);
  ASSERT_EQ(engine_->stats().fast_path, fast_before + 1) << "the reader did not take the fast path";
  sub_.clear();
  if (written_after) {
    ASSERT_NE(enqueue({{&a, {0, 4096, Access::overwrite}}}, 2), nullptr);
    sub_.clear();
  } else {
    buffers_.erase(std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& p) { return p.get() == &a; }));
  }
  Buffer& b = make(8192, false);  // device 1 holds 8 KiB: a's storage there goes
  Task* next = enqueue({{&b, {0, 8192, Access::overwrite}}}, 1);
  ASSERT_NE(next, nullptr);
  if (written_after) {
    EXPECT_FALSE(a.has_storage(1));
  }
  sub_.clear();
  host_.run_some(100);
  EXPECT_FALSE(next->done) << "ran over the storage the gated reader has still to read";
  EXPECT_FALSE(reader.done);
  host_.end_user(gate, true);
  host_.run_all();
  EXPECT_TRUE(reader.done);
  EXPECT_TRUE(next->done);
}

INSTANTIATE_TEST_SUITE_P(Engine, EngineReaderStorageTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("EvictedAfterAWriterElsewhere") : std::string("DestroyedWithTheBuffer");
                         });

// More unfinished writers on one buffer than the undo records it keeps
// (RangeVersions::kMaxUndo, 1,024): the oldest writers' records are
// forgotten while they are still to run, and no record names them. The
// later writers, which wait for them, may end first: the runtime fails a
// node at once when any dependency fails (here: the test ends them). The
// storage freed with the buffer must still wait for the oldest writer
// (Transaction::keep_forgotten_users makes it a user of the storage),
// or what is placed over it next runs before that writer writes.
TEST_F(EngineTest, StorageWaitsForAWriterWhoseUndoRecordWasForgotten) {
  Buffer& a = make(64, false);
  ASSERT_NE(enqueue({{&a, {0, 64, Access::read_write}}}, 1), nullptr);
  host_.run_all();
  Task& gate = host_.user_event();
  Task& first = enqueue_behind(gate, {{&a, {0, 64, Access::read_write}}}, 1);
  sub_.clear();
  Task* next = nullptr;
  ASSERT_NO_FATAL_FAILURE(next = forget_writers_then_reuse(a));
  ASSERT_NE(next, nullptr);
  host_.run_some(100);
  EXPECT_FALSE(next->done) << "ran over the storage the oldest writer has still to write";
  host_.end_user(gate, true);
  host_.run_all();
  EXPECT_TRUE(first.done);
  EXPECT_TRUE(next->done);
}

// The same for a reader: the first writer after a gated reader waits for
// it, and its undo record, the only one that names the reader, is
// forgotten among 1,100 writers. Once the writers end failed (the runtime
// fails a node at once when any dependency fails), only the storage's users
// name the reader (Transaction::keep_forgotten_users), and the storage
// freed with the buffer must still wait for it.
TEST_F(EngineTest, StorageWaitsForAReaderWhoseWritersUndoRecordWasForgotten) {
  Buffer& a = make(64, false);
  ASSERT_NE(enqueue({{&a, {0, 64, Access::read_write}}}, 1), nullptr);
  host_.run_all();
  Task& gate = host_.user_event();
  Task& reader = enqueue_behind(gate, {{&a, {0, 64, Access::read}}}, 1);
  sub_.clear();
  Task* next = nullptr;
  ASSERT_NO_FATAL_FAILURE(next = forget_writers_then_reuse(a));
  ASSERT_NE(next, nullptr);
  host_.run_some(100);
  EXPECT_FALSE(next->done) << "ran over the storage the gated reader has still to read";
  host_.end_user(gate, true);
  host_.run_all();
  EXPECT_TRUE(reader.done);
  EXPECT_TRUE(next->done);
}

// Each use's storage comes back in the order the uses were given, whether
// the engine sorts them, reuses the order of a command with the same
// buffers (a kernel enqueued again), or sorts again for the same buffers in
// another order or with one changed.
TEST_F(EngineTest, EachUseGetsItsBuffersStorageWhateverTheOrder) {
  constexpr std::size_t kBuffers = 12;  // more than the engine sorts by insertion
  std::vector<Buffer*> bufs;
  std::vector<StorageHandle> handle;
  for (std::size_t i = 0; i < kBuffers; ++i) {
    bufs.push_back(&make(256, false));
    ASSERT_NE(enqueue({{bufs.back(), {0, 256, Access::read}}}, 1), nullptr);
    handle.push_back(sub_.storage()[0]);
  }
  auto run = [&](const std::vector<std::size_t>& order) {
    std::vector<BufferUse> uses;
    for (std::size_t i : order) uses.push_back({bufs[i], {0, 256, Access::read_write}});
    ASSERT_NE(enqueue(uses, 1), nullptr);
    ASSERT_EQ(sub_.storage().size(), order.size());
    for (std::size_t u = 0; u < order.size(); ++u)
      EXPECT_EQ(sub_.storage()[u], handle[order[u]]) << "use " << u << " got another buffer's storage";
  };
  const std::vector<std::size_t> shuffled{7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 4};
  run(shuffled);
  run(shuffled);  // the same buffers in the same order
  run({4, 6, 8, 3, 10, 1, 9, 5, 0, 11, 2, 7});  // the same buffers, another order
  run({7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 6});  // one changed: a buffer twice
  run({7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 6});
  run({7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6});  // one fewer
  host_.run_all();
}

TEST_F(EngineTest, ADestroyedBufferGivesItsStorageBack) {
  {
    Buffer& a = make(4096, true);
    ASSERT_NE(enqueue({{&a, {0, 4096, Access::read}}}, 1), nullptr);
    ASSERT_NE(enqueue({{&a, {0, 4096, Access::read}}}, 2), nullptr);
    EXPECT_EQ(host_.live_storage, 2);
    sub_.clear();
    buffers_.clear();  // while its copies and commands are still pending
  }
  EXPECT_EQ(host_.live_storage, 0);
  host_.run_all();
}

// An enqueue's cost must not grow with the commands queued on its buffers
// (none of them run here): the host calls it makes (status looks, reference
// counts), per enqueue, are alike between 4,096 and 8,192 queued and
// between 8,192 and 16,384, for queued readers, writers and both in turn.
// (They rise before that, up to bounds: readers are pruned at powers of
// two, and from 1,024 unfinished writes on, each write forgets its
// buffer's oldest undo record.) A list of queued readers scanned or pruned
// at each enqueue doubles the figure from one window to the next.
TEST_F(EngineTest, AnEnqueueCostsTheSameWhateverIsQueued) {
  for (int mix = 0; mix < 3; ++mix) {
    SCOPED_TRACE(mix == 0 ? "readers" : mix == 1 ? "writers" : "readers and writers in turn");
    std::vector<BufferUse> reads, writes;
    for (int i = 0; i < 4; ++i) {
      Buffer& b = make(256, true);
      reads.push_back({&b, {0, 256, Access::read}});
      writes.push_back({&b, {0, 256, Access::read_write}});
    }
    ASSERT_NE(enqueue(writes, 1), nullptr);
    host_.run_all();  // valid on device 1: nothing migrates from here on
    auto steps = [&] { return host_.status_calls + host_.reference_calls; };
    long at_4096 = 0, at_8192 = 0;
    for (int n = 1; n <= 16384; ++n) {
      const bool write = mix == 1 || (mix == 2 && n % 2 == 0);
      ASSERT_NE(enqueue(write ? writes : reads, 1), nullptr) << "enqueue " << n;
      sub_.clear();
      if (n == 4096) at_4096 = steps();
      if (n == 8192) at_8192 = steps();
    }
    const double middle = static_cast<double>(at_8192 - at_4096) / 4096;
    const double last = static_cast<double>(steps() - at_8192) / 8192;
    EXPECT_GT(middle, 0);
    EXPECT_LT(last, 1.2 * middle) << "host calls per enqueue: " << middle << " with 4,096 to 8,192 queued, " << last
                                  << " with 8,192 to 16,384";
    if (mix == 0) {
      // A writer now waits for every queued reader, each named once (the
      // four buffers name each reader four times).
      Task& w = host_.command(nullptr);
      ASSERT_FALSE(engine_->enqueue(writes, 1, &w, sub_));
      std::vector<Event> waits(sub_.waits().begin(), sub_.waits().end());
      std::sort(waits.begin(), waits.end());
      EXPECT_EQ(std::adjacent_find(waits.begin(), waits.end()), waits.end()) << "a wait named twice";
      EXPECT_EQ(waits.size(), 16384u);
      host_.start(w, sub_.waits());
      sub_.clear();
    }
    host_.run_all();
  }
}

}  // namespace

// ---- the fast path (engine.hpp: Engine::enqueue) ---------------------------

class FastPathTest : public EngineTest {
 protected:
  std::uint64_t taken() const { return engine_->stats().fast_path; }
  // Enqueues `uses` at `at`; expects success, and the fast path taken or not.
  Task* expect(std::vector<BufferUse> uses, Location at, bool fast, int line = __builtin_LINE()) {
    const std::uint64_t before = taken();
    Task* t = enqueue(std::move(uses), at);
    EXPECT_NE(t, nullptr) << "line " << line;
    EXPECT_EQ(taken() - before, fast ? 1u : 0u)
        << "line " << line << ": " << (fast ? "the fast path was not taken" : "the fast path was taken");
    return t;
  }
};

TEST_F(FastPathTest, TakesTheSteadyStateWithItsWaits) {
  Buffer& a = make(2048, true);
  Buffer& b = make(1024, false);
  Task* first = expect({{&a, {0, 2048, Access::read_write}}, {&b, {0, 1024, Access::read}}}, 1, false);  // placed, copied
  Task* w = expect({{&a, {0, 2048, Access::read_write}}, {&b, {0, 1024, Access::overwrite}}}, 1, true);
  ASSERT_EQ(sub_.waits().size(), 1u) << "the last writer of a and the reader of b, once";
  EXPECT_EQ(sub_.waits()[0], first);
  Task* r1 = expect({{&a, {0, 2048, Access::read}}}, 1, true);
  ASSERT_EQ(sub_.waits().size(), 1u);
  EXPECT_EQ(sub_.waits()[0], w);
  Task* r2 = expect({{&a, {0, 2048, Access::read}}}, 1, true);
  // A writer after readers waits for each of them and the last writer.
  expect({{&a, {0, 2048, Access::write}}}, 1, true);
  std::vector<Event> waits(sub_.waits().begin(), sub_.waits().end());
  std::sort(waits.begin(), waits.end());
  std::vector<Event> want{w, r1, r2};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(waits, want);
  EXPECT_EQ(engine_->stats().bytes_migrated, 2048u) << "only the first command copied";
  EXPECT_EQ(engine_->stats().enqueues, 5u);
  host_.run_all();
}

TEST_F(FastPathTest, FallsBackOnEachMiss) {
  Buffer& a = make(2048, true);
  expect({{&a, {0, 2048, Access::read_write}}}, 1, false);  // no storage at 1 yet
  expect({{&a, {0, 2048, Access::read_write}}}, 1, true);
  expect({{&a, {0, 2048, Access::read}}, {&a, {0, 2048, Access::read}}}, 1, false);  // the buffer twice
  expect({{&a, {0, 2048, Access::read}}}, 2, false);  // not valid at 2: copied
  expect({{&a, {0, 2048, Access::read}}}, 2, true);
  expect({{&a, {0, 2048, Access::read_write}}}, 1, true);  // valid at 1 still (2 holds a copy)
  expect({{&a, {0, 2048, Access::read}}}, 2, false);       // 2's copy is stale now
  engine_->set_fast_path(false);
  expect({{&a, {0, 2048, Access::read}}}, 2, false);
  engine_->set_fast_path(true);
  expect({{&a, {0, 2048, Access::read}}}, 2, true);
  // Part of a buffer: its spans are cut there, and whole uses take the
  // general steps until a write of the whole makes it one span again.
  expect({{&a, {0, 1024, Access::read}}}, 1, false);
  expect({{&a, {0, 2048, Access::read}}}, 1, false);
  expect({{&a, {0, 2048, Access::read_write}}}, 1, false);
  expect({{&a, {0, 2048, Access::read_write}}}, 1, true);
  host_.run_all();
  EXPECT_TRUE(a.valid_at(1, 0, 2048));
  EXPECT_FALSE(a.valid_at(2, 0, 2048));
}

// A last writer that failed: the general steps settle the buffer first
// (its content before the writer is current again), then the fast path
// serves the next command.
TEST_F(FastPathTest, FallsBackWhenADependencyFailed) {
  Buffer& a = make(2048, true);
  expect({{&a, {0, 2048, Access::read}}}, 1, false);
  host_.run_all();
  Task& gate = host_.user_event();
  Task& w = host_.command(nullptr);
  const std::vector<BufferUse> write{{&a, {0, 2048, Access::read_write}}};
  ASSERT_FALSE(engine_->enqueue(write, 1, &w, sub_).has_value());
  EXPECT_EQ(taken(), 1u);
  std::vector<Task*> gates{&gate};
  host_.start(w, sub_.waits(), gates);
  host_.end_user(gate, false);
  host_.run_all();
  ASSERT_TRUE(w.failed());
  Task* r = expect({{&a, {0, 2048, Access::read}}}, 1, false);
  for (Event e : sub_.waits()) EXPECT_FALSE(static_cast<Task*>(e)->failed()) << "waits for the failed writer";
  expect({{&a, {0, 2048, Access::read}}}, 1, true);
  host_.run_all();
  EXPECT_FALSE(r->failed());
  EXPECT_EQ(a.bytes_lost(), 0u);
}

// Storage placed over evicted storage is fenced until that storage's last
// users have finished: the general steps wait for the fences (and drop
// them once they have ended), the fast path only takes unfenced storage.
TEST_F(FastPathTest, FallsBackWhileTheStorageIsFenced) {
  Buffer& old = make(8 << 10, false);
  Buffer& next = make(8 << 10, false);
  Task* user = expect({{&old, {0, 8 << 10, Access::read_write}}}, 1, false);
  expect({{&next, {0, 8 << 10, Access::read_write}}}, 1, false);  // evicts `old`, whose user has not run
  EXPECT_FALSE(old.has_storage(1));
  EXPECT_FALSE(user->done);
  expect({{&next, {0, 8 << 10, Access::read}}}, 1, false);  // the fence has not ended
  host_.run_all();
  expect({{&next, {0, 8 << 10, Access::read}}}, 1, false);  // it has: dropped now
  expect({{&next, {0, 8 << 10, Access::read}}}, 1, true);
  host_.run_all();
}

// The host copy an eviction writes undo content back into is fenced by
// that write-back (Transaction::fence_host): a later writer there waits
// for it, so the fast path does not take it while it runs. Written as
// EvictionWritesBackWhatAQueuedWritersFailureGoesBackTo sets it up, with
// the write-backs left unrun.
TEST_F(FastPathTest, FallsBackWhileTheHostCopyIsFencedByAWriteBack) {
  Task& gate = host_.user_event();
  std::vector<Buffer*> held;
  for (int i = 0; i < 2; ++i) {  // device 1 full of them, each overwritten at 2 behind the gate
    Buffer& b = make(4096, false);
    Task* made = enqueue({{&b, {0, 4096, Access::overwrite}}}, 1);
    ASSERT_NE(made, nullptr);
    ASSERT_TRUE(host_.run_until_done(std::vector<Event>{made}));
    enqueue_behind(gate, {{&b, {0, 4096, Access::overwrite}}}, 2);
    held.push_back(&b);
  }
  Buffer& next = make(4096, true);
  std::optional<EnqueueError> error;
  ASSERT_EQ(enqueue({{&next, {0, 4096, Access::read}}}, 1, &error), nullptr);
  ASSERT_EQ(error->code, EnqueueError::Code::device_busy) << error->message;
  const std::vector<Event> write_backs(sub_.waits().begin(), sub_.waits().end());
  ASSERT_FALSE(write_backs.empty());
  sub_.clear();
  std::size_t fenced = 0;
  for (Buffer* b : held) {
    if (!b->has_storage(kHost)) continue;  // not the one written back
    ++fenced;
    expect({{b, {0, 4096, Access::overwrite}}}, kHost, false);
    const auto waits = sub_.waits();
    EXPECT_TRUE(std::any_of(write_backs.begin(), write_backs.end(),
                            [&](Event w) { return std::find(waits.begin(), waits.end(), w) != waits.end(); }))
        << "the host writer does not wait for the write-back into its storage";
  }
  EXPECT_GT(fenced, 0u);
  host_.end_user(gate, true);
  host_.run_all();
}

// A buffer keeps the undo records of at most 1,024 unfinished writers: a
// writer that would make one more goes the general way, which forgets the
// oldest.
// A queue of writers none of which has run: the fast path looks whether
// the oldest has completed only as their records double, up to 64
// (fast_prepare()), not at every enqueue, so an enqueue asks the host about
// one event (its last writer: has it failed?), not two. Once they have
// run, their records go with a look at the last, and their events go back.
TEST_F(FastPathTest, QueuedWritersCostOneStatusLookPerEnqueue) {
  Buffer& a = make(64, false);
  expect({{&a, {0, 64, Access::read_write}}}, 1, false);
  const long before = host_.status_calls;
  for (int i = 0; i < 60; ++i) expect({{&a, {0, 64, Access::read_write}}}, 1, true);
  const double per_enqueue = static_cast<double>(host_.status_calls - before) / 60;
  EXPECT_LT(per_enqueue, 1.2) << "host status calls per enqueue";
  host_.run_all();
  // Run as they come, the writers' records go in bulk, a few at a time (one
  // look at the oldest, one at the last), and their events back to the
  // host: the 60 above, and all but the last few below.
  for (int i = 0; i < 64; ++i) {
    expect({{&a, {0, 64, Access::read_write}}}, 1, true);
    host_.run_all();
  }
  EXPECT_LE(host_.outstanding_refs(), 8) << "completed writers' events still held";
}

TEST_F(FastPathTest, FallsBackWhenTheUndoRecordsAreFull) {
  Buffer& a = make(64, false);
  expect({{&a, {0, 64, Access::read_write}}}, 1, false);
  for (int i = 1; i < 1024; ++i) {
    const std::uint64_t before = taken();
    ASSERT_NE(enqueue({{&a, {0, 64, Access::read_write}}}, 1), nullptr);
    ASSERT_EQ(taken(), before + 1) << "writer " << i;
  }
  expect({{&a, {0, 64, Access::read_write}}}, 1, false);
  expect({{&a, {0, 64, Access::read_write}}}, 1, true);
  host_.run_all();
}

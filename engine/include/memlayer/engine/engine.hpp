// memlayer/engine/engine.hpp — the migration engine: what happens at enqueue.
//
// One engine serves one context of a runtime (its Host, host.hpp). For each
// command the runtime hands it the command's buffer uses and the location the
// command runs at; the engine then, all or nothing:
//   1. finds or allocates each buffer's storage there, the largest first
//      (a command whose buffers cannot fit the location together fails at
//      once: Host::capacity); when the location is
//      full it evicts buffers the command does not use: those whose
//      storage borders the cheapest hole for the buffer, as the host names
//      them (Host::hole_victims; those with nothing to write back asked
//      about first), else one at a time, one with nothing to write back
//      first, then the least recently used: the storage is
//      handed back to the host with the events that must finish before
//      anything reuses it. A buffer with bytes valid nowhere else has them
//      written back to the host copy first, asynchronously, and keeps its
//      storage until they have completed: a write-back that fails loses
//      nothing. If nothing else makes room, the enqueue reports
//      `device_busy` with the write-backs to wait for. When the space is
//      there but cut into holes by the command's own buffers, those are
//      moved (evicted, placed again, brought back by the plan);
//   2. plans each buffer (migration::RangeVersions::plan: which stale bytes
//      must come from where, what the command must wait for);
//   3. has the host create the copies (unstarted);
//   4. commits the plans — the new versions, readers and writers — and
//      records the command and its copies as users of the storage;
//   5. releases the buffers' locks, starts the copies, and reports what the
//      command must wait for (Submission::waits) and where each use's bytes
//      are (Submission::storage).
// A step that fails undoes every earlier step of this enqueue: no version
// changed, no storage left allocated for it, no copy started. Evictions made
// on the way stay (each is complete and correct on its own: it changes where
// bytes are, never what they are). doc/engine.md walks through it.
//
// Content nobody gave (a buffer created without host data) is undefined and
// valid anywhere: it never migrates (migration::LocationSet::all()).
//
// Thread-safety: every member function may be called from any thread.
// Commands on disjoint buffers enqueue in parallel; a buffer's state is
// guarded by its own mutex, taken in address order with the command's other
// buffers. Eviction only ever try-locks other buffers, so it never waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memlayer/engine/detail/buffer_lock.hpp"
#include "memlayer/engine/host.hpp"
#include "memlayer/migration/access.hpp"
#include "memlayer/migration/plan.hpp"
#include "memlayer/migration/range_versions.hpp"

namespace memlayer::engine {

class CommandTable;
class Engine;
class FastPath;
class RefBatch;
class WaitList;
struct EnqueueScratch;

/// One buffer as the engine tracks it: its content versions by byte range
/// and its storage at each location. The host keeps one per buffer (a
/// parent: sub-buffers are ranges of it) for as long as the buffer lives.
class Buffer {
 public:
  /// Registers a buffer of `size` (> 0) bytes with `engine`, which must
  /// outlive it. `cookie` names it in Host calls. `host_content`: the user
  /// gave its initial bytes in the host copy (COPY_/USE_HOST_PTR); else
  /// they are undefined and valid anywhere. Throws std::invalid_argument for
  /// a size of 0. O(1).
  Buffer(Engine& engine, void* cookie, std::uint64_t size, bool host_content);
  /// Hands every storage back to the host (Host::free, after its last
  /// users). Waits for an eviction that is working on this buffer on
  /// another thread. O(locations + storage users + unfinished writers).
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] void* cookie() const noexcept { return cookie_; }

  /// Snapshots for tests and statistics; each takes the buffer's lock.
  [[nodiscard]] bool has_storage(Location at) const;
  [[nodiscard]] bool valid_at(Location at, std::uint64_t offset, std::uint64_t size) const;
  [[nodiscard]] std::uint64_t bytes_only_at(Location at) const;
  /// Bytes whose content was lost to failures so far (RangeVersions::bytes_lost).
  [[nodiscard]] std::uint64_t bytes_lost() const;
  /// The spans in offset order (RangeVersions::walk): their versions and
  /// where each is valid. `visit` must not call back into the engine.
  /// O(spans).
  void walk(const std::function<void(const migration::SpanInfo&)>& visit) const;

 private:
  friend class Engine;
  friend struct EnqueueScratch;
  friend class FastPath;
  friend class Transaction;

  // Its events, like every Event the engine records, are the engine's
  // names for them (engine/src/command_table.hpp): copied freely, never
  // counted.
  // One cache line holds what the fast path's commit reads and writes of
  // it (handle, last_use); its check reads Buffer::fast_storage_ instead.
  struct alignas(64) Storage {
    bool allocated = false;
    StorageHandle handle = 0;
    std::uint64_t last_use = 0;  // the engine's command stamp, for LRU eviction
    // What must finish before it may be written: a host's fences over
    // evicted storage; at the host copy, write-backs of undo content that
    // no version holds (Transaction::fence_host). Ordering only: one that
    // ended is dropped, whatever its outcome.
    std::vector<Event> fences;
    // Copies that touched it, and the general pipeline's commands, maybe
    // unfinished (users_at(): the planner's records name the rest).
    std::vector<Event> users;
    static constexpr std::size_t kFirstPrune = 16;  // users.size() from which add_user() prunes
    std::size_t prune_next = 0;                       // the entry add_user() looks at next
    // Write-backs of its bytes for an eviction, maybe unfinished: it is
    // evicted only once they have completed (Transaction::write_back).
    std::vector<Event> write_backs;
  };
  Storage& storage(Location at) {
    if (storage_.size() <= at) [[unlikely]] grow_storage(at);
    return storage_[at];
  }
  void grow_storage(Location at);
  // Whether the fast path may use the storage at `at` as it is: allocated,
  // with no fence to wait for (FastPath::check). One bit, not the two
  // fields behind a bounds check: about ten instructions fewer per argument
  // (doc/engine.md, the fast path's cost). Every change of a storage's
  // `allocated` or `fences` is followed by storage_changed().
  [[nodiscard]] bool fast_storage(Location at) const noexcept { return ((fast_storage_ >> at) & 1) != 0; }
  void storage_changed(Location at) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << at;
    const Storage& s = storage_[at];
    fast_storage_ = s.allocated && s.fences.empty() ? fast_storage_ | bit : fast_storage_ & ~bit;
  }
  // From kFirstPrune users on, each add looks at two entries, in turn
  // round the list, and drops those finished (prune_users): the list stays
  // within about twice its unfinished users, and an add costs the same
  // however many are queued, with no scan of the whole list at once.
  // Allocates nothing beyond the entry added (the room reserved before a
  // commit is enough).
  void add_user(Storage& s, Event e) {
    if (!s.users.empty() && s.users.back() == e) return;
    if (s.users.size() >= Storage::kFirstPrune) [[unlikely]] prune_users(s);
    s.users.push_back(e);
  }
  void prune_users(Storage& s);
  // Every command and copy that may still use the storage at `at`, maybe
  // finished already: its users, the writers the planner's undo records
  // name there, and the readers its spans and records name that the
  // command table places there (the fast path lists no command among the
  // users: a record or a span names it until it has finished; what a
  // record the planner forgets named becomes a user first:
  // Transaction::keep_forgotten_users). Appended to `out`. O(users +
  // unfinished writers + spans × readers).
  void users_at(Location at, std::vector<Event>& out) const;
  static migration::EventOps ops_of(CommandTable& table, bool host_tells);

  // What an enqueue reads and writes of every buffer it uses comes first,
  // together (the lock, the storage list, the events' batch, then the
  // planner's own such fields: migration::RangeVersions): a kernel with
  // 64 buffer arguments touches it 64 times, and a line fewer per buffer
  // is 64 first-level misses fewer (doc/engine.md, the enqueue's cost).
  mutable detail::BufferLock mutex_;  // guards storage_, fast_storage_, ops_.batch, versions_
  std::uint64_t fast_storage_ = 0;    // bit `at`: fast_storage(at)
  std::vector<Storage> storage_;      // by location, grown on demand
  // The planner's view of events: the engine's names, counted by nobody,
  // their statuses from the command table; ops_.batch (set by the enqueue
  // that holds mutex_) remembers those looked up.
  migration::EventOps ops_;
  migration::RangeVersions versions_;
  Engine& engine_;
  void* cookie_;
  std::uint64_t size_;
  std::list<Buffer*>::iterator registered_;
};

/// One use of a buffer by a command: a byte range and what it does there.
struct BufferUse {
  Buffer* buffer = nullptr;
  migration::Use use;
};

/// What the engine counts, over its lifetime.
struct EngineStats {
  std::uint64_t bytes_migrated = 0;  ///< bytes the copies move (a staged copy counts twice)
  std::uint64_t copies_direct = 0;   ///< device to device
  std::uint64_t copies_to_host = 0;  ///< device to host copy (staging legs and write-backs)
  std::uint64_t copies_from_host = 0;
  std::uint64_t evictions = 0;
  std::uint64_t write_backs = 0;  ///< write-backs made for evictions: bytes valid nowhere else, copied first
  std::uint64_t bytes_written_back = 0;
  /// Enqueues that found their location's free space cut into holes too
  /// small and moved the command's own buffers to make one.
  std::uint64_t compactions = 0;
  /// Bytes a failed command's undo found held nowhere any more: undefined
  /// since (migration/range_versions.hpp, failures).
  std::uint64_t bytes_lost = 0;
  /// Enqueues the fast path took (Engine::enqueue: the steady state), and
  /// all calls of Engine::enqueue, whatever their outcome. Read while
  /// enqueues run, one still in flight may count as taken by the fast path.
  std::uint64_t fast_path = 0;
  std::uint64_t enqueues = 0;
};

/// Why an enqueue failed. The message names the buffer size, the location
/// and the cause.
struct EnqueueError {
  enum class Code : std::uint8_t {
    device_full,         ///< the command's buffers cannot all be placed, even after evicting
    /// The location is full of storage that is freed once queued work
    /// finishes (Allocation::room_after), or evicted once its write-backs
    /// have completed: Submission::waits() lists that work. Or the buffers
    /// eviction could take were locked by other threads' enqueues at that
    /// instant (eviction never waits for a lock): waits() is empty. Wait
    /// with no enqueue of this thread in progress, then enqueue again (a
    /// write-back that failed is made again then: bound the wait), as
    /// engine/room_wait.hpp does.
    device_busy,
    host_out_of_memory,  ///< no host memory for the engine's records or a host copy (std::bad_alloc)
    /// The host refused an allocation (Allocation::error), or a host call or
    /// the planner threw something other than std::bad_alloc (the message
    /// carries its what()).
    host_failed,
  };
  Code code;
  std::string message;
};

/// The engine's name for a command it recorded (Submission::command()),
/// for telling it the command ended (Engine::ended()). Opaque;
/// `none` names nothing.
enum class CommandName : std::uintptr_t { none = 0 };

/// The result of one enqueue, and the scratch it works in. Reuse one per
/// thread: once warm, an enqueue allocates nothing in it. Its events are
/// retained until the next enqueue into it, clear(), or its destruction.
class Submission {
 public:
  Submission();
  ~Submission();
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;

  /// Every event the command must wait for: the last writers and readers
  /// of its ranges as the ordering rules say, the copies made for it, and
  /// the fences of storage placed over evicted storage. Each once. After a
  /// `device_busy` failure: what to wait for before trying again.
  [[nodiscard]] std::span<const Event> waits() const noexcept { return waits_; }
  /// The storage at the command's location of each use's buffer, in the
  /// order the uses were given (the use's bytes start at handle + offset).
  [[nodiscard]] std::span<const StorageHandle> storage() const noexcept { return storage_; }
  /// The engine's name for the command enqueued (none after a failure or
  /// place()): the host keeps it with the command's event, to pass to
  /// Engine::ended() once the command has ended.
  [[nodiscard]] CommandName command() const noexcept { return command_; }
  /// Lets go of waits(), which stay alive until then; command() is none
  /// again. Call it before the engine goes. O(waits); inline when there
  /// are none (the engine clears at every enqueue).
  void clear() noexcept {
    if (!leases_.empty() || waits_counted_) let_go();
    waits_.clear();
    storage_.clear();
    command_ = CommandName::none;
  }

 private:
  friend class Engine;
  friend class FastPath;
  friend class Transaction;
  friend class WaitList;
  void let_go() noexcept;  // of the leases, or the counted waits, of waits_
  Host* host_ = nullptr;
  CommandTable* table_ = nullptr;
  // After an enqueue, waits_ are held by leases on the engine's command
  // table (CommandTable::lease_host), one per name in leases_: no host
  // reference is taken or dropped for them. After a device_busy failure
  // they are host references (waits_counted_).
  std::vector<Event> waits_;
  std::vector<Event> leases_;
  bool waits_counted_ = false;
  std::vector<StorageHandle> storage_;
  CommandName command_ = CommandName::none;
  std::unique_ptr<EnqueueScratch> scratch_;
};

class Engine {
 public:
  /// An engine over `host`, which must outlive it and every Buffer made
  /// with it. O(1).
  explicit Engine(Host& host);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Enqueues one command that runs at `at` and uses `uses` (any number,
  /// several per buffer allowed: a buffer passed twice, a copy within one
  /// buffer; where they overlap, a read and a write make a read_write).
  /// `command` is the command's event (never nullptr): it becomes the last
  /// writer or a reader of its ranges and a user of the storage. The host
  /// makes it before the call and starts it after, waiting for out.waits();
  /// on an error it drops it: nothing refers to it.
  /// Preconditions: each use lies within its buffer and has a size > 0;
  /// at < migration::kMaxLocations; the buffers belong to this engine.
  /// Errors: EnqueueError (see there), with nothing of this enqueue left;
  /// an exception a host call throws is reported so, never let through.
  /// The fast path: when every buffer has one use, covering exactly one
  /// of its spans (the whole buffer, most often), whose bytes are valid at
  /// `at`, with its storage there and no fence on it, nothing it depends on
  /// failed and room among its undo records (migration::RangeVersions::
  /// fast_prepare), the enqueue checks that of every buffer first, then
  /// records the command: no plan, no copy, no placement. It takes the
  /// buffers' locks in the order given, waiting only for a buffer above
  /// every one it holds (the others lock in address order): a buffer
  /// another thread holds below that also falls back. Any miss falls back
  /// to the steps above; both decide the same (set_fast_path()).
  /// Complexity: O(U) for U uses on the fast path; else O(U log U) (O(U)
  /// when they come sorted by buffer address, or name the same buffers in
  /// the same order as this Submission's previous enqueue: a kernel
  /// enqueued again), plus the planner's cost per buffer (O(log spans +
  /// spans touched × locations)), plus one pass over the engine's buffers
  /// per eviction, and per placement that finds the location full one
  /// more and the host's Host::hole_victims; and, once
  /// the failed commands the engine's records may still name have doubled
  /// (256 at first), one pass over every name the buffers hold to let go of
  /// those none names (doc/engine.md, event names).
  [[nodiscard]] std::optional<EnqueueError> enqueue(std::span<const BufferUse> uses, Location at, Event command,
                                                    Submission& out);

  /// The command `name` names (Submission::command() of its enqueue) has
  /// ended with `status` (completed, cancelled or failed, as Host::status
  /// would say from then on). The engine's command table reads it so from
  /// now on without Host::status. Completed, the engine gives its
  /// reference to the event back now, on the calling thread
  /// (Host::release): a host calls it from its completion path, where it
  /// still holds the event itself, so that the event's last release stays
  /// there, off the enqueuing thread, as it is for a command the engine
  /// never saw. Failed or cancelled, the event stays held, and the next
  /// enqueue over the command's buffers undoes what it wrote (doc/engine.md,
  /// failures). Precondition: the command has done all it will do (its
  /// writes ended); its event may still read running, as long as it will
  /// end so with nothing else to run first (memlayer's runtime and PoCL
  /// tell the engine just before they end the event, so that nothing sees
  /// the end before the engine does: Host::tells_ends). A name the engine
  /// has recycled since (a look saw the end first), none, a second call,
  /// or `status` running does nothing. O(1); thread-safe, concurrently with
  /// enqueues, with no lock of the engine's taken.
  void ended(CommandName name, EventStatus status) noexcept;

  /// Places storage for all of `buffer` at `at` now, outside any command,
  /// evicting as enqueue() does: for a host that must hand out a pointer into
  /// the storage before the command that uses it (a map). Nothing else
  /// changes; `out` only carries the scratch. Errors as enqueue().
  /// Complexity: one allocation, plus one pass over the engine's buffers per
  /// eviction.
  [[nodiscard]] std::optional<EnqueueError> place(Buffer& buffer, Location at, Submission& out);

  /// Turns the fast path (enqueue()) on or off, for tests and measurements
  /// that compare the two: both decide the same. It starts on, unless the
  /// environment has MEMLAYER_FAST_PATH=0 when the engine is made. Takes
  /// effect at the next enqueue of any thread. O(1), thread-safe.
  void set_fast_path(bool on) noexcept { fast_path_on_.store(on, std::memory_order_relaxed); }

  [[nodiscard]] EngineStats stats() const noexcept;
  [[nodiscard]] Host& host() const noexcept { return host_; }

 private:
  friend class Buffer;
  friend class FastPath;
  friend class Transaction;

  // Recycles the command table's failed slots that no buffer names any
  // more, once there are sweep_at_ of them (then twice those left, at
  // least kFirstSweep): without it a failed command's event would stay held
  // for the engine's life. Called with no buffer locked; gives up (for 64
  // more) when another thread holds a buffer.
  void sweep_failed();
  static constexpr std::size_t kFirstSweep = 256;
  // The general pipeline (engine/src/transaction.cpp), on `out` as enqueue()
  // hands it over; out of line, so that the fast path's callers save no
  // registers for it.
  [[gnu::noinline]] std::optional<EnqueueError> pipeline(std::span<const BufferUse> uses, Location at, Event command,
                                                         Submission& out);

  Host& host_;
  const bool host_tells_ends_;           // Host::tells_ends(), asked once
  std::unique_ptr<CommandTable> table_;  // every Event the engine records is its name
  std::atomic<std::size_t> sweep_at_{kFirstSweep};
  std::mutex registry_mutex_;
  std::list<Buffer*> registry_;  // every live buffer, for eviction
  // Bumped by every enqueue (its stamp: Storage::last_use, and the count of
  // enqueues). The fast path's count is what the others leave (stats()):
  // only the general pipeline counts itself, so that a fast enqueue makes
  // one atomic update here, not two.
  std::atomic<std::uint64_t> stamp_{0};
  std::atomic<std::uint64_t> slow_path_{0};
  std::atomic<std::uint64_t> places_{0};  // place() calls, which take a stamp too
  std::atomic<bool> fast_path_on_{true};
  struct Counters {
    std::atomic<std::uint64_t> bytes_migrated{0}, copies_direct{0}, copies_to_host{0}, copies_from_host{0},
        evictions{0}, write_backs{0}, bytes_written_back{0}, bytes_lost{0}, compactions{0};
  } counters_;
};

}  // namespace memlayer::engine

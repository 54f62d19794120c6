// One enqueue through the engine, step by step (engine.hpp lists the steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "command_table.hpp"
#include "memlayer/engine/engine.hpp"
#include "ref_batch.hpp"
#include "wait_list.hpp"

namespace memlayer::engine {

/// The per-thread scratch one enqueue works in (owned by a Submission).
struct EnqueueScratch {
  /// One buffer of the command: its uses are uses[first, first + count).
  struct Group {
    static constexpr std::size_t kNoCopies = SIZE_MAX;
    Buffer* buffer;
    std::size_t first, count;
    std::size_t first_copy;  // its copies' events: copy_events[first_copy, ...)
    std::size_t plan;        // with_copies[plan], or kNoCopies: its plan moves nothing
  };
  /// A copy made, to be started (or dropped) once the locks are released;
  /// it waits for deps[first_dep, first_dep + dep_count), each retained.
  struct Pending {
    CopyHandle copy;
    Event name;  // the engine's name for its event (discarded if it never starts)
    std::size_t first_dep, dep_count;
    bool start;  // its plan was committed; else it is dropped
  };
  /// Storage this enqueue allocated, given back if it fails.
  struct Placed {
    Buffer* buffer;
    Location at;
  };

  std::vector<std::pair<Buffer*, std::size_t>> order;  // (buffer, use index), sorted
  // The buffers of the uses `order` was sorted from, in the order given: a
  // command with the same arguments as the one before (a kernel enqueued
  // again) reuses it instead of sorting.
  std::vector<Buffer*> order_of;
  bool grouped = false;  // groups and uses were built from `order` (kept for the same buffers)
  std::vector<migration::Use> uses;
  std::vector<Group> groups;
  migration::Plan planning;                  // each buffer is planned here
  std::vector<migration::Plan> with_copies;  // the plans that copy, by Group::plan
  const migration::Plan no_copies{};         // stands for the plans of the others
  migration::Plan evict_plan;
  std::vector<Event> copy_events;  // the copies' names
  std::vector<Pending> pending;
  std::vector<Event> deps;  // host events, retained
  std::vector<CopySource> also;  // scratch for CopyRequest::also
  std::vector<Placed> placed;
  std::vector<std::size_t> to_place;  // groups whose storage Transaction::place_all() places
  // Transaction::evict_for_hole(): the buffers eviction may take, each
  // held by its lock while the host is asked; what the host is told of
  // them (all, or only the clean ones: `asked` maps back), and its answer.
  std::vector<Buffer*> candidates;
  std::vector<std::unique_lock<detail::BufferLock>> candidate_locks;
  std::vector<bool> clean;
  std::vector<EvictionCandidate> told;
  std::vector<std::size_t> asked;
  std::vector<std::size_t> victims;
  std::vector<Event> after;       // names: what Host::free must wait for (then host events)
  std::vector<Event> users;       // Buffer::users_at()'s, for a victim
  std::vector<Event> forgettable;  // Transaction::keep_forgotten_users()
  std::vector<Event> room_after;  // host events: what a device_busy failure waits for, retained
  // Active while buffers are locked: the statuses looked up, and the host
  // references this enqueue drops.
  RefBatch refs;
};

class Transaction {
 public:
  Transaction(Engine& engine, std::span<const BufferUse> uses, Location at, Event command, Submission& out);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  std::optional<EnqueueError> run();
  /// Only places storage (Engine::place).
  std::optional<EnqueueError> run_place();
  /// What an exception that stopped an enqueue's decision says, as the
  /// enqueue's error. Called in a catch block.
  static EnqueueError error_of_exception();

 private:
  using Storage = Buffer::Storage;

  void group_uses();
  void lock_all();
  void unlock_all();
  [[nodiscard]] bool uses_buffer(const Buffer* b) const;

  std::optional<EnqueueError> place_all();
  std::optional<EnqueueError> place_largest_first();  // s_.to_place
  std::optional<EnqueueError> compact(EnqueueError full);
  [[nodiscard]] std::optional<EnqueueError> exceeds_location() const;
  std::optional<EnqueueError> place(Buffer& b, Location loc, bool for_eviction);
  enum class Evicted : std::uint8_t { nothing, freed, writing_back };
  Evicted evict_one(Location loc, bool clean_only);
  Evicted evict_for_hole(Location loc, std::uint64_t size);
  bool collect_candidates(Location loc);
  bool ask_for_hole(Location loc, std::uint64_t size, bool clean_only);
  Evicted evict_adopted(Buffer& victim, Location loc);
  Evicted evict(Buffer& victim, Location loc);
  bool plan_evict_now(Buffer& victim, Location loc);
  // How a buffer ranks as a victim (pick_victim() says the order).
  struct VictimRank {
    bool loses_undo;
    migration::RangeVersions::WriteBack write_back;
    bool idle;
    std::uint64_t last_use;
    [[nodiscard]] bool better_than(const VictimRank& o) const {
      if (loses_undo != o.loses_undo) return !loses_undo;
      if (write_back != o.write_back) return write_back < o.write_back;
      if (idle != o.idle) return idle;
      return last_use < o.last_use;
    }
  };
  std::optional<VictimRank> rank_victim(Buffer& b, Location loc);
  Buffer* pick_victim(Location loc, bool clean_only);
  // What a copy is for (CopyRequest::write_back, CopyRequest::last_copy).
  enum class CopyKind : std::uint8_t { for_command, write_back, last_copy };
  void plan_eviction(Buffer& victim, Location loc, migration::Plan& plan);
  std::optional<std::size_t> make_write_backs(Buffer& victim, const migration::Plan& plan, CopyKind kind);
  void fence_host(Buffer& victim, const migration::Plan& plan, std::size_t first_event);
  bool write_back(Buffer& victim, Location loc, const migration::Plan& plan);
  bool writing_back(Storage& st);
  void wait_for_room(std::span<const Event> names);
  bool adopt_fences(Buffer& b, Location loc, Allocation& a);
  std::optional<EnqueueError> plan_all();
  void keep_forgotten_users(Buffer& b);
  std::optional<EnqueueError> create_copies();
  bool create_copy(Buffer& b, const migration::Copy& c, std::size_t first_copy, CopyKind kind);
  void commit_all();
  [[nodiscard]] const migration::Plan& plan_of(const EnqueueScratch::Group& g) const;
  void rollback();
  void start_copies() noexcept;

  void add_dep(Event name, std::size_t from);  // to scratch.deps as a host event, retained, once
  void add_wait(Event name) { waits_.add(name, command_); }
  void release_all(std::vector<Event>& events) noexcept;  // host events; and clears them
  // One host reference fewer: batched while buffers are locked.
  void drop(Event e) noexcept;
  // Host::free of `b`'s storage at `loc` after the events `names` name
  // (overwritten: allocates nothing).
  void free_storage(Buffer& b, Location loc, Storage& st, std::vector<Event>& names);
  std::optional<EnqueueError> fail(EnqueueError e);  // undoes this enqueue
  void count_copy(const migration::Copy& c);
  void count_write_back(const migration::Plan& plan);
  void count_lost(std::uint64_t bytes);

  Engine& engine_;
  Host& host_;
  CommandTable& table_;
  std::span<const BufferUse> uses_;
  Location at_;
  Event host_command_;      // the host's event for the command
  Event command_ = nullptr;  // its name, once run() made it
  Submission& out_;
  EnqueueScratch& s_;
  WaitList waits_;
  std::uint64_t stamp_ = 0;
  std::size_t command_copies_ = 0;  // s_.pending from here on: this command's copies
  std::size_t fence_waits_ = 0;     // fences of the command's storages: commit_all() waits for them
  bool locked_ = false;
  // Eviction passed over a buffer it may take at the next try: one another
  // thread held locked (eviction only try-locks: an enqueue, or a buffer
  // being destroyed, which gives its storage back before it unlocks:
  // Buffer::~Buffer), or one whose write-back the host refused
  // (Host::create_copy: memlayer's runtime refuses it for a buffer being
  // destroyed, whose storage goes back once this enqueue lets go of it;
  // out of host memory, the room wait's limit ends the tries). A full
  // location is then device_busy, not device_full: the command may fit.
  bool transient_ = false;
};

}  // namespace memlayer::engine

// memlayer/engine/host.hpp — what the migration engine asks of the runtime
// it serves.
//
// The engine (memlayer/engine/engine.hpp) decides; its host acts. A host is
// memlayer's own runtime (lib/src/engine_host.cpp) or PoCL's core
// (drivers/pocl/core/): it owns the commands, the events and the memory, and
// the engine reaches all three only through this interface.
//
// Events are the host's opaque handles (migration::Event): a cl_event in
// PoCL, an EventState in memlayer's runtime. Buffers are named to the host by
// the cookie the host gave the engine's Buffer when it made it.
//
// Locks. The engine calls retain(), release(), status(), allocate(),
// free(), hole_victims() and create_copy() while it holds the locks of the
// buffers a command uses (the engine's own, never the host's; for
// hole_victims(), also those of the buffers it names): these must not call
// back into the engine, block on another enqueue, or run user callbacks.
// submit_copy() and discard_copy() are called with no engine lock held.
//
// Thread-safety: the engine calls a host from every thread that enqueues, at
// once; each function must be safe for that.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "memlayer/migration/cost_model.hpp"
#include "memlayer/migration/event.hpp"
#include "memlayer/migration/location.hpp"

namespace memlayer::engine {

using migration::Event;
using migration::EventStatus;
using migration::Location;

/// Where a buffer's bytes live at one location, as the host names them (a
/// device address, a host pointer): the engine only stores it and hands it
/// back. Byte `o` of the buffer is at `handle + o`.
using StorageHandle = std::uint64_t;

/// What allocate() hands back.
struct Allocation {
  enum class Outcome : std::uint8_t {
    ok,    ///< `handle` is the new storage
    full,  ///< the location has no room: the engine may evict and try again
    error  ///< anything else (`message` says what); the enqueue fails
  };
  Outcome outcome = Outcome::error;
  StorageHandle handle = 0;
  /// With `ok`: events that must finish before anything may write the new
  /// storage (it may overlap storage an eviction freed, still being read
  /// out). The host transfers one reference to each to the engine.
  std::vector<Event> fences;
  /// With `full`: events after which the location has more room — storage
  /// free() was given while its `after` events were unfinished, which this
  /// host frees only then (see free()). Empty: waiting will not make room.
  /// The host transfers one reference to each to the engine.
  std::vector<Event> room_after;
  std::string message;
};

/// A copy the host made but has not started: the engine starts it with
/// submit_copy() or drops it with discard_copy(), exactly once.
struct CopyHandle {
  /// The copy's completion event. The handle owns one reference to it,
  /// which submit_copy()/discard_copy() consume.
  Event event = nullptr;
  /// Whatever the host needs to start the copy later (its command node).
  std::shared_ptr<void> host_data;
};

/// Another copy of a CopyRequest's bytes: the buffer's storage at `at`.
struct CopySource {
  Location at = migration::kHost;
  StorageHandle storage = 0;
};

/// One copy the engine wants made: bytes [offset, offset + size) of the
/// buffer `cookie`, from its storage at `src` to its storage at `dst`.
struct CopyRequest {
  void* cookie = nullptr;
  bool write_back = false;  ///< saves bytes of storage being evicted (else: for a command)
  /// A write-back of bytes valid nowhere else whose storage goes once the
  /// copy has ended, whatever its outcome (they were still being made when
  /// eviction had to take them: doc/engine.md, the pipeline): if it fails,
  /// the bytes are lost. A host should keep trying it as long as it can
  /// rather than a bounded number of times (memlayer's runtime: until
  /// ContextOptions::room_wait has passed).
  bool last_copy = false;
  Location src = migration::kHost;
  Location dst = migration::kHost;
  StorageHandle src_storage = 0;
  StorageHandle dst_storage = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  /// What the copy will wait for (what made its source valid, the fences of
  /// its destination); valid during the call.
  std::span<const Event> after;
  /// Other storage holding the same bytes, complete (migration::Copy::also),
  /// lowest location first; valid during the call. A host whose transfer
  /// from `src` keeps failing may read from one of these instead (re-source
  /// the copy): each has a direct path to `dst`, and its bytes and storage
  /// stay as they are until the copy has ended. A host may ignore them.
  std::span<const CopySource> also;
};

/// A buffer eviction may take from a location now, as the engine names it
/// to Host::hole_victims().
struct EvictionCandidate {
  void* cookie = nullptr;
  StorageHandle storage = 0;  ///< its storage at the location
  std::uint64_t size = 0;
  /// When a command last used it there (the engine's stamp): lower is
  /// longer ago, and among holes that cost the same the engine would rather
  /// evict the least recently used.
  std::uint64_t last_use = 0;
};

class Host {
 public:
  virtual ~Host() = default;

  // ---- events -------------------------------------------------------------
  /// Take / drop `count` (>= 1) references to `e` (never nullptr). The
  /// engine holds one reference per command, copy and fence it records (its
  /// command table names them in its records, uncounted: doc/engine.md),
  /// taken when the event comes in and dropped once the event has
  /// completed, and one per event it hands back for longer than the
  /// enqueue (a copy's dependencies, Host::free's `after`; not
  /// Submission::waits(), which the engine keeps alive itself until
  /// Submission::clear()), so these are called about twice per command, not
  /// per buffer argument. O(1). May be called under engine locks: must not
  /// run user callbacks (dropping the last reference frees the event and
  /// nothing else).
  virtual void retain(Event e, std::uint32_t count) noexcept = 0;
  virtual void release(Event e, std::uint32_t count) noexcept = 0;
  /// The engine's reference to the event of the command Engine::enqueue()
  /// records, taken as the enqueue starts, while the event is the
  /// caller's alone: made for this command and not yet started or shown to
  /// another thread (engine.hpp: the host starts the command after the
  /// enqueue). A host whose events guard their counts with a lock may count
  /// this one without it (PoCL's core does: two atomic operations fewer
  /// per command). By default, retain(e, 1). O(1).
  virtual void retain_unshared(Event e) noexcept { retain(e, 1); }
  /// How `e` stands (migration/event.hpp: EventStatus): running until it
  /// ends, then for good completed, cancelled (failed without starting:
  /// wrote nothing) or failed (after starting: its writes may be partial; a
  /// host that cannot tell the two apart says failed). The engine undoes a
  /// failed writer's version from this (doc/migration.md, failures), so the
  /// host must also fail, without running it, every command and copy that
  /// waits for a failed event. O(1), lock-free preferred: the engine asks it
  /// at every enqueue about the events it holds that have not ended yet,
  /// from any thread, always holding a reference to `e`.
  [[nodiscard]] virtual EventStatus status(Event e) const noexcept = 0;
  /// status(e) != running.
  [[nodiscard]] bool finished(Event e) const noexcept { return status(e) != EventStatus::running; }
  /// Whether this host calls Engine::ended() for every command of the
  /// engine's (Submission::command()) as it ends, however it ends, before
  /// anything can see that it ended (engine.hpp). Then the engine never
  /// asks status() about those commands: a look at one still running is a
  /// load of its command table (doc/engine.md, the command table), and it
  /// does not also tell the table of the writers its undo records show
  /// completed. Copies and fences are asked about as ever. Asked once, when
  /// the engine is made. A command the host misses reads running until
  /// the table's free slots run out and it asks again (status()): its
  /// event is given back then, and a failure undone then, never lost.
  [[nodiscard]] virtual bool tells_ends() const noexcept { return false; }

  // ---- storage ------------------------------------------------------------
  /// Storage for all `size` bytes of buffer `cookie` at `at` (a device
  /// location, or migration::kHost for the host copy). `full` makes the
  /// engine evict another buffer from `at` and call again; the host copy is
  /// never `full` (host memory exhausted is an `error`). Cost: the host's
  /// allocator.
  virtual Allocation allocate(Location at, void* cookie, std::uint64_t size) = 0;
  /// Gives back storage allocate() made. The host must not let anything
  /// write the bytes before every event in `after` has finished (its last
  /// users, the write-back reading it out). Either it frees at once and
  /// names those events as `fences` of whatever allocate() places over them
  /// next (memlayer's runtime: its commands hold storage addresses taken at
  /// enqueue), or it keeps the storage until they have finished and, while
  /// that keeps allocate() `full`, names them as `room_after` (PoCL: its
  /// commands look the storage up when they run, so it must stay theirs).
  /// Storage none of whose `after` events is unfinished must be reusable at
  /// once: a failed enqueue gives back its new storage so, and the
  /// `device_busy` it reports names only room_after, so storage held back
  /// with nothing to wait for would never come back to an enqueue that
  /// waits and tries again. Never fails.
  virtual void free(Location at, void* cookie, StorageHandle storage, std::uint64_t size,
                    std::span<const Event> after) noexcept = 0;

  /// The most bytes of buffers location `at` (a device) can ever hold at
  /// once: its memory, less what the host keeps for itself. A command
  /// whose buffers need more than this together fails at once
  /// (`device_full`, naming the sizes), evicting nothing and waiting for
  /// no room. O(1). The default: no limit known.
  [[nodiscard]] virtual std::uint64_t capacity(Location /*at*/) const noexcept { return UINT64_MAX; }

  /// Whether eviction may take buffer `cookie`'s storage at `at` now (false:
  /// the host has handed out a pointer into it, a mapping). O(1); called
  /// under engine locks. The default: always.
  [[nodiscard]] virtual bool can_evict(void* /*cookie*/, Location /*at*/) const noexcept { return true; }

  /// Which of `candidates` to evict from device `at` so that a `size`-byte
  /// buffer fits there, when allocate() said `full`: those whose storage,
  /// with the free space around it, makes the hole that holds the buffer at
  /// the least cost: the fewest bytes evicted, then the fewest buffers, then
  /// the lowest sum of `last_use` (memlayer's runtime asks bufalloc's
  /// Region::cheapest_hole). The candidates are the buffers the engine may
  /// evict now; storage at `at` of any other (the command's own, one another
  /// thread holds, one a write-back is saving, one that would lose undo
  /// content or bytes still being made, a mapped one) stays, and a hole
  /// through it is no use. Appends the chosen candidates' indices to
  /// `victims` and returns true; false when no hole can be made of the
  /// candidates or the host cannot tell (the default): the engine then
  /// evicts by its rank alone (engine.hpp), as it does when evicting the
  /// victims named did not make room after all. An empty answer with true
  /// means the buffer fits already (no victim). Called under engine locks
  /// (host.hpp's file comment): must not call back into the engine. Cost:
  /// the host's; bufalloc's is O(blocks at `at`), paid only when the
  /// location is full.
  virtual bool hole_victims(Location /*at*/, std::uint64_t /*size*/, std::span<const EvictionCandidate> /*candidates*/,
                            std::vector<std::size_t>& /*victims*/) {
    return false;
  }

  // ---- copies -------------------------------------------------------------
  /// Makes, without starting it, a copy of `request`'s bytes. The copy must
  /// keep whatever it reads and writes alive until it has run (the buffer may
  /// be released meanwhile). nullptr `event`: the copy could not be made
  /// (no host memory; the buffer is being destroyed); the engine then gives
  /// up the step that needed it. The copy runs as a command of the host's,
  /// never inside this call: its failure must be one the engine can see
  /// (an eviction's write-back keeps the storage until it has succeeded).
  virtual CopyHandle create_copy(const CopyRequest& request) = 0;
  /// Starts a copy after `deps` (retained by the engine for the call; the
  /// same events as its request's `after`). It cannot fail: the engine has
  /// recorded the copy's effects by then, so what starting it needs is made
  /// in create_copy() (out of host memory there, the enqueue fails
  /// cleanly). A copy that cannot run after all must end failed, so that
  /// what waits for it fails too (its bytes are then not where the engine
  /// recorded them: a failed copy leaves none).
  virtual void submit_copy(CopyHandle copy, std::span<const Event> deps) noexcept = 0;
  /// Drops a copy that will never run (its enqueue failed).
  virtual void discard_copy(CopyHandle copy) noexcept = 0;

  /// What the engine's error messages call `at`: "the host copy" for
  /// migration::kHost, else a device's name. The default: "location N".
  [[nodiscard]] virtual std::string location_name(Location at) const {
    return at == migration::kHost ? std::string("the host copy") : "location " + std::to_string(at);
  }

  // ---- paths --------------------------------------------------------------
  /// What moving bytes costs between two locations, and which direct
  /// device-to-device paths exist. Read while planning; must not change
  /// while the engine runs.
  [[nodiscard]] virtual const migration::CostModel& cost_model() const noexcept = 0;
};

}  // namespace memlayer::engine

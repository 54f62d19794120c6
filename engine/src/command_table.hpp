// The engine's command table: one slot per command (or copy, or fence) the
// engine records, so that its records name commands without counting
// references to the host's events.
//
// Inside the engine every Event is a *name* the table made: the slot's
// index and its generation. The slot holds the host's event with one
// reference, taken when the name is made, and its final status once known.
// Records (the planner's spans and undo records, the storages' users and
// fences) copy names freely: no count is taken or dropped per record. A
// slot whose command completed gives its event back to the host and is
// recycled under the next generation, so that every name still naming it
// reads "completed long ago" (doc/engine.md, the command table). Host events
// cross at the engine's edges only: make() when a command, a copy or a
// fence comes in, retain_host() when the engine hands one back (a wait, a
// copy's dependency, what Host::free waits for).
//
// Two rules make that safe:
//   * A status look at a slot still running asks the host with the slot's
//     event. It pins the slot first and looks again; the event goes back to
//     the host only once the final status is cached and no pin is left, and
//     a look that pins after that reads the cached status and never touches
//     the event. A slot made `told` (a command whose host tells its end:
//     Host::tells_ends) is not asked: running there is one load, until
//     learned() makes it final. Only look_again(), when the free slots run
//     out, asks the host about it (a tell the host missed).
//   * A slot whose command failed or was cancelled keeps reading so, and
//     keeps its event (a command that waits for it must fail with it): it
//     is recycled only by recycle_unnamed(), once no record names it
//     (Engine::sweep_failed collects what the records name) and no pin
//     holds it (a lease: lease_host()).
//
// Thread-safety: every member function may be called from any thread at
// once. The free slots are a lock-free stack; only adding a block of slots
// takes a mutex.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "memlayer/engine/host.hpp"

namespace memlayer::engine {

class CommandTable {
 public:
  /// Events are the host's; `host` must outlive the table.
  explicit CommandTable(Host& host);
  /// Gives every event the table still holds back to the host.
  ~CommandTable();
  CommandTable(const CommandTable&) = delete;
  CommandTable& operator=(const CommandTable&) = delete;

  /// How make() comes by the reference the table holds.
  enum class Ref : std::uint8_t {
    retain,           // takes one (Host::retain)
    retain_unshared,  // takes one of an event no other thread sees yet (Host::retain_unshared)
    adopt,            // takes over one the caller holds
  };
  /// A new name for host event `e` (not nullptr), running. The table holds
  /// one reference to `e` from now on, as `ref` says. `told`: the host will tell
  /// how it ends (learned()), so status() never asks it. `where`: the
  /// location a command runs at, which where() tells (kNowhere: a copy or a
  /// fence). nullptr when no slot can be had (no host memory for a new block
  /// of slots): then nothing is taken. O(1) amortised; a block of slots is
  /// added, or up to 64 running slots are looked at again (finding those
  /// that completed unseen), when none is free.
  [[nodiscard]] Event make(Event e, Ref ref, bool told = false, Location where = kNowhere) noexcept;
  static constexpr Location kNowhere = ~Location{0};
  /// Where the command named runs, as make() was told; kNowhere for a copy
  /// or a fence, and for a name whose slot was recycled (its command
  /// completed long ago). A slot recycled during the call may answer for
  /// its new command: callers take the answer for a name of theirs that
  /// may have completed meanwhile (Buffer::users_at). O(1): two loads.
  [[nodiscard]] Location where(Event name) const noexcept {
    if (name == nullptr) return kNowhere;
    const Slot& s = slot(index_of(name));
    if (gen_of(s.word.load(std::memory_order_acquire)) != gen_of(name)) return kNowhere;
    return s.where.load(std::memory_order_relaxed);
  }
  /// Gives back a name nothing records (the command of an enqueue that
  /// failed, a copy never started): its event's reference goes back to the
  /// host, the slot is free. O(1).
  void discard(Event name) noexcept;

  /// How the command named stands (nullptr, or a recycled slot: completed).
  /// O(1): a load once the status is final, or while a told slot runs;
  /// else a call of Host::status.
  [[nodiscard]] EventStatus status(Event name) noexcept {
    if (name == nullptr) return EventStatus::completed;
    const std::uint32_t index = index_of(name), gen = gen_of(name);
    Slot& s = slot(index);
    const std::uint64_t w = s.word.load(std::memory_order_acquire);
    if (gen_of(w) != gen) return EventStatus::completed;
    if (state_of(w) != kRunning) return status_of(state_of(w));
    if ((w & kTold) != 0) return EventStatus::running;
    return ask_host(index, s, gen);
  }
  [[nodiscard]] bool finished(Event name) noexcept { return status(name) != EventStatus::running; }
  /// The command named has ended with `status`, as the caller knows without
  /// asking the host (Engine::ended, migration::EventOps::completed): a
  /// running slot reads so from now on. Completed, once no look has it
  /// pinned, it gives its event back and is recycled; failed or cancelled,
  /// it keeps it (rule 2). Nothing for a name already final or recycled, or
  /// for `status` running. O(1).
  void learned(Event name, EventStatus status) noexcept;
  /// The host's event behind `name`, with one reference more for the
  /// caller; nullptr when it completed (nothing is left to wait for). A
  /// failed one is returned: what waits for it must fail. O(1).
  [[nodiscard]] Event retain_host(Event name) noexcept;
  /// The host's event behind `name`, as retain_host() but leased rather
  /// than counted: the slot stays pinned, so that it keeps its event (and
  /// its one host reference) until end_lease(name), whatever the command
  /// does meanwhile; no host call either way. nullptr (no lease) when it
  /// completed. For what one enqueue hands its caller (Submission::waits):
  /// a lease is two atomic operations, a host reference two host calls.
  /// O(1).
  [[nodiscard]] Event lease_host(Event name) noexcept {
    if (name == nullptr) return nullptr;
    const std::uint32_t index = index_of(name), gen = gen_of(name);
    Slot& s = slot(index);
    if (const std::uint64_t w = s.word.load(std::memory_order_acquire); gen_of(w) != gen || state_of(w) == kCompleted)
      return nullptr;
    const std::uint64_t w = pin(s, gen);
    if (gen_of(w) != gen || state_of(w) == kCompleted) {
      unpin(index, s);
      return nullptr;
    }
    return s.host;  // running or failed: the slot keeps it while pinned
  }
  /// Ends a lease of lease_host(): a slot whose command completed
  /// meanwhile gives its event back now. O(1).
  void end_lease(Event name) noexcept {
    const std::uint32_t index = index_of(name);
    unpin(index, slot(index));
  }

  /// Names that failed or were cancelled, kept until recycle_unnamed()
  /// recycles them. O(1).
  [[nodiscard]] std::size_t failed_kept() const noexcept { return failed_kept_.load(std::memory_order_relaxed); }
  /// Appends the names of the slots failed or cancelled now. Throws
  /// std::bad_alloc (out grows). O(slots).
  void failed_names(std::vector<Event>& out) const;
  /// Recycles each of `candidates` (failed_names()'s) that is not in
  /// `named` (sorted): the caller has since seen every record the engine
  /// holds, each whole, and no record names a failed command anew (names
  /// enter the records only as new commands and copies, running). O(|candidates|
  /// × log |named|).
  void recycle_unnamed(std::span<const Event> candidates, std::span<const Event> named) noexcept;
  /// Slots holding an event (for tests). O(slots).
  [[nodiscard]] std::size_t holding() const noexcept;

 private:
  struct Slot {
    // generation << 32 | released flag | state (kFree ... kFailed)
    std::atomic<std::uint64_t> word{0};
    std::atomic<std::uint32_t> pins{0};
    std::atomic<std::uint32_t> next_free{0};  // while free: the next free slot's index + 1, or 0
    Event host = nullptr;  // written before `word` says running, read after
    // Written before `word` says running; read by where() without a pin,
    // maybe while make() writes it for the slot's next command.
    std::atomic<Location> where{kNowhere};
  };
  static constexpr unsigned kChunkBits = 12;
  static constexpr std::size_t kChunk = std::size_t{1} << kChunkBits;
  static constexpr std::size_t kMaxChunks = std::size_t{1} << 12;  // 16 M slots
  static constexpr std::uint64_t kFree = 0, kRunning = 1, kCompleted = 2, kCancelled = 3, kFailed = 4;
  static constexpr std::uint64_t kStateMask = 0xf, kReleased = 0x10;
  static constexpr std::uint64_t kTold = 0x20;  // while running: the host tells the end (make())

  static std::uint64_t word(std::uint32_t gen, std::uint64_t state) { return std::uint64_t{gen} << 32 | state; }
  static std::uint32_t gen_of(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 32); }
  static std::uint64_t state_of(std::uint64_t w) { return w & kStateMask; }
  static Event name_of(std::uint32_t index, std::uint32_t gen) {
    return reinterpret_cast<Event>(std::uint64_t{gen} << 32 | (std::uint64_t{index} + 1));
  }
  static std::uint32_t index_of(Event name) {
    return static_cast<std::uint32_t>((reinterpret_cast<std::uint64_t>(name) & 0xffffffffu) - 1);
  }
  static std::uint32_t gen_of(Event name) { return static_cast<std::uint32_t>(reinterpret_cast<std::uint64_t>(name) >> 32); }
  static EventStatus status_of(std::uint64_t state);
  static std::uint64_t state_for(EventStatus s);

  Slot& slot(std::uint32_t index) const noexcept {
    return chunks_[index >> kChunkBits].load(std::memory_order_acquire)[index & (kChunk - 1)];
  }
  EventStatus ask_host(std::uint32_t index, Slot& s, std::uint32_t gen) noexcept;
  // Pins slot `s` (a name of generation `gen`) and returns its word as
  // seen pinned. A failed slot that recycle_unnamed() is taking (kReleased,
  // not yet recycled) may or may not have seen this pin: it is waited out
  // (pin_again), until it recycles the slot (another generation) or puts
  // it back for this pin. Inline: every wait an enqueue hands over pins.
  std::uint64_t pin(Slot& s, std::uint32_t gen) noexcept {
    s.pins.fetch_add(1, std::memory_order_seq_cst);
    const std::uint64_t w = s.word.load(std::memory_order_seq_cst);
    if (!taking(w, gen)) [[likely]]
      return w;
    return pin_again(s, gen);
  }
  static bool taking(std::uint64_t w, std::uint32_t gen) noexcept {
    const std::uint64_t st = state_of(w);
    return (w & kReleased) != 0 && gen_of(w) == gen && (st == kCancelled || st == kFailed);
  }
  [[gnu::noinline]] std::uint64_t pin_again(Slot& s, std::uint32_t gen) noexcept;
  // Inline: every lease an enqueue hands over ends here (end_lease).
  void unpin(std::uint32_t index, Slot& s) noexcept {
    if (s.pins.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        state_of(s.word.load(std::memory_order_seq_cst)) == kCompleted)
      try_release(index, s);
  }
  void try_release(std::uint32_t index, Slot& s) noexcept;
  void recycle(std::uint32_t index, Slot& s, std::uint32_t gen) noexcept;
  void push_free(std::uint32_t first, std::uint32_t last) noexcept;  // slots first..last, linked already
  [[gnu::always_inline]] bool pop_free(std::uint32_t& index) noexcept;
  bool grow() noexcept;  // under mutex_
  void look_again() noexcept;

  Host& host_;
  std::unique_ptr<std::atomic<Slot*>[]> chunks_;
  std::vector<std::unique_ptr<Slot[]>> owned_;  // under mutex_
  std::atomic<std::uint32_t> capacity_{0};      // slots in the chunks made
  std::mutex mutex_;                            // adding a block
  // The free slots: a stack through Slot::next_free; a tag in the high half,
  // bumped by every pop, keeps a pop from taking a head that left and came
  // back meanwhile. Low half: the top slot's index + 1, or 0.
  std::atomic<std::uint64_t> free_top_{0};
  std::atomic<std::uint32_t> hand_{0};  // look_again()'s next slot
  std::atomic<std::size_t> failed_kept_{0};
};

}  // namespace memlayer::engine

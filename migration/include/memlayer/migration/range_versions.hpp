// memlayer/migration/range_versions.hpp — one buffer's content versions per
// byte range, and the planner that keeps its copies coherent.
//
// The model. A buffer (always a parent: sub-buffers arrive as ranges of it) is
// cut into spans. Each span records:
//   * its content version (bumped by every command that writes it),
//   * which locations hold that version, and for each, the event that made
//     its copy valid (a migration, or the writing command itself),
//   * the last command that wrote it, and the commands that read it since
//     (copies out of a location count as readers of it).
// Spans split where a command's range begins or ends and merge back when two
// neighbours are equal. PoCL's whole-buffer version is the one-span case; here
// two disjoint sub-buffers written on two devices are both valid, each on its
// own device, and neither moves the other's bytes.
//
// Planning, at enqueue time. For a command using ranges of the buffer at
// location L, plan() lists the copies that make exactly the stale bytes it
// will read valid at L (an overwrite needs none), choosing for each span the
// cheapest valid source by the CostModel: direct when a path exists, else
// staged through the host copy, which then serves every later importer; each
// copy also names the other complete copies it could read instead
// (Copy::also), for a runtime whose transfer from the source fails. It
// also lists what the command must wait for:
//   * a reader waits for the event that made its copy valid (and the last
//     writer), never for other readers;
//   * a writer waits for the last writer, every reader since, and anything
//     still filling its own copy.
// plan() changes no version. commit() then records the copies (with the
// events the runtime created for them) and the command, so the next enqueue
// plans against the new versions. A command that fails to enqueue between the
// two (no memory, say) is simply never committed: it leaves no trace.
//
// Failures. A command may fail after its enqueue: cancelled (a dependency
// failed, so it never ran) or failed while running. While a writer is
// unfinished, the planner keeps what the spans it wrote were before it (its
// undo records: versions, holders, waits). Before planning, the planner
// settles from what EventOps::status reports: a writer that completed
// drops its records; one that failed puts them back — the content before it
// valid everywhere it was for a cancelled writer; everywhere but its own
// location for one that failed while running (its writes there may be
// partial) — and drops the newer records over the same bytes (their writers
// wait for it, so they fail too). Copies
// that failed stop counting as holders, and failed events are never put in a
// wait list, so a command enqueued once a failure is known neither waits for
// it nor inherits it. Commands enqueued earlier that wait for the failed one
// fail with it (the runtime's rule: a failed dependency fails the command),
// and their writes are undone the same way. Content whose every holder is
// gone (its only copy was where a writer failed while running, in storage
// evicted while a writer over it was unfinished, or the records were
// forgotten: at most 1024 per buffer, the oldest go first) becomes undefined,
// and bytes_lost() counts it.
//
// Thread-safety: none. The runtime serialises plan()+commit() per buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "memlayer/migration/access.hpp"
#include "memlayer/migration/cost_model.hpp"
#include "memlayer/migration/detail/inline_list.hpp"
#include "memlayer/migration/detail/line_aligned.hpp"
#include "memlayer/migration/detail/reserve.hpp"
#include "memlayer/migration/event.hpp"
#include "memlayer/migration/location.hpp"
#include "memlayer/migration/plan.hpp"

namespace memlayer::migration {

/// One span as reported by RangeVersions::walk().
struct SpanInfo {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t version = 0;
  LocationSet valid;
};

class RangeVersions {
 public:
  /// A buffer of `size` bytes (> 0) whose initial content is valid at
  /// `initially_valid`: the host, for COPY_/USE_HOST_PTR buffers; for others
  /// LocationSet::all(): content nobody gave is undefined, so every location
  /// holds it already and nothing ever migrates it (it stays valid anywhere,
  /// eviction included, until a command writes it). `ops` must outlive this
  /// object. O(1).
  RangeVersions(std::uint64_t size, LocationSet initially_valid, const EventOps& ops);
  ~RangeVersions();
  RangeVersions(const RangeVersions&) = delete;
  RangeVersions& operator=(const RangeVersions&) = delete;

  /// Plans one command's uses of this buffer at location `at` into `out`
  /// (cleared first; reuse one Plan across calls to avoid allocating).
  /// Several uses by one command (a buffer passed twice, a copy within one
  /// buffer) must come in one call: where they overlap, a read and a write
  /// make a read_write. Preconditions: every use lies in [0, size) and has a
  /// size > 0; at < kMaxLocations. Changes nothing.
  /// Settles the spans it touches first (above: failures), which changes no
  /// content the runtime could still see: a later commit, or none, is valid.
  /// It also makes all the room commit() will need (cutting spans where the
  /// uses and copies begin and end, into identical halves), so that
  /// commit() allocates nothing. Throws std::bad_alloc out of host memory,
  /// with no content changed: what it settled stays settled, each failed
  /// writer's undo record put back whole or not at all (the next plan puts
  /// back the rest). Complexity O(log spans + spans touched ×
  /// (locations + readers + unfinished writers)).
  void plan(std::span<const Use> uses, Location at, const CostModel& cost, Plan& out);

  /// Records a plan made by plan() with the same uses and location, with no
  /// other change in between: `copy_events[i]` is the event of
  /// plan.copies[i], `command` the command's own event (each may be nullptr
  /// when the runtime has none). Takes a reference (EventOps::retain) on every
  /// event it keeps. Allocates nothing (plan() made the room), so it cannot
  /// fail half-way: an enqueue is all or nothing even out of host memory.
  /// Complexity as plan().
  void commit(const Plan& plan, std::span<const Event> copy_events, std::span<const Use> uses, Location at,
              Event command);

  // ---- the fast path: a kernel argument in the steady state ---------------
  // plan() and commit() for the common use without a Plan in between and
  // without looking the span up twice (the engine's fast path, engine.hpp).
  // They decide and record exactly what plan() and commit() would.

  /// Whether `use` is the steady-state case: it covers exactly one span,
  /// whose bytes are valid at `at` (or being made valid there; an
  /// overwrite needs neither), nothing it depends on has failed (plan()
  /// would settle nothing it depends on: a read may leave a failed copy
  /// elsewhere, which it does not read, to the next plan()), and a write
  /// finds room among the undo records
  /// (fewer than the 1,024 kept). Then it makes the room fast_commit()
  /// needs and returns how many events fast_commit() may report at most;
  /// else nullopt, and plan()/commit() handle the use. Changes no content
  /// (it drops the records of writers that completed, as plan() does).
  /// Preconditions as plan(). Throws std::bad_alloc, with no content
  /// changed. O(1) amortised, plus O(readers) for a write.
  [[nodiscard]] std::optional<std::size_t> fast_prepare(const Use& use, Location at) {
    Event none = nullptr;
    return fast_prepare(use, at, none);
  }
  /// The same for a caller that prepares several buffers for one command,
  /// holding each: `unfailed` is an event it has seen unfailed since it
  /// took the first (nullptr: none), whose status is then not looked up
  /// again, and is set to the last writer found unfailed. The buffers'
  /// last writers then are one moment's statuses, as with EventOps::batch
  /// (the buffers held name them: none is freed meanwhile).
  [[nodiscard, gnu::always_inline]] std::optional<std::size_t> fast_prepare(const Use& use, Location at, Event& unfailed);
  /// Records `use` by `command` at `at` as commit() would record plan()'s
  /// plan for it, right after a fast_prepare(use, at) that did not return
  /// nullopt, with no other call in between. Calls wait(e) first for each
  /// event the command must wait for (Plan::wait's: the last writer, what
  /// made the copy at `at` valid, and for a write every reader since; no
  /// nullptr, an event maybe more than once). `command` is not nullptr.
  /// Allocates nothing and throws nothing (unless `wait` does).
  /// Complexity as fast_prepare().
  template <class Wait>
  void fast_commit(const Use& use, Location at, Event command, Wait&& wait);

  /// Plans what must happen before the copy at `at` can be dropped
  /// (eviction): the spans whose only valid copy is at `at` are written back
  /// to the host first. `out.wait` lists what must finish before the storage
  /// at `at` may be freed or reused (its readers and whatever fills it).
  /// A span held elsewhere only by copies still in flight is written back
  /// too (those copies may yet fail), unless one of them is making the
  /// host's bytes: a write-back would write the host copy beside that
  /// import or after it, while a reader there may read it. That import
  /// reads `at` (`out.wait` lists it); if it fails, the bytes are lost
  /// (bytes_lost()), as a failed write-back's are. Settles every span first (as plan(),
  /// and as whole out of host memory); changes no version. Makes the room
  /// commit_write_back() and commit_evict() need, so that they allocate
  /// nothing; throws std::bad_alloc out of host memory. O(spans).
  void plan_evict(Location at, const CostModel& cost, Plan& out);

  /// Adds to `out`, a plan_evict(at) plan, the write-backs that keep what an
  /// unfinished writer's failure goes back to when `at` is evicted: content
  /// its undo record holds only at `at` (Copy::undo), to the host copy.
  /// Only where the host copy's bytes serve nothing else (no current
  /// version held there or at `at` over them, no other unfinished record
  /// over them naming the host) and the writer does not run at `at` (it may
  /// be writing those bytes); what it cannot save stays lost if the writer
  /// fails (undo_only_at()). commit_write_back() and commit_evict() make
  /// each the record's copy at the host, and a reader of the bytes (later
  /// writers wait for it). The runtime must keep every later write of the
  /// host copy after these copies (the engine fences the host storage with
  /// them). Makes the room the commits need; throws std::bad_alloc out of
  /// host memory. O(unfinished writers), and O(unfinished writers ×
  /// records over the bytes) for each record held only at `at`.
  void plan_undo_write_backs(Location at, Plan& out);

  /// Records an eviction planned by plan_evict(): the write-backs become the
  /// host's copies and `at` holds nothing any more. A write-back that fails
  /// then loses its bytes (bytes_lost()): a runtime that cannot afford it
  /// writes back first (commit_write_back()) and evicts once
  /// write_back_needed() says none. Throws std::invalid_argument, having
  /// changed nothing, when `copy_events` does not match the plan's copies,
  /// or when the plan does not write back every byte only `at` holds (a
  /// plan plan_evict(at) did not make for the current versions: committing
  /// it would lose them). O(spans × copies).
  void commit_evict(const Plan& plan, std::span<const Event> copy_events, Location at);

  /// Records only the write-backs of a plan_evict() plan: they become the
  /// host's copies, and `at` keeps its copy, so a write-back that fails
  /// loses nothing (its bytes are still at `at`; the next plan_evict()
  /// writes them back again). Once they have completed, plan_evict(at) has
  /// nothing to write back and the storage can go. Complexity O(log spans +
  /// spans the copies cover).
  void commit_write_back(const Plan& plan, std::span<const Event> copy_events);
  /// What evicting `at` now would have to write back (what plan_evict()
  /// would copy: spans `at` holds that no other location holds complete):
  /// nothing; bytes whose copy at `at` is complete, so a write-back can
  /// start at once; or bytes still being made there (by a writer or a copy
  /// not finished), which a write-back must wait for. O(spans).
  enum class WriteBack : std::uint8_t { none, ready, waiting };
  [[nodiscard]] WriteBack write_back_needed(Location at) const;

  /// True when every byte of [offset, offset + size) is valid at `at`, or
  /// being made valid there (a copy in flight counts; one that failed not).
  [[nodiscard]] bool valid_at(Location at, std::uint64_t offset, std::uint64_t size) const;
  /// Bytes whose current version is held only at `at` (what eviction would
  /// have to write back). O(spans).
  [[nodiscard]] std::uint64_t bytes_only_at(Location at) const;

  /// True when some span could still go back to content held only at
  /// `at` that plan_undo_write_backs() cannot save: an unfinished writer's
  /// undo record holds it nowhere else, and the writer runs at `at` or the
  /// host copy's bytes under it are in use. Evicting `at` then loses that
  /// content if the writer fails (bytes_lost()), so eviction takes such
  /// storage last. Complexity O(unfinished writers), and O(spans and
  /// unfinished writers over its bytes) for each record held only at `at`.
  [[nodiscard]] bool undo_only_at(Location at) const;
  /// The writers behind undo_only_at(at) that have not finished, each once,
  /// appended to `out`: once they have, evicting `at` loses nothing (a
  /// completed writer's record is dropped, a failed one's put back as the
  /// current content). Throws std::bad_alloc (out grows). O(unfinished
  /// writers).
  void undo_only_at_writers(Location at, std::vector<Event>& out) const;
  /// Bytes whose content was lost so far: a failed writer's previous
  /// content held nowhere any more (above: failures). They are undefined now.
  [[nodiscard]] std::uint64_t bytes_lost() const noexcept { return bytes_lost_; }

  /// Appends the writers of the undo records kept for writes at `at` (each
  /// record's writer, until it completes or fails): every write not yet
  /// finished that ran at `at` is one of them, unless its record was
  /// forgotten (events_a_commit_may_forget()). A runtime may take these,
  /// rather than its own list, as what still writes its storage at `at`.
  /// Throws std::bad_alloc (out grows). O(unfinished writers).
  void writers_at(Location at, std::vector<Event>& out) const;
  /// Appends every reader the spans and the undo records name (a span's
  /// readers since its last writer, kept until they finish; a record's,
  /// kept while its writer, which waits for them, has not completed): with
  /// writers_at(), every command not yet finished that used the buffer is
  /// named, but for those whose records were forgotten
  /// (events_a_commit_may_forget()). A runtime that knows where each reader
  /// runs may take these, rather than a list of its own, as what still
  /// reads its storage. Throws std::bad_alloc (out grows). O(spans ×
  /// readers + unfinished writers).
  void readers(std::vector<Event>& out) const;
  /// After plan(), before its commit(): the writers of the undo records
  /// that commit() may forget to make room (at most 1,024 are kept; the
  /// oldest go), and the readers those records name, appended to `out` (a
  /// superset: those that complete meanwhile are dropped first). Once
  /// forgotten, writers_at() and readers() no longer name them. Empty
  /// unless the records are nearly full. Throws std::bad_alloc. O(1), or
  /// O(unfinished writers × readers) when nearly full.
  void events_a_commit_may_forget(std::vector<Event>& out) const;
  /// Appends every event this object names (span holders, last writers,
  /// readers; undo records), maybe more than once: with them, a runtime
  /// that recycles event handles knows which it may not (the engine's
  /// command table). Throws std::bad_alloc (out grows). O(spans × (locations
  /// + readers) + unfinished writers).
  void events(std::vector<Event>& out) const;
  /// How many undo records keep a whole span of their own (those whose
  /// span had readers or several holders; the rest are plain entries): a
  /// diagnostic, which tests compare. O(1).
  [[nodiscard]] std::size_t wide_records() const noexcept { return wide_.size() - wide_free_.size(); }
  /// The spans in offset order. O(spans).
  void walk(const std::function<void(const SpanInfo&)>& visit) const;
  [[nodiscard]] std::size_t span_count() const noexcept { return spans_.size(); }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

 private:
  struct Holder {
    Location where;
    Event ready;  // what made this copy valid; nullptr: valid since creation or finished
    friend bool operator==(const Holder&, const Holder&) = default;
  };
  struct Span {
    // What the fast path reads of a span with one holder comes first
    // (RangeVersions::fast_prepare): from the node's key to the first
    // holder, 96 bytes, which with the node's header of 32 fill the two
    // cache lines the node starts on (SpanMap).
    std::uint64_t version = 0;
    Event last_writer = nullptr;
    bool anywhere = false;        // undefined content: valid at every location, `holders` empty
    // Inline: a span, and the undo record it moves into, allocate nothing
    // while they name at most two holders and two readers.
    detail::InlineList<Event, 2> readers;  // since last_writer
    detail::InlineList<Holder, 2> holders;  // sorted by location; never empty unless `anywhere`
    friend bool operator==(const Span&, const Span&) = default;
  };
  // Key: offset; a span ends where the next begins. Each node starts a
  // cache line (detail/line_aligned.hpp).
  using SpanMap = std::map<std::uint64_t, Span, std::less<std::uint64_t>, detail::LineAligned<std::pair<const std::uint64_t, Span>>>;
  // What one span was before an unfinished writer wrote it, kept until the
  // writer completes (dropped) or fails (put back): see settle(). Plain
  // data, so that recording, trimming and forgetting records moves bytes
  // and runs no destructor. Most spans a writer takes over have no reader
  // and at most one holder (a kernel's argument written again where it was
  // written last): the record keeps those fields itself. Any other span
  // moves whole into wide_, at a place made free while planning, so that
  // recording a write allocates nothing either way.
  struct alignas(64) Undo {  // one cache line each (a record is written at every write)
    Undo() = default;
    // The narrow record of span `s` (fits_narrow()), written by `w` at
    // `where` over [off, off + n).
    Undo(Event w, Location where, std::uint64_t off, std::uint64_t n, const Span& s) noexcept
        : writer(w), at(where), offset(off), size(n), version(s.version), last_writer(s.last_writer),
          anywhere(s.anywhere), has_holder(!s.holders.empty()) {
      if (has_holder) holder_at = s.holders[0].where, holder_ready = s.holders[0].ready;
    }
    // The record of the steady write (steady_write()): span `s` was the
    // whole buffer of `n` bytes, held at `where` alone, made ready there by
    // its last writer. The same record as above, from what the caller has
    // at hand rather than from the span's lists.
    struct Steady {};
    Undo(Steady, Event w, Location where, std::uint64_t n, std::uint64_t before_version, Event before_writer) noexcept
        : writer(w), at(where), size(n), version(before_version), last_writer(before_writer), holder_at(where),
          has_holder(true), holder_ready(before_writer) {}
    Event writer = nullptr;
    Location at = 0;             // where the writer runs
    std::uint32_t wide = kNarrow;  // the span before is wide_[wide], or kNarrow: the fields below
    std::uint64_t offset = 0, size = 0;
    // The span before, while narrow: its version, last writer, whether it
    // was undefined (anywhere), its one holder if any (it may have none:
    // the content was evicted since), no readers. Laid out in 64 bytes:
    // the records' count is then a shift, not a division.
    std::uint64_t version = 0;
    Event last_writer = nullptr;
    Location holder_at = 0;
    bool anywhere = false;
    bool has_holder = false;
    Event holder_ready = nullptr;
  };
  static constexpr std::uint32_t kNarrow = ~std::uint32_t{0};
  // Undo records kept per buffer: more unfinished writes forget the oldest,
  // whose content is then lost only if its writer fails (settle_span()). It
  // bounds the memory of a deep queue and what a failed writer's search
  // goes through.
  static constexpr std::size_t kMaxUndo = 1024;
  // What forget_oldest_undo() leaves, so that the next kMaxUndo / 4 writes
  // forget nothing.
  static constexpr std::size_t kUndoKeptAfterForget = kMaxUndo / 4 * 3;
  static_assert(std::is_trivially_copyable_v<Undo> && std::is_trivially_destructible_v<Undo> && sizeof(Undo) == 64);
  [[nodiscard]] static bool fits_narrow(const Span& s) { return s.readers.empty() && s.holders.size() <= 1; }
  // The span record `r` puts back; a wide one's place is free again.
  Span take_before(Undo& r) noexcept;
  // A copy of record `r` over [offset, offset + size). Throws
  // std::bad_alloc, with nothing changed.
  [[nodiscard]] Undo copy_record(const Undo& r, std::uint64_t offset, std::uint64_t size);
  // The holder of `r`'s content at `l`, if any.
  [[nodiscard]] std::optional<Holder> record_holder(const Undo& r, Location l) const;
  // Makes record `r` wide, so that its span can take a holder more.
  // Throws std::bad_alloc, with nothing changed.
  void widen(Undo& r);
  // `n` free places in wide_ at least. Throws std::bad_alloc.
  void reserve_wide(std::size_t n);
  [[nodiscard]] std::uint32_t take_wide() noexcept;
  void free_wide(std::uint32_t index) noexcept;
  void hold_record(const Undo& r) const;
  void drop_record(Undo& r) noexcept;
  void record_wide(Span& s, std::uint64_t offset, std::uint64_t size, Location at, Event command) noexcept;

  [[nodiscard]] std::uint64_t end_of(SpanMap::const_iterator it) const;
  // The span holding byte `offset` (< size).
  SpanMap::iterator span_containing(std::uint64_t offset);
  [[nodiscard]] SpanMap::const_iterator span_containing(std::uint64_t offset) const;
  SpanMap::iterator split_at(std::uint64_t offset);
  void merge_range(std::uint64_t begin, std::uint64_t end);
  static constexpr Holder kAnywhere{kHost, nullptr};  // valid since creation, at every location
  [[nodiscard]] const Holder* holder(const Span& s, Location l) const {
    if (s.anywhere) return &kAnywhere;
    for (const Holder& h : s.holders)
      if (h.where == l) return &h;
    return nullptr;
  }
  void set_holder(Span& s, Location l, Event ready);
  void hold_span(const Span& s) const;
  void drop_span(const Span& s) const;
  void trim_completed();
  void trim_from_first();
  void settle_range(std::uint64_t begin, std::uint64_t end, bool for_write);
  [[nodiscard]] bool settled(const Span& s, bool for_write) const {
    const Holder* unused = nullptr;
    return settled_at(s, for_write, kHost, unused);
  }
  [[nodiscard]] bool settled_at(const Span& s, bool for_write, Location at, const Holder*& found) const;
  void settle_span(Span& s, std::uint64_t bytes, bool for_write, bool writer_failed);
  bool restore_writer(Event writer);
  void restore(std::size_t index, bool ran);
  void forget_undo(std::size_t index);
  void forget_oldest_undo();
  // Room for one record more before commit()'s write_span(): the oldest go
  // when kMaxUndo are kept (fast_prepare() never lets them reach it).
  void forget_if_full() {
    if (undo_.size() - first_undo_ == kMaxUndo) [[unlikely]] forget_oldest_undo();
  }
  // Readers kept before finished ones are dropped; then again each time the
  // list reaches a power of two above it, so that a list of readers that
  // have not finished (queued behind a user event) costs O(1) amortised per
  // reader added, not a scan each time (add_reader()).
  static constexpr std::uint32_t kPruneThreshold = 8;
  void add_reader(Span& s, Event e);
  // prune() once a reader added makes the list reach the next mark.
  void prune_if_due(Span& s) {
    const std::uint32_t n = s.readers.size();
    if (n == kPruneThreshold + 1 || (n > kPruneThreshold && (n & (n - 1)) == 0)) [[unlikely]]
      prune(s);
  }
  // Out of line: add_reader() is inline on the fast path's commit, its
  // prune rare.
  [[gnu::noinline]] void prune(Span& s);
  [[nodiscard]] SpanMap::iterator exact_span(std::span<const Use> uses);
  void plan_waits(const Span& s, Access access, Location at, Plan& out) const;
  void write_span(Span& s, std::uint64_t offset, std::uint64_t size, std::uint64_t version, Location at,
                  Event command, bool narrow);
  [[nodiscard]] bool complete_elsewhere(const Span& s, Location at) const;
  [[nodiscard]] LocationSet also_sources(const Span& s, Location src, Location to, std::uint64_t bytes,
                                         const CostModel& cost) const;
  void plan_fetch(SpanMap::const_iterator first, std::uint64_t begin, std::uint64_t end, Location at,
                  const CostModel& cost, Plan& out) const;
  void prepare_commit(std::span<const Use> uses, const Plan& plan);
  void check_eviction_keeps_content(const Plan& plan, Location at) const;
  [[nodiscard]] bool held_only_at(const Undo& r, Location at) const;
  [[nodiscard]] bool can_write_back_undo(std::size_t index, Location at) const;
  void commit_undo_write_back(const Copy& c, Event e);
  void make_room(Span& s, std::uint32_t holders, std::uint32_t readers);
  bool fast_trim(bool for_write);
  std::size_t fast_prepared(SpanMap::iterator it, bool for_write, Event ready);

  // What fast_prepare() and fast_commit() use comes first, together: a
  // command with many buffers touches it in each (the engine's Buffer
  // puts its own such fields just before).
  std::uint64_t size_;
  const EventOps& ops_;
  SpanMap spans_;
  std::uint64_t next_version_ = 1;
  std::vector<Undo> undo_;  // in commit order; [0, first_undo_) are spent
  std::size_t first_undo_ = 0;
  std::size_t fast_trim_at_;  // undo records that make fast_prepare() look for completed ones
  // What fast_prepare() found, for fast_commit(): the span, the event that
  // made its copy at the location ready (nullptr: none to wait for),
  // whether a write's record of it is narrow.
  SpanMap::iterator fast_span_;
  Event fast_ready_ = nullptr;
  bool fast_narrow_ = false;
  // The steady state, which fast_commit() enters and only the fast path
  // keeps: one span, whose copy at steady_at_ is valid once its last writer
  // has completed (that writer made it, or what made it has completed:
  // the holder's ready event is the last writer or none); other holders
  // and readers since, maybe. A read at steady_at_ then waits for the last
  // writer alone, and is settled unless that writer failed: a failed
  // holder elsewhere changes nothing there, a failed reader nothing for a
  // read. kNotSteady once any other member that may change a span or a
  // record has run (leave_steady()): fast_prepare() then looks at the span
  // whole again. Entered by a whole write (that writer's one holder), or
  // by a whole read that found the copy there so (fast_commit()).
  static constexpr Location kNotSteady = kMaxLocations;
  Location steady_at_ = kNotSteady;
  // While steady: the steady writes left before the undo records reach
  // fast_trim_at_, so that the steady route needs no look at the
  // records' count; 0 (no steady write) unless the state began with a
  // write, whose one holder a steady write replaces (steady_write()). Only
  // the steady write adds records while the state lasts: every other
  // member that does leaves it first.
  std::size_t steady_writes_left_ = 0;
  void leave_steady() noexcept { steady_at_ = kNotSteady; }
  // fast_prepare() took the steady route: fast_commit() is a
  // steady_read() or a steady_write().
  bool fast_steady_ = false;
  template <class Wait>
  void steady_read(Event command, Wait& wait);
  template <class Wait>
  void steady_write(Event command, Wait& wait);
  std::uint64_t bytes_lost_ = 0;
  std::vector<std::uint64_t> cuts_;  // for_each_piece's scratch
  bool cut_in_plan_ = false;         // prepare_commit() cut spans: commit() merges
  std::size_t planned_writes_ = 0;   // undo records the planned commit adds (prepare_commit())
  // The spans of wide undo records, and free places among them
  // (wide_free_'s capacity holds every index: freeing never allocates).
  // It never shrinks: it holds as many spans as the most wide records (or
  // planned writes) the buffer has had at once, and goes with it.
  std::vector<Span> wide_;
  std::vector<std::uint32_t> wide_free_;
};

// The span one use covers exactly, else end(): the whole buffer while it
// is one span (most kernel arguments, without searching the tree), or a
// range a command wrote before on its own (a sub-buffer, a fill). plan()
// and commit() take it without cutting pieces: it needs no cut, and a
// command on it never makes it equal to a neighbour (a write gives it a
// version no other span has; a merge a read made possible may be skipped).

inline RangeVersions::SpanMap::iterator RangeVersions::exact_span(std::span<const Use> uses) {
  if (uses.size() != 1) return spans_.end();
  const Use& u = uses[0];
  if (spans_.size() == 1) return u.offset == 0 && u.size == size_ ? spans_.begin() : spans_.end();
  auto it = spans_.find(u.offset);
  return it != spans_.end() && end_of(it) == u.offset + u.size ? it : spans_.end();
}

// Whether settle_range() over span `s` (the only one) would change nothing
// beyond trim_completed(): its last writer, its holders' ready events and,
// for a write, its readers all unfailed, and its content held somewhere.
// The same status looks, without the edits' machinery. `found` gets, from
// the same pass over the holders, what holder(s, at) would return.
inline bool RangeVersions::settled_at(const Span& s, bool for_write, Location at, const Holder*& found) const {
  found = nullptr;
  if (s.anywhere) found = &kAnywhere;
  else if (s.holders.empty()) return false;
  if (ops_.failed(s.last_writer)) return false;
  // Most holders were made ready by the last writer, looked at above: the
  // pass that finds them makes no status look (no call that would make
  // the compiler save its registers), and a second pass looks at the rest.
  bool others = false;
  for (const Holder& h : s.holders) {
    others |= h.ready != s.last_writer;
    if (h.where == at) found = &h;
  }
  if (others) [[unlikely]]
    for (const Holder& h : s.holders)
      if (h.ready != s.last_writer && ops_.failed(h.ready)) return false;
  if (for_write)
    for (Event r : s.readers)
      if (ops_.failed(r)) return false;
  return true;
}

// Room in `s` for `holders` holders and `readers` readers more, so that a
// commit adds them without allocating.
inline void RangeVersions::make_room(Span& s, std::uint32_t holders, std::uint32_t readers) {
  s.holders.reserve(s.holders.size() + holders);
  s.readers.reserve(s.readers.size() + readers);
}

// The fast path: plan()'s exact-span case with nothing to fetch, settle or
// forget, deciding only. Here, not in range_versions.cpp: the engine's loop
// over a command's buffers inlines it, with no call per argument.
inline std::optional<std::size_t> RangeVersions::fast_prepare(const Use& use, Location at, Event& unfailed) {
  const bool for_write = writes(use.access);
  // In the steady state at `at` (steady_at_), the whole buffer's one span
  // is settled for a read unless its last writer failed; so for a write
  // with no readers since, while steady writes are left (which also says
  // there is room among the records): that writer made its one holder
  // ready, and the write waits for nothing else.
  if (at == steady_at_ && use.offset == 0 && use.size == size_) {
    const auto it = spans_.begin();
    Span& s = it->second;
    if (!for_write || (steady_writes_left_ != 0 && s.readers.empty())) [[likely]] {
      // A command's buffers mostly share their last writer: one look.
      if (s.last_writer != unfailed) {
        if (ops_.failed(s.last_writer)) return std::nullopt;
        unfailed = s.last_writer;
      }
      // fast_commit() records it with steady_read() or steady_write(),
      // which wait only for the last writer. The steady write is narrow
      // (no readers, one holder).
      if (!for_write) s.readers.reserve(s.readers.size() + 1);  // room for the command as a reader
      else detail::reserve_more(undo_, 1);
      fast_steady_ = true;
      return 1;
    }
  }
  const auto it = exact_span(std::span(&use, 1));
  if (it == spans_.end()) return std::nullopt;
  // Completed writers' records are dropped here only once there are
  // fast_trim_at_ of them: a look at the oldest writer per command would
  // cost a status look per argument while a queue of writers is running.
  // Looked at in vain, the next look waits until their number has doubled
  // (O(1) looks per record, amortised), up to kFastTrimMost; dropped, back
  // to the first mark. Records of completed writers kept meanwhile change
  // no decision (only a failed writer's matter, and settled() looks at
  // those); they keep their writers' names from being recycled a while.
  if (undo_.size() - first_undo_ >= fast_trim_at_ && !fast_trim(for_write)) [[unlikely]]
    return std::nullopt;
  Span& s = it->second;
  const Holder* h = nullptr;
  if (!settled_at(s, for_write, at, h)) return std::nullopt;
  if (h == nullptr && reads_old_content(use.access)) return std::nullopt;
  return fast_prepared(it, for_write, h != nullptr && h->ready != s.last_writer ? h->ready : nullptr);
}

// fast_prepare()'s end (but for the steady write, which needs only the
// undo room), once span `it` is known to take the use: room for what
// fast_commit() adds, and what it must know. `ready`: what made the
// copy at the location valid, if not the last writer.
inline std::size_t RangeVersions::fast_prepared(SpanMap::iterator it, bool for_write, Event ready) {
  Span& s = it->second;
  if (!for_write) s.readers.reserve(s.readers.size() + 1);  // room for the command as a reader
  const bool narrow = fits_narrow(s);
  if (for_write) {
    detail::reserve_more(undo_, 1);
    if (!narrow) reserve_wide(1);
  }
  fast_span_ = it;
  fast_ready_ = ready;
  fast_narrow_ = narrow;
  fast_steady_ = false;
  return 2 + (for_write ? s.readers.size() : 0);
}

template <class Wait>
void RangeVersions::fast_commit(const Use& use, Location at, Event command, Wait&& wait) {
  if (fast_steady_) [[likely]] {
    if (writes(use.access)) steady_write(command, wait);
    else steady_read(command, wait);
    return;
  }
  Span& s = fast_span_->second;
  if (s.last_writer != nullptr) wait(s.last_writer);
  if (fast_ready_ != nullptr) wait(fast_ready_);
  if (!writes(use.access)) {
    add_reader(s, command);
    // A whole read with nothing to wait for there but the last writer: the
    // steady state's (a write's steady state stays as it is).
    if (at != steady_at_ && fast_ready_ == nullptr && use.size == size_) [[unlikely]] {
      steady_at_ = at;
      steady_writes_left_ = 0;
    }
    return;
  }
  for (Event r : s.readers) wait(r);
  write_span(s, fast_span_->first, use.size, next_version_++, at, command, fast_narrow_);
  const std::size_t records = undo_.size() - first_undo_;
  if (use.size == size_) {
    steady_at_ = at;
    steady_writes_left_ = records < fast_trim_at_ ? fast_trim_at_ - records : 0;
  } else {
    steady_at_ = kNotSteady;
  }
}

// add_reader() of the command to the whole buffer's span in the steady
// state (steady_at_), which it keeps; fast_prepare() made the room. The
// command is new to the list (a command the list named already would only
// be there twice, each entry with its own reference).
template <class Wait>
void RangeVersions::steady_read(Event command, Wait& wait) {
  Span& s = spans_.begin()->second;
  if (s.last_writer != nullptr) wait(s.last_writer);
  ops_.hold(command);
  s.readers.push_back_reserved(command);
  prune_if_due(s);
}

// write_span() of the whole buffer in the steady state (steady_at_), which
// it keeps: the span's one holder, at steady_at_, is made ready by the
// command, and the record of what it was is narrow (fast_prepare() saw no
// reader). The fields write_span() sets and the state already has (the
// holder's location, `anywhere`) are left as they are.
template <class Wait>
void RangeVersions::steady_write(Event command, Wait& wait) {
  Span& s = spans_.begin()->second;
  if (s.last_writer != nullptr) wait(s.last_writer);
  ops_.hold(command, 3);  // as write_span()
  undo_.emplace_back(Undo::Steady{}, command, steady_at_, size_, s.version, s.last_writer);  // room made by fast_prepare()
  s.holders.begin()->ready = command;
  s.version = next_version_++;
  s.last_writer = command;
  --steady_writes_left_;  // at 0 the records reach fast_trim_at_: the next write looks at them (fast_prepare())
}

// Each reader comes once: a commit adds its command to a span once (the
// pieces of its uses are disjoint, and the plan cut the spans at their
// ends) and each of its copies once per span the copy reads. So the list
// (which grows with the readers queued) is not searched; the last entry is
// looked at, which is free. Here, not in range_versions.cpp: the fast
// path's commit of a read (fast_commit, in the engine's loop) inlines it.
inline void RangeVersions::add_reader(Span& s, Event e) {
  if (e == nullptr || (!s.readers.empty() && s.readers.back() == e)) return;
  ops_.hold(e);
  s.readers.push_back(e);
  prune_if_due(s);
}

// The command's bytes [offset, offset + size) are the new version, held only
// where it runs; what they were goes into an undo record until it
// completes. Here, not in range_versions.cpp: the fast path's commit
// (fast_commit, in the engine's loop) inlines it.
// `narrow`: fits_narrow(s), which the caller knows. The caller has made
// room among the records (fast_prepare(), or commit()'s forget_if_full()).
inline void RangeVersions::write_span(Span& s, std::uint64_t offset, std::uint64_t size, std::uint64_t version,
                                      Location at, Event command, bool narrow) {
  ops_.hold(command, 3);  // the record's writer, the new holder's ready event, the last writer
  const Holder now{at, command};
  if (narrow) [[likely]] {
    undo_.emplace_back(command, at, offset, size, s);  // room made by plan() / fast_prepare()
    s.holders.assign_one(now);
  } else {
    record_wide(s, offset, size, at, command);
    s.holders.push_back(now);  // the record took its lists: inline room
  }
  s.version = version;
  s.anywhere = false;
  s.last_writer = command;
}

}  // namespace memlayer::migration

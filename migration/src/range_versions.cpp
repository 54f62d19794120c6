#include "memlayer/migration/range_versions.hpp"

#include "memlayer/migration/detail/reserve.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace memlayer::migration {

namespace {

// How many undo records the fast path lets pile up before it looks whether
// the oldest writer completed (fast_prepare()): first, and at most.
constexpr std::size_t kFastTrimFirst = 8, kFastTrimMost = 64;

template <class List>
void add_unique(List& list, Event e) {
  if (e == nullptr) return;
  if (std::find(list.begin(), list.end(), e) == list.end()) list.push_back(e);
}


// What a command's use adds to the reader list of a span no copy covers:
// itself, for a read. A write moves the span, lists and all, into an undo
// record and starts new, inline lists (prepare_commit()).
constexpr std::uint32_t readers_a_use_adds(Access a) { return writes(a) ? 0 : 1; }

// Calls f(begin, end, access) for each maximal piece of the uses' union with
// one combined access, in offset order: where uses overlap, any read of old
// content plus any write makes read_write. `cuts` is scratch: once it has
// had room for these uses, the call allocates nothing.
template <class F>
void for_each_piece(std::span<const Use> uses, std::vector<std::uint64_t>& cuts, F&& f) {
  if (uses.size() == 1) {  // the common case, without the sweep
    f(uses[0].offset, uses[0].offset + uses[0].size, uses[0].access);
    return;
  }
  cuts.clear();
  cuts.reserve(uses.size() * 2);
  for (const Use& u : uses) {
    cuts.push_back(u.offset);
    cuts.push_back(u.offset + u.size);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::uint64_t run_begin = 0, run_end = 0;
  bool have_run = false;
  Access run_access = Access::read;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::uint64_t b = cuts[i], e = cuts[i + 1];
    bool covered = false, reads = false, writes_any = false;
    for (const Use& u : uses) {
      if (u.offset <= b && e <= u.offset + u.size) {
        covered = true;
        reads = reads || reads_old_content(u.access);
        writes_any = writes_any || writes(u.access);
      }
    }
    if (!covered) continue;
    const Access a = !writes_any ? Access::read : (reads ? Access::read_write : Access::overwrite);
    if (have_run && run_end == b && run_access == a) {
      run_end = e;
      continue;
    }
    if (have_run) f(run_begin, run_end, run_access);
    run_begin = b, run_end = e, run_access = a, have_run = true;
  }
  if (have_run) f(run_begin, run_end, run_access);
}

}  // namespace

RangeVersions::RangeVersions(std::uint64_t size, LocationSet initially_valid, const EventOps& ops)
    : size_(size), ops_(ops), fast_trim_at_(kFastTrimFirst) {
  if (size == 0) throw std::invalid_argument("RangeVersions: a buffer of 0 bytes");
  if (initially_valid.empty()) throw std::invalid_argument("RangeVersions: the initial content must be valid somewhere");
  Span s;
  if (initially_valid == LocationSet::all())
    s.anywhere = true;
  else
    initially_valid.for_each([&](Location l) { s.holders.push_back(Holder{l, nullptr}); });
  spans_.emplace(0, std::move(s));
}

RangeVersions::~RangeVersions() {
  for (const auto& [offset, span] : spans_) drop_span(span);
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) forget_undo(i);
}

// One span (the whole buffer, the common case) needs no tree search.
RangeVersions::SpanMap::iterator RangeVersions::span_containing(std::uint64_t offset) {
  return spans_.size() == 1 ? spans_.begin() : std::prev(spans_.upper_bound(offset));
}
RangeVersions::SpanMap::const_iterator RangeVersions::span_containing(std::uint64_t offset) const {
  return spans_.size() == 1 ? spans_.begin() : std::prev(spans_.upper_bound(offset));
}

std::uint64_t RangeVersions::end_of(SpanMap::const_iterator it) const {
  auto next = std::next(it);
  return next == spans_.end() ? size_ : next->first;
}

// The span starting exactly at `offset` (splitting the one containing it), or
// end() for offset == size.
RangeVersions::SpanMap::iterator RangeVersions::split_at(std::uint64_t offset) {
  if (offset >= size_) return spans_.end();
  auto it = span_containing(offset);
  if (it->first == offset) return it;
  auto made = spans_.emplace_hint(std::next(it), offset, it->second);
  hold_span(made->second);  // the new span shares every event reference (once it exists)
  return made;
}

void RangeVersions::merge_range(std::uint64_t begin, std::uint64_t end) {
  auto it = spans_.upper_bound(begin);
  if (it != spans_.begin()) --it;
  if (it != spans_.begin()) --it;  // the neighbour before may merge too
  while (it != spans_.end()) {
    auto next = std::next(it);
    if (next == spans_.end()) break;
    if (it->first > end) break;
    if (it->second == next->second) {
      drop_span(next->second);
      spans_.erase(next);
    } else {
      it = next;
    }
  }
}

void RangeVersions::set_holder(Span& s, Location l, Event ready) {
  ops_.hold(ready);
  for (Holder& h : s.holders) {
    if (h.where == l) {
      ops_.drop(h.ready);
      h.ready = ready;
      return;
    }
  }
  auto pos = std::lower_bound(s.holders.begin(), s.holders.end(), l,
                              [](const Holder& h, Location where) { return h.where < where; });
  s.holders.insert(pos, Holder{l, ready});
}

// A span's one holder is most often ready with its last writer: one count
// for both.
void RangeVersions::hold_span(const Span& s) const {
  if (ops_.retain == nullptr) return;  // events not counted (EventOps::hold)
  if (s.holders.size() == 1 && s.holders[0].ready == s.last_writer) {
    ops_.hold(s.last_writer, 2);
  } else {
    for (const Holder& h : s.holders) ops_.hold(h.ready);
    ops_.hold(s.last_writer);
  }
  for (Event e : s.readers) ops_.hold(e);
}

void RangeVersions::drop_span(const Span& s) const {
  if (ops_.release == nullptr) return;  // events not counted (EventOps::drop)
  if (s.holders.size() == 1 && s.holders[0].ready == s.last_writer) {
    ops_.drop(s.last_writer, 2);
  } else {
    for (const Holder& h : s.holders) ops_.drop(h.ready);
    ops_.drop(s.last_writer);
  }
  for (Event e : s.readers) ops_.drop(e);
}

// ---- failures --------------------------------------------------------------

// Drops the records of writers that completed, oldest first: a buffer's
// writers mostly complete in commit order, and one still running only holds
// back the completed ones behind it until it ends. Amortised O(1).
void RangeVersions::trim_completed() {
  if (first_undo_ < undo_.size() && ops_.state(undo_[first_undo_].writer) == EventStatus::completed)
    trim_from_first();
}

// trim_completed() once the oldest record's writer is known to have
// completed (the callers that looked already).
void RangeVersions::trim_from_first() {
  // The only span's last writer completed: so did every record's writer.
  // Each record's writer wrote bytes of that span before it, and it waited
  // for the last writer of every byte it wrote, which waited in turn (a
  // writer known failed had its records put back before): the host runs a
  // command only after what it waits for completed. All records go at once,
  // with one status look, rather than one look each.
  if (undo_.size() - first_undo_ > 2 && spans_.size() == 1) {
    const Event w = spans_.begin()->second.last_writer;
    if (w != nullptr && ops_.state(w) == EventStatus::completed) {
      if (ops_.completed != nullptr)
        for (std::size_t i = first_undo_; i < undo_.size(); ++i) ops_.completed(ops_.context, undo_[i].writer);
      // Uncounted narrow records hold nothing to drop (forget_undo).
      if (ops_.release != nullptr || wide_records() != 0)
        for (std::size_t i = first_undo_; i < undo_.size(); ++i) forget_undo(i);
      undo_.clear();
      first_undo_ = 0;
      return;
    }
  }
  do {
    forget_undo(first_undo_++);
  } while (first_undo_ < undo_.size() && ops_.state(undo_[first_undo_].writer) == EventStatus::completed);
  if (first_undo_ == undo_.size()) {
    undo_.clear();
    first_undo_ = 0;
  } else if (first_undo_ >= 16 && 2 * first_undo_ >= undo_.size()) {
    undo_.erase(undo_.begin(), undo_.begin() + static_cast<std::ptrdiff_t>(first_undo_));
    first_undo_ = 0;
  }
}

// Settles the spans of [begin, end) (the header's "Failures"): a span whose
// last writer failed gets back what it was before, through all of that
// writer's records, newest first, and so on while the content put back
// names a failed writer too; then each span's own lists (settle_span).
// `for_write`: the plan writes there, so failed readers matter.
void RangeVersions::settle_range(std::uint64_t begin, std::uint64_t end, bool for_write) {
  trim_completed();
  for (auto it = span_containing(begin); it != spans_.end() && it->first < end;) {
    const Event w = it->second.last_writer;
    const bool writer_failed = ops_.failed(w);
    if (writer_failed && restore_writer(w)) {
      it = span_containing(begin);  // spans_ changed: look again
      continue;
    }
    settle_span(it->second, end_of(it) - it->first, for_write, writer_failed);
    ++it;
  }
}


// Puts back every record of `writer` (failed); false if it has none left.
bool RangeVersions::restore_writer(Event writer) {
  const bool ran = ops_.state(writer) == EventStatus::failed;
  bool found = false;
  for (std::size_t i = undo_.size(); i-- > first_undo_;) {  // restore() erases only records from i on
    if (undo_[i].writer != writer) continue;
    restore(i, ran);
    found = true;
  }
  return found;
}

// Drops record `index`'s references (a wide one's span goes); the caller
// removes the record, or leaves it spent (before first_undo_), where
// nothing reads it.
void RangeVersions::forget_undo(std::size_t index) {
  Undo& r = undo_[index];
  if (ops_.release == nullptr && r.wide == kNarrow) return;  // nothing counted, nothing wide
  drop_record(r);
}

void RangeVersions::drop_record(Undo& r) noexcept {
  if (ops_.release != nullptr) {  // else events are not counted: nothing to drop
    if (r.wide != kNarrow) {
      drop_span(wide_[r.wide]);
    } else {
      if (r.has_holder) ops_.drop(r.holder_ready);
      ops_.drop(r.last_writer);
    }
    ops_.drop(r.writer);
  }
  if (r.wide != kNarrow) {
    wide_[r.wide] = Span{};  // its lists' heap arrays go now
    free_wide(r.wide);
    r.wide = kNarrow;
  }
}

void RangeVersions::hold_record(const Undo& r) const {
  if (ops_.retain == nullptr) return;  // events not counted (EventOps::hold)
  if (r.wide != kNarrow) {
    hold_span(wide_[r.wide]);
  } else {
    if (r.has_holder) ops_.hold(r.holder_ready);
    ops_.hold(r.last_writer);
  }
  ops_.hold(r.writer);
}

void RangeVersions::reserve_wide(std::size_t n) {
  if (wide_free_.size() >= n) return;
  const std::size_t more = n - wide_free_.size();
  if (wide_.size() + more >= kNarrow) throw std::bad_alloc();
  // Grown geometrically (detail::grow_for): a place more per write, reserved
  // exactly, would move every pooled span at each write while writers are
  // queued.
  detail::reserve_more(wide_, more);
  // Room for every index, so that free_wide() never allocates.
  if (const std::size_t all = wide_.size() + more; wide_free_.capacity() < all)
    detail::grow_for(wide_free_, all - wide_free_.size());
  for (std::size_t i = 0; i < more; ++i) {
    wide_free_.push_back(static_cast<std::uint32_t>(wide_.size()));
    wide_.emplace_back();
  }
}

std::uint32_t RangeVersions::take_wide() noexcept {
  const std::uint32_t i = wide_free_.back();  // reserve_wide() made it
  wide_free_.pop_back();
  return i;
}

void RangeVersions::free_wide(std::uint32_t index) noexcept { wide_free_.push_back(index); }

RangeVersions::Span RangeVersions::take_before(Undo& r) noexcept {
  Span s;
  if (r.wide != kNarrow) {
    s = std::move(wide_[r.wide]);  // leaves the place's lists empty
    free_wide(r.wide);
    r.wide = kNarrow;
    return s;
  }
  s.version = r.version;
  s.anywhere = r.anywhere;
  s.last_writer = r.last_writer;
  if (r.has_holder) s.holders.push_back(Holder{r.holder_at, r.holder_ready});  // inline: allocates nothing
  return s;
}

RangeVersions::Undo RangeVersions::copy_record(const Undo& r, std::uint64_t offset, std::uint64_t size) {
  Undo c = r;
  c.offset = offset;
  c.size = size;
  if (r.wide != kNarrow) {
    reserve_wide(1);
    const std::uint32_t i = wide_free_.back();
    wide_[i] = wide_[r.wide];  // may throw: then the place stays free
    c.wide = take_wide();
  }
  return c;
}

std::optional<RangeVersions::Holder> RangeVersions::record_holder(const Undo& r, Location l) const {
  if (r.wide != kNarrow) {
    const Holder* h = holder(wide_[r.wide], l);
    return h != nullptr ? std::optional<Holder>(*h) : std::nullopt;
  }
  if (r.anywhere) return Holder{kHost, nullptr};  // as holder(): valid at every location
  if (r.has_holder && r.holder_at == l) return Holder{r.holder_at, r.holder_ready};
  return std::nullopt;
}

void RangeVersions::widen(Undo& r) {
  if (r.wide != kNarrow) return;
  reserve_wide(1);
  const std::uint32_t i = take_wide();
  wide_[i] = take_before(r);
  r.wide = i;
}

// Puts back what record `index` says its bytes were before its writer,
// which failed (`ran`: after starting). All or nothing: what may throw
// (copying the newer records it splits in two, room for them, cutting the
// spans at the record's ends) comes first, so that on std::bad_alloc the
// record is still there, whole, for the next settle; the changes after it
// allocate nothing.
void RangeVersions::restore(std::size_t index, bool ran) {
  const std::uint64_t begin = undo_[index].offset, end = begin + undo_[index].size;
  // Newer records over these bytes describe content made from the failed
  // one; their writers wait for it, so they fail too. Of a record that
  // reaches beyond these bytes (spans merge and split, so records need not
  // nest), the part beyond stays: its writer's failure puts that back. One
  // beyond on both sides becomes two records: its right part is made here.
  std::vector<Undo> rights;
  try {
    for (std::size_t j = index + 1; j < undo_.size(); ++j) {
      const Undo& n = undo_[j];
      if (n.offset < begin && end < n.offset + n.size) {
        if (rights.empty()) rights.reserve(undo_.size() - j);
        rights.push_back(copy_record(n, end, n.offset + n.size - end));
      }
    }
    if (rights.size() > 1) detail::reserve_more(undo_, rights.size() - 1);  // one goes where this record was
    // Spans begin at both ends (a cut left when the second throws is into
    // identical halves: no content changes, as plan()'s own cuts).
    split_at(begin);
    split_at(end);
  } catch (...) {
    for (Undo& x : rights)  // the copies' places in wide_ are free again
      if (x.wide != kNarrow) free_wide(x.wide);
    throw;
  }

  Undo r = std::move(undo_[index]);
  undo_.erase(undo_.begin() + static_cast<std::ptrdiff_t>(index));
  auto right = rights.begin();
  for (std::size_t j = index; j < undo_.size();) {
    Undo& n = undo_[j];
    const std::uint64_t a = n.offset, b = n.offset + n.size;
    if (b <= begin || end <= a) {
      ++j;
    } else if (begin <= a && b <= end) {
      forget_undo(j);
      undo_.erase(undo_.begin() + static_cast<std::ptrdiff_t>(j));
    } else if (a < begin && end < b) {  // made above, in this order
      hold_record(*right);
      n.size = begin - a;
      undo_.insert(undo_.begin() + static_cast<std::ptrdiff_t>(j + 1), std::move(*right++));  // has room
      j += 2;
    } else {
      if (a < begin) n.size = begin - a;
      else n.offset = end, n.size = b - end;
      ++j;
    }
  }
  // The span cut at `begin` takes the content back (its map node reused:
  // nothing allocated); the others over these bytes go.
  const auto first = spans_.find(begin);
  drop_span(first->second);
  first->second = take_before(r);
  for (auto it = std::next(first); it != spans_.end() && it->first < end;) {
    drop_span(it->second);
    it = spans_.erase(it);
  }
  Span& s = first->second;
  ops_.drop(r.writer);
  if (ran) {  // its partial writes spoilt the copy where it ran
    auto h = std::find_if(s.holders.begin(), s.holders.end(), [&](const Holder& x) { return x.where == r.at; });
    if (h != s.holders.end()) {
      ops_.drop(h->ready);
      s.holders.erase(h);
    }
  }
  merge_range(begin, end);
}

// What one span's own lists say of failures: a copy that failed left no
// valid bytes, and a reader that failed orders nothing (neither may reach a
// wait list: it would fail the command; readers matter only to a writer).
// `writer_failed` is what settle_range() found of the last writer, which
// then had no records left (forgotten: kMaxUndo); one that fails after that
// look keeps the span as it is until the next plan puts its records back (a
// command planned now waits for it and fails with it). Content with no
// holder left is lost.
void RangeVersions::settle_span(Span& s, std::uint64_t bytes, bool for_write, bool writer_failed) {
  s.holders.erase_if([&](const Holder& h) {
    // The writer's own copy is ready with the writer: already looked at.
    if (h.ready == s.last_writer || !ops_.failed(h.ready)) return false;
    ops_.drop(h.ready);
    return true;
  });
  if (for_write) {
    s.readers.erase_if([&](Event e) {
      if (!ops_.failed(e)) return false;
      ops_.drop(e);
      return true;
    });
  }
  if (writer_failed) {  // its records were forgotten (kMaxUndo)
    for (const Holder& h : s.holders) ops_.drop(h.ready);
    s.holders.clear();
    ops_.drop(s.last_writer);
    s.last_writer = nullptr;
  }
  if (s.holders.empty() && !s.anywhere) {
    s.anywhere = true;
    s.version = next_version_++;
    bytes_lost_ += bytes;
  }
}

// Whether record `r`'s content is held at `at` and nowhere else.
bool RangeVersions::held_only_at(const Undo& r, Location at) const {
  if (r.wide != kNarrow) {
    const Span& s = wide_[r.wide];
    return !s.anywhere && s.holders.size() == 1 && s.holders[0].where == at;
  }
  return !r.anywhere && r.has_holder && r.holder_at == at;
}

bool RangeVersions::undo_only_at(Location at) const {
  for (std::size_t i = first_undo_; i < undo_.size(); ++i)
    if (held_only_at(undo_[i], at) && !can_write_back_undo(i, at)) return true;
  return false;
}

void RangeVersions::undo_only_at_writers(Location at, std::vector<Event>& out) const {
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) {
    const Event w = undo_[i].writer;
    if (ops_.done(w) || !held_only_at(undo_[i], at) || can_write_back_undo(i, at)) continue;
    if (std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  }
}

// Finished events order nothing any more: drop them, so lists stay short and
// spans that differ only in finished history can merge. Failed ready events
// and writers stay: settle_range() needs them to undo.
// Of the readers, the older half is looked at, and the newer ones after
// it while they are done: about one look per reader added (add_reader()
// calls this as the list doubles), not two. A deep queue's newer half is
// mostly still running (queued behind the older); the readers done there
// that stay are in the older half at the next prune. A list doubles only
// when half of it is still running, so it stays within four times its
// unfinished readers, or the threshold (twice, were every reader looked
// at).
void RangeVersions::prune(Span& s) {
  s.readers.erase_if(
      [&](Event e) {
        if (!ops_.done(e)) return false;
        ops_.drop(e);
        return true;
      },
      s.readers.size() / 2);
  for (Holder& h : s.holders) {
    if (h.ready != nullptr && ops_.state(h.ready) == EventStatus::completed) {
      ops_.drop(h.ready);
      h.ready = nullptr;
    }
  }
  if (s.last_writer != nullptr && ops_.state(s.last_writer) == EventStatus::completed) {
    ops_.drop(s.last_writer);
    s.last_writer = nullptr;
  }
}

// Copy::also for a copy of span `s` (`bytes` of it) from `src` to `to`.
LocationSet RangeVersions::also_sources(const Span& s, Location src, Location to, std::uint64_t bytes,
                                        const CostModel& cost) const {
  LocationSet also;
  for (const Holder& h : s.holders) {
    if (h.where == src || h.where == to) continue;
    if (ops_.state(h.ready) == EventStatus::completed && cost.cost(h.where, to, bytes)) also.insert(h.where);
  }
  return also;
}

void RangeVersions::plan_fetch(SpanMap::const_iterator first, std::uint64_t begin, std::uint64_t end, Location at,
                               const CostModel& cost, Plan& out) const {
  for (auto it = first; it != spans_.end() && it->first < end; ++it) {
    const Span& s = it->second;
    if (holder(s, at) != nullptr) continue;
    const std::uint64_t x = std::max(begin, it->first), y = std::min(end, end_of(it)), n = y - x;

    // The cheapest valid source: direct where a path exists, else through
    // the host copy (which the first importer leaves valid for the rest).
    double best = std::numeric_limits<double>::infinity();
    const Holder* src = nullptr;
    bool staged = false;
    const bool host_valid = holder(s, kHost) != nullptr;
    for (const Holder& h : s.holders) {
      if (auto c = cost.cost(h.where, at, n); c && *c < best) {
        best = *c, src = &h, staged = false;
      }
      if (!host_valid && h.where != kHost && at != kHost) {
        auto up = cost.cost(h.where, kHost, n), down = cost.cost(kHost, at, n);
        if (up && down && *up + *down < best) best = *up + *down, src = &h, staged = true;
      }
    }
    if (src == nullptr) {
      throw std::logic_error("migration: the cost model offers no path to location " + std::to_string(at) +
                             " (host links must always exist)");
    }

    // Extend the previous copy (or staged pair) when this one continues it.
    auto& copies = out.copies;
    if (!staged && !copies.empty()) {
      Copy& last = copies.back();
      if (last.after < 0 && last.src == src->where && last.dst == at && last.offset + last.size == x) {
        last.size += n;
        add_unique(last.wait, src->ready);
        last.also = last.also & also_sources(s, src->where, at, n, cost);
        continue;
      }
    }
    if (staged && copies.size() >= 2) {
      Copy& up = copies[copies.size() - 2];
      Copy& down = copies.back();
      if (down.after == static_cast<int>(copies.size() - 2) && up.src == src->where && down.dst == at &&
          up.offset + up.size == x) {
        up.size += n, down.size += n;
        add_unique(up.wait, src->ready);
        up.also = up.also & also_sources(s, src->where, kHost, n, cost);
        down.also = down.also & also_sources(s, kHost, at, n, cost);
        continue;
      }
    }
    if (staged) {
      Copy up{src->where, kHost, x, n, {}, -1, also_sources(s, src->where, kHost, n, cost)};
      add_unique(up.wait, src->ready);
      copies.push_back(std::move(up));
      copies.push_back(
          Copy{kHost, at, x, n, {}, static_cast<int>(copies.size() - 1), also_sources(s, kHost, at, n, cost)});
    } else {
      Copy c{src->where, at, x, n, {}, -1, also_sources(s, src->where, at, n, cost)};
      add_unique(c.wait, src->ready);
      copies.push_back(std::move(c));
    }
  }
}

// What a command using span `s` with `access` at `at` must wait for.
void RangeVersions::plan_waits(const Span& s, Access access, Location at, Plan& out) const {
  add_unique(out.wait, s.last_writer);
  if (const Holder* h = holder(s, at)) add_unique(out.wait, h->ready);
  if (writes(access)) {
    for (Event r : s.readers) add_unique(out.wait, r);
  }
}

void RangeVersions::plan(std::span<const Use> uses, Location at, const CostModel& cost, Plan& out) {
  leave_steady();
  out.clear();
  if (auto exact = exact_span(uses); exact != spans_.end()) {  // most kernel arguments: no pieces
    const Access access = uses[0].access;
    const bool for_write = writes(access);
    // Most often the oldest record's writer is still running: nothing to
    // trim, known without the call.
    if (first_undo_ != undo_.size() && ops_.state(undo_[first_undo_].writer) == EventStatus::completed) trim_from_first();
    if (!settled(exact->second, for_write)) {
      settle_range(uses[0].offset, uses[0].offset + uses[0].size, for_write);
      exact = exact_span(uses);  // settling changed spans_: look again
    }
    if (exact != spans_.end()) {
      Span& t = exact->second;
      const Holder* h = holder(t, at);
      if (h == nullptr && reads_old_content(access)) plan_fetch(exact, exact->first, end_of(exact), at, cost, out);
      // plan_waits(), with the common holder ready with the last writer
      // looked at once.
      if (t.last_writer != nullptr) out.wait.push_back(t.last_writer);
      if (h != nullptr && h->ready != t.last_writer) add_unique(out.wait, h->ready);
      if (for_write) {  // the readers are distinct (add_reader()): only the two above may repeat one
        const auto before = static_cast<std::ptrdiff_t>(out.wait.size());
        for (Event r : t.readers)
          if (std::find(out.wait.begin(), out.wait.begin() + before, r) == out.wait.begin() + before)
            out.wait.push_back(r);
      }
      // prepare_commit(), without its search when no copy covers the span.
      if (!out.copies.empty()) {
        prepare_commit(uses, out);
      } else {
        make_room(t, 0, readers_a_use_adds(access));
        if (for_write) detail::reserve_more(undo_, 1);
        if (for_write && !fits_narrow(t)) reserve_wide(1);
        planned_writes_ = for_write ? 1 : 0;
      }
      return;
    }
  }
  for (const Use& u : uses) settle_range(u.offset, u.offset + u.size, writes(u.access));
  for_each_piece(uses, cuts_, [&](std::uint64_t begin, std::uint64_t end, Access access) {
    const auto first = span_containing(begin);
    if (reads_old_content(access)) plan_fetch(first, begin, end, at, cost, out);
    for (auto it = first; it != spans_.end() && it->first < end; ++it) plan_waits(it->second, access, at, out);
  });
  prepare_commit(uses, out);
}

// fast_prepare()'s look for completed writers, once their records reach
// fast_trim_at_. False when a write would find no room among the records
// (write_span() would forget one): the general path then forgets it.
// Out of line: rare, and its body would make fast_prepare() save every
// register.
bool RangeVersions::fast_trim(bool for_write) {
  // Fewer records than fast_trim_at_ are fewer than kMaxUndo: room for a
  // write, with no look.
  static_assert(kFastTrimMost < kMaxUndo);
  if (ops_.state(undo_[first_undo_].writer) == EventStatus::completed) trim_from_first();
  const std::size_t live = undo_.size() - first_undo_;
  fast_trim_at_ = std::clamp(2 * live, kFastTrimFirst, kFastTrimMost);
  return !for_write || live < kMaxUndo;
}

// Makes room now for what commit() of this plan adds, so that it allocates
// nothing: a commit cannot then fail half-way, and an enqueue that fails
// after its plans (out of host memory) changes no content. The spans are
// cut where the copies and uses begin and end (identical halves: content
// and versions unchanged; commit() merges what stays equal), and each span
// gets room for the holders and readers a commit adds there: under a copy,
// a holder and a reader per copy (a staged copy: two of each) and the
// command as reader; under a read only, the command as reader; a span
// written goes whole into an undo record (its lists with it, leaving empty
// inline ones for the new holder), and gets room for that record. A span
// never gets more than it needs: room past a list's inline two is a heap
// array, made and freed again with the record.
void RangeVersions::prepare_commit(std::span<const Use> uses, const Plan& plan) {
  const std::size_t spans_before = spans_.size();
  std::size_t written = 0;
  auto room = [&](std::uint64_t begin, std::uint64_t end, std::uint32_t holders, std::uint32_t readers, bool write) {
    auto first = split_at(begin);
    split_at(end);
    for (auto it = first; it != spans_.end() && it->first < end; ++it) {
      make_room(it->second, holders, readers);
      if (write) ++written;
    }
  };
  for (const Copy& c : plan.copies) room(c.offset, c.offset + c.size, 2, 3, false);
  for_each_piece(uses, cuts_, [&](std::uint64_t begin, std::uint64_t end, Access access) {
    room(begin, end, 0, readers_a_use_adds(access), writes(access));
  });
  detail::reserve_more(undo_, written);
  reserve_wide(written);  // at most: a span written may be narrow
  planned_writes_ = written;
  cut_in_plan_ = cut_in_plan_ || spans_.size() != spans_before;
}

// The undo records are full: completed writers behind a running one go
// first, then the oldest, down to three quarters, so that the next
// kMaxUndo / 4 writes scan nothing. Out of line: rare, and its body would
// make write_span() save every register.
[[gnu::noinline, gnu::cold]] void RangeVersions::forget_oldest_undo() {
  std::size_t kept = 0;
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) {
    if (ops_.state(undo_[i].writer) == EventStatus::completed) {
      forget_undo(i);
      continue;
    }
    if (kept != i) undo_[kept] = std::move(undo_[i]);
    ++kept;
  }
  undo_.resize(kept);
  first_undo_ = 0;
  while (undo_.size() - first_undo_ > kUndoKeptAfterForget) forget_undo(first_undo_++);
}

// write_span()'s record of a span that is not narrow: it moves whole into
// the place in wide_ plan() / fast_prepare() made free. Out of line: the
// common case stays small.
[[gnu::noinline]] void RangeVersions::record_wide(Span& s, std::uint64_t offset, std::uint64_t size, Location at,
                                                  Event command) noexcept {
  Undo& r = undo_.emplace_back();  // room made by plan() / fast_prepare()
  r.writer = command;
  r.at = at;
  r.offset = offset;
  r.size = size;
  r.wide = take_wide();
  wide_[r.wide] = std::move(s);  // leaves s's lists empty
}

void RangeVersions::commit(const Plan& plan, std::span<const Event> copy_events, std::span<const Use> uses,
                           Location at, Event command) {
  leave_steady();
  if (copy_events.size() != plan.copies.size())
    throw std::invalid_argument("migration: commit needs one event per planned copy");
  if (plan.copies.empty()) {
    if (auto it = exact_span(uses); it != spans_.end()) {  // nothing splits, nothing merges
      cut_in_plan_ = false;  // a cut the plan made leaves halves this command makes differ
      if (writes(uses[0].access)) {
        forget_if_full();
        write_span(it->second, it->first, uses[0].size, next_version_++, at, command, fits_narrow(it->second));
      }
      else add_reader(it->second, command);
      return;
    }
  }
  std::uint64_t lo = size_, hi = 0;

  for (std::size_t i = 0; i < plan.copies.size(); ++i) {
    const Copy& c = plan.copies[i];
    auto first = split_at(c.offset);  // cut by the plan already (prepare_commit): found, not made
    for (auto it = first; it != spans_.end() && it->first < c.offset + c.size; ++it) {
      add_reader(it->second, copy_events[i]);  // a copy reads its source: writers wait for it
      set_holder(it->second, c.dst, copy_events[i]);
    }
    lo = std::min(lo, c.offset), hi = std::max(hi, c.offset + c.size);
  }

  // Only new or rewritten spans can equal a neighbour. A read on existing
  // boundaries changes reader lists, which never lets neighbours merge; a
  // write that rewrites exactly one existing span gives it a version no
  // other span has. Skip the merge pass then (the common, whole-buffer
  // case); it runs when the plan cut spans, or one version now covers
  // several.
  bool reshaped = !plan.copies.empty() || cut_in_plan_;
  cut_in_plan_ = false;
  bool writes_any = false;
  for (const Use& u : uses) writes_any = writes_any || writes(u.access);
  const std::uint64_t version = writes_any ? next_version_++ : 0;
  int written_pieces = 0;

  for_each_piece(uses, cuts_, [&](std::uint64_t begin, std::uint64_t end, Access access) {
    auto first = split_at(begin);  // cut by the plan already (prepare_commit): found, not made
    if (writes(access) && ++written_pieces > 1) reshaped = true;
    std::size_t touched = 0;
    for (auto it = first; it != spans_.end() && it->first < end; ++it) {
      Span& s = it->second;
      if (!writes(access)) {
        add_reader(s, command);
        continue;
      }
      if (++touched > 1) reshaped = true;
      forget_if_full();
      write_span(s, it->first, end_of(it) - it->first, version, at, command, fits_narrow(s));
    }
    lo = std::min(lo, begin), hi = std::max(hi, end);
  });
  if (reshaped && lo < hi) merge_range(lo, hi);
}

// Valid somewhere other than `at` for sure: not only by a copy still in
// flight, which may yet fail.
bool RangeVersions::complete_elsewhere(const Span& s, Location at) const {
  return std::any_of(s.holders.begin(), s.holders.end(), [&](const Holder& x) {
    return x.where != at && ops_.state(x.ready) == EventStatus::completed;
  });
}

void RangeVersions::plan_evict(Location at, const CostModel& cost, Plan& out) {
  leave_steady();
  out.clear();
  if (at == kHost) throw std::invalid_argument("migration: the host copy is not evicted");
  settle_range(0, size_, true);
  for (auto it = spans_.begin(); it != spans_.end(); ++it) {
    const Span& s = it->second;
    const Holder* h = holder(s, at);
    if (h == nullptr) continue;
    add_unique(out.wait, h->ready);
    for (Event r : s.readers) add_unique(out.wait, r);
    if (s.anywhere || complete_elsewhere(s, at)) continue;  // nothing to save: just drop it
    // An import still making the host's bytes (for a reader there) is not
    // written back beside or after: that would write host bytes the reader
    // may be reading once the import has ended. The import reads `at` (in
    // out.wait above), so the storage outlives it; if it fails, the bytes
    // are lost as a failed write-back's would be (a write-back after it
    // would fail with it: it depends on it).
    if (holder(s, kHost) != nullptr) continue;
    const std::uint64_t x = it->first, n = end_of(it) - x;
    if (!cost.cost(at, kHost, n)) {
      throw std::logic_error("migration: the cost model offers no path from location " + std::to_string(at) +
                             " to the host");
    }
    if (out.copies.empty() || out.copies.back().offset + out.copies.back().size != x) {
      out.copies.push_back(Copy{at, kHost, x, n, {}, -1, {}});  // nothing else holds it complete: no other source
    } else {
      out.copies.back().size += n;
    }
    add_unique(out.copies.back().wait, h->ready);
  }
  // Room for commit_write_back() and commit_evict() (the write-backs cover
  // whole spans: no cut), which then allocate nothing.
  for (const Copy& c : out.copies) {
    for (auto it = spans_.find(c.offset); it != spans_.end() && it->first < c.offset + c.size; ++it)
      make_room(it->second, 1, 1);
  }
}

void RangeVersions::commit_write_back(const Plan& plan, std::span<const Event> copy_events) {
  leave_steady();
  if (copy_events.size() != plan.copies.size())
    throw std::invalid_argument("migration: commit needs one event per planned copy");
  for (std::size_t i = 0; i < plan.copies.size(); ++i) {
    const Copy& c = plan.copies[i];
    if (c.undo) {
      commit_undo_write_back(c, copy_events[i]);
      continue;
    }
    split_at(c.offset);
    split_at(c.offset + c.size);
    for (auto it = spans_.find(c.offset); it != spans_.end() && it->first < c.offset + c.size; ++it) {
      add_reader(it->second, copy_events[i]);
      set_holder(it->second, kHost, copy_events[i]);
    }
  }
}

// Throws std::invalid_argument, having changed nothing, when committing
// `plan` as an eviction of `at` would leave bytes valid nowhere: a span that
// only `at` holds and whose bytes the plan's write-backs do not all cover
// (a plan that plan_evict(at) did not make for these versions). O(spans ×
// copies), and the plans of evictions have few copies.
void RangeVersions::check_eviction_keeps_content(const Plan& plan, Location at) const {
  for (auto it = spans_.begin(); it != spans_.end(); ++it) {
    const Span& s = it->second;
    if (s.anywhere || s.holders.size() != 1 || s.holders[0].where != at) continue;
    const std::uint64_t end = end_of(it);
    std::uint64_t covered = it->first;  // [it->first, covered) is written back
    for (bool grew = true; grew && covered < end;) {
      grew = false;
      for (const Copy& c : plan.copies) {
        if (!c.undo && c.dst == kHost && c.offset <= covered && c.offset + c.size > covered) {
          covered = c.offset + c.size;
          grew = true;
        }
      }
    }
    if (covered < end) {
      throw std::invalid_argument("migration: evicting location " + std::to_string(at) + " would drop the only copy of bytes [" +
                                  std::to_string(covered) + ", " + std::to_string(end) +
                                  "), which the plan does not write back (not plan_evict()'s plan for these versions)");
    }
  }
}

void RangeVersions::commit_evict(const Plan& plan, std::span<const Event> copy_events, Location at) {
  leave_steady();
  check_eviction_keeps_content(plan, at);
  commit_write_back(plan, copy_events);  // checks the events first, then changes
  auto forget = [&](Span& x) {
    auto h = std::find_if(x.holders.begin(), x.holders.end(), [&](const Holder& y) { return y.where == at; });
    if (h == x.holders.end()) return;
    ops_.drop(h->ready);
    x.holders.erase(h);
  };
  for (auto& [offset, s] : spans_) forget(s);  // each keeps a holder: checked above
  // An undo record left with no holder is lost if its writer fails
  // (bytes_lost); eviction takes such storage last (undo_only_at()).
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) {
    Undo& r = undo_[i];
    if (r.wide != kNarrow) {
      forget(wide_[r.wide]);
    } else if (r.has_holder && r.holder_at == at) {
      ops_.drop(r.holder_ready);
      r.has_holder = false;
    }
  }
  merge_range(0, size_);
}

// Whether record `index` (held only at `at`) can be written back to the
// host copy (plan_undo_write_backs()): its writer is unfinished and runs
// elsewhere, its copy at `at` did not fail, and the host copy's bytes under
// it serve nothing else.
bool RangeVersions::can_write_back_undo(std::size_t index, Location at) const {
  const Undo& r = undo_[index];
  if (r.at == at || ops_.done(r.writer) || ops_.failed(record_holder(r, at)->ready)) return false;
  const std::uint64_t end = r.offset + r.size;
  for (auto it = span_containing(r.offset); it != spans_.end() && it->first < end; ++it)
    if (holder(it->second, kHost) != nullptr || holder(it->second, at) != nullptr) return false;
  for (std::size_t j = first_undo_; j < undo_.size(); ++j) {
    const Undo& o = undo_[j];
    if (j == index || o.offset + o.size <= r.offset || end <= o.offset) continue;
    if (record_holder(o, kHost).has_value() || held_only_at(o, at)) return false;  // the same host bytes
  }
  return true;
}

void RangeVersions::plan_undo_write_backs(Location at, Plan& out) {
  leave_steady();
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) {
    Undo& r = undo_[i];
    if (!held_only_at(r, at) || !can_write_back_undo(i, at)) continue;
    Copy c{at, kHost, r.offset, r.size, {}, -1, {}, true};
    add_unique(c.wait, record_holder(r, at)->ready);
    out.copies.push_back(std::move(c));
    // Room for commit_undo_write_back(): the record's holder (a wide
    // record's span takes it), a reader of each span over it.
    widen(r);
    make_room(wide_[r.wide], 1, 0);
    for (auto it = span_containing(r.offset); it != spans_.end() && it->first < r.offset + r.size; ++it)
      make_room(it->second, 0, 1);
  }
}

// The record plan_undo_write_backs() made `c` for (the one over exactly its
// bytes held only at c.src: no other over them is) gets `e`'s copy at the
// host; the spans over them get `e` as a reader, so later writers (at
// c.src, whose bytes it reads) wait for it.
void RangeVersions::commit_undo_write_back(const Copy& c, Event e) {
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) {
    Undo& r = undo_[i];
    if (r.offset != c.offset || r.size != c.size || !held_only_at(r, c.src)) continue;
    widen(r);  // plan_undo_write_backs() did: allocates nothing here
    set_holder(wide_[r.wide], kHost, e);
    for (auto it = span_containing(c.offset); it != spans_.end() && it->first < c.offset + c.size; ++it)
      add_reader(it->second, e);
    return;
  }
}

RangeVersions::WriteBack RangeVersions::write_back_needed(Location at) const {
  WriteBack need = WriteBack::none;
  for (const auto& [offset, s] : spans_) {
    if (s.anywhere) continue;
    const Holder* h = holder(s, at);
    if (h == nullptr || complete_elsewhere(s, at)) continue;
    if (ops_.state(h->ready) != EventStatus::completed) return WriteBack::waiting;
    need = WriteBack::ready;
  }
  return need;
}

bool RangeVersions::valid_at(Location at, std::uint64_t offset, std::uint64_t size) const {
  const std::uint64_t end = offset + size;
  for (auto it = span_containing(offset); it != spans_.end() && it->first < end; ++it) {
    const Holder* h = holder(it->second, at);
    if (h == nullptr || ops_.failed(h->ready)) return false;
  }
  return true;
}

std::uint64_t RangeVersions::bytes_only_at(Location at) const {
  std::uint64_t n = 0;
  for (auto it = spans_.begin(); it != spans_.end(); ++it)
    if (it->second.holders.size() == 1 && it->second.holders[0].where == at) n += end_of(it) - it->first;
  return n;
}

void RangeVersions::walk(const std::function<void(const SpanInfo&)>& visit) const {
  for (auto it = spans_.begin(); it != spans_.end(); ++it) {
    SpanInfo info{it->first, end_of(it) - it->first, it->second.version, {}};
    if (it->second.anywhere) info.valid = LocationSet::all();
    for (const Holder& h : it->second.holders) info.valid.insert(h.where);
    visit(info);
  }
}

void RangeVersions::writers_at(Location at, std::vector<Event>& out) const {
  for (std::size_t i = first_undo_; i < undo_.size(); ++i)
    if (undo_[i].at == at) out.push_back(undo_[i].writer);
}

void RangeVersions::readers(std::vector<Event>& out) const {
  for (const auto& [offset, s] : spans_) out.insert(out.end(), s.readers.begin(), s.readers.end());
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) {
    if (undo_[i].wide == kNarrow) continue;  // a narrow record's span had no readers (fits_narrow)
    const Span& s = wide_[undo_[i].wide];
    out.insert(out.end(), s.readers.begin(), s.readers.end());
  }
}

// forget_oldest_undo() forgets the oldest records first and keeps
// kUndoKeptAfterForget: what the commit forgets is older than that many of
// the records there will be, so among the oldest `n` (below). Only the
// records themselves, not all that are kept: a queue of unfinished writers
// makes this list at every forgetting, and the runtime keeps what it gets.
void RangeVersions::events_a_commit_may_forget(std::vector<Event>& out) const {
  const std::size_t kept = undo_.size() - first_undo_, after = kept + planned_writes_;
  if (after < kMaxUndo) return;
  const std::size_t n = after - kUndoKeptAfterForget;
  for (std::size_t i = first_undo_; i < first_undo_ + std::min(n, kept); ++i) {
    const Undo& r = undo_[i];
    out.push_back(r.writer);
    if (r.wide != kNarrow) out.insert(out.end(), wide_[r.wide].readers.begin(), wide_[r.wide].readers.end());
  }
  // Records the commit itself makes may go too: their writer is the
  // command, their readers those of the spans it writes, named by the
  // spans now.
  if (n > kept) readers(out);
}

void RangeVersions::events(std::vector<Event>& out) const {
  auto span_events = [&](const Span& s) {
    for (const Holder& h : s.holders)
      if (h.ready != nullptr) out.push_back(h.ready);
    if (s.last_writer != nullptr) out.push_back(s.last_writer);
    out.insert(out.end(), s.readers.begin(), s.readers.end());
  };
  for (const auto& [offset, s] : spans_) span_events(s);
  for (std::size_t i = first_undo_; i < undo_.size(); ++i) {
    const Undo& r = undo_[i];
    out.push_back(r.writer);
    if (r.wide != kNarrow) {
      span_events(wide_[r.wide]);
      continue;
    }
    if (r.has_holder && r.holder_ready != nullptr) out.push_back(r.holder_ready);
    if (r.last_writer != nullptr) out.push_back(r.last_writer);
  }
}

}  // namespace memlayer::migration

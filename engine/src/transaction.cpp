#include "transaction.hpp"

#include "memlayer/migration/detail/reserve.hpp"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>

namespace memlayer::engine {

namespace {

using migration::kHost;

EnqueueError error(EnqueueError::Code code, std::string message) { return EnqueueError{code, std::move(message)}; }


}  // namespace

Transaction::Transaction(Engine& engine, std::span<const BufferUse> uses, Location at, Event command,
                         Submission& out)
    : engine_(engine), host_(engine.host()), table_(*engine.table_), uses_(uses), at_(at), host_command_(command),
      out_(out), s_(*out.scratch_), waits_(table_, out) {}

Transaction::~Transaction() {
  // Only when an exception left run() half-way (a broken invariant: nothing
  // after the decision throws): no buffer stays locked, no copy unhandled.
  unlock_all();
  if (!s_.pending.empty() || !s_.deps.empty()) start_copies();  // none after the fast path
}

// What an exception that stopped the decision says, as the enqueue's error.
// Every step before commit_all() changes nothing that fail() does not undo,
// so any exception there (a host's, or the planner's logic_error) fails
// the enqueue whole.
EnqueueError Transaction::error_of_exception() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return error(EnqueueError::Code::host_out_of_memory, "no host memory for the engine's records");
  } catch (const std::exception& e) {
    return error(EnqueueError::Code::host_failed, std::string("the enqueue stopped on an exception: ") + e.what());
  } catch (...) {
    return error(EnqueueError::Code::host_failed, "the enqueue stopped on an exception of an unknown type");
  }
}

std::optional<EnqueueError> Transaction::run() {
  std::optional<EnqueueError> failed;
  try {
    group_uses();
    out_.storage_.assign(uses_.size(), 0);
    command_ = table_.make(host_command_, CommandTable::Ref::retain_unshared, engine_.host_tells_ends_, at_);
    if (command_ == nullptr) throw std::bad_alloc();  // no slot: the enqueue fails, nothing done
    lock_all();
    stamp_ = engine_.stamp_.fetch_add(1, std::memory_order_relaxed) + 1;
    // After its stamp: stats() never counts more of these than stamps.
    engine_.slow_path_.fetch_add(1, std::memory_order_release);
    failed = place_all();
    if (!failed) failed = plan_all();
    if (!failed) failed = create_copies();
    // The rest of commit_all()'s room (plan_all() made the storages'):
    // a wait per copy and per fence of the command's storage.
    if (!failed) waits_.reserve(s_.copy_events.size() + fence_waits_);
  } catch (...) {
    failed = error_of_exception();
  }
  if (failed) return fail(std::move(*failed));
  commit_all();  // allocates nothing: the plans, plan_all() and the reserve above made the room
  waits_.dedupe();
  release_all(s_.room_after);  // write-backs made on the way, not waited for: room came otherwise
  unlock_all();
  start_copies();
  out_.command_ = static_cast<CommandName>(reinterpret_cast<std::uintptr_t>(command_));
  return std::nullopt;
}

std::optional<EnqueueError> Transaction::run_place() {
  std::optional<EnqueueError> failed;
  try {
    group_uses();
    lock_all();
    failed = place(*s_.groups[0].buffer, at_, false);
    if (!failed) {
      s_.groups[0].buffer->storage(at_).last_use = engine_.stamp_.fetch_add(1) + 1;
      engine_.places_.fetch_add(1);  // after its stamp: stats() never counts more places than stamps
    }
  } catch (...) {
    failed = error_of_exception();
  }
  if (failed) return fail(std::move(*failed));
  release_all(s_.room_after);
  unlock_all();
  start_copies();
  return std::nullopt;
}

std::optional<EnqueueError> Transaction::fail(EnqueueError e) {
  rollback();
  unlock_all();
  start_copies();  // only the write-backs of evictions made on the way
  out_.clear();
  if (e.code == EnqueueError::Code::device_busy) {
    out_.waits_.swap(s_.room_after);  // their references move
    out_.waits_counted_ = true;
  }
  release_all(s_.room_after);
  table_.discard(command_);  // nothing records it
  command_ = nullptr;
  return e;
}

void Transaction::release_all(std::vector<Event>& events) noexcept {
  for (Event e : events) drop(e);
  events.clear();
}

void Transaction::drop(Event e) noexcept {
  if (s_.refs.active()) s_.refs.count(e, -1);
  else host_.release(e, 1);
}

// ---- buffers and locks ----------------------------------------------------

void Transaction::group_uses() {
  s_.pending.clear();
  s_.deps.clear();
  s_.placed.clear();
  s_.copy_events.clear();
  const bool same_buffers =
      !uses_.empty() && s_.order_of.size() == uses_.size() &&
      std::equal(uses_.begin(), uses_.end(), s_.order_of.begin(), [](const BufferUse& u, const Buffer* b) { return u.buffer == b; });
  if (same_buffers && s_.grouped) {  // the groups stand; only the ranges and accesses may differ
    for (std::size_t k = 0; k < s_.order.size(); ++k) s_.uses[k] = uses_[s_.order[k].second].use;
    return;
  }
  s_.grouped = false;  // first: out of memory below, no half-built groups are reused
  s_.uses.clear();
  s_.groups.clear();
  if (!same_buffers) {
    s_.order_of.clear();  // first: out of memory below, no stale order is reused
    s_.order.clear();
    for (std::size_t i = 0; i < uses_.size(); ++i) s_.order.emplace_back(uses_[i].buffer, i);
    // A handful of uses: insertion sort; many: sort, unless the host gave
    // them in buffer order already (engine.hpp: enqueue).
    if (s_.order.size() > 8) {
      if (!std::is_sorted(s_.order.begin(), s_.order.end())) std::sort(s_.order.begin(), s_.order.end());
    } else {
      for (std::size_t i = 1; i < s_.order.size(); ++i)
        for (std::size_t j = i; j > 0 && s_.order[j - 1] > s_.order[j]; --j) std::swap(s_.order[j - 1], s_.order[j]);
    }
    s_.order_of.reserve(uses_.size());  // the last step that may throw: then nothing is reused
    for (const BufferUse& u : uses_) s_.order_of.push_back(u.buffer);
  }
  for (const auto& [buffer, index] : s_.order) {
    if (s_.groups.empty() || s_.groups.back().buffer != buffer)
      s_.groups.push_back({buffer, s_.uses.size(), 0, 0, EnqueueScratch::Group::kNoCopies});
    s_.uses.push_back(uses_[index].use);
    ++s_.groups.back().count;
  }
  s_.grouped = true;
}

// Address order: two commands on the same buffers never wait for each other.
void Transaction::lock_all() {
  s_.refs.begin(host_);
  for (const EnqueueScratch::Group& g : s_.groups) {
    g.buffer->mutex_.lock();
    g.buffer->ops_.batch = &s_.refs;
  }
  locked_ = true;
}

void Transaction::unlock_all() {
  if (!locked_) return;
  s_.refs.flush();  // while the buffers still hold what the batch retained
  for (auto it = s_.groups.rbegin(); it != s_.groups.rend(); ++it) {
    it->buffer->ops_.batch = nullptr;
    it->buffer->mutex_.unlock();
  }
  locked_ = false;
}

bool Transaction::uses_buffer(const Buffer* b) const {
  auto it = std::lower_bound(s_.groups.begin(), s_.groups.end(), b,
                             [](const EnqueueScratch::Group& g, const Buffer* x) { return g.buffer < x; });
  return it != s_.groups.end() && it->buffer == b;
}

// ---- storage and eviction -------------------------------------------------

// Storage at the command's location for each of its buffers that has none
// there, the largest first (a small one placed first may cut the hole a
// large one needs). When that fails with the location full although the
// command's buffers fit it together (exceeds_location()), the space is cut
// up: compact().
std::optional<EnqueueError> Transaction::place_all() {
  s_.to_place.clear();
  for (std::size_t i = 0; i < s_.groups.size(); ++i)
    if (!s_.groups[i].buffer->storage(at_).allocated) s_.to_place.push_back(i);
  if (s_.to_place.empty()) return std::nullopt;
  if (auto too_big = exceeds_location()) return too_big;
  auto failed = place_largest_first();
  if (failed && failed->code == EnqueueError::Code::device_full && at_ != kHost) return compact(std::move(*failed));
  return failed;
}

std::optional<EnqueueError> Transaction::place_largest_first() {
  // Ties in buffer order; std::sort, as std::stable_sort may allocate.
  if (s_.to_place.size() > 1) {
    std::sort(s_.to_place.begin(), s_.to_place.end(), [&](std::size_t a, std::size_t b) {
      const std::uint64_t x = s_.groups[a].buffer->size(), y = s_.groups[b].buffer->size();
      return x != y ? x > y : a < b;
    });
  }
  for (std::size_t i : s_.to_place)
    if (auto failed = place(*s_.groups[i].buffer, at_, false)) return failed;
  return std::nullopt;
}

// The location is full, nothing more can be evicted, yet the command's
// buffers fit it together: its own buffers already there (and the storage
// this enqueue placed) cut the free space into holes too small. They are
// moved: this enqueue's new storage, empty still, is given back, the
// command's resident buffers are evicted as any victim is (their bytes
// valid nowhere else written back first: then the enqueue reports
// device_busy, to be tried again once that is done), and every one is
// placed again, the largest first, into the space that leaves; the plan
// then brings their bytes back from where eviction left them. A buffer
// that cannot move (mapped) fails the enqueue with `full`, the error
// placement gave.
std::optional<EnqueueError> Transaction::compact(EnqueueError full) {
  rollback();  // this enqueue's new storage: nothing is in it yet
  bool waiting = false;
  for (const EnqueueScratch::Group& g : s_.groups) {
    Buffer& b = *g.buffer;
    Storage& st = b.storage(at_);
    if (!st.allocated) continue;
    if (!host_.can_evict(b.cookie(), at_)) return full;
    // Content a queued writer's failure goes back to, held only here: moved
    // once that writer has finished. Until then, and while a write-back
    // saves the storage, the enqueue waits.
    s_.after.clear();
    b.versions_.undo_only_at_writers(at_, s_.after);
    if (writing_back(st)) s_.after.insert(s_.after.end(), st.write_backs.begin(), st.write_backs.end());
    if (!s_.after.empty()) {
      wait_for_room(s_.after);
      waiting = true;
      continue;
    }
    const Evicted e = evict(b, at_);
    if (e == Evicted::nothing) return full;
    waiting = waiting || e == Evicted::writing_back;
  }
  engine_.counters_.compactions.fetch_add(1, std::memory_order_relaxed);
  if (waiting) {
    return error(EnqueueError::Code::device_busy,
                 host_.location_name(at_) + ": its free space is cut into holes too small for the command's " +
                     "buffers; they are moved once their bytes are written back");
  }
  s_.to_place.clear();
  for (std::size_t i = 0; i < s_.groups.size(); ++i) s_.to_place.push_back(i);
  return place_largest_first();
}

// A command whose own buffers cannot fit its location together fails at
// once: evicting others would move bytes for nothing, and waiting for room
// (device_busy) would never end well.
std::optional<EnqueueError> Transaction::exceeds_location() const {
  if (at_ == kHost) return std::nullopt;
  const std::uint64_t capacity = host_.capacity(at_);
  std::uint64_t need = 0;
  for (const EnqueueScratch::Group& g : s_.groups) need += std::min(g.buffer->size(), UINT64_MAX - need);
  if (need <= capacity) return std::nullopt;
  constexpr std::size_t kNamed = 8;
  std::string sizes;
  for (std::size_t i = 0; i < s_.groups.size() && i < kNamed; ++i)
    sizes += (i == 0 ? "" : ", ") + std::to_string(s_.groups[i].buffer->size()) + "-byte";
  if (s_.groups.size() > kNamed) sizes += ", ...";
  const std::string n = std::to_string(s_.groups.size());
  return error(EnqueueError::Code::device_full,
               host_.location_name(at_) + ": the command's " + (s_.groups.size() == 1 ? "buffer needs " : n + " buffers need ") +
                   std::to_string(need) + " bytes (" + sizes + "), more than the " + std::to_string(capacity) +
                   " it can hold");
}

std::optional<EnqueueError> Transaction::place(Buffer& b, Location loc, bool for_eviction) {
  Storage& st = b.storage(loc);
  if (st.allocated) return std::nullopt;
  bool wrote_back = false;  // then only buffers with nothing to write back are evicted
  // The host is asked for the cheapest hole once (evict_for_hole()); when
  // its victims are being written back, the enqueue waits for that rather
  // than evict others by rank, which would not make that hole.
  bool hole_asked = false, hole_writing_back = false;
  if (!for_eviction) migration::detail::reserve_more(s_.placed, 1);  // before there is storage to lose
  for (;;) {
    Allocation a = host_.allocate(loc, b.cookie(), b.size());
    if (a.outcome == Allocation::Outcome::ok) {
      release_all(a.room_after);  // none: they come with `full`
      if (!adopt_fences(b, loc, a)) {
        return error(EnqueueError::Code::host_out_of_memory,
                     host_.location_name(loc) + ": no host memory to record what a new storage waits for");
      }
      st.allocated = true;
      st.handle = a.handle;
      b.storage_changed(loc);
      if (!for_eviction) s_.placed.push_back({&b, loc});
      return std::nullopt;
    }
    const bool full = a.outcome == Allocation::Outcome::full && loc != kHost;
    if (full && !for_eviction && !hole_writing_back) {
      Evicted e = Evicted::nothing;
      if (!hole_asked) {
        hole_asked = true;
        e = evict_for_hole(loc, b.size());
        hole_writing_back = e == Evicted::writing_back;
      }
      if (e == Evicted::nothing) e = evict_one(loc, wrote_back);
      if (e != Evicted::nothing) {
        release_all(a.room_after);
        wrote_back = wrote_back || e == Evicted::writing_back;
        continue;
      }
    }
    if (full && (!a.room_after.empty() || !s_.room_after.empty())) {
      s_.room_after.insert(s_.room_after.end(), a.room_after.begin(), a.room_after.end());  // for fail()
      return error(EnqueueError::Code::device_busy,
                   host_.location_name(loc) + ": no room for a " + std::to_string(b.size()) +
                       "-byte buffer until queued commands finish with the storage evicted for it, or its bytes "
                       "are written back");
    }
    if (full && transient_) {
      // Room may be there at the next try (transient_): nothing to wait
      // for (waits() empty), try again at once.
      return error(EnqueueError::Code::device_busy,
                   host_.location_name(loc) + ": no room for a " + std::to_string(b.size()) +
                       "-byte buffer while other threads hold the buffers it could evict");
    }
    release_all(a.room_after);
    if (a.outcome == Allocation::Outcome::full) {
      return error(loc == kHost ? EnqueueError::Code::host_out_of_memory : EnqueueError::Code::device_full,
                   host_.location_name(loc) + ": cannot place a " + std::to_string(b.size()) +
                       "-byte buffer and nothing more can be evicted" + (a.message.empty() ? "" : " (" + a.message + ")"));
    }
    return error(EnqueueError::Code::host_failed, host_.location_name(loc) + ": " + a.message);
  }
}

// The fences of new storage at `loc` for `b` (Allocation::fences, whose
// references the host handed over) become the storage's, as names. False,
// the storage given back and nothing held, when they cannot be recorded.
bool Transaction::adopt_fences(Buffer& b, Location loc, Allocation& a) {
  Storage& st = b.storage(loc);
  std::size_t made = 0;
  try {
    st.fences.reserve(a.fences.size());
    for (; made < a.fences.size(); ++made) {
      const Event name = table_.make(a.fences[made], CommandTable::Ref::adopt);
      if (name == nullptr) break;
      st.fences.push_back(name);
    }
  } catch (const std::bad_alloc&) {
  }
  if (made == a.fences.size()) return true;
  host_.free(loc, b.cookie(), a.handle, b.size(), a.fences);
  for (Event name : st.fences) table_.discard(name);  // the references adopted so far
  for (std::size_t i = made; i < a.fences.size(); ++i) host_.release(a.fences[i], 1);
  st.fences.clear();
  return false;
}

// Adds the host events of `names` to what a device_busy failure waits for,
// each once, retained (names that completed: nothing to wait for).
void Transaction::wait_for_room(std::span<const Event> names) {
  for (Event n : names) {
    migration::detail::reserve_more(s_.room_after, 1);  // first: out of memory, nothing is held
    const Event e = table_.retain_host(n);
    if (e == nullptr) continue;
    if (std::find(s_.room_after.begin(), s_.room_after.end(), e) != s_.room_after.end()) drop(e);
    else s_.room_after.push_back(e);
  }
}

// Whether `st`'s write-backs are still running; forgets those that ended.
bool Transaction::writing_back(Storage& st) {
  std::erase_if(st.write_backs, [&](Event e) { return table_.finished(e); });
  return !st.write_backs.empty();
}

// The buffer to evict from `loc`, among those with storage there that this
// command does not use, no other thread holds and no write-back is saving:
// one whose storage holds no content only an unfinished writer's undo
// record names (evicting it would lose what that writer's failure goes
// back to) first; within those, one with nothing to write back (its
// storage can go now), then one whose bytes can be written back at once
// (its storage goes once they are: a write-back that fails loses nothing),
// then one whose bytes are still being made there (written back after
// them, its storage going at once: that write-back failing loses them);
// within each, one nothing still uses (its storage is reusable at once),
// then the least recently used. `clean_only`: only those with nothing to
// write back and no undo content to lose (the enqueue waits for the
// write-backs made so far instead). Returned locked. Never waits for a
// lock; an exception (out of memory recording what to wait for) leaves
// none locked.
Buffer* Transaction::pick_victim(Location loc, bool clean_only) {
  using Lock = std::unique_lock<detail::BufferLock>;
  Buffer* victim = nullptr;
  Lock victim_lock;
  VictimRank best{};
  std::lock_guard registry(engine_.registry_mutex_);
  for (Buffer* b : engine_.registry_) {
    if (uses_buffer(b)) continue;
    Lock lock(b->mutex_, std::try_to_lock);
    if (!lock) {
      transient_ = true;
      continue;
    }
    const std::optional<VictimRank> r = rank_victim(*b, loc);
    if (!r || (clean_only && (r->write_back != migration::RangeVersions::WriteBack::none || r->loses_undo))) continue;
    if (victim != nullptr && !r->better_than(best)) continue;
    victim = b;
    victim_lock = std::move(lock);  // the one before is unlocked
    best = *r;
  }
  victim_lock.release();  // evict_one() adopts it
  return victim;
}

// How `b` (locked) ranks as a victim at `loc`; nullopt when it is none: no
// storage there, or the host must keep it (can_evict), or a write-back
// (this enqueue's or another's) is saving it: room once that ends, so a
// failure waits for it (device_busy). Those are retained at once, not
// batched: b's lock goes before this enqueue's batch is applied, and
// another thread may then drop b's references to them.
std::optional<Transaction::VictimRank> Transaction::rank_victim(Buffer& b, Location loc) {
  if (b.storage_.size() <= loc || !b.storage_[loc].allocated || !host_.can_evict(b.cookie(), loc)) return std::nullopt;
  Storage& st = b.storage_[loc];
  if (writing_back(st)) {
    wait_for_room(st.write_backs);
    return std::nullopt;
  }
  s_.users.clear();
  b.users_at(loc, s_.users);
  const bool idle = std::all_of(s_.users.begin(), s_.users.end(), [&](Event e) { return table_.finished(e); });
  return VictimRank{b.versions_.undo_only_at(loc), b.versions_.write_back_needed(loc), idle, st.last_use};
}

// Evicts one buffer from `loc`: its storage goes back to the host, reusable
// once its users have finished. Bytes valid nowhere else are written back
// to the host copy first: when they are complete, by write_back(), the
// buffer then evicted by a later pass; when still being made, by copies
// that wait for them while the storage goes now (pick_victim() takes such
// a buffer last).
Transaction::Evicted Transaction::evict_one(Location loc, bool clean_only) {
  Buffer* victim = pick_victim(loc, clean_only);
  if (victim == nullptr) return Evicted::nothing;
  const Evicted e = evict_adopted(*victim, loc);
  if (e == Evicted::nothing) transient_ = true;  // its write-back was refused
  return e;
}

// Evicts the buffers whose storage, with the free space around it, makes
// the cheapest hole for a `size`-byte buffer at `loc`, as the host names
// them (Host::hole_victims): evicting by rank alone may take buffers all
// over the location whose ranges never join into a hole that big. The
// engine's order still holds between kinds of victim: the host is asked
// first about the buffers with nothing to write back, then also about
// those whose bytes can be written back at once (their storage then goes
// once that is done: the enqueue waits for it, device_busy); one whose
// eviction would lose undo content, or whose bytes are still being made,
// is never a candidate (pick_victim() takes those last). Nothing when the
// host has no answer: the caller evicts by rank.
Transaction::Evicted Transaction::evict_for_hole(Location loc, std::uint64_t size) {
  // Every candidate lock still held is let go however this ends.
  struct Unlock {
    EnqueueScratch& s;
    ~Unlock() { s.candidate_locks.clear(); }
  } unlock{s_};
  if (!collect_candidates(loc)) return Evicted::nothing;
  if (!ask_for_hole(loc, size, true) && !ask_for_hole(loc, size, false)) return Evicted::nothing;
  if (s_.victims.empty()) return Evicted::freed;  // it fits already: allocate again
  // A victim whose write-back would have to wait would free its storage
  // with that write-back behind it, which the rank order leaves for last:
  // then no hole is made this way, and nothing is evicted for it.
  for (std::size_t i : s_.victims)
    if (!plan_evict_now(*s_.candidates[i], loc)) return Evicted::nothing;
  // The others go now; the victims' locks stay held until each is evicted.
  for (std::size_t i = 0; i < s_.candidates.size(); ++i)
    if (!std::binary_search(s_.victims.begin(), s_.victims.end(), i)) s_.candidate_locks[i].unlock();
  Evicted result = Evicted::nothing;
  for (std::size_t i : s_.victims) {
    s_.candidate_locks[i].release();  // evict_adopted() adopts it
    const Evicted e = evict_adopted(*s_.candidates[i], loc);
    if (e == Evicted::nothing) {  // its write-back was refused: no hole after all (`unlock` lets the rest go)
      transient_ = true;
      break;
    }
    if (result != Evicted::writing_back) result = e;
  }
  return result;
}

// The buffers evict_for_hole() may offer the host, each locked (try-locked:
// eviction never waits) and held in s_.candidate_locks while it asks, and
// whether each has nothing to write back. False when there is none.
bool Transaction::collect_candidates(Location loc) {
  using WriteBack = migration::RangeVersions::WriteBack;
  s_.candidates.clear();
  s_.candidate_locks.clear();
  s_.clean.clear();
  std::lock_guard registry(engine_.registry_mutex_);
  for (Buffer* b : engine_.registry_) {
    if (uses_buffer(b)) continue;
    std::unique_lock lock(b->mutex_, std::try_to_lock);
    if (!lock) {
      transient_ = true;
      continue;
    }
    const std::optional<VictimRank> r = rank_victim(*b, loc);
    if (!r || r->loses_undo || r->write_back == WriteBack::waiting) continue;
    s_.candidates.push_back(b);
    s_.clean.push_back(r->write_back == WriteBack::none);
    s_.candidate_locks.push_back(std::move(lock));  // last: out of memory before it, the lock goes with `lock`
  }
  return !s_.candidates.empty();
}

// Asks the host which candidates (only the clean ones, with `clean_only`)
// border the cheapest hole for `size` bytes; their indices into
// s_.candidates in s_.victims, each once. False: no answer.
bool Transaction::ask_for_hole(Location loc, std::uint64_t size, bool clean_only) {
  s_.told.clear();
  s_.asked.clear();
  s_.victims.clear();
  for (std::size_t i = 0; i < s_.candidates.size(); ++i) {
    if (clean_only && !s_.clean[i]) continue;
    const Buffer& b = *s_.candidates[i];
    const Storage& st = b.storage_[loc];
    s_.told.push_back({b.cookie(), st.handle, b.size(), st.last_use});
    s_.asked.push_back(i);
  }
  const bool asked_before = !clean_only && std::all_of(s_.clean.begin(), s_.clean.end(), [](bool c) { return c; });
  if (s_.told.empty() || asked_before) return false;
  if (!host_.hole_victims(loc, size, s_.told, s_.victims)) {
    s_.victims.clear();
    return false;
  }
  // Each candidate once, and only those the host was told of; in
  // s_.candidates order (evict_for_hole() searches it).
  std::sort(s_.victims.begin(), s_.victims.end());
  s_.victims.erase(std::unique(s_.victims.begin(), s_.victims.end()), s_.victims.end());
  if (!s_.victims.empty() && s_.victims.back() >= s_.told.size()) {
    s_.victims.clear();
    return false;
  }
  for (std::size_t& v : s_.victims) v = s_.asked[v];
  return true;
}

// Evicts `victim`, whose lock this thread holds, from `loc`, and unlocks it.
Transaction::Evicted Transaction::evict_adopted(Buffer& victim, Location loc) {
  std::unique_lock lock(victim.mutex_, std::adopt_lock);
  // The references taken from the victim's records are applied before its
  // lock goes (destroyed first): another thread may then drop those records.
  victim.ops_.batch = &s_.refs;
  struct Rebatch {
    Buffer& victim;
    RefBatch& refs;
    Host& host;
    ~Rebatch() {
      victim.ops_.batch = nullptr;
      refs.flush();
      refs.begin(host);
    }
  } rebatch{victim, s_.refs, host_};
  return evict(victim, loc);
}

// Plans evicting `victim` (locked) from `loc` into s_.evict_plan, and
// says whether its write-backs, if any, can start at once (else they wait
// for bytes still being made there).
bool Transaction::plan_evict_now(Buffer& victim, Location loc) {
  const migration::Plan& plan = s_.evict_plan;
  const std::uint64_t lost = victim.versions_.bytes_lost();
  plan_eviction(victim, loc, s_.evict_plan);  // settles first: judge the bytes after it
  count_lost(victim.versions_.bytes_lost() - lost);
  return std::all_of(plan.copies.begin(), plan.copies.end(), [&](const migration::Copy& c) {
    return std::all_of(c.wait.begin(), c.wait.end(), [&](Event e) { return table_.finished(e); });
  });
}

// Evicts `victim` (locked, its references batched) from `loc`.
Transaction::Evicted Transaction::evict(Buffer& buffer, Location loc) {
  Buffer* victim = &buffer;
  migration::Plan& plan = s_.evict_plan;
  const bool complete = plan_evict_now(*victim, loc);
  if (!plan.copies.empty() && complete) {
    return write_back(*victim, loc, plan) ? Evicted::writing_back : Evicted::nothing;
  }
  std::size_t first_event = s_.copy_events.size();
  const std::size_t first_pending = s_.pending.size();
  if (!plan.copies.empty()) {
    const auto made = make_write_backs(*victim, plan, CopyKind::last_copy);
    if (!made) return Evicted::nothing;
    first_event = *made;
  }
  Storage& st = victim->storage(loc);
  s_.after.clear();
  victim->users_at(loc, s_.after);
  s_.after.insert(s_.after.end(), st.fences.begin(), st.fences.end());
  s_.after.insert(s_.after.end(), plan.wait.begin(), plan.wait.end());
  s_.after.insert(s_.after.end(), s_.copy_events.begin() + static_cast<std::ptrdiff_t>(first_event),
                  s_.copy_events.end());
  migration::detail::reserve_more(victim->storage(kHost).users, s_.copy_events.size() - first_event);
  // Recorded before the storage goes: commit_evict() throws having changed
  // nothing (then the write-backs made above are dropped, not started), and
  // the references it drops are batched until `rebatch` ends, so the events
  // free() is given stay alive.
  try {
    victim->versions_.commit_evict(plan, std::span(s_.copy_events).subspan(first_event), loc);
  } catch (...) {
    for (std::size_t i = first_pending; i < s_.pending.size(); ++i) s_.pending[i].start = false;
    s_.copy_events.resize(first_event);
    throw;
  }
  free_storage(*victim, loc, st, s_.after);
  for (std::size_t i = first_event; i < s_.copy_events.size(); ++i)
    victim->add_user(victim->storage(kHost), s_.copy_events[i]);
  s_.copy_events.resize(first_event);
  engine_.counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  return Evicted::freed;
}

// What evicting `victim` from `loc` must write back: the bytes valid nowhere
// else, and what a queued writer's failure would go back to, held only
// there (its undo record's content).
void Transaction::plan_eviction(Buffer& victim, Location loc, migration::Plan& plan) {
  victim.versions_.plan_evict(loc, host_.cost_model(), plan);
  victim.versions_.plan_undo_write_backs(loc, plan);
}

// Makes the write-backs of `plan` (plan_eviction's copies of the bytes of
// `victim` valid nowhere else, to its host copy, placed here if need be).
// They start with this enqueue's copies, whatever becomes of it: the caller
// commits them at once. Returns the index of their first event in
// s_.copy_events; nullopt when one could not be made (none starts then).
std::optional<std::size_t> Transaction::make_write_backs(Buffer& victim, const migration::Plan& plan, CopyKind kind) {
  if (place(victim, kHost, true)) return std::nullopt;
  const auto undo = std::count_if(plan.copies.begin(), plan.copies.end(), [](const migration::Copy& c) { return c.undo; });
  migration::detail::reserve_more(victim.storage(kHost).fences, static_cast<std::size_t>(undo));  // fence_host()'s
  const std::size_t first = s_.pending.size(), first_event = s_.copy_events.size();
  for (const migration::Copy& c : plan.copies) {
    if (!create_copy(victim, c, first_event, kind)) {
      s_.copy_events.resize(first_event);  // its copies stay pending, unstarted: dropped after the unlock
      return std::nullopt;
    }
  }
  for (std::size_t i = first; i < s_.pending.size(); ++i) s_.pending[i].start = true;
  fence_host(victim, plan, first_event);
  count_write_back(plan);
  return first_event;
}

// A write-back of undo content writes host bytes that no version holds
// (migration::RangeVersions::plan_undo_write_backs()): whatever writes the
// host copy later (a copy into it, a command there) waits for it, as for
// a fence of storage placed over evicted storage. Fences that ended go
// first, so the list holds only unfinished ones.
void Transaction::fence_host(Buffer& victim, const migration::Plan& plan, std::size_t first_event) {
  Storage& host = victim.storage(kHost);
  std::erase_if(host.fences, [&](Event f) { return table_.finished(f); });
  for (std::size_t i = 0; i < plan.copies.size(); ++i) {
    const Event e = s_.copy_events[first_event + i];
    if (!plan.copies[i].undo || e == nullptr) continue;
    host.fences.push_back(e);  // room made in make_write_backs()
  }
  victim.storage_changed(kHost);
}

// Writes back the bytes of `victim` at `loc` valid nowhere else, keeping the
// storage: the buffer is evicted once they have completed, and a
// write-back that fails leaves the bytes where they are (the next eviction
// writes them back again). The write-backs are what a device_busy failure
// waits for. False when a copy could not be made (nothing recorded then).
bool Transaction::write_back(Buffer& victim, Location loc, const migration::Plan& plan) {
  // Room first for what records them below (they are committed at once).
  const std::size_t n = plan.copies.size();
  migration::detail::reserve_more(victim.storage(loc).users, n);
  migration::detail::reserve_more(victim.storage(kHost).users, n);
  migration::detail::reserve_more(victim.storage(loc).write_backs, n);
  migration::detail::reserve_more(s_.room_after, n);
  const auto first_event = make_write_backs(victim, plan, CopyKind::write_back);
  if (!first_event) return false;
  const auto events = std::span(s_.copy_events).subspan(*first_event);
  victim.versions_.commit_write_back(plan, events);
  Storage& st = victim.storage(loc);
  for (Event e : events) {
    victim.add_user(st, e);
    victim.add_user(victim.storage(kHost), e);
    st.write_backs.push_back(e);
    wait_for_room(std::span(&e, 1));
  }
  s_.copy_events.resize(*first_event);
  return true;
}

void Transaction::count_write_back(const migration::Plan& plan) {
  if (plan.copies.empty()) return;
  for (const migration::Copy& c : plan.copies) {
    count_copy(c);
    engine_.counters_.bytes_written_back.fetch_add(c.size, std::memory_order_relaxed);
  }
  engine_.counters_.write_backs.fetch_add(1, std::memory_order_relaxed);
}

// ---- planning and copies --------------------------------------------------

// Each buffer is planned in one scratch plan, which stays in cache; its
// waits become the command's at once (they are released if the enqueue
// fails), and only a plan with copies is kept for the later steps. The
// storages get room for the users commit_all() records (it must not fail
// half-way).
std::optional<EnqueueError> Transaction::plan_all() {
  const migration::CostModel& cost = host_.cost_model();
  std::size_t kept = 0;
  for (EnqueueScratch::Group& g : s_.groups) {
    g.plan = EnqueueScratch::Group::kNoCopies;  // unless it copies (below)
    const std::uint64_t lost = g.buffer->versions_.bytes_lost();
    g.buffer->versions_.plan(std::span(s_.uses).subspan(g.first, g.count), at_, cost, s_.planning);
    count_lost(g.buffer->versions_.bytes_lost() - lost);
    waits_.reserve(s_.planning.wait.size());
    for (Event e : s_.planning.wait) add_wait(e);  // before a commit may drop them
    keep_forgotten_users(*g.buffer);
    // commit_all()'s room in the storages: a user per copy and the command.
    const std::size_t users = s_.planning.copies.size() + 1;
    Storage& st = g.buffer->storage(at_);
    migration::detail::reserve_more(st.users, users);
    fence_waits_ += st.fences.size();
    if (s_.planning.copies.empty()) continue;
    if (kept == s_.with_copies.size()) s_.with_copies.emplace_back();
    std::swap(s_.with_copies[kept], s_.planning);  // the swapped-out plan's capacity is reused
    g.plan = kept++;
    for (const migration::Copy& c : s_.with_copies[g.plan].copies) {
      for (Location end : {c.src, c.dst}) {
        if (end == kHost) {
          if (auto failed = place(*g.buffer, kHost, false)) return failed;
        } else if (!g.buffer->storage(end).allocated) {
          return error(EnqueueError::Code::host_failed,
                       "the planner chose " + host_.location_name(end) + ", where the buffer has no storage");
        }
        migration::detail::reserve_more(g.buffer->storage(end).users, users);
      }
      c.also.for_each([&](Location l) {
        if (Storage& other = g.buffer->storage(l); other.allocated) migration::detail::reserve_more(other.users, users);
      });
    }
  }
  return std::nullopt;
}

// The writers whose undo records the commit may forget (the planner keeps
// 1,024), and the readers those records name, become users of the storage
// where they run: once forgotten, no record says they still use it
// (Buffer::users_at()). Before the commit, which must not allocate; if the
// enqueue fails, they are users all the same. A copy among the readers
// runs nowhere in the table's sense: it is a user of its storages already.
void Transaction::keep_forgotten_users(Buffer& b) {
  s_.forgettable.clear();
  b.versions_.events_a_commit_may_forget(s_.forgettable);
  for (const Event e : s_.forgettable) {
    const Location loc = table_.where(e);
    if (b.storage_.size() <= loc || !b.storage_[loc].allocated) continue;  // kNowhere is past any
    Storage& st = b.storage_[loc];
    migration::detail::reserve_more(st.users, 1);
    b.add_user(st, e);
  }
}

std::optional<EnqueueError> Transaction::create_copies() {
  command_copies_ = s_.pending.size();  // those before are evictions' write-backs
  for (EnqueueScratch::Group& g : s_.groups) {
    g.first_copy = s_.copy_events.size();
    for (const migration::Copy& c : plan_of(g).copies) {
      if (!create_copy(*g.buffer, c, g.first_copy, CopyKind::for_command)) {
        return error(EnqueueError::Code::host_out_of_memory,
                     "could not create a copy of " + std::to_string(c.size) + " bytes from " + host_.location_name(c.src) +
                         " to " + host_.location_name(c.dst));
      }
    }
  }
  return std::nullopt;
}

// Makes one copy of `c` and records what it waits for: what made its source
// valid, the earlier leg of a staged copy (events from `first_copy` on are
// this buffer's copies), and the fences of its destination storage.
bool Transaction::create_copy(Buffer& b, const migration::Copy& c, std::size_t first_copy, CopyKind kind) {
  const std::size_t first_dep = s_.deps.size();
  // Room first for every record of the copy: a dependency held, or a copy
  // the host made, is let go of only through a Pending.
  migration::detail::reserve_more(s_.deps, c.wait.size() + 1 + b.storage(c.dst).fences.size());
  migration::detail::reserve_more(s_.pending, 1);
  migration::detail::reserve_more(s_.copy_events, 1);
  for (Event e : c.wait) add_dep(e, first_dep);
  if (c.after >= 0) add_dep(s_.copy_events[first_copy + static_cast<std::size_t>(c.after)], first_dep);
  // Fences only order: one that ended (a failed undo write-back too,
  // fence_host()) is nothing to wait for.
  for (Event f : b.storage(c.dst).fences)
    if (!table_.finished(f)) add_dep(f, first_dep);
  const std::size_t dep_count = s_.deps.size() - first_dep;
  s_.also.clear();
  c.also.for_each([&](Location l) {
    if (const Storage& st = b.storage(l); st.allocated) s_.also.push_back(CopySource{l, st.handle});
  });
  CopyRequest req{b.cookie(),
                  kind != CopyKind::for_command,
                  kind == CopyKind::last_copy,
                  c.src,
                  c.dst,
                  b.storage(c.src).handle,
                  b.storage(c.dst).handle,
                  c.offset,
                  c.size,
                  std::span(s_.deps).subspan(first_dep, dep_count),
                  s_.also};
  auto drop_deps = [&] {
    for (std::size_t i = first_dep; i < s_.deps.size(); ++i) drop(s_.deps[i]);
    s_.deps.resize(first_dep);
  };
  CopyHandle h;
  try {
    h = host_.create_copy(req);
  } catch (...) {
    drop_deps();  // held for a copy that does not exist
    throw;        // the enqueue fails with it (error_of_exception)
  }
  const Event name = h.event == nullptr ? nullptr : table_.make(h.event, CommandTable::Ref::retain);
  if (name == nullptr) {
    if (h.event != nullptr) host_.discard_copy(std::move(h));
    drop_deps();
    return false;
  }
  s_.copy_events.push_back(name);
  s_.pending.push_back({std::move(h), name, first_dep, dep_count, false});
  return true;
}

const migration::Plan& Transaction::plan_of(const EnqueueScratch::Group& g) const {
  return g.plan == EnqueueScratch::Group::kNoCopies ? s_.no_copies : s_.with_copies[g.plan];
}

void Transaction::commit_all() {
  for (const EnqueueScratch::Group& g : s_.groups) {
    Buffer& b = *g.buffer;
    const migration::Plan& plan = plan_of(g);
    const auto events = std::span(s_.copy_events).subspan(g.first_copy, plan.copies.size());
    b.versions_.commit(plan, events, std::span(s_.uses).subspan(g.first, g.count), at_, command_);
    for (std::size_t c = 0; c < plan.copies.size(); ++c) {
      count_copy(plan.copies[c]);
      add_wait(events[c]);
      b.add_user(b.storage(plan.copies[c].src), events[c]);
      b.add_user(b.storage(plan.copies[c].dst), events[c]);
      plan.copies[c].also.for_each([&](Location l) {  // it may read there instead
        if (Storage& st = b.storage(l); st.allocated) b.add_user(st, events[c]);
      });
    }
    Storage& st = b.storage(at_);
    std::erase_if(st.fences, [&](Event f) { return table_.finished(f); });
    b.storage_changed(at_);
    for (Event f : st.fences) add_wait(f);
    b.add_user(st, command_);
    st.last_use = stamp_;
    for (std::size_t u = g.first; u < g.first + g.count; ++u) out_.storage_[s_.order[u].second] = st.handle;
  }
  for (std::size_t i = command_copies_; i < s_.pending.size(); ++i) s_.pending[i].start = true;
}

// Gives back the storage this enqueue placed. The plans were never
// committed, so no version changed.
void Transaction::rollback() {
  for (const EnqueueScratch::Placed& p : s_.placed) {
    Storage& st = p.buffer->storage(p.at);
    free_storage(*p.buffer, p.at, st, st.fences);  // st.fences: translated, then reset with st
  }
  s_.placed.clear();
}

// Gives `b`'s storage at `loc` back to the host, to be reused once what
// `names` name has finished, and forgets the storage. The names become
// their host events in place (those that completed are left out), so that
// a rollback allocates nothing.
void Transaction::free_storage(Buffer& b, Location loc, Storage& st, std::vector<Event>& names) {
  std::size_t n = 0;
  for (Event name : names)
    if (const Event e = table_.retain_host(name)) names[n++] = e;
  names.resize(n);
  host_.free(loc, b.cookie(), st.handle, b.size(), names);
  for (Event e : names) drop(e);
  names.clear();
  st = Storage{};
  b.storage_changed(loc);
}

// Starts the copies whose effects were committed and drops the others, then
// the references their dependency lists held. No engine lock is held: a
// dropped copy may hold the last reference to a buffer.
void Transaction::start_copies() noexcept {
  for (EnqueueScratch::Pending& p : s_.pending) {
    const auto deps = std::span(s_.deps).subspan(p.first_dep, p.dep_count);
    if (p.start) {
      host_.submit_copy(std::move(p.copy), deps);
    } else {
      host_.discard_copy(std::move(p.copy));
      table_.discard(p.name);  // nothing records it
    }
    for (Event e : deps) drop(e);
  }
  s_.pending.clear();
  s_.deps.clear();
}

// ---- event lists ----------------------------------------------------------

// Finished events stay in: one that failed must fail what depends on it.
// The caller made room in s_.deps.
void Transaction::add_dep(Event name, std::size_t from) {
  const Event e = table_.retain_host(name);
  if (e == nullptr) return;  // completed: nothing to wait for
  if (std::find(s_.deps.begin() + static_cast<std::ptrdiff_t>(from), s_.deps.end(), e) != s_.deps.end()) {
    drop(e);
    return;
  }
  s_.deps.push_back(e);
}

void Transaction::count_lost(std::uint64_t bytes) {
  if (bytes != 0) [[unlikely]]
    engine_.counters_.bytes_lost.fetch_add(bytes, std::memory_order_relaxed);
}

void Transaction::count_copy(const migration::Copy& c) {
  Engine::Counters& n = engine_.counters_;
  n.bytes_migrated.fetch_add(c.size, std::memory_order_relaxed);
  if (c.src != kHost && c.dst != kHost) n.copies_direct.fetch_add(1, std::memory_order_relaxed);
  else if (c.dst == kHost) n.copies_to_host.fetch_add(1, std::memory_order_relaxed);
  else n.copies_from_host.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace memlayer::engine

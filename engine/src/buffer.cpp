#include <algorithm>
#include <stdexcept>

#include "memlayer/engine/engine.hpp"
#include "command_table.hpp"

namespace memlayer::engine {

namespace {
migration::LocationSet initial_holders(bool host_content) {
  return host_content ? migration::LocationSet::of(migration::kHost) : migration::LocationSet::all();
}
}  // namespace

// The planner's view of events: the engine's names (command_table.hpp),
// which need no counting (no retain/release), their statuses from the
// table. While an enqueue holds the buffer, ops_.batch remembers the
// statuses it looked up. Completions the planner derives go to the table,
// unless the host tells the engine of every one (Host::tells_ends).
migration::EventOps Buffer::ops_of(CommandTable& table, bool host_tells) {
  migration::EventOps ops;
  ops.context = &table;
  ops.status = [](void* t, Event e) -> int { return static_cast<int>(static_cast<CommandTable*>(t)->status(e)); };
  if (!host_tells) ops.completed = [](void* t, Event e) { static_cast<CommandTable*>(t)->learned(e, EventStatus::completed); };
  return ops;
}

Buffer::Buffer(Engine& engine, void* cookie, std::uint64_t size, bool host_content)
    : ops_(ops_of(*engine.table_, engine.host_tells_ends_)),
      versions_(size, initial_holders(host_content), ops_),
      engine_(engine),
      cookie_(cookie),
      size_(size) {
  std::lock_guard lock(engine_.registry_mutex_);
  engine_.registry_.push_front(this);
  registered_ = engine_.registry_.begin();
}

Buffer::~Buffer() {
  // An eviction picks its victim under the registry lock and holds the
  // victim's lock past it: wait for it to finish with this buffer. The
  // storage goes back first, the buffer leaves the registry after, both
  // under its lock: an eviction never finds the storage held by no buffer
  // it can see (it would take the location for full, nothing to evict,
  // and fail a command that fits), only a buffer it cannot lock (busy:
  // Transaction::place). Holding it while taking the registry lock keeps
  // the lock order: whoever holds the registry only try-locks buffers.
  std::lock_guard lock(mutex_);
  std::vector<Event> after;
  for (std::size_t loc = 0; loc < storage_.size(); ++loc) {
    Storage& s = storage_[loc];
    if (!s.allocated) continue;
    std::vector<Event> names;
    users_at(static_cast<Location>(loc), names);
    names.insert(names.end(), s.fences.begin(), s.fences.end());
    for (Event n : names)
      if (Event e = engine_.table_->retain_host(n)) after.push_back(e);
    engine_.host().free(static_cast<Location>(loc), cookie_, s.handle, size_, after);
    for (Event e : after) engine_.host().release(e, 1);
    after.clear();
    s = Storage{};
  }
  std::lock_guard registry(engine_.registry_mutex_);
  engine_.registry_.erase(registered_);
}

void Buffer::grow_storage(Location at) { storage_.resize(at + 1); }

// Statuses through ops_: during an enqueue its batch remembers them, and a
// batch of commands' buffers all ask about the same commands.
void Buffer::users_at(Location at, std::vector<Event>& out) const {
  const Storage& s = storage_[at];
  out.insert(out.end(), s.users.begin(), s.users.end());
  versions_.writers_at(at, out);
  // The readers the planner names, of every location: those the command
  // table places at `at`. A name whose command completed may be kept or
  // not (where() of a recycled slot): it has nothing left to wait for.
  const std::size_t first = out.size();
  versions_.readers(out);
  const CommandTable& table = *engine_.table_;
  out.erase(std::remove_if(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                           [&](Event r) { return table.where(r) != at; }),
            out.end());
}

void Buffer::prune_users(Storage& s) {
  for (int looks = 0; looks < 2 && !s.users.empty(); ++looks) {
    if (s.prune_next >= s.users.size()) s.prune_next = 0;
    Event& u = s.users[s.prune_next];
    if (ops_.done(u)) {
      u = s.users.back();  // the order of the users means nothing
      s.users.pop_back();
    } else {
      ++s.prune_next;
    }
  }
}

bool Buffer::has_storage(Location at) const {
  std::lock_guard lock(mutex_);
  return at < storage_.size() && storage_[at].allocated;
}

bool Buffer::valid_at(Location at, std::uint64_t offset, std::uint64_t size) const {
  std::lock_guard lock(mutex_);
  return versions_.valid_at(at, offset, size);
}

std::uint64_t Buffer::bytes_only_at(Location at) const {
  std::lock_guard lock(mutex_);
  return versions_.bytes_only_at(at);
}

std::uint64_t Buffer::bytes_lost() const {
  std::lock_guard lock(mutex_);
  return versions_.bytes_lost();
}

void Buffer::walk(const std::function<void(const migration::SpanInfo&)>& visit) const {
  std::lock_guard lock(mutex_);
  versions_.walk(visit);
}

}  // namespace memlayer::engine

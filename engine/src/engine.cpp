#include "memlayer/engine/engine.hpp"

#include "command_table.hpp"
#include "fast_path.hpp"
#include "transaction.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace memlayer::engine {

namespace {

// MEMLAYER_FAST_PATH=0 starts engines with the fast path off, so that a
// benchmark or a driver (PoCL's) compares both without a rebuild.
bool fast_path_by_default() {
  const char* v = std::getenv("MEMLAYER_FAST_PATH");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

Engine::Engine(Host& host)
    : host_(host), host_tells_ends_(host.tells_ends()), table_(std::make_unique<CommandTable>(host)) {
  fast_path_on_.store(fast_path_by_default(), std::memory_order_relaxed);
}

Engine::~Engine() = default;

std::optional<EnqueueError> Engine::pipeline(std::span<const BufferUse> uses, Location at, Event command,
                                             Submission& out) {
  return Transaction(*this, uses, at, command, out).run();
}

void Engine::ended(CommandName name, EventStatus status) noexcept {
  table_->learned(reinterpret_cast<Event>(static_cast<std::uintptr_t>(name)), status);
}

std::optional<EnqueueError> Engine::place(Buffer& buffer, Location at, Submission& out) {
  out.clear();
  out.host_ = &host_;
  out.table_ = table_.get();
  const BufferUse use{&buffer, {0, buffer.size(), migration::Access::read}};
  return Transaction(*this, std::span(&use, 1), at, nullptr, out).run_place();
}

void Engine::sweep_failed() {
  // Failed before the buffers are looked at: a name enters a record only
  // as a new command or copy, running, so one of these that no buffer
  // names now never will again (CommandTable::recycle_unnamed).
  std::vector<Event> candidates, named;
  try {
    table_->failed_names(candidates);
    std::lock_guard registry(registry_mutex_);
    for (Buffer* b : registry_) {
      std::unique_lock lock(b->mutex_, std::try_to_lock);
      if (!lock) {
        sweep_at_.store(table_->failed_kept() + 64, std::memory_order_relaxed);
        return;
      }
      b->versions_.events(named);
      for (const Buffer::Storage& st : b->storage_)
        for (const std::vector<Event>* list : {&st.users, &st.fences, &st.write_backs})
          named.insert(named.end(), list->begin(), list->end());
    }
  } catch (const std::bad_alloc&) {
    sweep_at_.store(table_->failed_kept() + 64, std::memory_order_relaxed);
    return;
  }
  std::sort(named.begin(), named.end());
  table_->recycle_unnamed(candidates, named);
  sweep_at_.store(std::max(kFirstSweep, 2 * table_->failed_kept()), std::memory_order_relaxed);
}

EngineStats Engine::stats() const noexcept {
  EngineStats s;
  s.bytes_migrated = counters_.bytes_migrated.load();
  s.copies_direct = counters_.copies_direct.load();
  s.copies_to_host = counters_.copies_to_host.load();
  s.copies_from_host = counters_.copies_from_host.load();
  s.evictions = counters_.evictions.load();
  s.write_backs = counters_.write_backs.load();
  s.bytes_written_back = counters_.bytes_written_back.load();
  s.bytes_lost = counters_.bytes_lost.load();
  s.compactions = counters_.compactions.load();
  // Each count first, its stamps after: every enqueue and place counted
  // is in the stamps read (each counts itself after taking its stamp). An
  // enqueue in flight may read as taken by the fast path until it counts.
  const std::uint64_t slow = slow_path_.load(std::memory_order_acquire);
  const std::uint64_t places = places_.load();
  s.enqueues = stamp_.load() - places;
  s.fast_path = s.enqueues - slow;
  return s;
}

Submission::Submission() : scratch_(std::make_unique<EnqueueScratch>()) {}
Submission::~Submission() { clear(); }

void Submission::let_go() noexcept {
  if (waits_counted_)
    for (Event e : waits_) host_->release(e, 1);
  for (Event name : leases_) table_->end_lease(name);
  leases_.clear();
  waits_counted_ = false;
}

}  // namespace memlayer::engine

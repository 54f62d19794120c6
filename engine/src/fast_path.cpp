#include "fast_path.hpp"

#include <functional>
#include <new>

#include "command_table.hpp"
#include "memlayer/migration/detail/reserve.hpp"
#include "transaction.hpp"
#include "wait_list.hpp"

namespace memlayer::engine {

// With every buffer locked, two passes: the first only checks and makes
// room (it changes no content, so a miss in a later buffer leaves the
// general pipeline to start from the same state), the second records and
// allocates nothing. The command's name is made between them, once the
// command is sure to be recorded: a miss makes and discards nothing.
std::optional<EnqueueError> FastPath::enqueue(Engine& engine, std::span<const BufferUse> uses, Location at,
                                              Event command, Submission& out) {
  // The statuses looked up are remembered for the command's other buffers,
  // which mostly share their last writer; a lone buffer has none to share
  // them with, and a look is a load of the command table's slot.
  RefBatch* const memo = uses.size() > 1 ? &out.scratch_->refs : nullptr;
  if (memo != nullptr) memo->begin(engine.host_);
  const std::size_t locked = lock(uses, memo);
  Event name = nullptr;
  std::optional<EnqueueError> failed;
  WaitList waits(*engine.table_, out);
  if (locked == uses.size()) {
    try {
      if (const auto n = check(uses, at)) {
        migration::detail::reserve_more(out.storage_, uses.size());
        waits.reserve(*n);
        name = engine.table_->make(command, CommandTable::Ref::retain_unshared, engine.host_tells_ends_);
        if (name == nullptr) throw std::bad_alloc();  // no slot: the enqueue fails, nothing done
      }
    } catch (...) {
      failed = Transaction::error_of_exception();
      out.clear();
    }
  }
  if (name != nullptr) {
    const std::uint64_t stamp = engine.stamp_.fetch_add(1, std::memory_order_relaxed) + 1;
    commit(uses, at, name, stamp, waits, out);
    waits.dedupe();
    out.command_ = static_cast<CommandName>(reinterpret_cast<std::uintptr_t>(name));
  }
  if (memo != nullptr) memo->flush();
  unlock(uses.first(locked));
  if (name == nullptr && !failed) return engine.pipeline(uses, at, command, out);  // a miss
  return failed;
}

// Every other locker takes buffers in address order (Transaction::lock_all;
// eviction only try-locks), so waiting is safe only for a buffer above
// every one held. Any other is only tried: held by another thread, or by
// this one (a buffer passed twice), it ends the fast path's try.
std::size_t FastPath::lock(std::span<const BufferUse> uses, RefBatch* memo) noexcept {
  const Buffer* highest = nullptr;
  std::size_t n = 0;
  for (const BufferUse& u : uses) {
    Buffer& b = *u.buffer;
    if (std::less<const Buffer*>{}(highest, &b)) {
      b.mutex_.lock();
      highest = &b;
    } else if (!b.mutex_.try_lock()) {
      break;
    }
    b.ops_.batch = memo;
    ++n;
  }
  return n;
}

void FastPath::unlock(std::span<const BufferUse> uses) noexcept {
  for (const BufferUse& u : uses) {
    u.buffer->ops_.batch = nullptr;
    u.buffer->mutex_.unlock();
  }
}

std::optional<std::size_t> FastPath::check(std::span<const BufferUse> uses, Location at) {
  std::size_t waits = 0;
  for (const BufferUse& u : uses) {
    Buffer& b = *u.buffer;
    Storage* st = b.storage_if_listed(at);
    // Fences wait until the general pipeline drops the ones that ended.
    if (st == nullptr || !st->allocated || !st->fences.empty()) return std::nullopt;
    const auto n = b.versions_.fast_prepare(u.use, at);
    if (!n) return std::nullopt;
    if (!migration::writes(u.use.access)) migration::detail::reserve_more(st->users, 1);
    waits += *n;
  }
  return waits;
}

void FastPath::commit(std::span<const BufferUse> uses, Location at, Event name, std::uint64_t stamp,
                      WaitList& waits, Submission& out) noexcept {
  for (std::size_t i = 0; i < uses.size(); ++i) {
    Buffer& b = *uses[i].buffer;
    const migration::Use& use = uses[i].use;
    Storage& st = b.storage_[at];
    b.versions_.fast_commit(use, at, name, [&](Event e) { waits.add(e, name); });
    // A writer needs no entry: its undo record names it, with where it runs,
    // until it has finished (Buffer::users_at()).
    if (!migration::writes(use.access)) b.add_user(st, name);
    st.last_use = stamp;
    out.storage_.push_back(st.handle);  // within the room check() made: the i-th
  }
}

}  // namespace memlayer::engine

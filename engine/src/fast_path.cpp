#include "fast_path.hpp"

#include <functional>
#include <new>

#include "command_table.hpp"
#include "transaction.hpp"
#include "wait_list.hpp"

namespace memlayer::engine {

// Two passes over the buffers: the first locks and checks each, making
// room but changing no content (so a miss leaves the general pipeline to
// start from the same state), the second records the command in each and
// unlocks it, allocating nothing. The command's name is made between them,
// once the command is sure to be recorded: a miss makes and discards
// nothing. A buffer the second pass has unlocked may be taken by another
// command at once: that one comes after this one there, and waits for the
// buffers this one still holds, as for any buffer held.
inline std::optional<EnqueueError> FastPath::enqueue(Engine& engine, std::span<const BufferUse> uses, Location at,
                                                     Event command, Submission& out) {
  // The statuses looked up are remembered for the command's other buffers,
  // which mostly share their last writer; a lone buffer has none to share
  // them with, and a look is a load of the command table's slot.
  RefBatch* const memo = uses.size() > 1 ? &out.scratch_->refs : nullptr;
  if (memo != nullptr) memo->begin(engine.host_);
  std::size_t locked = 0;
  Event name = nullptr;
  std::optional<EnqueueError> failed;
  WaitList waits(*engine.table_, out);
  try {
    out.storage_.resize(uses.size());  // the commit writes each use's in place
    if (const auto n = lock_and_check(uses, at, memo, locked)) {
      waits.reserve(*n);
      name = engine.table_->make(command, CommandTable::Ref::retain_unshared, engine.host_tells_ends_, at);
      if (name == nullptr) throw std::bad_alloc();  // no slot: the enqueue fails, nothing done
    }
  } catch (...) {
    failed = Transaction::error_of_exception();
  }
  if (name != nullptr) {
    const std::uint64_t stamp = engine.stamp_.fetch_add(1, std::memory_order_relaxed) + 1;
    commit_and_unlock(uses, at, name, stamp, waits, out);
    waits.dedupe();
    out.command_ = static_cast<CommandName>(reinterpret_cast<std::uintptr_t>(name));
  } else {  // `out` as it came: only the commit fills it
    for (const BufferUse& u : uses.first(locked)) unlock(*u.buffer);
    out.storage_.clear();
  }
  if (memo != nullptr) memo->flush();
  if (name == nullptr && !failed) return engine.pipeline(uses, at, command, out);  // a miss
  return failed;
}

// Every other locker takes buffers in address order (Transaction::lock_all;
// eviction only try-locks), so waiting is safe only for a buffer above
// every one held. Any other is only tried: held by another thread, or by
// this one (a buffer passed twice), it ends the fast path's try.
std::optional<std::size_t> FastPath::lock_and_check(std::span<const BufferUse> uses, Location at, RefBatch* memo,
                                                    std::size_t& locked) {
  const Buffer* highest = nullptr;
  std::size_t waits = 0;
  Event unfailed = nullptr;  // RangeVersions::fast_prepare
  for (const BufferUse& u : uses) {
    Buffer& b = *u.buffer;
    if (std::less<const Buffer*>{}(highest, &b)) {
      b.mutex_.lock();
      highest = &b;
    } else if (!b.mutex_.try_lock()) {
      return std::nullopt;
    }
    b.ops_.batch = memo;
    ++locked;
    if (!check(u, at, unfailed, waits)) return std::nullopt;
  }
  return waits;
}

inline bool FastPath::check(const BufferUse& u, Location at, Event& unfailed, std::size_t& waits) {
  Buffer& b = *u.buffer;
  // Fences wait until the general pipeline drops the ones that ended.
  if (!b.fast_storage(at)) return false;
  const auto n = b.versions_.fast_prepare(u.use, at, unfailed);
  if (!n) return false;
  waits += *n;
  return true;
}

void FastPath::commit_and_unlock(std::span<const BufferUse> uses, Location at, Event name, std::uint64_t stamp,
                                 WaitList& waits, Submission& out) noexcept {
  StorageHandle* handle = out.storage_.data();
  for (const BufferUse& u : uses) {
    Buffer& b = *u.buffer;
    Storage& st = b.storage_[at];
    // No storage-user entry: the span's readers or the undo record name the
    // command until it has finished, and the command table where it runs
    // (Buffer::users_at()).
    b.versions_.fast_commit(u.use, at, name, [&](Event e) { waits.add(e, name); });
    st.last_use = stamp;
    *handle++ = st.handle;
    unlock(b);
  }
}

inline void FastPath::unlock(Buffer& b) noexcept {
  b.ops_.batch = nullptr;
  b.mutex_.unlock();
}

// Here, beside the fast path, which it inlines: one call less per enqueue.
std::optional<EnqueueError> Engine::enqueue(std::span<const BufferUse> uses, Location at, Event command,
                                            Submission& out) {
  if (table_->failed_kept() >= sweep_at_.load(std::memory_order_relaxed)) [[unlikely]]
    sweep_failed();
  out.clear();
  out.host_ = &host_;
  out.table_ = table_.get();
  if (fast_path_on_.load(std::memory_order_relaxed)) return FastPath::enqueue(*this, uses, at, command, out);
  return pipeline(uses, at, command, out);
}

}  // namespace memlayer::engine

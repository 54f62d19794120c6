// The engine's fast path (engine.hpp: Engine::enqueue): a command whose
// buffers are all in the steady state is checked whole, then recorded,
// without the general pipeline's plans, copies and placement
// (transaction.cpp). doc/engine.md ("The fast path") has its conditions and
// cost.
#include "transaction.hpp"

#include "memlayer/migration/detail/reserve.hpp"

namespace memlayer::engine {

// Two passes over the command's buffers, locked: the first only checks and
// makes room (it changes no content, so a miss in a later buffer leaves
// the general pipeline to start from the same state), the second records
// and allocates nothing. True when the command was recorded.
bool Transaction::fast_path() {
  if (!engine_.fast_path_on_.load(std::memory_order_relaxed)) return false;
  std::size_t waits = 0;
  for (const EnqueueScratch::Group& g : s_.groups) {
    Buffer& b = *g.buffer;
    if (g.count != 1) return false;
    Storage* st = b.storage_if_listed(at_);
    // Fences wait until the general pipeline drops the ones that ended.
    if (st == nullptr || !st->allocated || !st->fences.empty()) return false;
    const migration::Use& use = use_of(g);
    const auto n = b.versions_.fast_prepare(use, at_);
    if (!n) return false;
    if (!migration::writes(use.access)) migration::detail::reserve_more(st->users, 1);
    waits += *n;
  }
  reserve_waits(waits);
  for (const EnqueueScratch::Group& g : s_.groups) {
    Buffer& b = *g.buffer;
    Storage& st = b.storage_[at_];
    const migration::Use& use = use_of(g);
    b.versions_.fast_commit(use, at_, command_, [this](Event e) { add_wait(e); });
    // A writer needs no entry: its undo record names it, with where it runs,
    // until it has finished (Buffer::users_at()).
    if (!migration::writes(use.access)) b.add_user(st, command_);
    st.last_use = stamp_;
    out_.storage_[g.use] = st.handle;
  }
  return true;
}

}  // namespace memlayer::engine

#include "wait_list.hpp"

#include <algorithm>

namespace memlayer::engine {

void WaitList::add_new(Event name) {
  constexpr std::size_t kSearched = 32;
  last_ = name;
  const Event e = table_.lease_host(name);
  if (e == nullptr) return;  // completed: nothing to wait for
  if (out_.waits_.size() >= kSearched) {
    unsearched_ = true;
  } else if (!out_.waits_.empty() && std::find(out_.waits_.begin(), out_.waits_.end(), e) != out_.waits_.end()) {
    table_.end_lease(name);  // (most commands wait for one event: the first is not searched for)
    return;
  }
  out_.waits_.push_back(e);
  out_.leases_.push_back(name);
}

void WaitList::sort_out() noexcept {
  std::vector<Event>& w = out_.waits_;
  std::sort(w.begin(), w.end());
  auto kept = w.begin();
  for (auto it = w.begin(); it != w.end(); ++it)  // each lease ends once (Submission::clear)
    if (kept == w.begin() || *(kept - 1) != *it) *kept++ = *it;
  w.erase(kept, w.end());
  unsearched_ = false;
}

}  // namespace memlayer::engine

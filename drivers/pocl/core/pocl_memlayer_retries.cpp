#include "pocl_memlayer_retries.hpp"

#include "pocl_core_compat.hpp"

#include <algorithm>
#include <thread>
#include <utility>

namespace memlayer::pocl_core {

namespace {

bool finished(cl_event e) { return __atomic_load_n(&e->status, __ATOMIC_ACQUIRE) <= CL_COMPLETE; }

}  // namespace

MigrationRetries::~MigrationRetries() {
  for (auto& [e, plan] : plans_) POname(clReleaseEvent)(e);
}

void MigrationRetries::add(cl_event e, cl_device_id dst, std::vector<cl_device_id> also, bool last_copy) {
  if (also.empty() && !last_copy) return;
  POname(clRetainEvent)(e);
  std::vector<cl_event> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (plans_.size() >= purge_at_) {
      done = purge_locked();
      purge_at_ = std::max<std::size_t>(64, 2 * plans_.size());
    }
    Plan& p = plans_[e];
    p.dst = dst;
    p.also = std::move(also);
    p.last_copy = last_copy;
    count_.store(plans_.size(), std::memory_order_release);
  }
  for (cl_event d : done) POname(clReleaseEvent)(d);
}

void MigrationRetries::forget(cl_event e) noexcept {
  if (count_.load(std::memory_order_acquire) == 0) return;
  bool held = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    held = plans_.erase(e) > 0;
    count_.store(plans_.size(), std::memory_order_release);
  }
  if (held) POname(clReleaseEvent)(e);
}

MigrationRetries::Retry MigrationRetries::next(_cl_command_node* node, std::chrono::milliseconds limit) {
  cl_event e = node->sync.event.event;
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = plans_.find(e);
  if (it == plans_.end()) return Retry::give_up;
  Plan& p = it->second;
  if (p.next < p.also.size()) {
    const cl_device_id from = p.also[p.next++];
    const cl_device_id dst = p.dst;
    lock.unlock();
    compat::point_into_device(node, dst, from);
    return Retry::resourced;
  }
  if (!p.last_copy) return Retry::give_up;
  const Clock::time_point now = Clock::now();
  if (p.give_up == Clock::time_point{}) p.give_up = now + limit;
  if (now >= p.give_up) return Retry::give_up;
  const Clock::duration pause = std::min<Clock::duration>(p.pause, p.give_up - now);
  p.pause = std::min(p.pause * 2, std::chrono::milliseconds(100));
  lock.unlock();
  std::this_thread::sleep_for(pause);
  return Retry::again;
}

std::vector<cl_event> MigrationRetries::purge_locked() {
  std::vector<cl_event> done;
  std::erase_if(plans_, [&](const auto& entry) {
    if (!finished(entry.first)) return false;
    done.push_back(entry.first);
    return true;
  });
  return done;
}

}  // namespace memlayer::pocl_core

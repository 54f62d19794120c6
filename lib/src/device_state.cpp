#include "device_state.hpp"

#include "scheduler.hpp"

namespace memlayer::runtime::detail {

namespace {
thread_local bool worker_thread = false;
}

bool on_worker_thread() { return worker_thread; }

DeviceState::DeviceState(std::unique_ptr<DeviceDriver> driver, migration::Location location,
                         const bufalloc::HeapOptions& heap_options)
    : driver_(std::move(driver)), location_(location) {
  const DeviceInfo& info = driver_->info();
  memory = std::make_unique<GlobalMemory>(*driver_, heap_options);
  const unsigned n = info.worker_threads == 0 ? 1 : info.worker_threads;
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

DeviceState::~DeviceState() {
  stop();
  // Nodes pushed after stop() go one at a time: a chain dropped whole would
  // recurse as deep as it is long.
  while (first_ != nullptr) first_ = std::move(first_->next_ready);
  memory.reset();  // before the driver goes: it takes the segments back
}

void DeviceState::stop() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
}

void DeviceState::push(std::shared_ptr<CommandNode> node) noexcept {
  {
    std::lock_guard lock(queue_mutex_);
    CommandNode* added = node.get();
    (last_ != nullptr ? last_->next_ready : first_) = std::move(node);
    last_ = added;
  }
  queue_cv_.notify_one();
}

void DeviceState::worker_loop(unsigned index) {
  worker_thread = true;
  driver_->on_worker_start(index);
  for (;;) {
    std::shared_ptr<CommandNode> node;
    {
      std::unique_lock lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || first_ != nullptr; });
      if (first_ == nullptr) return;  // stopping, and nothing left
      node = std::move(first_);
      first_ = std::move(node->next_ready);
      if (first_ == nullptr) last_ = nullptr;
    }
    run(node);
  }
}

}  // namespace memlayer::runtime::detail

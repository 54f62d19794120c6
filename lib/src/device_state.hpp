// One device as the runtime sees it: its driver, its location for the
// migration planner, its global memory, and the worker threads that
// run its commands.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "event_state.hpp"
#include "global_memory.hpp"
#include "memlayer/migration/location.hpp"
#include "memlayer/runtime/device_driver.hpp"

namespace memlayer::runtime::detail {

/// True on any device worker thread of any context.
bool on_worker_thread();

class DeviceState {
 public:
  DeviceState(std::unique_ptr<DeviceDriver> driver, migration::Location location,
              const bufalloc::HeapOptions& heap_options);
  ~DeviceState();  // stop()s, then drops the memory and the driver
  /// Stops the workers and joins them: each first runs what its queue still
  /// holds. A node pushed afterwards stays queued and never runs (only the
  /// context's teardown pushes then). Idempotent; not from a worker.
  void stop();
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  DeviceDriver& driver() { return *driver_; }
  const DeviceInfo& info() const { return driver_->info(); }
  migration::Location location() const { return location_; }
  bool shares_host_memory() const { return driver_->info().shares_host_memory; }

  /// Hands a ready node to the workers. Allocates nothing (the queue runs
  /// through CommandNode::next_ready): a committed command is never lost.
  void push(std::shared_ptr<CommandNode> node) noexcept;

  // Global memory, guarded by the mutex. The destructor drops it before the
  // driver: it gives its segments back to the driver.
  std::mutex memory_mutex;
  std::unique_ptr<GlobalMemory> memory;

 private:
  void worker_loop(unsigned index);

  std::unique_ptr<DeviceDriver> driver_;
  migration::Location location_;
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::shared_ptr<CommandNode> first_;  // the ready nodes, oldest first, through next_ready
  CommandNode* last_ = nullptr;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace memlayer::runtime::detail

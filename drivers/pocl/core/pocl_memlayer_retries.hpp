// What a migration command memlayer's engine made may do once its transfer
// has failed as often as its driver tries one (pocl_ml_migration_retry in
// pocl_memlayer_migration.h): read from another complete copy of its bytes
// (engine/host.hpp: CopyRequest::also), or, as the last copy of bytes being
// evicted (CopyRequest::last_copy), be tried again until the room wait has
// passed. The runtime's copies do the same in one function
// (lib/src/engine_host.cpp: copy_work); here the driver runs the copy and
// the core knows the sources, so the plan is kept per command until it has
// ended. Only commands with something to fall back on are recorded.
#pragma once

extern "C" {
#include "pocl_cl.h"
}

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace memlayer::pocl_core {

class MigrationRetries {
 public:
  using Clock = std::chrono::steady_clock;

  MigrationRetries() = default;
  MigrationRetries(const MigrationRetries&) = delete;
  MigrationRetries& operator=(const MigrationRetries&) = delete;
  /// Drops the references to the commands' events still recorded.
  ~MigrationRetries();

  /// Records what migration command `e` (into device `dst`, whose driver
  /// asks next() and calls forget() once it has run the command) may fall
  /// back on; retains `e` until forgotten. Nothing is recorded when there is
  /// nothing to fall back on. The records of commands that finished without
  /// reaching their driver are dropped here, each time the table has
  /// doubled: amortised O(1).
  void add(cl_event e, cl_device_id dst, std::vector<cl_device_id> also, bool last_copy);
  /// Forgets `e`: it has run, or will never run. O(1); no lock when nothing
  /// is recorded.
  void forget(cl_event e) noexcept;

  enum class Retry : std::uint8_t {
    give_up,    ///< nothing left to try: fail the command
    resourced,  ///< the command now reads from another copy: try it again
    again,      ///< a last copy, paused a while: try it again
  };
  /// For the driver, after `node`'s tries failed: points it at the next
  /// source, or, for a last copy, pauses (1 ms, doubling up to 100 ms)
  /// until `limit` has passed since the first call for it. Never holds the
  /// lock while pausing.
  Retry next(_cl_command_node* node, std::chrono::milliseconds limit);

 private:
  struct Plan {
    cl_device_id dst = nullptr;
    std::vector<cl_device_id> also;  // the other copies: a device, or the host copy (nullptr)
    std::size_t next = 0;
    bool last_copy = false;
    Clock::time_point give_up{};  // set at the first call of next() for it
    std::chrono::milliseconds pause{1};
  };
  // Drops the records of finished commands; returns their events to
  // release once the lock is let go.
  std::vector<cl_event> purge_locked();

  std::mutex mutex_;
  std::unordered_map<cl_event, Plan> plans_;
  std::atomic<std::size_t> count_{0};  // plans_.size(), read without the lock
  std::size_t purge_at_ = 64;
};

}  // namespace memlayer::pocl_core

// One memlayer device inside PoCL: global memory from memlayer's DeviceMemory
// (an arena and a bufalloc region), one worker thread per compute unit, each
// with its own local memory managed by a bufalloc LinearRegion, and a queue
// of ready commands.
//
// Scheduling follows PoCL's pthread model, not basic's: submit() and
// notify() only queue a ready command and wake a worker; nothing runs on the
// thread that made it ready, so an event completing inside a callback or a
// multi-device wait list cannot re-enter the scheduler (basic's deadlock).
// A kernel is split into chunks of work-groups that every worker takes from
// until none is left; the worker that finishes the last chunk completes it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memlayer/bufalloc/linear_region.hpp"
#include "memlayer/drivers/device_memory.hpp"
#include "parameters.hpp"
#include "pocl_compat.hpp"

namespace memlayer::pocl {

struct KernelRun;

/// A compute unit's private resources: its local memory (a LinearRegion
/// over a block it owns, reset for every chunk of work-groups), its printf
/// buffer, and the argument array of the chunk it runs (reused, so a launch
/// allocates nothing per chunk once the arrays have grown).
struct ComputeUnit {
  drivers::DeviceArena local_block;
  bufalloc::LinearRegion local;
  std::vector<std::byte> printf_buffer;
  std::vector<void*> arguments;
  std::vector<void*> local_pointers;
};

class MemlayerDevice {
 public:
  /// Sets up the device's memory and compute units and starts its workers.
  static drivers::DevResult<std::unique_ptr<MemlayerDevice>> create(cl_device_id device,
                                                                    const DriverParameters& params);
  ~MemlayerDevice();  // stops and joins the workers
  MemlayerDevice(const MemlayerDevice&) = delete;
  MemlayerDevice& operator=(const MemlayerDevice&) = delete;

  /// Queues a command whose wait list is empty; any thread.
  void push(_cl_command_node* node);

  /// Runs a kernel's work-groups on the calling thread, with a compute unit
  /// of its own (PoCL's ops->run; the workers never use it).
  void run_inline(_cl_command_node* node);

  /// Whether a transfer PoCL asks of the driver's ops directly (read,
  /// write), outside a command a memlayer worker runs, fails: fault
  /// injection (transfer_faults) for transfers no command carries, whose
  /// callers cannot be told (the ops return nothing: the bytes are then not
  /// moved, and PoCL's error log says so). Inside a worker the command was
  /// drawn for already (transfer_fails): never.
  bool direct_transfer_fails(const char* what);

  drivers::DeviceMemory& memory() noexcept { return memory_; }
  [[nodiscard]] const DriverParameters& parameters() const noexcept { return params_; }

  class Key {
    friend class MemlayerDevice;
    Key() = default;
  };
  MemlayerDevice(Key, cl_device_id device, const DriverParameters& params, drivers::DeviceMemory memory);

 private:
  struct Job {
    _cl_command_node* node = nullptr;   // a command to run whole
    std::shared_ptr<KernelRun> kernel;  // or a kernel whose work-groups are being dealt
  };

  drivers::DevResult<std::unique_ptr<ComputeUnit>> make_compute_unit() const;
  void worker(unsigned index);
  /// Makes the kernel run for a command; null when it has no work-groups.
  /// A run whose work-group function could not be made is not `loaded`.
  std::shared_ptr<KernelRun> prepare_kernel(_cl_command_node* node) const;
  /// Runs work-groups [first, last) of `run` on compute unit `cu`. Returns
  /// false if a chunk's local memory did not fit.
  bool run_groups(KernelRun& run, std::size_t first, std::size_t last, ComputeUnit& cu) const;
  void finish_kernel(KernelRun& run) const;

  // Fault injection (DriverParameters::transfer_faults, peer_read_faults),
  // deterministic in the seed and the count. Whether transfer command
  // `node` fails, after its tries: a migration (what a migration engine
  // makes to keep copies coherent) is tried up to kMigrationTries times, as
  // memlayer's runtime tries its hidden copies (doc/runtime.md, failures),
  // then from each other copy memlayer's engine named, as often, and, the
  // last copy of bytes being evicted, until the room wait has passed
  // (compat::retry_migration); a user's own transfer once.
  bool transfer_fails(_cl_command_node* node);
  // One try of migration `m`: a fault of this device's, or of the device a
  // device-to-device copy reads from (its peer_read_faults).
  bool migration_fault(const _cl_command_migrate& m);
  static std::string migration_failure(const _cl_command_node* node);
  static bool counts_as_transfer(cl_command_type type);
  bool draw_fault(double probability, std::atomic<std::uint64_t>& count) const;
  static constexpr int kMigrationTries = 3;

  cl_device_id device_;
  DriverParameters params_;
  std::atomic<std::uint64_t> transfers_{0};
  std::atomic<std::uint64_t> peer_reads_{0};  // D2D copies other devices made from this one
  drivers::DeviceMemory memory_;
  std::vector<std::unique_ptr<ComputeUnit>> units_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

/// Whether `d` is a memlayer device (its ops are this driver's).
bool is_memlayer(cl_device_id d);

}  // namespace memlayer::pocl

// memlayer/drivers/sim_device.hpp — a discrete device simulated in host memory.
//
// Its global memory is one host arena, placed with hwloc on a NUMA node
// (hwloc_alloc_membind), and memlayer's worker threads for it are bound to
// that node's cores. Transfers are real memcpys; an optional link model
// (latency + bandwidth) makes them take the time a real link would, so
// migration cost is visible; fault injection fails the Nth allocation or a
// transfer with probability p (seeded, reproducible) for tests. Kernels are
// host callables that receive pointers into the arena.
//
// Device addresses start at a per-device base far from 0 (and from every
// other sim device's), so an address used on the wrong device is caught.
// Every operation checks its range against the arena and returns
// CL_INVALID_VALUE naming the range otherwise; nothing here aborts.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "memlayer/bufalloc/locked_region.hpp"
#include "memlayer/drivers/device_memory.hpp"
#include "memlayer/runtime/device_driver.hpp"

namespace memlayer::drivers {

struct SimOptions {
  std::uint64_t memory_size = std::uint64_t{256} << 20;  ///< the arena: the device's global memory
  std::uint64_t local_mem_size = 64 << 10;               ///< per compute unit
  std::uint64_t base_alignment = 128;
  unsigned compute_units = 2;
  unsigned worker_threads = 2;
  runtime::LinkCost host_link{10e-6, 12e9};
  /// Direct copies between sim devices over this link; none: through the host.
  std::optional<runtime::LinkCost> peer_link;
  /// Make transfers take at least the link model's time (sleeping the rest).
  bool model_link_time = false;
  /// Fault injection: the Nth on_allocate() and the Nth transfer (read,
  /// write, peer copy: both ends count it) on each device fail (1-based;
  /// 0 = never), and each transfer fails with this probability, before it
  /// moves a byte (Status::error_before_start). A failed
  /// transfer fails the device's next fault_burst - 1 transfers too (a link
  /// that stays down a while: what retrying alone does not survive).
  std::uint64_t fail_allocation_number = 0;
  std::uint64_t fail_transfer_number = 0;
  double transfer_failure_probability = 0.0;
  std::uint64_t fault_burst = 1;
  std::uint64_t fault_seed = 1;
  /// Behave like a device with a native allocator (cuMemAlloc): memlayer
  /// then gets the arena in segments through native_allocate(), each call
  /// taking native_allocation_cost (busy-waited, so it shows on this
  /// machine as it would on a GPU), and sub-allocates them with its heap.
  /// Off: memlayer places buffers directly in the arena, at no cost.
  bool native_allocator = false;
  /// The seeds' figure for cudaMalloc: about 100 us plus size at 15 GiB/s.
  runtime::LinkCost native_allocation_cost{100e-6, 15.0 * 1024 * 1024 * 1024};
};

class SimDevice final : public runtime::DeviceDriver {
 public:
  /// Makes `count` sim devices, or one per NUMA node when count is 0, spread
  /// round-robin over the NUMA nodes. Fails (nothing made) if hwloc cannot
  /// load the topology or an arena cannot be allocated.
  static runtime::Status create(unsigned count, const SimOptions& options,
                                std::vector<std::unique_ptr<SimDevice>>& out);

  ~SimDevice() override = default;
  SimDevice(const SimDevice&) = delete;
  SimDevice& operator=(const SimDevice&) = delete;

  [[nodiscard]] const runtime::DeviceInfo& info() const noexcept override { return info_; }
  [[nodiscard]] runtime::DeviceAddress memory_base() const noexcept override { return base_; }
  void on_worker_start(unsigned worker_index) override;
  runtime::Status on_allocate(runtime::DeviceAddress address, std::uint64_t size) override;
  [[nodiscard]] bool has_native_allocator() const noexcept override { return options_.native_allocator; }
  /// Places `size` bytes in the arena (bookkeeping in a bufalloc region),
  /// then busy-waits the cost model's time. nullopt when the arena is full,
  /// when the injected allocation failure is due, or when native_allocator is off.
  std::optional<runtime::DeviceAddress> native_allocate(std::uint64_t size) override;
  void native_release(runtime::DeviceAddress address, std::uint64_t size) override;
  /// native_allocate() calls that succeeded, and bytes they hold now.
  [[nodiscard]] std::uint64_t native_allocations() const noexcept { return native_calls_.load(); }
  [[nodiscard]] std::uint64_t native_bytes() const noexcept { return native_bytes_.load(); }
  /// The most bytes held from native_allocate() at once.
  [[nodiscard]] std::uint64_t native_peak_bytes() const noexcept { return native_peak_bytes_.load(); }

  runtime::Status write(runtime::DeviceAddress dst, const void* src, std::uint64_t size) override;
  runtime::Status read(runtime::DeviceAddress src, void* dst, std::uint64_t size) override;
  runtime::Status copy(runtime::DeviceAddress src, runtime::DeviceAddress dst, std::uint64_t size) override;
  runtime::Status fill(runtime::DeviceAddress dst, std::uint64_t size, std::span<const std::byte> pattern) override;
  [[nodiscard]] void* host_pointer(runtime::DeviceAddress address) override;

  [[nodiscard]] runtime::LinkCost host_link() const override { return options_.host_link; }
  [[nodiscard]] std::optional<runtime::LinkCost> peer_link(const runtime::DeviceDriver& source) const override;
  runtime::Status copy_from_peer(runtime::DeviceDriver& source, runtime::DeviceAddress src,
                                 runtime::DeviceAddress dst, std::uint64_t size) override;
  runtime::Status run_kernel(const runtime::KernelFunction& kernel, std::span<const runtime::DeviceAddress> buffers,
                             std::span<const std::uint64_t> local_sizes) override;

  /// Whether the arena really is bound to its NUMA node (hwloc may refuse on
  /// a machine or container without memory binding; it then stays unbound).
  [[nodiscard]] bool memory_bound() const noexcept { return arena_.bound(); }
  /// Bytes moved in and out (host link, peer link), for the stress summary.
  [[nodiscard]] std::uint64_t bytes_transferred() const noexcept { return bytes_transferred_.load(); }
  /// Transfers failed on purpose so far (fail_transfer_number, transfer_failure_probability).
  [[nodiscard]] std::uint64_t faults_injected() const noexcept { return faults_injected_.load(); }

  /// Only create() can make the key: devices come from create(), which
  /// checks the options and the arena, but make_unique needs a public
  /// constructor.
  class Key {
    friend class SimDevice;
    Key() = default;
  };
  SimDevice(Key, DeviceArena arena, unsigned index, const SimOptions& options);

 private:
  /// The arena pointer for [address, address + size), or nullptr.
  [[nodiscard]] std::byte* locate(runtime::DeviceAddress address, std::uint64_t size) const;
  runtime::Status out_of_range(const char* op, runtime::DeviceAddress address, std::uint64_t size) const;
  runtime::Status maybe_fail_transfer(const char* op);
  void pace(const runtime::LinkCost& link, std::uint64_t bytes, double elapsed_s) const;

  DeviceArena arena_;
  SimOptions options_;
  runtime::DeviceInfo info_;
  runtime::DeviceAddress base_;
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<std::uint64_t> transfers_{0};
  std::atomic<std::uint64_t> burst_end_{0};  // transfers numbered below it fail (fault_burst)
  std::atomic<std::uint64_t> bytes_transferred_{0};
  std::atomic<std::uint64_t> faults_injected_{0};
  std::optional<bufalloc::LockedRegion> native_;  // the native allocator's bookkeeping
  std::atomic<std::uint64_t> native_calls_{0};
  std::atomic<std::uint64_t> native_bytes_{0};
  std::atomic<std::uint64_t> native_peak_bytes_{0};
  std::mutex native_mutex_;  // serialises native calls (see native_allocate)
};

}  // namespace memlayer::drivers

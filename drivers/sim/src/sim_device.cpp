#include "memlayer/drivers/sim_device.hpp"

#include "memlayer/runtime/local_memory.hpp"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace memlayer::drivers {

using runtime::DeviceAddress;
using runtime::Status;

namespace {
using runtime::cl::kInvalidValue;
using runtime::cl::kMemObjectAllocationFailure;
using runtime::cl::kOutOfResources;

// SplitMix64: a seeded, stateless stream; op n of a device draws mix(seed, n).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

Status SimDevice::create(unsigned count, const SimOptions& options, std::vector<std::unique_ptr<SimDevice>>& out) {
  if (options.memory_size == 0) return Status::error(kInvalidValue, "sim: memory_size must be > 0");
  if (options.base_alignment == 0 || (options.base_alignment & (options.base_alignment - 1)) != 0)
    return Status::error(kInvalidValue, "sim: base_alignment must be a power of two");
  if (options.worker_threads == 0 || options.compute_units == 0)
    return Status::error(kInvalidValue, "sim: worker_threads and compute_units must be > 0");
  if (options.transfer_failure_probability < 0 || options.transfer_failure_probability > 1)
    return Status::error(kInvalidValue, "sim: transfer_failure_probability must be in [0, 1]");
  if (options.fault_burst == 0) return Status::error(kInvalidValue, "sim: fault_burst must be at least 1");
  if (options.native_allocator) {
    if (!(options.native_allocation_cost.bytes_per_s > 0) || !(options.native_allocation_cost.latency_s >= 0))
      return Status::error(kInvalidValue, "sim: native_allocation_cost needs latency >= 0 and bandwidth > 0");
    if (options.memory_size % options.base_alignment != 0)
      return Status::error(kInvalidValue, "sim: with native_allocator, memory_size must be a multiple of base_alignment");
  }
  const int nodes = DeviceArena::numa_node_count();
  if (count == 0) count = static_cast<unsigned>(nodes);
  std::vector<std::unique_ptr<SimDevice>> made;
  for (unsigned i = 0; i < count; ++i) {
    auto arena = DeviceArena::create(options.memory_size, static_cast<int>(i % static_cast<unsigned>(nodes)));
    if (!arena.ok()) return Status::error(kOutOfResources, "sim" + std::to_string(i) + ": " + arena.error());
    made.push_back(std::make_unique<SimDevice>(Key{}, std::move(arena).value(), i, options));
  }
  for (auto& d : made) out.push_back(std::move(d));
  return {};
}

SimDevice::SimDevice(Key, DeviceArena arena, unsigned index, const SimOptions& options)
    : arena_(std::move(arena)), options_(options),
      // 2^44 apart: distinct, far from 0, room for arenas up to 16 TiB.
      base_((DeviceAddress{index} + 1) << 44) {
  info_.name = "sim" + std::to_string(index);
  info_.global_mem_size = options.memory_size;
  info_.local_mem_size = options.local_mem_size;
  info_.base_alignment = options.base_alignment;
  info_.compute_units = options.compute_units;
  info_.worker_threads = options.worker_threads;
  info_.numa_node = arena_.numa_node();
  if (options.native_allocator) {
    auto region = bufalloc::LockedRegion::create(base_, options.memory_size, bufalloc::RegionOptions{options.base_alignment});
    if (region) native_.emplace(std::move(region).value());
  }
}

std::optional<DeviceAddress> SimDevice::native_allocate(std::uint64_t size) {
  if (!native_) return std::nullopt;
  // One native call at a time per device, as with cuMemAlloc (it takes a
  // context-wide lock): concurrent callers queue behind each other's cost.
  std::lock_guard lock(native_mutex_);
  const std::uint64_t n = allocations_.fetch_add(1) + 1;
  if (options_.fail_allocation_number != 0 && n == options_.fail_allocation_number) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  auto placed = native_->allocate(size);
  if (!placed) return std::nullopt;
  // Busy-wait, not sleep: a native allocator keeps the calling thread busy
  // (the driver's bookkeeping, page-table updates), and sleeping would let
  // benchmarks overlap what a real one would not.
  const auto due = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options_.native_allocation_cost.seconds(size)));
  while (std::chrono::steady_clock::now() < due) {
  }
  ++native_calls_;
  const std::uint64_t now_held = native_bytes_ += size;
  if (now_held > native_peak_bytes_) native_peak_bytes_ = now_held;  // under native_mutex_
  return placed.value().address;
}

void SimDevice::native_release(DeviceAddress address, std::uint64_t size) {
  std::lock_guard lock(native_mutex_);
  // By address, as cuMemFree takes it: the native interface knows no handles
  // (the region indexes the few segments' addresses at the first release).
  if (native_ && native_->free(address)) native_bytes_ -= size;
}

void SimDevice::on_worker_start(unsigned) {
  arena_.bind_current_thread();  // best effort: a container may forbid binding
}

Status SimDevice::on_allocate(DeviceAddress address, std::uint64_t size) {
  const std::uint64_t n = allocations_.fetch_add(1) + 1;
  if (options_.fail_allocation_number != 0 && n == options_.fail_allocation_number) {
    return Status::error(kMemObjectAllocationFailure,
                         info_.name + ": allocation " + std::to_string(n) + " failed (injected)");
  }
  if (locate(address, size) == nullptr) return out_of_range("allocate", address, size);
  return {};
}

std::byte* SimDevice::locate(DeviceAddress address, std::uint64_t size) const {
  if (address < base_) return nullptr;
  return arena_.locate(address - base_, size);
}

Status SimDevice::out_of_range(const char* op, DeviceAddress address, std::uint64_t size) const {
  return Status::error(kInvalidValue, info_.name + ": " + op + " of [" + std::to_string(address) + ", +" +
                                          std::to_string(size) + ") is outside device memory [" +
                                          std::to_string(base_) + ", +" + std::to_string(options_.memory_size) + ")");
}

Status SimDevice::maybe_fail_transfer(const char* op) {
  const std::uint64_t n = transfers_.fetch_add(1);
  const auto fault = [&](const std::string& why) {
    faults_injected_.fetch_add(1);
    // Before any byte moves: the destination keeps what it held.
    return Status::error_before_start(kOutOfResources, info_.name + ": " + op + " failed (injected: " + why + ")");
  };
  if (n < burst_end_.load()) return fault("in a burst of " + std::to_string(options_.fault_burst));
  // A fault of its own starts a burst: the next fault_burst - 1 transfers fail too.
  const auto burst = [&](const std::string& why) {
    for (std::uint64_t end = burst_end_.load(); end < n + options_.fault_burst;)
      if (burst_end_.compare_exchange_weak(end, n + options_.fault_burst)) break;
    return fault(why);
  };
  if (n + 1 == options_.fail_transfer_number) return burst("transfer number " + std::to_string(n + 1));
  if (options_.transfer_failure_probability <= 0) return {};
  const double draw = static_cast<double>(mix(options_.fault_seed ^ mix(n)) >> 11) * 0x1.0p-53;
  if (draw >= options_.transfer_failure_probability) return {};
  return burst("probability " + std::to_string(options_.transfer_failure_probability));
}

// With the link model on, a transfer takes at least what the link would.
void SimDevice::pace(const runtime::LinkCost& link, std::uint64_t bytes, double elapsed_s) const {
  if (!options_.model_link_time) return;
  const double remaining = link.seconds(bytes) - elapsed_s;
  if (remaining > 0) std::this_thread::sleep_for(std::chrono::duration<double>(remaining));
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Status SimDevice::write(DeviceAddress dst, const void* src, std::uint64_t size) {
  std::byte* to = locate(dst, size);
  if (to == nullptr) return out_of_range("write", dst, size);
  if (Status s = maybe_fail_transfer("write"); !s.ok()) return s;
  const auto t0 = std::chrono::steady_clock::now();
  std::memcpy(to, src, size);
  bytes_transferred_ += size;
  pace(options_.host_link, size, seconds_since(t0));
  return {};
}

Status SimDevice::read(DeviceAddress src, void* dst, std::uint64_t size) {
  const std::byte* from = locate(src, size);
  if (from == nullptr) return out_of_range("read", src, size);
  if (Status s = maybe_fail_transfer("read"); !s.ok()) return s;
  const auto t0 = std::chrono::steady_clock::now();
  std::memcpy(dst, from, size);
  bytes_transferred_ += size;
  pace(options_.host_link, size, seconds_since(t0));
  return {};
}

Status SimDevice::copy(DeviceAddress src, DeviceAddress dst, std::uint64_t size) {
  const std::byte* from = locate(src, size);
  if (from == nullptr) return out_of_range("copy source", src, size);
  std::byte* to = locate(dst, size);
  if (to == nullptr) return out_of_range("copy destination", dst, size);
  std::memmove(to, from, size);  // a copy within one buffer may overlap
  return {};
}

Status SimDevice::fill(DeviceAddress dst, std::uint64_t size, std::span<const std::byte> pattern) {
  if (pattern.empty() || size % pattern.size() != 0)
    return Status::error(kInvalidValue, info_.name + ": fill size " + std::to_string(size) +
                                            " is not a multiple of the pattern size " +
                                            std::to_string(pattern.size()));
  std::byte* to = locate(dst, size);
  if (to == nullptr) return out_of_range("fill", dst, size);
  for (std::uint64_t i = 0; i < size; i += pattern.size()) std::memcpy(to + i, pattern.data(), pattern.size());
  return {};
}

void* SimDevice::host_pointer(DeviceAddress address) { return locate(address, 0); }

std::optional<runtime::LinkCost> SimDevice::peer_link(const runtime::DeviceDriver& source) const {
  if (!options_.peer_link || dynamic_cast<const SimDevice*>(&source) == nullptr || &source == this) return std::nullopt;
  return options_.peer_link;
}

Status SimDevice::copy_from_peer(runtime::DeviceDriver& source, DeviceAddress src, DeviceAddress dst,
                                 std::uint64_t size) {
  auto* peer = dynamic_cast<SimDevice*>(&source);
  if (peer == nullptr || !peer_link(source)) return DeviceDriver::copy_from_peer(source, src, dst, size);
  const std::byte* from = peer->locate(src, size);
  if (from == nullptr) return peer->out_of_range("peer copy source", src, size);
  std::byte* to = locate(dst, size);
  if (to == nullptr) return out_of_range("peer copy destination", dst, size);
  if (Status s = peer->maybe_fail_transfer("peer copy out"); !s.ok()) return s;
  if (Status s = maybe_fail_transfer("peer copy in"); !s.ok()) return s;
  const auto t0 = std::chrono::steady_clock::now();
  std::memcpy(to, from, size);
  bytes_transferred_ += size;
  pace(*options_.peer_link, size, seconds_since(t0));
  return {};
}

Status SimDevice::run_kernel(const runtime::KernelFunction& kernel, std::span<const DeviceAddress> buffers,
                             std::span<const std::uint64_t> local_sizes) {
  std::vector<void*> pointers;
  pointers.reserve(buffers.size() + local_sizes.size());
  for (DeviceAddress a : buffers) {
    std::byte* p = locate(a, 0);
    if (p == nullptr) return out_of_range("kernel argument", a, 0);
    pointers.push_back(p);
  }
  // Each worker thread is one compute unit with its own local memory.
  if (Status s = runtime::append_local_pointers(local_sizes, info_.local_mem_size, pointers); !s.ok()) return s;
  return kernel(pointers);
}

}  // namespace memlayer::drivers

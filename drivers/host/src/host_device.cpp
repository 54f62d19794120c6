#include "memlayer/drivers/host_device.hpp"

#include "memlayer/runtime/local_memory.hpp"

#include <cstring>
#include <string>
#include <vector>

namespace memlayer::drivers {

using runtime::DeviceAddress;
using runtime::Status;

namespace {
using runtime::cl::kInvalidValue;

void* pointer(DeviceAddress a) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)); }

Status null_address(const char* op) {
  return Status::error(kInvalidValue, std::string("host: ") + op + " at a null address");
}
}  // namespace

HostDevice::HostDevice(std::uint64_t global_mem_size, unsigned worker_threads) {
  info_.name = "host";
  info_.global_mem_size = global_mem_size;
  info_.local_mem_size = 64 << 10;
  info_.base_alignment = 128;
  info_.compute_units = worker_threads;
  info_.worker_threads = worker_threads;
  info_.shares_host_memory = true;
}

Status HostDevice::write(DeviceAddress dst, const void* src, std::uint64_t size) {
  if (dst == 0) return null_address("write");
  std::memcpy(pointer(dst), src, size);
  return {};
}

Status HostDevice::read(DeviceAddress src, void* dst, std::uint64_t size) {
  if (src == 0) return null_address("read");
  std::memcpy(dst, pointer(src), size);
  return {};
}

Status HostDevice::copy(DeviceAddress src, DeviceAddress dst, std::uint64_t size) {
  if (src == 0 || dst == 0) return null_address("copy");
  std::memmove(pointer(dst), pointer(src), size);
  return {};
}

Status HostDevice::fill(DeviceAddress dst, std::uint64_t size, std::span<const std::byte> pattern) {
  if (dst == 0) return null_address("fill");
  if (pattern.empty() || size % pattern.size() != 0)
    return Status::error(kInvalidValue, "host: fill size " + std::to_string(size) +
                                            " is not a multiple of the pattern size " +
                                            std::to_string(pattern.size()));
  auto* to = static_cast<std::byte*>(pointer(dst));
  for (std::uint64_t i = 0; i < size; i += pattern.size()) std::memcpy(to + i, pattern.data(), pattern.size());
  return {};
}

void* HostDevice::host_pointer(DeviceAddress address) { return pointer(address); }

Status HostDevice::run_kernel(const runtime::KernelFunction& kernel, std::span<const DeviceAddress> buffers,
                              std::span<const std::uint64_t> local_sizes) {
  std::vector<void*> pointers;
  pointers.reserve(buffers.size() + local_sizes.size());
  for (DeviceAddress a : buffers) {
    if (a == 0) return null_address("kernel argument");
    pointers.push_back(pointer(a));
  }
  if (Status s = runtime::append_local_pointers(local_sizes, info_.local_mem_size, pointers); !s.ok()) return s;
  return kernel(pointers);
}

}  // namespace memlayer::drivers

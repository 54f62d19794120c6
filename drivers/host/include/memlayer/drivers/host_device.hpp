// memlayer/drivers/host_device.hpp — a device that computes on host memory.
//
// Its copy of a buffer is the buffer's host copy: DeviceAddresses are host
// pointers, nothing ever migrates between it and the host, and maps need no
// copy. It is what a CPU device is to PoCL's `pthread` driver, and the
// baseline next to which the sim driver's migrations show their cost.
#pragma once

#include "memlayer/runtime/device_driver.hpp"

namespace memlayer::drivers {

class HostDevice final : public runtime::DeviceDriver {
 public:
  /// `global_mem_size`: how many bytes of host memory memlayer may place on
  /// it (the host copies of buffers are allocated by memlayer, not here).
  explicit HostDevice(std::uint64_t global_mem_size = std::uint64_t{1} << 30, unsigned worker_threads = 2);

  [[nodiscard]] const runtime::DeviceInfo& info() const noexcept override { return info_; }
  runtime::Status write(runtime::DeviceAddress dst, const void* src, std::uint64_t size) override;
  runtime::Status read(runtime::DeviceAddress src, void* dst, std::uint64_t size) override;
  runtime::Status copy(runtime::DeviceAddress src, runtime::DeviceAddress dst, std::uint64_t size) override;
  runtime::Status fill(runtime::DeviceAddress dst, std::uint64_t size, std::span<const std::byte> pattern) override;
  [[nodiscard]] void* host_pointer(runtime::DeviceAddress address) override;
  runtime::Status run_kernel(const runtime::KernelFunction& kernel, std::span<const runtime::DeviceAddress> buffers,
                             std::span<const std::uint64_t> local_sizes) override;

 private:
  runtime::DeviceInfo info_;
};

}  // namespace memlayer::drivers

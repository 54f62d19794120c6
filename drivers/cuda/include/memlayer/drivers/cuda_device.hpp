// memlayer/drivers/cuda_device.hpp — an NVIDIA GPU as a memlayer device.
//
// Global memory comes from cuMemAlloc, in segments: the driver says it has a
// native allocator, so memlayer's runtime obtains large segments through
// native_allocate() and sub-allocates buffers from them with its DeviceHeap
// (ContextOptions::device_heap) — cuMemAlloc's cost, which grows with size,
// is paid per segment, not per buffer. Transfers are cuMemcpyHtoD/DtoH/DtoD
// and cuMemset*; device-to-device between two GPUs is cuMemcpyPeer where
// cuDeviceCanAccessPeer says a direct path exists (peer_link), else memlayer
// stages through the host.
//
// libcuda is loaded at run time (dlopen "libcuda.so.1"), never linked: the
// same build runs on machines without an NVIDIA driver, where create()
// fails with a message saying so (tests skip on it).
//
// Kernels. memlayer's kernels are host callables; on this device they
// receive device pointers (CUdeviceptr values cast to void*), valid in the
// device's primary context, which is current on every worker thread: the
// callable launches its CUDA kernel (cuLaunchKernel) and synchronises
// before it returns. Local-memory arguments are refused (a CUDA kernel sizes
// its shared memory itself).
//
// Errors: every CUDA failure becomes a Status naming the device, the call
// and cuGetErrorString's text; nothing here aborts.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "memlayer/runtime/device_driver.hpp"

namespace memlayer::drivers {

struct CudaOptions {
  unsigned worker_threads = 2;
  /// global_mem_size reported to memlayer: this fraction of the memory free
  /// at create() (the rest is left to CUDA's own use and other processes).
  double memory_fraction = 0.9;
};

class CudaDevice final : public runtime::DeviceDriver {
 public:
  /// Every GPU the CUDA driver reports, or only `ordinals` when given.
  /// Errors: CL_DEVICE_NOT_FOUND (-1) when libcuda cannot be loaded, cuInit
  /// fails or there is no GPU; CL_INVALID_VALUE for bad options or an
  /// ordinal out of range. Nothing is made on error.
  static runtime::Status create(const CudaOptions& options, std::vector<std::unique_ptr<CudaDevice>>& out,
                                std::vector<int> ordinals = {});

  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  [[nodiscard]] const runtime::DeviceInfo& info() const noexcept override { return info_; }
  void on_worker_start(unsigned worker_index) override;

  [[nodiscard]] bool has_native_allocator() const noexcept override { return true; }
  /// cuMemAlloc in the device's primary context; nullopt when it fails.
  std::optional<runtime::DeviceAddress> native_allocate(std::uint64_t size) override;
  void native_release(runtime::DeviceAddress address, std::uint64_t size) override;

  runtime::Status write(runtime::DeviceAddress dst, const void* src, std::uint64_t size) override;
  runtime::Status read(runtime::DeviceAddress src, void* dst, std::uint64_t size) override;
  /// Overlapping ranges are copied in pieces that do not overlap.
  runtime::Status copy(runtime::DeviceAddress src, runtime::DeviceAddress dst, std::uint64_t size) override;
  /// cuMemsetD8/D16/D32 for 1-, 2- and 4-byte patterns; longer ones are
  /// written once and doubled with device-to-device copies.
  runtime::Status fill(runtime::DeviceAddress dst, std::uint64_t size, std::span<const std::byte> pattern) override;

  [[nodiscard]] runtime::LinkCost host_link() const override { return {10e-6, 20e9}; }
  [[nodiscard]] std::optional<runtime::LinkCost> peer_link(const runtime::DeviceDriver& source) const override;
  runtime::Status copy_from_peer(runtime::DeviceDriver& source, runtime::DeviceAddress src,
                                 runtime::DeviceAddress dst, std::uint64_t size) override;
  runtime::Status run_kernel(const runtime::KernelFunction& kernel, std::span<const runtime::DeviceAddress> buffers,
                             std::span<const std::uint64_t> local_sizes) override;

  [[nodiscard]] int ordinal() const noexcept { return ordinal_; }

  struct State;  // the CUDA handles (cuda.h stays out of this header)
  /// Only create() can make the key (make_unique needs a public constructor).
  class Key {
    friend class CudaDevice;
    Key() = default;
  };
  CudaDevice(Key, std::unique_ptr<State> state, int ordinal, runtime::DeviceInfo info);

 private:
  runtime::Status check(int result, const char* call) const;

  std::unique_ptr<State> state_;
  int ordinal_;
  runtime::DeviceInfo info_;
};

}  // namespace memlayer::drivers

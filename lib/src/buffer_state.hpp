// A parent buffer's state: its content versions per range, its host copy,
// and its instance (storage) on each location.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "event_state.hpp"
#include "memlayer/migration/range_versions.hpp"
#include "memlayer/runtime/device_driver.hpp"

namespace memlayer::runtime::detail {

class ContextState;

/// The storage of one buffer in one device's memory.
struct Instance {
  bool allocated = false;
  DeviceAddress address = 0;
  std::uint64_t last_use = 0;  // for LRU eviction
  /// Every command or copy that touched this storage and may not have
  /// finished: the storage is freed only after them.
  std::vector<std::shared_ptr<EventState>> users;
  /// What must finish before the storage may be written (it may overlap an
  /// evicted buffer's, still being read out).
  std::vector<std::shared_ptr<EventState>> fences;

  void add_user(const std::shared_ptr<EventState>& e);
};

class BufferState : public std::enable_shared_from_this<BufferState> {
  // First, so it is destroyed last: `versions` and the storage need the
  // context (its event ops, its devices) while they are torn down.
  std::shared_ptr<ContextState> context_;

 public:
  BufferState(std::shared_ptr<ContextState> context, std::uint64_t size, std::uint32_t flags, void* user_host_ptr);
  ~BufferState();
  BufferState(const BufferState&) = delete;
  BufferState& operator=(const BufferState&) = delete;

  ContextState& context() { return *context_; }
  std::uint64_t size() const { return size_; }
  std::uint32_t flags() const { return flags_; }

  /// The host copy, allocated on first need. Throws std::bad_alloc.
  std::byte* host();
  bool has_host() const { return host_ != nullptr; }

  std::mutex mutex;  // guards everything below; taken in address order with other buffers
  migration::RangeVersions versions;
  std::vector<Instance> instances;  // by location

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::uint64_t size_;
  std::uint32_t flags_;
  std::byte* host_ = nullptr;  // the user's memory (USE_HOST_PTR) or owned_
  std::unique_ptr<std::byte, FreeDeleter> owned_;
};

}  // namespace memlayer::runtime::detail

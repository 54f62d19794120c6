// A parent buffer's state: its host copy, and its coherence state in the
// context's migration engine (content versions by range, storage by location).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "event_state.hpp"
#include "memlayer/bufalloc/region.hpp"
#include "memlayer/engine/engine.hpp"

namespace memlayer::runtime::detail {

class ContextState;

class BufferState : public std::enable_shared_from_this<BufferState> {
  // First, so it is destroyed last: `tracked` hands its storage back to the
  // context's devices when it goes.
  std::shared_ptr<ContextState> context_;

 public:
  BufferState(std::shared_ptr<ContextState> context, std::uint64_t size, std::uint32_t flags, void* user_host_ptr);
  BufferState(const BufferState&) = delete;
  BufferState& operator=(const BufferState&) = delete;

  ContextState& context() { return *context_; }
  /// Names the buffer in messages (Buffer::id()).
  std::uint64_t id() const { return id_; }
  std::uint64_t size() const { return size_; }
  std::uint32_t flags() const { return flags_; }

  /// The host copy, allocated on first need. Throws std::bad_alloc.
  std::byte* host();
  bool has_host() const { return host_ != nullptr; }

  /// This buffer's storage at one device location, as EngineHost::allocate()
  /// made it for free() to give back: the allocator's handle (freeing needs
  /// no address lookup) and the fence free() quarantines it with while
  /// users are still queued, made with the storage (free() must not fail).
  struct DeviceStorage {
    bufalloc::BlockHandle block;
    std::shared_ptr<CommandNode> fence;
  };
  /// Only EngineHost::allocate() and free() use it, which the engine calls
  /// with this buffer locked; each location has its own slot.
  DeviceStorage& device_storage(engine::Location at) { return device_storage_[at]; }

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::uint64_t id_;
  std::uint64_t size_;
  std::uint32_t flags_;
  std::byte* host_ = nullptr;  // the user's memory (USE_HOST_PTR) or owned_
  std::unique_ptr<std::byte, FreeDeleter> owned_;
  // One slot per location of the context (ContextState::by_location); before
  // `tracked`, so it outlives the frees that read it.
  std::vector<DeviceStorage> device_storage_;

 public:
  /// Last, so it goes first: its storage is handed back while the host copy
  /// still exists (an eviction's write-back may be targeting it).
  engine::Buffer tracked;
};

}  // namespace memlayer::runtime::detail

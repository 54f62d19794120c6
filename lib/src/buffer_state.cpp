#include "buffer_state.hpp"

#include <cstring>
#include <new>

#include "context_state.hpp"

namespace memlayer::runtime::detail {

BufferState::BufferState(std::shared_ptr<ContextState> context, std::uint64_t size, std::uint32_t flags,
                         void* user_host_ptr)
    : context_(std::move(context)),
      versions(size, migration::LocationSet::of(migration::kHost), context_->event_ops),
      instances(context_->by_location.size()),
      size_(size),
      flags_(flags) {
  if ((flags & mem::kUseHostPtr) != 0) {
    host_ = static_cast<std::byte*>(user_host_ptr);
  } else if ((flags & (mem::kCopyHostPtr | mem::kAllocHostPtr)) != 0) {
    host();
    if ((flags & mem::kCopyHostPtr) != 0) std::memcpy(host_, user_host_ptr, size);
  }
}

std::byte* BufferState::host() {
  if (host_ == nullptr) {
    // 128-byte alignment: what devices expect of a buffer's base address.
    const std::uint64_t rounded = (size_ + 127) / 128 * 128;
    owned_.reset(static_cast<std::byte*>(std::aligned_alloc(128, rounded)));
    if (!owned_) throw std::bad_alloc();
    host_ = owned_.get();
  }
  return host_;
}

BufferState::~BufferState() {
  // Every command that used this buffer held it alive until it finished, so
  // nothing can still be using the storage.
  for (std::size_t loc = 0; loc < instances.size(); ++loc) {
    Instance& inst = instances[loc];
    if (!inst.allocated) continue;
    DeviceState* dev = context_->by_location[loc];
    std::lock_guard mem(dev->memory_mutex);
    dev->driver().on_free(inst.address, size_);
    dev->memory->free(inst.address);
  }
}

}  // namespace memlayer::runtime::detail

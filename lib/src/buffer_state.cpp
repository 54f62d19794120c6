#include "buffer_state.hpp"

#include <cstring>
#include <new>

#include "context_state.hpp"

namespace memlayer::runtime::detail {

namespace {
// Content the user gave is valid at the host copy only; any other is
// undefined and valid anywhere (engine.hpp).
bool has_host_content(std::uint32_t flags) { return (flags & (mem::kUseHostPtr | mem::kCopyHostPtr)) != 0; }
}  // namespace

BufferState::BufferState(std::shared_ptr<ContextState> context, std::uint64_t size, std::uint32_t flags,
                         void* user_host_ptr)
    : context_(std::move(context)),
      id_(context_->next_buffer_id.fetch_add(1, std::memory_order_relaxed)),
      size_(size),
      flags_(flags),
      device_storage_(context_->by_location.size()),
      tracked(context_->engine, this, size, has_host_content(flags)) {
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

}  // namespace memlayer::runtime::detail

namespace memlayer::runtime {
std::uint64_t Buffer::id() const noexcept { return parent_ != nullptr ? parent_->id() : 0; }
std::uint64_t Buffer::bytes_lost() const { return parent_ != nullptr ? parent_->tracked.bytes_lost() : 0; }
}  // namespace memlayer::runtime

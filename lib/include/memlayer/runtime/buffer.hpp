// memlayer/runtime/buffer.hpp — a buffer, or a sub-buffer of one.
//
// A Buffer is a handle (copy it freely; the memory lives while any handle
// or in-flight command uses it). Creating one takes no device memory: the
// first command that uses it on a device allocates it there. A sub-buffer is
// (parent, origin, size) from the start: everything below the API sees the
// parent and a range, never a sub-buffer object.
#pragma once

#include <cstdint>
#include <memory>

namespace memlayer::runtime {

namespace detail {
class BufferState;
}

/// OpenCL's cl_mem_flags values.
namespace mem {
inline constexpr std::uint32_t kReadWrite = 1u << 0;
inline constexpr std::uint32_t kWriteOnly = 1u << 1;
inline constexpr std::uint32_t kReadOnly = 1u << 2;
inline constexpr std::uint32_t kUseHostPtr = 1u << 3;
inline constexpr std::uint32_t kAllocHostPtr = 1u << 4;
inline constexpr std::uint32_t kCopyHostPtr = 1u << 5;
inline constexpr std::uint32_t kHostWriteOnly = 1u << 7;
inline constexpr std::uint32_t kHostReadOnly = 1u << 8;
inline constexpr std::uint32_t kHostNoAccess = 1u << 9;
}  // namespace mem

class Buffer {
 public:
  Buffer() = default;  ///< an empty handle
  Buffer(std::shared_ptr<detail::BufferState> parent, std::uint64_t offset, std::uint64_t size, std::uint32_t flags,
         bool sub)
      : parent_(std::move(parent)), offset_(offset), size_(size), flags_(flags), sub_(sub) {}

  [[nodiscard]] bool valid() const noexcept { return parent_ != nullptr; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] std::uint32_t flags() const noexcept { return flags_; }
  [[nodiscard]] bool is_sub_buffer() const noexcept { return sub_; }
  /// A number naming the buffer (a sub-buffer: its parent) in error
  /// messages, unique within its context; 0 for an empty handle.
  [[nodiscard]] std::uint64_t id() const noexcept;
  /// Bytes of this buffer (a sub-buffer: of its parent) whose content
  /// failures lost so far: held nowhere any more, undefined since
  /// (doc/runtime.md, failures). 0 for an empty handle.
  [[nodiscard]] std::uint64_t bytes_lost() const;
  /// The origin in the parent (0 for a buffer).
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }

  [[nodiscard]] const std::shared_ptr<detail::BufferState>& parent() const noexcept { return parent_; }

 private:
  std::shared_ptr<detail::BufferState> parent_;
  std::uint64_t offset_ = 0;
  std::uint64_t size_ = 0;
  std::uint32_t flags_ = 0;
  bool sub_ = false;
};

}  // namespace memlayer::runtime

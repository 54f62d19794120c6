// memlayer/runtime/local_memory.hpp — a kernel launch's local memory.
//
// A device's local memory (DeviceInfo::local_mem_size per compute unit) holds
// a launch's __local arguments, laid out by bufalloc's LinearRegion and
// released together when the launch ends. The runtime checks the layout at
// enqueue, so a launch that asks for more than the device has fails cleanly
// there; drivers lay the arguments out the same way when they run it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "memlayer/runtime/status.hpp"

namespace memlayer::runtime {

/// Every local argument's alignment: the largest OpenCL C vector type.
inline constexpr std::uint64_t kLocalAlignment = 128;

/// Offsets of the local arguments in a local space of `capacity` bytes.
/// Errors: kInvalidKernelArgs for a zero size, kOutOfResources when they do
/// not fit (the message gives the request and the capacity). O(arguments).
Result<std::vector<std::uint64_t>> layout_local(std::span<const std::uint64_t> sizes, std::uint64_t capacity);

/// For drivers whose local memory is host memory: lays the local arguments
/// out in the calling worker thread's own local memory of `capacity` bytes
/// (one compute unit's; reused by every launch on the thread) and appends
/// their pointers. Errors as layout_local(); kOutOfHostMemory.
Status append_local_pointers(std::span<const std::uint64_t> sizes, std::uint64_t capacity,
                             std::vector<void*>& pointers);

}  // namespace memlayer::runtime

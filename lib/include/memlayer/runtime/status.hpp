// memlayer/runtime/status.hpp — how the runtime reports failure: OpenCL's
// error codes (the same values, so a C boundary passes them through) with a
// message that names the problem.
#pragma once

#include <string>
#include <utility>

#include "memlayer/bufalloc/error.hpp"

namespace memlayer::runtime {

/// OpenCL's values for the errors memlayer reports.
namespace cl {
inline constexpr int kSuccess = 0;
inline constexpr int kMemObjectAllocationFailure = -4;
inline constexpr int kOutOfResources = -5;
inline constexpr int kOutOfHostMemory = -6;
inline constexpr int kMapFailure = -12;
inline constexpr int kMisalignedSubBufferOffset = -13;
inline constexpr int kExecStatusErrorForEventsInWaitList = -14;
inline constexpr int kInvalidValue = -30;
inline constexpr int kInvalidDevice = -33;
inline constexpr int kInvalidContext = -34;
inline constexpr int kInvalidCommandQueue = -36;
inline constexpr int kInvalidHostPtr = -37;
inline constexpr int kInvalidMemObject = -38;
inline constexpr int kInvalidKernelArgs = -52;
inline constexpr int kInvalidEventWaitList = -57;
inline constexpr int kInvalidEvent = -58;
inline constexpr int kInvalidOperation = -59;
inline constexpr int kInvalidBufferSize = -61;

// Command execution states, as clGetEventInfo reports them.
inline constexpr int kComplete = 0;
inline constexpr int kRunning = 1;
inline constexpr int kSubmitted = 2;
inline constexpr int kQueued = 3;
}  // namespace cl

/// Success, or an OpenCL error code (< 0) with a message that names the
/// problem ("sim0: transfer failed (injected, probability 0.01)").
struct Status {
  int code = 0;
  std::string message;
  /// A failure that changed no byte the operation was to write: it failed
  /// before it started (a transfer refused before moving anything). The
  /// command it fails then counts as one that never ran, so the bytes it
  /// was to write keep their content before it, also where it ran
  /// (doc/runtime.md, failures); without it a failed command may have
  /// written part of them there, and their content only there is lost.
  bool changed_nothing = false;

  [[nodiscard]] bool ok() const noexcept { return code == 0; }
  static Status success() { return {}; }
  static Status error(int code, std::string message) { return Status{code, std::move(message)}; }
  /// A failure that changed nothing (changed_nothing).
  static Status error_before_start(int code, std::string message) { return Status{code, std::move(message), true}; }
};

/// A value or a Status: the runtime's fallible calls return this.
template <class T>
using Result = bufalloc::Result<T, Status>;

}  // namespace memlayer::runtime

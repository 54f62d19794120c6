// memlayer/bufalloc/error.hpp — the typed errors of bufalloc and the Result
// type every fallible bufalloc call returns.
//
// bufalloc never throws and never aborts on bad input: each failure is a
// named `Errc` plus the figures needed to explain it (the request, the free
// bytes, the largest free block, the offending address). `Error::message()`
// renders those into one line for logs and for the C API.
#pragma once

#include <cstdint>
#include <variant>
#include <string>
#include <utility>

namespace memlayer::bufalloc {

/// An address inside a managed space. The space may be device memory the host
/// cannot touch: bufalloc only does arithmetic on these numbers.
using Address = std::uint64_t;
/// A byte count inside a managed space.
using Size = std::uint64_t;

/// Every way a bufalloc call can fail. The numeric values are stable: the C
/// API (memlayer/bufalloc.h) exposes them as `ml_status`.
enum class Errc : int {
  ok = 0,
  zero_size = 1,                  ///< allocate(0): no zero-byte blocks
  size_overflow = 2,              ///< size rounded up to the granularity exceeds 2^64-1
  alignment_not_power_of_two = 3, ///< alignment is not 0 and not a power of two
  alignment_overflow = 4,         ///< size plus alignment padding exceeds 2^64-1
  out_of_memory = 5,              ///< no free block can hold the request
  address_outside_region = 6,     ///< free(): address not in [base, base + size)
  not_block_start = 7,            ///< free(): address is inside a live block, not its start
  double_free = 8,                ///< free(): address lies in free space (freed twice, or never allocated)
  region_empty = 9,               ///< create(): usable size is 0 (size < granularity)
  region_wraps = 10,              ///< create(): base + size exceeds 2^64-1
  granularity_not_power_of_two = 11, ///< create(): granularity is 0 or not a power of two
  misaligned_base = 12,           ///< create(): base is not a multiple of the granularity
  stale_mark = 13,                ///< LinearRegion::rollback() with a mark that is no longer valid
  invariant_violation = 14,       ///< check(): the bookkeeping is inconsistent (a bug)
  invalid_argument = 15,          ///< C API: a null pointer where an object is required
  host_out_of_memory = 16,        ///< C API: the host could not grow the bookkeeping
  // 17-19 are the migration planner's (memlayer/status.h).
  stale_handle = 20,              ///< free(handle): its block was freed and its record reused since
  foreign_handle = 21,            ///< free(handle): not issued by this region (another's, zeroed, or altered)
  no_hole = 22,                   ///< cheapest_hole(): no run of free and evictable blocks can hold the request
};

/// The short, fixed name of an error code ("out_of_memory", ...).
/// Complexity O(1); thread-safe.
const char* errc_name(Errc code) noexcept;

/// A failure with the figures that explain it. Trivially copyable on purpose:
/// it travels inside Result<> on the hot path without allocating.
struct Error {
  Errc code = Errc::ok;
  Size size = 0;          ///< the requested size (allocation errors)
  Size alignment = 0;     ///< the requested alignment (allocation errors)
  Address address = 0;    ///< the offending address (free errors: the handle's address), or the base (create errors)
  Size free_bytes = 0;    ///< free bytes in the region when the request failed
  Size largest_free = 0;  ///< largest free block when the request failed

  /// One line naming the problem with its figures, e.g.
  /// "out_of_memory: request of 4096 bytes (alignment 64) failed; 1024 bytes
  /// free, largest free block 512 bytes". Allocates; call it off the hot path.
  [[nodiscard]] std::string message() const;
};

/// Either a value or an error (an Error here; other layers of memlayer use
/// the same type with their own error). Success carries just the value (no
/// error figures to fill in), so the hot path pays for one tag and the value.
template <class T, class E = Error>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(E error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit by design

  [[nodiscard]] bool ok() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  /// The value. Precondition: ok().
  [[nodiscard]] const T& value() const& noexcept { return *std::get_if<0>(&state_); }
  [[nodiscard]] T& value() & noexcept { return *std::get_if<0>(&state_); }
  [[nodiscard]] T&& value() && noexcept { return std::move(*std::get_if<0>(&state_)); }
  /// The error; a default-constructed E (Errc::ok for Error) when ok().
  [[nodiscard]] const E& error() const noexcept {
    static const E kNone{};
    const E* e = std::get_if<1>(&state_);
    return e != nullptr ? *e : kNone;
  }

 private:
  std::variant<T, E> state_;
};

template <class E>
class [[nodiscard]] Result<void, E> {
 public:
  Result() = default;
  Result(E error) : error_(std::move(error)), failed_(true) {}  // NOLINT: implicit by design
  [[nodiscard]] bool ok() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const E& error() const noexcept { return error_; }

 private:
  E error_{};
  bool failed_ = false;
};

}  // namespace memlayer::bufalloc

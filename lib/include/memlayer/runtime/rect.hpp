// memlayer/runtime/rect.hpp — the byte boxes of OpenCL's *Rect commands
// (clEnqueueReadBufferRect, WriteBufferRect, CopyBufferRect).
//
// A box is region[2] slices of region[1] rows of region[0] bytes, laid out in
// a buffer (or in host memory) with a row pitch and a slice pitch, starting at
// origin {x bytes, y rows, z slices}. Row (y, z) of the box starts at
//   (origin[2] + z) × slice_pitch + (origin[1] + y) × row_pitch + origin[0].
// Rows never overlap one another (OpenCL's pitch rules guarantee it), and
// they lie in increasing order, slice by slice.
//
// Thread-safety: value types; RectBox is immutable.
#pragma once

#include <array>
#include <cstdint>

#include "memlayer/runtime/status.hpp"

namespace memlayer::runtime {

/// Where a box lies in its memory. A pitch of 0 means tightly packed:
/// row_pitch = region[0], slice_pitch = region[1] × row_pitch.
struct RectLayout {
  std::array<std::uint64_t, 3> origin{};
  std::uint64_t row_pitch = 0;
  std::uint64_t slice_pitch = 0;
};

/// {bytes per row, rows, slices}.
using RectRegion = std::array<std::uint64_t, 3>;

/// A layout checked against a region, its pitches resolved.
class RectBox {
 public:
  /// Errors (kInvalidValue, the message starting with `what`): a region
  /// element of 0; a row pitch below region[0]; a slice pitch below
  /// region[1] × row pitch, or not a multiple of the row pitch; a box whose
  /// offsets do not fit in 64 bits. O(1).
  static Result<RectBox> make(const RectLayout& layout, const RectRegion& region, const char* what);

  /// Offset of the box's first byte, and one past its last: every byte of
  /// the box lies in [first, end).
  [[nodiscard]] std::uint64_t first() const noexcept { return first_; }
  [[nodiscard]] std::uint64_t end() const noexcept { return end_; }
  /// True when the box is all of [first, end) (no gaps between rows or
  /// slices).
  [[nodiscard]] bool contiguous() const noexcept { return end_ - first_ == region_[0] * region_[1] * region_[2]; }
  [[nodiscard]] std::uint64_t row_offset(std::uint64_t y, std::uint64_t z) const noexcept {
    return first_ + z * slice_pitch_ + y * row_pitch_;
  }
  [[nodiscard]] const RectRegion& region() const noexcept { return region_; }
  [[nodiscard]] std::uint64_t row_pitch() const noexcept { return row_pitch_; }
  [[nodiscard]] std::uint64_t slice_pitch() const noexcept { return slice_pitch_; }

  /// Calls f(row_offset) for every row, in increasing offset order.
  /// O(region[1] × region[2]).
  template <class F>
  void for_each_row(F&& f) const {
    for (std::uint64_t z = 0; z < region_[2]; ++z)
      for (std::uint64_t y = 0; y < region_[1]; ++y) f(row_offset(y, z));
  }

  /// Whether some byte lies in both boxes, `a` shifted by a_base and `b` by
  /// b_base within one memory (the same region). O(rows of a).
  friend bool overlap(const RectBox& a, std::uint64_t a_base, const RectBox& b, std::uint64_t b_base);

 private:
  RectBox(std::uint64_t first, std::uint64_t end, std::uint64_t row_pitch, std::uint64_t slice_pitch,
          const RectRegion& region)
      : first_(first), end_(end), row_pitch_(row_pitch), slice_pitch_(slice_pitch), region_(region) {}
  /// The start of the last row that starts at or before `offset` (both
  /// relative to the box's first byte, where row 0 starts).
  [[nodiscard]] std::uint64_t last_row_at_or_before(std::uint64_t offset) const noexcept;

  std::uint64_t first_;
  std::uint64_t end_;
  std::uint64_t row_pitch_;
  std::uint64_t slice_pitch_;
  RectRegion region_;
};

bool overlap(const RectBox& a, std::uint64_t a_base, const RectBox& b, std::uint64_t b_base);

/// Calls f(a_row, b_row) -> Status for the rows of two boxes of one region,
/// row by row in order, and stops at the first failure, returning it: one
/// that changed nothing (Status::changed_nothing) only if no row before it
/// was done.
template <class F>
Status for_each_row_pair(const RectBox& a, const RectBox& b, F&& f) {
  bool first = true;
  for (std::uint64_t z = 0; z < a.region()[2]; ++z) {
    for (std::uint64_t y = 0; y < a.region()[1]; ++y) {
      if (Status s = f(a.row_offset(y, z), b.row_offset(y, z)); !s.ok()) {
        s.changed_nothing = s.changed_nothing && first;
        return s;
      }
      first = false;
    }
  }
  return Status{};
}

}  // namespace memlayer::runtime

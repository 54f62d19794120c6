#include "memlayer/runtime/rect.hpp"

#include <algorithm>
#include <string>

namespace memlayer::runtime {

namespace {

// Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false
// positive) on `"literal" + std::string` chains.
std::string describe(const RectLayout& l, const RectRegion& r) {
  std::string out;
  auto triple = [&out](const std::array<std::uint64_t, 3>& v) {
    out += '{';
    for (std::size_t i = 0; i < 3; ++i) out.append(i == 0 ? "" : ", ").append(std::to_string(v[i]));
    out += '}';
  };
  out += "origin ";
  triple(l.origin);
  out += ", region ";
  triple(r);
  out.append(", row pitch ").append(std::to_string(l.row_pitch));
  out.append(", slice pitch ").append(std::to_string(l.slice_pitch));
  return out;
}

// a * b + c, false on overflow.
bool mul_add(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t& out) {
  std::uint64_t p = 0;
  return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, &out);
}

}  // namespace

Result<RectBox> RectBox::make(const RectLayout& layout, const RectRegion& region, const char* what) {
  auto bad = [&](const char* why) {
    return Status::error(cl::kInvalidValue, std::string(what) + ": " + why + " (" + describe(layout, region) + ")");
  };
  if (region[0] == 0 || region[1] == 0 || region[2] == 0) return bad("a region element is 0");
  const std::uint64_t row = layout.row_pitch != 0 ? layout.row_pitch : region[0];
  if (row < region[0]) return bad("the row pitch is below region[0]");
  std::uint64_t min_slice = 0;
  if (!mul_add(region[1], row, 0, min_slice)) return bad("the box does not fit in 64 bits");
  const std::uint64_t slice = layout.slice_pitch != 0 ? layout.slice_pitch : min_slice;
  if (slice < min_slice) return bad("the slice pitch is below region[1] x row pitch");
  if (slice % row != 0) return bad("the slice pitch is not a multiple of the row pitch");
  std::uint64_t first = 0, extent = 0, end = 0;
  if (!mul_add(layout.origin[2], slice, 0, first) || !mul_add(layout.origin[1], row, first, first) ||
      !mul_add(1, layout.origin[0], first, first) || !mul_add(region[2] - 1, slice, 0, extent) ||
      !mul_add(region[1] - 1, row, extent, extent) || !mul_add(1, region[0], extent, extent) ||
      !mul_add(1, first, extent, end))
    return bad("the box does not fit in 64 bits");
  return RectBox(first, end, row, slice, region);
}

std::uint64_t RectBox::last_row_at_or_before(std::uint64_t offset) const noexcept {
  const std::uint64_t z = std::min(region_[2] - 1, offset / slice_pitch_);
  const std::uint64_t y = std::min(region_[1] - 1, (offset - z * slice_pitch_) / row_pitch_);
  return z * slice_pitch_ + y * row_pitch_;
}

bool overlap(const RectBox& a, std::uint64_t a_base, const RectBox& b, std::uint64_t b_base) {
  if (a_base + a.end() <= b_base + b.first() || b_base + b.end() <= a_base + a.first()) return false;
  // Walk the rows of the box with fewer; for each, only the last row of the
  // other that starts before it ends can reach it (rows are ordered and
  // disjoint, all of one width).
  const bool a_fewer = a.region()[1] * a.region()[2] <= b.region()[1] * b.region()[2];
  const RectBox& walk = a_fewer ? a : b;
  const RectBox& other = a_fewer ? b : a;
  const std::uint64_t walk_base = a_fewer ? a_base : b_base;
  const std::uint64_t other_start = (a_fewer ? b_base : a_base) + other.first();
  bool found = false;
  walk.for_each_row([&](std::uint64_t row) {
    if (found) return;
    const std::uint64_t s = walk_base + row, last = s + walk.region()[0] - 1;
    if (last < other_start) return;
    if (other_start + other.last_row_at_or_before(last - other_start) + other.region()[0] > s) found = true;
  });
  return found;
}

}  // namespace memlayer::runtime

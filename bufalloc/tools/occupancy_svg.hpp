// Draws a Region's occupancy as SVG: the address range folded into rows of
// pixels, each pixel shaded by the fraction of its bytes in live blocks, so
// fragmentation shows at a glance whatever the block count (a pixel can
// cover thousands of blocks; the file size depends on the picture, not on
// the region). A caption carries the statistics.
#pragma once

#include <string>

#include "memlayer/bufalloc/region.hpp"

namespace memlayer::tools {

struct SvgLayout {
  int columns = 512;  ///< pixels per row
  int rows = 64;      ///< rows; the range is split evenly across columns*rows pixels
  int pixel = 2;      ///< drawn size of one pixel
};

/// The SVG document for `region`'s current blocks. `title` heads the caption;
/// '\n' in it starts a new line.
/// O(blocks + columns*rows).
std::string occupancy_svg(const bufalloc::Region& region, const std::string& title, const SvgLayout& layout = {});

}  // namespace memlayer::tools

#include "occupancy_svg.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

namespace memlayer::tools {

namespace {

std::string human(bufalloc::Size bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Used fraction 0..1 -> a colour from free (pale) to full (deep blue); the
// middle shades are pixels shared by live blocks and holes.
std::string shade(double used) {
  const int level = static_cast<int>(used * 8.0 + 0.5);  // 9 steps keep the file small
  static const char* palette[] = {"#f4f1ea", "#dfe6f2", "#c6d4ea", "#a9bfe0", "#8aa8d4",
                                  "#6b8fc6", "#4e76b6", "#355ea3", "#1f4788"};
  return palette[std::clamp(level, 0, 8)];
}

}  // namespace

std::string occupancy_svg(const bufalloc::Region& region, const std::string& title, const SvgLayout& layout) {
  const long pixels = static_cast<long>(layout.columns) * layout.rows;
  const double per_pixel = static_cast<double>(region.size()) / static_cast<double>(pixels);
  std::vector<double> used(static_cast<size_t>(pixels), 0.0);

  // Spread every live block's bytes over the pixels it covers.
  region.walk([&](const bufalloc::BlockInfo& b) {
    if (b.free) return;
    double start = static_cast<double>(b.address - region.base()) / per_pixel;
    const double end = start + static_cast<double>(b.size) / per_pixel;
    while (start < end) {
      const long px = static_cast<long>(start);
      if (px >= pixels) break;
      const double next = std::min(end, static_cast<double>(px + 1));
      used[static_cast<size_t>(px)] += next - start;
      start = next;
    }
  });

  const auto st = region.stats();
  const int width = layout.columns * layout.pixel;
  const int map_height = layout.rows * layout.pixel;
  // The title may span several lines ('\n'); the statistics follow it.
  std::vector<std::string> title_lines;
  for (size_t start = 0;;) {
    const size_t nl = title.find('\n', start);
    title_lines.push_back(title.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  const int title_height = 18 * static_cast<int>(title_lines.size());
  const int caption_top = map_height + 24 + title_height - 18;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width + 20 << "\" height=\""
      << caption_top + 70 << "\" font-family=\"monospace\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<g transform=\"translate(10,10)\" shape-rendering=\"crispEdges\">\n";
  for (int row = 0; row < layout.rows; ++row) {
    // Runs of equal shade become one rect.
    int col = 0;
    while (col < layout.columns) {
      const std::string colour = shade(used[static_cast<size_t>(row * layout.columns + col)]);
      int run = 1;
      while (col + run < layout.columns && shade(used[static_cast<size_t>(row * layout.columns + col + run)]) == colour)
        ++run;
      svg << "<rect x=\"" << col * layout.pixel << "\" y=\"" << row * layout.pixel << "\" width=\""
          << run * layout.pixel << "\" height=\"" << layout.pixel << "\" fill=\"" << colour << "\"/>\n";
      col += run;
    }
  }
  svg << "<rect width=\"" << width << "\" height=\"" << map_height
      << "\" fill=\"none\" stroke=\"#333\" stroke-width=\"1\"/>\n</g>\n";

  char frag[32];
  std::snprintf(frag, sizeof frag, "%.1f%%", st.fragmentation() * 100.0);
  char util[32];
  std::snprintf(util, sizeof util, "%.1f%%",
                100.0 * static_cast<double>(st.used_bytes) / static_cast<double>(st.total_bytes));
  for (size_t i = 0; i < title_lines.size(); ++i) {
    svg << "<text x=\"10\" y=\"" << caption_top - title_height + 18 * static_cast<int>(i + 1)
        << "\" font-weight=\"bold\">" << escape(title_lines[i]) << "</text>\n";
  }
  svg << "<text x=\"10\" y=\"" << caption_top + 18 << "\">region " << human(st.total_bytes) << " at 0x" << std::hex
      << region.base() << std::dec << ", " << human(static_cast<bufalloc::Size>(per_pixel))
      << " per pixel, left to right, top to bottom; darker = more bytes in live blocks</text>\n";
  svg << "<text x=\"10\" y=\"" << caption_top + 36 << "\">used " << human(st.used_bytes) << " (" << util
      << ") in " << st.live_blocks << " blocks; free " << human(st.free_bytes) << " in " << st.free_blocks
      << " holes; largest free " << human(st.largest_free) << "; fragmentation " << frag << "</text>\n";
  svg << "<text x=\"10\" y=\"" << caption_top + 54 << "\">peak " << human(st.peak_used_bytes) << "; failed requests "
      << st.failed_requests << "; fallback searches " << st.slow_searches << "</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace memlayer::tools

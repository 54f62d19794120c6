// memlayer-region-svg: replay a workload on a Region and write its occupancy
// as SVG. See --help.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "occupancy_svg.hpp"
#include "replay.hpp"

using namespace memlayer;

namespace {

const char* kUsage = R"(usage: memlayer-region-svg [options]
Replays a workload on a memlayer Region and writes its occupancy as SVG.
  --out FILE          output file (default region.svg)
  --region BYTES      region size, suffixes K M G (default 64M)
  --granularity N     block granularity (default 64)
  --trace FILE        replay a trace ('a ID SIZE [ALIGN]', 'f ID', 'r')
  --min BYTES         synthetic: smallest request (default 64)
  --max BYTES         synthetic: largest request (default 64K)
  --free-prob P       synthetic fill: probability a step frees (default 0.333, < 0.5)
  --churn N           synthetic: steps after the first failure (default 0)
  --churn-free-prob P synthetic churn: probability a step frees (default 0.5)
  --seed N            synthetic: random seed (default 1)
  --columns N --rows N --pixel N   picture layout (default 512 x 64, 2 px)
Without --trace: random allocations and frees until the first failed one.)";

bool parse_size(const std::string& text, bufalloc::Size& out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return false;
  bufalloc::Size mult = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") mult = 1024;
  else if (suffix == "M" || suffix == "m") mult = 1024 * 1024;
  else if (suffix == "G" || suffix == "g") mult = 1024ull * 1024 * 1024;
  else if (!suffix.empty()) return false;
  out = v * mult;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "region.svg", trace_path;
  bufalloc::Size region_size = 64ull << 20, granularity = 64;
  tools::SyntheticWorkload w;
  tools::SvgLayout layout;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::puts(kUsage);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "memlayer-region-svg: %s needs a value\n%s\n", arg.c_str(), kUsage);
      return 2;
    }
    const std::string value = argv[++i];
    bool ok = true;
    if (arg == "--out") out_path = value;
    else if (arg == "--trace") trace_path = value;
    else if (arg == "--region") ok = parse_size(value, region_size);
    else if (arg == "--granularity") ok = parse_size(value, granularity);
    else if (arg == "--min") ok = parse_size(value, w.min_size);
    else if (arg == "--max") ok = parse_size(value, w.max_size);
    else if (arg == "--churn") ok = parse_size(value, w.churn_ops);
    else if (arg == "--seed") ok = parse_size(value, w.seed);
    else if (arg == "--free-prob") w.fill_free_probability = std::atof(value.c_str());
    else if (arg == "--churn-free-prob") w.churn_free_probability = std::atof(value.c_str());
    else if (arg == "--columns") layout.columns = std::atoi(value.c_str());
    else if (arg == "--rows") layout.rows = std::atoi(value.c_str());
    else if (arg == "--pixel") layout.pixel = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "memlayer-region-svg: unknown option %s\n%s\n", arg.c_str(), kUsage);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "memlayer-region-svg: bad value '%s' for %s\n", value.c_str(), arg.c_str());
      return 2;
    }
  }
  if (w.min_size == 0 || w.max_size < w.min_size || w.fill_free_probability < 0 || w.fill_free_probability >= 0.5 ||
      w.churn_free_probability < 0 || w.churn_free_probability > 1 || layout.columns <= 0 || layout.rows <= 0 ||
      layout.pixel <= 0) {
    std::fprintf(stderr,
                 "memlayer-region-svg: need 0 < min <= max, 0 <= free-prob < 0.5, 0 <= churn-free-prob <= 1, "
                 "positive layout\n");
    return 2;
  }

  auto made = bufalloc::Region::create(0, region_size, bufalloc::RegionOptions{granularity});
  if (!made) {
    std::fprintf(stderr, "memlayer-region-svg: %s\n", made.error().message().c_str());
    return 2;
  }
  bufalloc::Region& region = made.value();
  tools::ReplayResult result;
  std::string title;
  if (!trace_path.empty()) {
    std::ifstream trace(trace_path);
    if (!trace) {
      std::fprintf(stderr, "memlayer-region-svg: cannot open trace %s\n", trace_path.c_str());
      return 2;
    }
    if (std::string err = tools::replay_trace(region, trace, result); !err.empty()) {
      std::fprintf(stderr, "memlayer-region-svg: %s: %s\n", trace_path.c_str(), err.c_str());
      return 1;
    }
    title = "memlayer bufalloc: trace " + trace_path;
  } else {
    result = tools::replay_synthetic(region, w);
    title = "memlayer bufalloc: random sizes " + std::to_string(w.min_size) + "-" + std::to_string(w.max_size) +
            " B, seed " + std::to_string(w.seed) + ": filled to the first failed allocation";
    if (w.churn_ops) {
      char churn[96];
      std::snprintf(churn, sizeof churn, ", then %llu steps freeing with p=%.2f",
                    static_cast<unsigned long long>(w.churn_ops), w.churn_free_probability);
      title += churn;
    }
  }
  char util[64];
  std::snprintf(util, sizeof util, "live requested bytes = %.2f%% of the region",
                100.0 * static_cast<double>(result.live_requested) / static_cast<double>(region.size()));
  title += std::string("\n") + util;

  std::ofstream out(out_path);
  out << tools::occupancy_svg(region, title, layout);
  if (!out) {
    std::fprintf(stderr, "memlayer-region-svg: cannot write %s\n", out_path.c_str());
    return 1;
  }
  const auto st = region.stats();
  std::printf("%s: %llu steps, %llu live blocks, fragmentation %.3f; %s\n", out_path.c_str(),
              static_cast<unsigned long long>(result.steps), static_cast<unsigned long long>(st.live_blocks),
              st.fragmentation(), util);
  return 0;
}

// The occupancy picture and the trace replayer behind memlayer-region-svg.
#include <gtest/gtest.h>

#include <sstream>

#include "occupancy_svg.hpp"
#include "replay.hpp"

using namespace memlayer;

namespace {
bufalloc::Region make(bufalloc::Size size) { return std::move(bufalloc::Region::create(0, size, {64})).value(); }

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(OccupancySvg, ShadesUsedAndFreePixelsAndCaptionsStats) {
  auto r = make(64 * 100);
  std::istringstream trace("a x 3200\na y 64\nf x\n");
  tools::ReplayResult res;
  ASSERT_EQ(tools::replay_trace(r, trace, res), "");
  EXPECT_EQ(res.live_requested, 64u);
  // 10 columns x 1 row: 640 B a pixel. [0, 3200) free, [3200, 3264) used, rest free.
  const std::string svg = tools::occupancy_svg(r, "t<1>", {10, 1, 4});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("t&lt;1&gt;"), std::string::npos) << "title must be escaped";
  EXPECT_NE(svg.find("in 1 blocks"), std::string::npos);
  EXPECT_NE(svg.find("in 2 holes"), std::string::npos);
  // Pixel 5 holds the 64 used bytes out of 640: a pale shade, between two free runs.
  EXPECT_EQ(count(svg, "fill=\"#f4f1ea\""), 2);
  EXPECT_EQ(count(svg, "fill=\"#dfe6f2\""), 1);
}

TEST(OccupancySvg, FullRegionIsOneDarkRun) {
  auto r = make(64 * 100);
  ASSERT_TRUE(r.allocate(6400).ok());
  const std::string svg = tools::occupancy_svg(r, "full", {10, 2, 1});
  EXPECT_EQ(count(svg, "fill=\"#1f4788\""), 2);  // one run per row
  EXPECT_NE(svg.find("(100.0%)"), std::string::npos);
}

TEST(ReplayTrace, ReportsMalformedLinesByNumber) {
  auto r = make(4096);
  tools::ReplayResult res;
  std::istringstream bad_op("a x 64\n# comment\nq\n");
  EXPECT_EQ(tools::replay_trace(r, bad_op, res), "line 3: unknown operation 'q' (expected a, f or r)");
  std::istringstream unknown("f nope\n");
  EXPECT_EQ(tools::replay_trace(r, unknown, res), "line 1: no live block named 'nope'");
  std::istringstream twice("a y 64\na y 64\n");
  EXPECT_EQ(tools::replay_trace(r, twice, res), "line 2: block 'y' is already live");
  std::istringstream missing("a z\n");
  EXPECT_EQ(tools::replay_trace(r, missing, res), "line 1: expected 'a ID SIZE [ALIGNMENT]'");
}

TEST(ReplaySynthetic, StopsAtFirstFailureWithHighUtilisation) {
  auto r = make(4 << 20);
  const auto res = tools::replay_synthetic(r, tools::SyntheticWorkload{});
  EXPECT_EQ(r.stats().failed_requests, 1u);
  EXPECT_GT(static_cast<double>(res.live_requested) / static_cast<double>(r.size()), 0.9);
  std::string what;
  EXPECT_TRUE(r.check(&what).ok()) << what;
}

TEST(OccupancySvg, MultiLineTitleBecomesSeveralTextLines) {
  auto r = make(64 * 100);
  const std::string svg = tools::occupancy_svg(r, "first\nsecond", {10, 1, 1});
  EXPECT_NE(svg.find(">first</text>"), std::string::npos);
  EXPECT_NE(svg.find(">second</text>"), std::string::npos);
}

TEST(ReplaySynthetic, ChurnPhaseRunsAfterTheFill) {
  auto r = make(4 << 20);
  tools::SyntheticWorkload w;
  w.churn_ops = 2000;
  w.churn_free_probability = 0.9;  // mostly frees: the region drains
  const auto res = tools::replay_synthetic(r, w);
  EXPECT_LT(static_cast<double>(res.live_requested) / static_cast<double>(r.size()), 0.5);
  EXPECT_EQ(r.stats().peak_used_bytes > r.size() * 9 / 10, true);
}

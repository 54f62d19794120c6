// Workloads the SVG tool replays on a Region: a synthetic one (random sizes,
// random frees) or a recorded trace.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

#include "memlayer/bufalloc/region.hpp"

namespace memlayer::tools {

struct SyntheticWorkload {
  bufalloc::Size min_size = 64;
  bufalloc::Size max_size = 64 * 1024;  ///< sizes are log-uniform in [min_size, max_size]
  /// Fill phase: each step frees a random live block with this probability,
  /// else allocates, until the first failed allocation. Below 1/2, so the
  /// region fills.
  double fill_free_probability = 1.0 / 3.0;
  std::uint64_t churn_ops = 0;            ///< churn phase: steps after the first failure
  double churn_free_probability = 0.5;    ///< churn phase: probability a step frees
  std::uint64_t seed = 1;
  std::uint64_t max_steps = 100'000'000;  ///< a bound on the fill phase, whatever the sizes
};

struct ReplayResult {
  std::uint64_t steps = 0;
  bufalloc::Size live_requested = 0;  ///< bytes asked for by the blocks still live
};

/// Allocates and frees at random until the first failed allocation (or
/// max_steps), then runs churn_ops more steps (failures allowed). O(steps).
ReplayResult replay_synthetic(bufalloc::Region& region, const SyntheticWorkload& w);

/// Replays a trace, one operation a line ('#' starts a comment):
///   a ID SIZE [ALIGNMENT]   allocate and name the block ID
///   f ID                    free block ID
///   r                       reset the region
/// Returns an error message naming the line on a malformed line, an unknown
/// ID, or a failed free; failed allocations are counted, not fatal.
std::string replay_trace(bufalloc::Region& region, std::istream& trace, ReplayResult& result);

}  // namespace memlayer::tools

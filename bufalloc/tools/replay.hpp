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
  double free_probability = 1.0 / 3.0;  ///< each step frees a random live block with this probability
  std::uint64_t seed = 1;
  std::uint64_t churn_ops = 0;  ///< steps to go on after the first failed allocation
};

struct ReplayResult {
  std::uint64_t steps = 0;
  bufalloc::Size live_requested = 0;  ///< bytes asked for by the blocks still live
};

/// Allocates and frees at random until the first failed allocation, then runs
/// churn_ops more steps (failures allowed). O(steps).
ReplayResult replay_synthetic(bufalloc::Region& region, const SyntheticWorkload& w);

/// Replays a trace, one operation a line ('#' starts a comment):
///   a ID SIZE [ALIGNMENT]   allocate and name the block ID
///   f ID                    free block ID
///   r                       reset the region
/// Returns an error message naming the line on a malformed line, an unknown
/// ID, or a failed free; failed allocations are counted, not fatal.
std::string replay_trace(bufalloc::Region& region, std::istream& trace, ReplayResult& result);

}  // namespace memlayer::tools

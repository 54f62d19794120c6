// The workloads every allocator in memlayer-bench-bufalloc runs: one random
// stream per seed, so each allocator sees the same requests in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace memlayer::bench {

using Address = std::uint64_t;
using Size = std::uint64_t;

// Far from 0 so that no allocator can confuse a valid address with "none".
inline constexpr Address kBase = 0x1'0000'0000;
inline constexpr Size kAlignment = 64;
inline constexpr Size kKiB = 1024;
inline constexpr Size kMiB = 1024 * kKiB;
inline constexpr Size kGiB = 1024 * kMiB;

/// std::mt19937_64 is fully specified by the standard, unlike the standard
/// distributions, so these helpers keep every stream identical on any library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}

  /// Uniform in [0, 1) with 53 random bits.
  double unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform in [0, n); the modulo bias is below 2^-40 for the n used here.
  std::size_t index(std::size_t n) { return static_cast<std::size_t>(engine_() % n); }
  /// Integer bytes in [lo, hi], log-uniform: each doubling is equally likely.
  Size log_uniform(Size lo, Size hi);

 private:
  std::mt19937_64 engine_;
};

/// The alloc+free pair workload: `prefill` sizes fill the region, then pair i
/// frees live block `victim[i]` and allocates `size[i]` in its slot.
struct PairTrace {
  std::vector<Size> prefill;
  std::vector<std::uint32_t> victim;
  std::vector<Size> size;
};

inline constexpr Size kPairRegion = 1 * kGiB;
inline constexpr Size kPairMinSize = 64;
inline constexpr Size kPairMaxSize = 16 * kKiB;

PairTrace make_pair_trace(std::size_t live, std::size_t pairs, std::uint64_t seed);

/// A fill-until-failure workload for the utilisation benchmarks.
struct UtilWorkload {
  const char* name;
  Size region;
  Size min_size;
  Size max_size;
};

inline constexpr UtilWorkload kUtilSmall{"64MiB_64B-64KiB", 64 * kMiB, 64, 64 * kKiB};
inline constexpr UtilWorkload kUtilLarge{"1GiB_4KiB-16MiB", 1 * kGiB, 4 * kKiB, 16 * kMiB};

// Benchmark names, shared by the registration and the summary table.
inline constexpr const char* kMemlayer = "memlayer";
inline constexpr const char* kBaseline = "before";  ///< Region before handles (baseline/)
inline constexpr const char* kPocl = "pocl_tight";
inline constexpr const char* kBestFit = "best_fit";

/// A benchmark is named "<workload>/<allocator>".
std::string pair_workload_name(std::size_t live);
std::string util_workload_name(const UtilWorkload& workload);
std::string benchmark_name(const std::string& workload, const char* allocator);

/// How much work one run does; --quick shrinks it for CI smoke tests.
struct RunConfig {
  bool quick = false;
  int util_seeds = 10;
  int latency_repetitions = 5;
};

}  // namespace memlayer::bench

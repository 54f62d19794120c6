#include "workloads.hpp"

#include <cmath>

namespace memlayer::bench {

Size Rng::log_uniform(Size lo, Size hi) {
  // Sampling ln(size) over [ln lo, ln(hi + 1)) and flooring gives integer
  // sizes whose distribution is log-uniform over the closed range.
  const double ln_lo = std::log(static_cast<double>(lo));
  const double ln_hi = std::log(static_cast<double>(hi) + 1.0);
  const auto size = static_cast<Size>(std::exp(ln_lo + unit() * (ln_hi - ln_lo)));
  return size < lo ? lo : (size > hi ? hi : size);
}

PairTrace make_pair_trace(std::size_t live, std::size_t pairs, std::uint64_t seed) {
  Rng rng(seed);
  PairTrace trace;
  trace.prefill.reserve(live);
  for (std::size_t i = 0; i < live; ++i) {
    trace.prefill.push_back(rng.log_uniform(kPairMinSize, kPairMaxSize));
  }
  trace.victim.reserve(pairs);
  trace.size.reserve(pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    trace.victim.push_back(static_cast<std::uint32_t>(rng.index(live)));
    trace.size.push_back(rng.log_uniform(kPairMinSize, kPairMaxSize));
  }
  return trace;
}

std::string pair_workload_name(std::size_t live) { return "pair/live:" + std::to_string(live); }

std::string util_workload_name(const UtilWorkload& workload) { return std::string("util/") + workload.name; }

std::string benchmark_name(const std::string& workload, const char* allocator) {
  return workload + "/" + allocator;
}

}  // namespace memlayer::bench

// What each benchmark file contributes to main(): registration at run time,
// because how much work a benchmark does depends on --quick.
#pragma once

#include "workloads.hpp"

namespace memlayer::bench {

void register_latency_benchmarks(const RunConfig& config);
void register_utilisation_benchmarks(const RunConfig& config);

}  // namespace memlayer::bench

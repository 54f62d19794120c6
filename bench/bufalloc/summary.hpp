// --summary: collect every run while still printing the usual console
// output, then print one side-by-side table of the headline figures and
// whether each target was met.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "workloads.hpp"

namespace memlayer::bench {

/// One finished benchmark: its counters, or why it produced none.
struct RunResult {
  bool error = false;
  std::string error_message;
  std::map<std::string, double> counters;
};

/// Keyed by the registered benchmark name (see workloads.hpp).
using RunResults = std::map<std::string, RunResult>;

class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  using benchmark::ConsoleReporter::ConsoleReporter;
  void ReportRuns(const std::vector<Run>& runs) override;
  [[nodiscard]] const RunResults& results() const { return results_; }

 private:
  RunResults results_;
};

/// Prints the table. Returns the number of missed targets, for the caller to
/// mention; a miss is a finding, not a failure of the run.
int print_summary(const RunResults& results, const RunConfig& config, std::ostream& out);

}  // namespace memlayer::bench

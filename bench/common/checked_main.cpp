// main() for memlayer's Google Benchmark programs: as BENCHMARK_MAIN, but the
// exit status is 1 when any benchmark reported an error. The benchmarks check
// what they measure (a kernel that failed, a copy the no-migration path
// planned, too few devices) with State::SkipWithError, which Google
// Benchmark prints and otherwise forgets: so a smoke run in ctest fails then.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <unistd.h>
#include <vector>

namespace {

class ErrorCountingReporter final : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal, as Google Benchmark's own default reporter:
  // scripts parse the table (bench/pocl/compare-engines.sh).
  ErrorCountingReporter()
      : ConsoleReporter(isatty(fileno(stdout)) != 0 ? OO_ColorTabular : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.error_occurred) ++errors;
    ConsoleReporter::ReportRuns(runs);
  }
  int errors = 0;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ErrorCountingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (reporter.errors != 0) std::fprintf(stderr, "%d benchmark(s) reported an error\n", reporter.errors);
  return reporter.errors != 0 ? 1 : 0;
}

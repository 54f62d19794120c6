// memlayer-bench-bufalloc: memlayer's Region vs the Region before handles
// (baseline/) vs PoCL's bufalloc vs exact best fit. Accepts every Google Benchmark flag, plus:
//   --summary  after the usual output, print the side-by-side target table
//   --quick    a reduced run (about 20 s) for CI smoke tests; the environment
//              variable MEMLAYER_BENCH_QUICK=1 does the same
// Always exits 0 once the benchmarks ran: a missed target is reported in the
// table, not turned into a failure.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include <benchmark/benchmark.h>

#include "registry.hpp"
#include "summary.hpp"

namespace {

/// Removes our own flags from argv before Google Benchmark sees them (it
/// rejects flags it does not know).
bool take_flag(int& argc, char** argv, const char* flag) {
  bool found = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) {
      found = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return found;
}

bool quick_from_environment() {
  const char* value = std::getenv("MEMLAYER_BENCH_QUICK");
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memlayer::bench;
  const bool summary = take_flag(argc, argv, "--summary");
  RunConfig config;
  config.quick = take_flag(argc, argv, "--quick") || quick_from_environment();
  config.util_seeds = config.quick ? 3 : 10;
  config.latency_repetitions = config.quick ? 1 : 5;

  register_latency_benchmarks(config);
  register_utilisation_benchmarks(config);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  if (summary) {
    // Our own console reporter replaces the default one, so the colour
    // decision the default makes from --benchmark_color is taken here.
    auto options = benchmark::ConsoleReporter::OO_Tabular;
    if (isatty(STDOUT_FILENO) != 0) {
      options = static_cast<benchmark::ConsoleReporter::OutputOptions>(options | benchmark::ConsoleReporter::OO_Color);
    }
    CollectingReporter reporter(options);
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_summary(reporter.results(), config, std::cout);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  return 0;
}

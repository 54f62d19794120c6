#include "summary.hpp"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>

namespace memlayer::bench {

void CollectingReporter::ReportRuns(const std::vector<Run>& runs) {
  for (const Run& run : runs) {
    // With repetitions the median stands for the row; other aggregates and
    // single repetitions (which come first) give way to it.
    const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
    if (run.run_type == Run::RT_Aggregate && !median) continue;
    RunResult& result = results_[run.run_name.function_name];
    if (result.error && !run.error_occurred) continue;  // keep the first error
    result.error = run.error_occurred;
    result.error_message = run.error_message;
    for (const auto& [name, counter] : run.counters) result.counters[name] = counter.value;
  }
  benchmark::ConsoleReporter::ReportRuns(runs);
}

namespace {

enum class Unit { nanoseconds, percent };

enum class Check {
  none,
  memlayer_at_most,    // memlayer's value <= bound
  memlayer_at_least,   // memlayer's value >= bound
  ratio_at_least,      // PoCL / memlayer >= bound
  vs_before_at_most,   // memlayer / before <= bound (both from this run)
  near_before,         // |memlayer - before| <= bound (both from this run)
};

struct Row {
  std::string label;
  std::string workload;  // benchmark name without the allocator
  const char* counter;
  Unit unit;
  Check check = Check::none;
  double bound = 0.0;
  const char* target = "";
  const char* field_notes = "";
};

std::optional<double> lookup(const RunResults& results, const std::string& name, const char* counter) {
  const auto run = results.find(name);
  if (run == results.end() || run->second.error) return std::nullopt;
  const auto value = run->second.counters.find(counter);
  if (value == run->second.counters.end()) return std::nullopt;
  return value->second;
}

std::string format(std::optional<double> value, Unit unit) {
  if (!value) return "n/a";
  char text[32];
  if (unit == Unit::percent) {
    std::snprintf(text, sizeof text, "%.2f %%", *value);
  } else if (*value < 10'000.0) {
    std::snprintf(text, sizeof text, "%.0f ns", *value);
  } else {
    std::snprintf(text, sizeof text, "%.1f us", *value / 1000.0);
  }
  return text;
}

// numerator / denominator, as "0.42x"; n/a when either is missing.
std::string format_ratio(std::optional<double> numerator, std::optional<double> denominator) {
  if (!numerator || !denominator || *denominator == 0.0) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", *numerator / *denominator);
  return text;
}

const char* verdict(const Row& row, std::optional<double> memlayer, std::optional<double> pocl,
                    std::optional<double> before) {
  switch (row.check) {
    case Check::none:
      return "";
    case Check::memlayer_at_most:
      if (!memlayer) return "n/a";
      return *memlayer <= row.bound ? "PASS" : "MISS";
    case Check::memlayer_at_least:
      if (!memlayer) return "n/a";
      return *memlayer >= row.bound ? "PASS" : "MISS";
    case Check::ratio_at_least:
      if (!memlayer || !pocl || *memlayer == 0.0) return "n/a";
      return *pocl / *memlayer >= row.bound ? "PASS" : "MISS";
    case Check::vs_before_at_most:
      if (!memlayer || !before || *before == 0.0) return "n/a";
      return *memlayer / *before <= row.bound ? "PASS" : "MISS";
    case Check::near_before:
      if (!memlayer || !before) return "n/a";
      return std::fabs(*memlayer - *before) <= row.bound ? "PASS" : "MISS";
  }
  return "";
}

std::vector<Row> rows() {
  const auto pair = pair_workload_name;
  const auto util = util_workload_name;
  return {
      {"pair mean, 10^3 live", pair(1000), "batch_ns", Unit::nanoseconds, Check::vs_before_at_most, 0.6,
       "memlayer/before <= 0.6", "OffsetAllocator 0.61"},
      {"pair mean, 10^3 live, PoCL", pair(1000), "batch_ns", Unit::nanoseconds, Check::ratio_at_least, 50.0,
       "PoCL/memlayer >= 50x", "PoCL 2.5 us"},
      {"pair p99.9, 10^3 live", pair(1000), "p999_ns", Unit::nanoseconds},
      {"pair mean, 10^4 live", pair(10000), "batch_ns", Unit::nanoseconds},
      {"pair p99.9, 10^4 live", pair(10000), "p999_ns", Unit::nanoseconds},
      {"pair mean, 10^5 live", pair(100000), "batch_ns", Unit::nanoseconds, Check::vs_before_at_most, 0.4,
       "memlayer/before <= 0.4", "OffsetAllocator 0.40"},
      {"pair mean, 10^5 live, abs", pair(100000), "batch_ns", Unit::nanoseconds, Check::memlayer_at_most, 100.0,
       "memlayer <= 100 ns"},
      {"pair p99.9, 10^5 live", pair(100000), "p999_ns", Unit::nanoseconds, Check::memlayer_at_most, 1000.0,
       "memlayer <= 1 us"},
      {"timer floor (empty pair)", pair(100000), "timer_ns", Unit::nanoseconds},
      {"util 64MiB 64B-64KiB, mean", util(kUtilSmall), "util_pct", Unit::percent, Check::near_before, 0.2,
       "|memlayer-before| <= 0.2", "BF 98.7, PoCL 48.9"},
      {"util 64MiB 64B-64KiB, min", util(kUtilSmall), "util_min_pct", Unit::percent},
      {"util 1GiB 4KiB-16MiB, mean", util(kUtilLarge), "util_pct", Unit::percent, Check::near_before, 0.2,
       "|memlayer-before| <= 0.2", "BF 94.8, PoCL 50.3"},
      {"util 1GiB 4KiB-16MiB, min", util(kUtilLarge), "util_min_pct", Unit::percent},
  };
}

}  // namespace

int print_summary(const RunResults& results, const RunConfig& config, std::ostream& out) {
  char line[256];
  const char* layout = "%-28s %10s %10s %9s %12s %12s %14s  %-24s %-20s %s\n";
  out << "\nmemlayer bufalloc summary" << (config.quick ? " (--quick: reduced pairs and seeds)" : "")
      << "\n  pair times are per free+allocate pair; means are timed as one batch (no clock reads inside),"
      << "\n  p99.9 pair by pair, two clock reads included (see the timer floor row)"
      << (config.latency_repetitions > 1 ? ", median of " + std::to_string(config.latency_repetitions) +
                                               " repetitions;"
                                         : std::string(";"))
      << "\n  utilisation = live requested bytes / region size at the first failed allocation, "
      << config.util_seeds << " seeds."
      << "\n  before = the Region before handles (bench/bufalloc/baseline/, frees by address), run side by side;"
      << "\n  now/bef. = memlayer / before.\n";
#ifndef MEMLAYER_BENCH_HAVE_POCL
  out << "  PoCL's bufalloc was not built (no pocl-source tarball at configure time): its column is n/a.\n";
#endif
  out << "\n";
  std::snprintf(line, sizeof line, layout, "workload", "memlayer", "before", "now/bef.", "PoCL tight",
                "exact best", "PoCL/memlayer", "target", "field notes", "result");
  out << line;
  int missed = 0;
  int checked = 0;
  for (const Row& row : rows()) {
    const auto memlayer = lookup(results, benchmark_name(row.workload, kMemlayer), row.counter);
    const auto pocl = lookup(results, benchmark_name(row.workload, kPocl), row.counter);
    const auto best = lookup(results, benchmark_name(row.workload, kBestFit), row.counter);
    const auto before = lookup(results, benchmark_name(row.workload, kBaseline), row.counter);
    const char* result = verdict(row, memlayer, pocl, before);
    if (row.check != Check::none) ++checked;
    if (std::string_view(result) != "PASS" && row.check != Check::none) ++missed;
    std::snprintf(line, sizeof line, layout, row.label.c_str(), format(memlayer, row.unit).c_str(),
                  format(before, row.unit).c_str(),
                  row.unit == Unit::percent ? "" : format_ratio(memlayer, before).c_str(),
                  format(pocl, row.unit).c_str(), format(best, row.unit).c_str(),
                  format_ratio(pocl, memlayer).c_str(), row.target, row.field_notes, result);
    out << line;
  }
  for (const auto& [name, result] : results) {
    if (result.error) out << "  error in " << name << ": " << result.error_message << "\n";
  }
  out << "\n" << (checked - missed) << " of " << checked << " targets met"
      << (missed != 0 ? " (a miss or n/a is a finding, not a failure of the run)" : "") << "\n";
  return missed;
}

}  // namespace memlayer::bench

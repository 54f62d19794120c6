#include "parameters.hpp"

#include <charconv>
#include <cstdlib>
#include <limits>

namespace memlayer::pocl {
namespace {

// "123", "64K", "256M", "2G" (powers of 1024).
bool parse_size(std::string_view text, std::uint64_t& out) {
  std::uint64_t shift = 0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return false;
  if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return false;
  out = value << shift;
  return true;
}

bool power_of_two(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// "0", "1", "0.001": a probability.
bool parse_probability(std::string_view text, double& out) {
  const std::string s(text);
  char* end = nullptr;
  const double v = s.empty() ? -1 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(v >= 0 && v <= 1)) return false;
  out = v;
  return true;
}

}  // namespace

drivers::DevResult<DriverParameters> parse_parameters(const char* text) {
  DriverParameters p;
  if (text == nullptr) return p;
  std::string_view rest(text);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string key(item.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
    const std::string bad = "memlayer parameters: bad value '" + std::string(value) + "' for " + key;
    std::uint64_t n = 0;
    if (eq == std::string_view::npos) {
      return "memlayer parameters: '" + key + "' has no value (expected key=value)";
    } else if (key == "global_mem") {
      if (!parse_size(value, n) || n < (std::uint64_t{1} << 20)) return bad + " (a size of at least 1M)";
      p.global_mem = n;
    } else if (key == "local_mem") {
      if (!parse_size(value, n) || n < (std::uint64_t{32} << 10) || n > (std::uint64_t{1} << 30))
        return bad + " (a size from 32K to 1G)";
      p.local_mem = n;
    } else if (key == "compute_units") {
      if (!parse_size(value, n) || n == 0 || n > 1024) return bad + " (a count from 1 to 1024)";
      p.compute_units = static_cast<unsigned>(n);
    } else if (key == "numa_node") {
      if (!parse_size(value, n) || n > 4096) return bad + " (a node index)";
      p.numa_node = static_cast<int>(n);
    } else if (key == "alignment") {
      if (!parse_size(value, n) || !power_of_two(n) || n < 128 || n > 4096)
        return bad + " (a power of two from 128 to 4096)";
      p.alignment = n;
    } else if (key == "transfer_faults") {
      if (!parse_probability(value, p.transfer_faults)) return bad + " (a probability from 0 to 1)";
    } else if (key == "peer_read_faults") {
      if (!parse_probability(value, p.peer_read_faults)) return bad + " (a probability from 0 to 1)";
    } else if (key == "fault_seed") {
      if (!parse_size(value, n)) return bad + " (a number)";
      p.fault_seed = n;
    } else if (key == "migration_ranges") {
      if (value != "0" && value != "1") return bad + " (0 or 1)";
      p.migration_ranges = value == "1";
    } else if (key == "svm_space") {
      if (!parse_size(value, n) || (n != 0 && n < (std::uint64_t{1} << 20)) || n > (std::uint64_t{1} << 46))
        return bad + " (0, or a size from 1M to 64T)";
      p.svm_space = n;
    } else {
      return "memlayer parameters: unknown key '" + key +
             "' (known: global_mem, local_mem, compute_units, numa_node, alignment, transfer_faults, peer_read_faults, fault_seed, "
             "migration_ranges, svm_space)";
    }
  }
  if (p.local_mem > p.global_mem) return std::string("memlayer parameters: local_mem is larger than global_mem");
  return p;
}

}  // namespace memlayer::pocl

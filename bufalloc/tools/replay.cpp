#include "replay.hpp"

#include <cmath>
#include <random>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace memlayer::tools {

ReplayResult replay_synthetic(bufalloc::Region& region, const SyntheticWorkload& w) {
  std::mt19937_64 rng(w.seed);
  std::uniform_real_distribution<double> log_size(std::log2(static_cast<double>(w.min_size)),
                                                  std::log2(static_cast<double>(w.max_size)));
  std::vector<std::pair<bufalloc::BlockHandle, bufalloc::Size>> live;
  ReplayResult result;
  // One step: free a random live block with probability p, else allocate.
  auto step = [&](double p) {
    ++result.steps;
    if (!live.empty() && std::bernoulli_distribution(p)(rng)) {
      const size_t k = rng() % live.size();
      (void)region.free(live[k].first);
      result.live_requested -= live[k].second;
      live[k] = live.back();
      live.pop_back();
      return true;
    }
    const auto size = static_cast<bufalloc::Size>(std::exp2(log_size(rng)));
    auto a = region.allocate(size);
    if (!a) return false;
    live.emplace_back(a.value(), size);
    result.live_requested += size;
    return true;
  };
  while (result.steps < w.max_steps && step(w.fill_free_probability)) {
  }
  for (std::uint64_t i = 0; i < w.churn_ops; ++i) step(w.churn_free_probability);
  return result;
}

std::string replay_trace(bufalloc::Region& region, std::istream& trace, ReplayResult& result) {
  std::unordered_map<std::string, std::pair<bufalloc::BlockHandle, bufalloc::Size>> live;
  std::string line;
  int number = 0;
  while (std::getline(trace, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream in(line);
    std::string op, id;
    if (!(in >> op)) continue;
    const std::string where = "line " + std::to_string(number) + ": ";
    ++result.steps;
    if (op == "a") {
      bufalloc::Size size = 0, align = 0;
      if (!(in >> id >> size)) return where + "expected 'a ID SIZE [ALIGNMENT]'";
      in >> align;
      if (live.count(id)) return where + "block '" + id + "' is already live";
      auto a = region.allocate(size, align);
      if (a.ok()) {
        live[id] = {a.value(), size};
        result.live_requested += size;
      }
    } else if (op == "f") {
      if (!(in >> id)) return where + "expected 'f ID'";
      auto it = live.find(id);
      if (it == live.end()) return where + "no live block named '" + id + "'";
      if (auto r = region.free(it->second.first); !r) return where + r.error().message();
      result.live_requested -= it->second.second;
      live.erase(it);
    } else if (op == "r") {
      region.reset();
      live.clear();
      result.live_requested = 0;
    } else {
      return where + "unknown operation '" + op + "' (expected a, f or r)";
    }
  }
  return {};
}

}  // namespace memlayer::tools

#include "memlayer/migration/cost_model.hpp"

namespace memlayer::migration {

LinkCost& LinkCostModel::at(Location src, Location dst) {
  const std::size_t n = std::max(src, dst) + 1;
  if (links_.size() < n) links_.resize(n);
  for (auto& row : links_)
    if (row.size() < n) row.resize(n);
  return links_[src][dst];
}

std::optional<double> LinkCostModel::cost(Location src, Location dst, std::uint64_t bytes) const {
  if (src == dst) return 0.0;
  LinkCost link{};
  if (src < links_.size() && dst < links_[src].size()) link = links_[src][dst];
  if (link.bytes_per_s <= 0) {
    if (src != kHost && dst != kHost) return std::nullopt;  // no direct device-to-device link
    link = host_link_;
  }
  return link.seconds(bytes);
}

}  // namespace memlayer::migration

// memlayer/migration/cost_model.hpp — what moving bytes costs, so the planner
// can pick the cheapest source and know which direct copies exist.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "memlayer/migration/location.hpp"

namespace memlayer::migration {

class CostModel {
 public:
  virtual ~CostModel() = default;
  /// The cost (any unit, consistently) of copying `bytes` directly from src
  /// to dst, or nullopt when no direct path exists. Copies between the host
  /// and any device must have a cost: staging through the host is the path of
  /// last resort. Called at enqueue time; keep it cheap.
  [[nodiscard]] virtual std::optional<double> cost(Location src, Location dst, std::uint64_t bytes) const = 0;
};

/// Links with latency + bytes / bandwidth. Every device has a link to and
/// from the host; direct device-to-device links exist only where set.
/// Not synchronised: configure it before planning starts.
class LinkCostModel final : public CostModel {
 public:
  struct Link {
    double latency_s = 0;
    double bytes_per_s = 0;  ///< 0: no link
  };

  explicit LinkCostModel(Link host_link = {1e-5, 10e9}) : host_link_(host_link) {}

  /// The host link of one device (defaults to the constructor's).
  void set_host_link(Location device, Link link) { at(device, kHost) = link, at(kHost, device) = link; }
  /// A direct device-to-device link, one direction.
  void set_direct(Location src, Location dst, Link link) { at(src, dst) = link; }

  [[nodiscard]] std::optional<double> cost(Location src, Location dst, std::uint64_t bytes) const override;

 private:
  Link& at(Location src, Location dst);
  Link host_link_;
  std::vector<std::vector<Link>> links_;  // [src][dst]; empty entries: defaults
};

}  // namespace memlayer::migration

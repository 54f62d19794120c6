// memlayer/migration/cost_model.hpp — what moving bytes costs, so the planner
// can pick the cheapest source and know which direct copies exist.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "memlayer/migration/location.hpp"

namespace memlayer::migration {

/// A link: latency plus size over bandwidth. The one link type of memlayer:
/// drivers report theirs (runtime::DeviceDriver::host_link, peer_link), the
/// LinkCostModel ranks sources with them, the sim driver paces by them.
struct LinkCost {
  double latency_s = 0;
  double bytes_per_s = 0;  ///< > 0 for a link; 0 in LinkCostModel: no link
  [[nodiscard]] double seconds(std::uint64_t bytes) const {
    return latency_s + static_cast<double>(bytes) / bytes_per_s;
  }
};

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
  explicit LinkCostModel(LinkCost host_link = {1e-5, 10e9}) : host_link_(host_link) {}

  /// The host link of one device (defaults to the constructor's).
  void set_host_link(Location device, LinkCost link) { at(device, kHost) = link, at(kHost, device) = link; }
  /// A direct device-to-device link, one direction.
  void set_direct(Location src, Location dst, LinkCost link) { at(src, dst) = link; }

  [[nodiscard]] std::optional<double> cost(Location src, Location dst, std::uint64_t bytes) const override;

 private:
  LinkCost& at(Location src, Location dst);
  LinkCost host_link_;
  std::vector<std::vector<LinkCost>> links_;  // [src][dst]; empty entries: defaults
};

}  // namespace memlayer::migration

// A Host for tests of the engine's event handling alone (RefBatch, the
// command table): they call only retain, release and status, which the test
// defines; storage and copies are never asked for.
#pragma once

#include "memlayer/engine/host.hpp"

namespace memlayer::engine::testing {

class EventsOnlyHost : public Host {
 public:
  Allocation allocate(Location, void*, std::uint64_t) override { return {}; }
  void free(Location, void*, StorageHandle, std::uint64_t, std::span<const Event>) noexcept override {}
  CopyHandle create_copy(const CopyRequest&) override { return {}; }
  void submit_copy(CopyHandle, std::span<const Event>) noexcept override {}
  void discard_copy(CopyHandle) noexcept override {}
  const migration::CostModel& cost_model() const noexcept override { return cost_; }

 private:
  migration::LinkCostModel cost_{{1e-6, 1e9}};
};

}  // namespace memlayer::engine::testing

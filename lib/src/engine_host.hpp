// The runtime as the migration engine's host (memlayer/engine/host.hpp):
// events are EventStates, storage comes from each device's GlobalMemory (the
// host copy from the BufferState), copies are command nodes run by the
// devices' workers.
#pragma once

#include "memlayer/engine/host.hpp"
#include "memlayer/migration/cost_model.hpp"

namespace memlayer::runtime::detail {

class ContextState;

class EngineHost final : public engine::Host {
 public:
  explicit EngineHost(ContextState& context) : context_(context) {}

  void retain(engine::Event e, std::uint32_t count) noexcept override;
  void release(engine::Event e, std::uint32_t count) noexcept override;
  // A command's event is its node's alone until try_enqueue() puts the
  // node in its queue and submits it (context_state.cpp).
  void retain_unshared(engine::Event e) noexcept override;
  [[nodiscard]] engine::EventStatus status(engine::Event e) const noexcept override;
  // Each command the engine recorded is told to it as it ends
  // (scheduler.cpp: tell_engine()).
  [[nodiscard]] bool tells_ends() const noexcept override { return true; }

  engine::Allocation allocate(engine::Location at, void* cookie, std::uint64_t size) override;
  void free(engine::Location at, void* cookie, engine::StorageHandle storage, std::uint64_t size,
            std::span<const engine::Event> after) noexcept override;
  bool hole_victims(engine::Location at, std::uint64_t size, std::span<const engine::EvictionCandidate> candidates,
                    std::vector<std::size_t>& victims) override;

  engine::CopyHandle create_copy(const engine::CopyRequest& request) override;
  void submit_copy(engine::CopyHandle copy, std::span<const engine::Event> deps) noexcept override;
  void discard_copy(engine::CopyHandle copy) noexcept override;

  [[nodiscard]] const migration::CostModel& cost_model() const noexcept override;
  [[nodiscard]] std::uint64_t capacity(engine::Location at) const noexcept override;
  [[nodiscard]] std::string location_name(engine::Location at) const override;

 private:
  ContextState& context_;
};

}  // namespace memlayer::runtime::detail

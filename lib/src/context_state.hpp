// The context's shared state, and the one enqueue path every command takes.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "buffer_state.hpp"
#include "device_state.hpp"
#include "engine_host.hpp"
#include "memlayer/engine/engine.hpp"
#include "memlayer/migration/cost_model.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"

namespace memlayer::runtime::detail {

/// Where a command finds one of its buffer uses at run time.
struct Target {
  DeviceAddress address = 0;  // in the command's device (a host pointer on host-memory devices)
  std::byte* host = nullptr;  // in the host copy, when the command runs at the host location
};

struct BufferUse {
  std::shared_ptr<BufferState> parent;
  migration::Use use;
};

struct CommandSpec {
  std::vector<BufferUse> uses;
  migration::Location at = migration::kHost;  // where the uses must be valid
  DeviceState* device = nullptr;              // whose workers run the work (nullptr: no work)
  /// Builds the work once the uses have their storage; empty: no work.
  std::function<std::function<Status()>(std::span<const Target>)> make_work;
  bool barrier = false;  // marker/barrier semantics in an out-of-order queue
};

struct QueueState {
  std::shared_ptr<ContextState> context;
  DeviceState* device = nullptr;
  std::size_t index = 0;
  bool out_of_order = false;
  std::mutex mutex;
  std::shared_ptr<EventState> last;                       // in-order: the previous command
  std::shared_ptr<EventState> barrier;                    // out-of-order: the last barrier
  std::vector<std::shared_ptr<EventState>> since_barrier; // out-of-order: commands after it
  std::vector<std::shared_ptr<EventState>> outstanding;   // for finish()
  // outstanding.size() that prunes its finished commands; then twice what
  // is left (at least 64), so that a deep queue of unfinished commands
  // costs O(1) amortised per enqueue, not a scan each time.
  std::size_t prune_outstanding_at = 64;
  std::vector<std::pair<void*, Buffer>> mappings;         // live maps: pointer -> buffer
};

class ContextState : public std::enable_shared_from_this<ContextState> {
 public:
  ContextState(std::vector<std::unique_ptr<DeviceDriver>> drivers, const ContextOptions& options);
  /// Stops every device's workers before any device goes: a worker
  /// finishing one device's node may still be handing its dependents to
  /// another device's queue (TSan caught one signalling a condition
  /// variable that the other device's destructor was destroying).
  ~ContextState();
  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;

  std::vector<std::unique_ptr<DeviceState>> devices;
  migration::LinkCostModel cost;
  /// Device by location (nullptr for the host location).
  std::vector<DeviceState*> by_location;
  /// The migration engine (memlayer/engine/engine.hpp) and this runtime as
  /// its host. Declared after the devices: buffers outlive neither.
  EngineHost engine_host{*this};
  engine::Engine engine{engine_host};
  std::atomic<std::uint64_t> transfer_retries{0};  // ContextStats::transfer_retries
  std::atomic<std::uint64_t> copies_resourced{0};  // ContextStats::copies_resourced
  std::atomic<std::uint64_t> next_buffer_id{1};    // Buffer::id()
  std::chrono::milliseconds room_wait;             // ContextOptions::room_wait

  /// A location as messages name it: "the host" or the device's name.
  std::string location_name(migration::Location at) const;

  /// The one enqueue path: the engine places, plans and copies; this adds
  /// the queue's order and starts the command. All or nothing.
  Result<Event> enqueue(QueueState& queue, CommandSpec spec, std::span<const Event> wait);

 private:
  // One try of enqueue(): nullopt when the device had no room yet
  // (engine device_busy), with what to wait for in `sc`'s submission.
  std::optional<Result<Event>> try_enqueue(QueueState& queue, const CommandSpec& spec,
                                           const std::shared_ptr<CommandNode>& node,
                                           std::vector<std::shared_ptr<EventState>> deps, bool last_try);
};

}  // namespace memlayer::runtime::detail

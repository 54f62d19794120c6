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

struct CommandSpec {
  // The parent buffers' (a sub-buffer is a range of one), as the engine
  // takes them: the application's handles hold them through the enqueue.
  std::vector<engine::BufferUse> uses;
  migration::Location at = migration::kHost;  // where the uses must be valid
  DeviceState* device = nullptr;              // whose workers run the work (nullptr: no work)
  /// The work, given where the uses' storage is (an address per use, in
  /// order); empty: no work. Made before the enqueue: nothing the engine
  /// commits may wait for an allocation still to be made.
  Work work;
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
  std::size_t prune_outstanding_at = 64;                  // its size when the ended go next
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
  /// the queue's order and starts the command. All or nothing, out of host
  /// memory too: everything the command needs once the engine has
  /// committed it is made before (its node, the room for its dependencies
  /// and in the queue's lists), so the command either is not enqueued
  /// (kOutOfHostMemory) or will run or fail; it never hangs what waits for
  /// it. Never throws std::bad_alloc.
  Result<Event> enqueue(QueueState& queue, CommandSpec spec, std::span<const Event> wait) noexcept;

 private:
  Result<Event> enqueue_or_throw(QueueState& queue, CommandSpec spec, std::span<const Event> wait);
  // One try of enqueue(): nullopt when the device had no room yet
  // (engine device_busy, its message in `busy`), with what to wait for in
  // the thread's submission.
  std::optional<Result<Event>> try_enqueue(QueueState& queue, CommandSpec& spec,
                                           const std::shared_ptr<CommandNode>& node, std::string& busy);
};

}  // namespace memlayer::runtime::detail

// Wiring and running the command graph: a node runs when every dependency
// has ended; a failed dependency fails it at once, unless the node only
// waits for it to end (order: queue order, storage fences — a failure there
// says nothing of this node's inputs); nodes with work go to their device's
// workers.
#pragma once

#include <memory>
#include <span>

#include "event_state.hpp"

namespace memlayer::runtime::detail {

/// A node for `device`'s workers (nullptr: no work, or work-less) with a
/// fresh event.
std::shared_ptr<CommandNode> make_node(DeviceState* device, std::function<Status()> work);

/// Makes `node` wait for `deps` (whose failure fails it) and for `order`
/// (which it only waits to end), then releases it; it may run (or fail) on
/// this thread's call when nothing is pending. Thread-safe.
void submit(const std::shared_ptr<CommandNode>& node, std::span<const std::shared_ptr<EventState>> deps,
            std::span<const std::shared_ptr<EventState>> order = {});

/// Ends `event` with `status` and resolves everything waiting on it, without
/// recursion (a failure can cascade through long chains). Thread-safe.
void finish(const std::shared_ptr<EventState>& event, int status, std::string message);

/// Runs a ready node's work on the calling (worker) thread, then finishes it.
void run(const std::shared_ptr<CommandNode>& node);

}  // namespace memlayer::runtime::detail

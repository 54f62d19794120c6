// Wiring and running the command graph: a node runs when every dependency
// has ended; a failed dependency fails it at once, unless the node only
// waits for it to end (order: queue order, storage fences — a failure there
// says nothing of this node's inputs); nodes with work go to their device's
// workers.
//
// Memory. What a node needs to be wired is made with it, before the engine
// commits its command (reserve_deps, add_dep); from then on nothing here
// allocates: submitting, finishing (a failure cascading through any number
// of nodes included) and queueing on a device cannot fail, so a committed
// command always runs or fails, and what waits for it never hangs.
#pragma once

#include <memory>
#include <span>

#include "event_state.hpp"

namespace memlayer::runtime::detail {

/// A node for `device`'s workers (nullptr: no work, or work-less) with a
/// fresh event. Throws std::bad_alloc.
std::shared_ptr<CommandNode> make_node(DeviceState* device, Work work);

/// Makes room in `node` for `more` dependencies beyond those it has. Throws
/// std::bad_alloc; only before the node is submitted.
void reserve_deps(CommandNode& node, std::size_t more);
/// Room for how many more dependencies `node` has.
[[nodiscard]] std::size_t deps_room(const CommandNode& node) noexcept;
/// Makes `node` wait for `dep` (nullptr: nothing): its failure fails the
/// node if `propagate`, else the node only waits for it to end. Needs the
/// room reserve_deps() made (checked): allocates nothing.
void add_dep(CommandNode& node, std::shared_ptr<EventState> dep, bool propagate) noexcept;

/// Tells the migration engine that recorded `node` how it ended
/// (Engine::ended; EngineHost::tells_ends), once: nothing for a node the
/// engine did not record or a second call. Every path that ends such a
/// node calls it before it ends the node's event, so that nothing sees the
/// end before the engine does, and while the node still holds its buffers
/// (and so the engine). O(1). Thread-safe for distinct nodes.
void tell_engine(CommandNode& node, migration::EventStatus status) noexcept;

/// Wires `node` after its dependencies, then releases it; it may run (or
/// fail) on this thread's call when nothing is pending. Thread-safe.
void submit(const std::shared_ptr<CommandNode>& node) noexcept;

/// Ends `event` with `status` and resolves everything waiting on it, without
/// recursion (a failure can cascade through long chains). Thread-safe.
void finish(const std::shared_ptr<EventState>& event, int status, std::string message) noexcept;

/// Runs a ready node's work on the calling (worker) thread, then finishes it.
void run(const std::shared_ptr<CommandNode>& node) noexcept;

/// kOutOfHostMemory, its message naming `what`: for a std::bad_alloc caught
/// (a shorter message if even that cannot be made).
[[nodiscard]] Status out_of_host_memory(const char* what) noexcept;

}  // namespace memlayer::runtime::detail

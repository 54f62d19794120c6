// The event references one enqueue takes and drops while it holds buffer
// locks, summed per event and handed to the host once per event when the
// locks are about to go (Host::retain/release with a count): the planner's
// batch (memlayer/migration/ref_batch.hpp) applied to a Host. Each locked
// buffer's EventOps points at it, so the planner's and the engine's
// references count inline.
#pragma once

#include "memlayer/engine/host.hpp"
#include "memlayer/migration/ref_batch.hpp"

namespace memlayer::engine {

class RefBatch : public migration::RefBatch {
 public:
  /// Counts from now on, for `host`. Why deferring is safe: every event
  /// counted meanwhile is kept alive by a reference the locked buffers hold
  /// (a retain only copies one of those), and a deferred release only keeps
  /// an event alive longer.
  void begin(Host& host) noexcept { migration::RefBatch::begin(&host, &apply_to); }

  static void apply(Host& host, Event e, int delta) noexcept {
    if (delta > 0) host.retain(e, static_cast<std::uint32_t>(delta));
    else if (delta < 0) host.release(e, static_cast<std::uint32_t>(-delta));
  }

 private:
  static void apply_to(void* host, Event e, int delta) noexcept { apply(*static_cast<Host*>(host), e, delta); }
};

}  // namespace memlayer::engine

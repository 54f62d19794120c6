// The event nodes PoCL frees while memlayer's engine runs, kept for the
// adapter's links (compat::LinkNodes) rather than given back to malloc.
//
// Every command that waits for something takes two nodes on the enqueuing
// thread, and the device's thread frees both when the command it waited
// for ends (pocl_broadcast). Built without PoCL's memory manager (Debian's
// 3.1, our 7.1), the node came from malloc and went back with free on
// another thread, so the enqueuing thread's malloc cache was always empty:
// two trips to the arena per enqueue, ≈ 120 instructions each
// (doc/performance.md, "The event nodes recycled and the fixed steps
// inline"). Our patches route PoCL's pocl_mem_manager_free_event_node to
// pocl_ml_free_event_node (declared in PoCL's pocl_mem_management.h by the
// patch, defined in pocl_node_pool.cpp), which gives the node here; the
// adapter takes them all at once when its own run short.
//
// Thread-safety: give() and take_all() may be called from any thread at
// once. The pool is a lock-free stack that is only pushed one node at a
// time and emptied whole, so no pop can see a node leave and come back
// (no ABA). Bounded: past kMost nodes kept, give() frees.
#pragma once

extern "C" {
#include "pocl_cl.h"
}

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memlayer::pocl_core {

class NodePool {
 public:
  /// The most nodes kept (16 bytes each): more than the links of the
  /// commands a few threads keep in flight.
  static constexpr std::int64_t kMost = std::int64_t{1} << 16;

  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  /// Frees the nodes kept.
  ~NodePool();

  /// Keeps `n` (a node PoCL allocated or this pool gave, not linked
  /// anywhere), or frees it when kMost are kept. O(1), lock-free.
  void give(event_node* n) noexcept;
  /// Every node kept, as a chain through `next` (nullptr: none), its length
  /// in `count` and its last node in `last`; the pool is left empty. The
  /// nodes' fields are stale: a taker clears each before use. O(count).
  [[nodiscard]] event_node* take_all(std::size_t& count, event_node*& last) noexcept;

  /// What the links took (memlayer_pocl_get_migration_stats): nodes from
  /// this pool and nodes newly allocated. O(1).
  struct Took {
    std::uint64_t recycled = 0, allocated = 0;
  };
  /// Counts what one refill of a thread's nodes took (LinkNodes::grow).
  void took(std::size_t recycled, std::size_t allocated) noexcept {
    recycled_.fetch_add(recycled, std::memory_order_relaxed);
    allocated_.fetch_add(allocated, std::memory_order_relaxed);
  }
  /// The counts so far; `reset` zeroes them.
  [[nodiscard]] Took links_took(bool reset) noexcept {
    if (reset) return {recycled_.exchange(0), allocated_.exchange(0)};
    return {recycled_.load(), allocated_.load()};
  }

 private:
  std::atomic<event_node*> top_{nullptr};
  // Nodes pushed less nodes taken; an approximate bound (a give counts
  // after its push, a take after its walk), so signed.
  std::atomic<std::int64_t> kept_{0};
  std::atomic<std::uint64_t> recycled_{0}, allocated_{0};
};

/// The process's pool: pocl_ml_free_event_node gives to it, every thread's
/// LinkNodes takes from it.
NodePool& node_pool() noexcept;

}  // namespace memlayer::pocl_core

#include "pocl_node_pool.hpp"

extern "C" {
#include "pocl_mem_management.h"  // pocl_ml_free_event_node, as PoCL calls it
#include "pocl_memlayer_migration.h"
}

#include <cstdlib>

namespace memlayer::pocl_core {

NodePool::~NodePool() {
  std::size_t count = 0;
  event_node* last = nullptr;
  for (event_node* n = take_all(count, last); n != nullptr;) {
    event_node* next = n->next;
    std::free(n);
    n = next;
  }
}

void NodePool::give(event_node* n) noexcept {
  if (kept_.load(std::memory_order_relaxed) >= kMost) {
    std::free(n);
    return;
  }
  event_node* top = top_.load(std::memory_order_relaxed);
  do {
    n->next = top;
  } while (!top_.compare_exchange_weak(top, n, std::memory_order_release, std::memory_order_relaxed));
  kept_.fetch_add(1, std::memory_order_relaxed);
}

event_node* NodePool::take_all(std::size_t& count, event_node*& last) noexcept {
  count = 0;
  last = nullptr;
  if (top_.load(std::memory_order_relaxed) == nullptr) return nullptr;
  event_node* chain = top_.exchange(nullptr, std::memory_order_acquire);
  for (event_node* n = chain; n != nullptr; n = n->next) {
    last = n;
    ++count;
  }
  kept_.fetch_sub(static_cast<std::int64_t>(count), std::memory_order_relaxed);
  return chain;
}

// Destroyed at exit, after PoCL's threads are done with nodes or not: a
// node given after that is still kept (the members are atomics of trivial
// type), and only that one is never freed.
NodePool& node_pool() noexcept {
  static NodePool pool;
  return pool;
}

}  // namespace memlayer::pocl_core

extern "C" void pocl_ml_free_event_node(event_node* n) {
  if (n == nullptr) return;
  if (pocl_ml_migration_enabled()) memlayer::pocl_core::node_pool().give(n);
  else std::free(n);
}

// memlayer's migration engine inside PoCL's core: PoCL as the engine's host
// (memlayer/engine/host.hpp). Events are cl_events, storage is what the
// device's driver allocates for a cl_mem (alloc_mem_obj / free), the host
// copy is mem_host_ptr, and copies are PoCL migration commands over byte
// ranges on the context's default (hidden) queues. The contract is in
// pocl_memlayer_migration.h; the pipeline in doc/engine.md.
// PoCL declares its internal API entry points (POclRetainEvent, ...)
// without C linkage for C++; its headers are C.
extern "C" {
#include "pocl_memlayer_migration.h"
#include "common_driver.h"
}

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "memlayer/engine/engine.hpp"
#include "memlayer/engine/room_wait.hpp"
#include "pocl_core_compat.hpp"
#include "pocl_memlayer_retries.hpp"

namespace {

using memlayer::engine::Allocation;
using memlayer::engine::CopyHandle;
using memlayer::engine::CopyRequest;
using memlayer::engine::Event;
using memlayer::engine::Location;
using memlayer::engine::StorageHandle;
using memlayer::migration::Access;
using memlayer::migration::kHost;
using memlayer::migration::kMaxLocations;

// PoCL's CPU drivers (basic, pthread) keep a buffer in mem_host_ptr itself:
// their memory is the host copy. Every other device's memory is location
// global_mem_id + 1.
Location location_of(cl_device_id dev) {
  if (dev->ops->alloc_mem_obj == pocl_driver_alloc_mem_obj) return kHost;
  return static_cast<Location>(dev->global_mem_id) + 1;
}

cl_event event_of(Event e) { return static_cast<cl_event>(e); }

// Whether `dev` is a memlayer device: its mappings are host memory of its
// own or the host copy, never its storage, and its driver re-sources and
// retries failed migrations (pocl_ml_migration_retry).
bool is_memlayer_device(cl_device_id dev) { return std::strcmp(dev->ops->device_name, "memlayer") == 0; }

bool finished(cl_event e) {
  // CL_COMPLETE is 0, failures are negative; status only decreases.
  return __atomic_load_n(&e->status, __ATOMIC_ACQUIRE) <= CL_COMPLETE;
}

// ---- engine choice ----------------------------------------------------------

int read_engine_choice() {
  const char* v = std::getenv("POCL_MEMLAYER_MIGRATION");
  if (v == nullptr || *v == '\0') return MEMLAYER_MIGRATION_DEFAULT;
  if (std::strcmp(v, "1") == 0) return 1;
  if (std::strcmp(v, "0") == 0) return 0;
  std::fprintf(stderr, "pocl: POCL_MEMLAYER_MIGRATION must be 0 or 1, not '%s'; using %d\n", v,
               MEMLAYER_MIGRATION_DEFAULT);
  return MEMLAYER_MIGRATION_DEFAULT;
}

namespace compat = memlayer::pocl_core::compat;

// Never destroyed: a program may release its last context or buffer from a
// static destructor of its own, or from a PoCL worker finishing while exit()
// runs static destructors (that crashed PoCL's test_command_buffer_images
// and test_issue_445 when these were ordinary globals).
template <class T>
union Immortal {
  T value;
  constexpr Immortal() : value() {}
  ~Immortal() {}
};

// ---- per-buffer state --------------------------------------------------------

struct ContextState;

struct BufferState {
  BufferState(ContextState& context, cl_mem m);
  cl_mem mem;
  bool host_ref = false;  // holds one mem_host_ptr reference for the host copy (under the engine's lock)
  // Set while clReleaseMemObject tears the buffer down: PoCL frees the
  // device storage itself right after.
  std::atomic<bool> releasing{false};
  memlayer::engine::Buffer tracked;
};

// ---- PoCL as the engine's host --------------------------------------------------

// Device storage an eviction gave back while commands may still use it:
// PoCL's commands look a buffer's storage up when they run, so it is freed
// only once every event in `after` has finished (checked at each
// allocation), or taken over again if the engine places the same buffer
// there first. Until then a full device names those events as room_after.
struct DeferredFree {
  cl_mem mem;
  cl_device_id dev;
  std::vector<cl_event> after;  // retained
};

// PoCL counts references in int, under the event's lock; the engine hands
// over its references per event and enqueue, with a count.
void retain_event(cl_event e, std::uint32_t count) {
  POCL_LOCK_OBJ(e);
  e->pocl_refcount += static_cast<int>(count);
  POCL_UNLOCK_OBJ(e);
}

void release_event(cl_event e, std::uint32_t count) {
  // Held `count` times: all but the last drop leave it alive.
  if (count > 1) {
    POCL_LOCK_OBJ(e);
    e->pocl_refcount -= static_cast<int>(count - 1);
    POCL_UNLOCK_OBJ(e);
  }
  POname(clReleaseEvent)(e);
}

// ---- links to what commands wait for -------------------------------------------

// How many of `events` are still running: the links a command or copy that
// waits for them may need (one that ends meanwhile needs none).
template <class Events>
std::size_t running(const Events& events) {
  return static_cast<std::size_t>(
      std::count_if(std::begin(events), std::end(events), [](auto e) { return !finished(event_of(e)); }));
}

// For tests: POCL_MEMLAYER_TEST_LINKS=N lets the adapter reserve links to N
// running events in all, then fails each reservation as out of host memory
// would (compat::LinkNodes::reserve), at whichever step it comes: a copy's
// (create_copy), a user's wait list (make_command, before the engine), or
// the engine's waits (after it). Unset: no limit. Read once.
long read_link_limit() {
  const char* v = std::getenv("POCL_MEMLAYER_TEST_LINKS");
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0) {
    std::fprintf(stderr, "pocl: POCL_MEMLAYER_TEST_LINKS must be a number of links, not '%s'; no limit\n", v);
    return -1;
  }
  return n;
}

const long g_link_limit = read_link_limit();

// Under a limit (tests only), out of line.
[[gnu::noinline]] bool within_link_limit(std::size_t more) {
  static std::atomic<unsigned long> reserved{0};
  return reserved.fetch_add(more) + more <= static_cast<unsigned long>(g_link_limit);
}

// Makes `nodes` hold the nodes of `total` links, `more` of them new to the
// caller's count. False when out of host memory. Inline: two per command.
inline bool reserve_links(compat::LinkNodes& nodes, std::size_t more, std::size_t total) {
  if (g_link_limit >= 0 && more != 0 && !within_link_limit(more)) return false;
  return nodes.reserve(total);
}

// A copy made and not started: CopyHandle::host_data.
struct PendingCopy {
  _cl_command_node* node = nullptr;
  compat::LinkNodes links;  // one link per event of its request's `after` running when it was made
};

class PoclHost final : public memlayer::engine::Host {
 public:
  explicit PoclHost(ContextState& cs) : cs_(cs) {}

  void retain(Event e, std::uint32_t count) noexcept override { retain_event(event_of(e), count); }
  // The command's event, made by make_command() for this enqueue and not
  // enqueued yet: no other thread can reach it, so no lock guards its
  // count (what PoCL's own POCL_RETAIN_OBJECT_UNLOCKED is for).
  void retain_unshared(Event e) noexcept override { ++event_of(e)->pocl_refcount; }
  void release(Event e, std::uint32_t count) noexcept override { release_event(event_of(e), count); }
  // Each command the engine recorded is told to it as it ends
  // (pocl_ml_command_ended, from pocl_update_event_finished).
  bool tells_ends() const noexcept override { return true; }
  // PoCL keeps no record of whether a failed command had started (its
  // time_start only with profiling). `dependency_failed` (our patches'
  // field) marks the commands that failed without running: a dependency
  // had failed (PoCL fails them at enqueue, the memlayer driver in its
  // worker), or the memlayer driver failed a transfer before starting it.
  // Those are `cancelled`: they wrote nothing, so the content before them
  // stays valid where it was, their own location included. Any other
  // failure is `failed`, the safe side (engine/host.hpp). The flag is set
  // before the event's status turns negative, both under the event's lock.
  memlayer::engine::EventStatus status(Event e) const noexcept override {
    cl_event ev = event_of(e);
    return status_of(ev, __atomic_load_n(&ev->status, __ATOMIC_ACQUIRE));
  }
  // What `ev` ending (or ended) with OpenCL status `s` means to the engine.
  static memlayer::engine::EventStatus status_of(cl_event ev, cl_int s) noexcept {
    if (s > CL_COMPLETE) return memlayer::engine::EventStatus::running;
    if (s == CL_COMPLETE) return memlayer::engine::EventStatus::completed;
    return __atomic_load_n(&ev->dependency_failed, __ATOMIC_ACQUIRE) ? memlayer::engine::EventStatus::cancelled
                                                                       : memlayer::engine::EventStatus::failed;
  }

  Allocation allocate(Location at, void* cookie, std::uint64_t size) override;
  void free(Location at, void* cookie, StorageHandle storage, std::uint64_t size,
            std::span<const Event> after) noexcept override;
  bool can_evict(void* cookie, Location at) const noexcept override;
  CopyHandle create_copy(const CopyRequest& r) override;
  void record_fallbacks(const CopyRequest& r, cl_event ev);
  void submit_copy(CopyHandle copy, std::span<const Event> deps) noexcept override;
  void discard_copy(CopyHandle copy) noexcept override;
  const memlayer::migration::CostModel& cost_model() const noexcept override;
  std::uint64_t capacity(Location at) const noexcept override;
  std::string location_name(Location at) const override;

  // Frees every deferred storage whose users have all finished.
  void collect();
  // Forgets the deferred frees of a buffer being released (PoCL frees its
  // storage itself).
  void forget(cl_mem mem);

 private:
  void room_after(cl_device_id dev, std::vector<Event>& out);

  ContextState& cs_;
  std::mutex deferred_mutex_;
  std::vector<DeferredFree> deferred_;
};

// ---- waiting for room -----------------------------------------------------------

// How long an enqueue waits for queued work to give back the device storage
// it needs (POCL_MEMLAYER_ROOM_WAIT_MS, default 60 s; engine/room_wait.hpp
// says how it waits). Read at each wait: only an enqueue that must wait
// pays for it.
std::chrono::milliseconds room_wait_limit() {
  constexpr long kDefault = 60000;
  const char* v = std::getenv("POCL_MEMLAYER_ROOM_WAIT_MS");
  if (v == nullptr || *v == '\0') return std::chrono::milliseconds(kDefault);
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  if (*end != '\0' || ms < 0) {
    std::fprintf(stderr, "pocl: POCL_MEMLAYER_ROOM_WAIT_MS must be a number of milliseconds, not '%s'; using %ld\n",
                 v, kDefault);
    return std::chrono::milliseconds(kDefault);
  }
  return std::chrono::milliseconds(ms);
}

struct ContextState {
  explicit ContextState(cl_context c) : ctx(c) {}
  cl_context ctx;
  memlayer::migration::LinkCostModel cost{{10e-6, 12e9}};
  // index into ctx->devices of a device with that global memory, -1: none
  std::array<int, kMaxLocations> device_at{};
  PoclHost host{*this};
  memlayer::engine::Engine engine{host};
  memlayer::pocl_core::MigrationRetries retries;
  // A device of this context moves whole buffers whatever range its
  // migration commands name (it lacks honours_migration_ranges): every use
  // is then planned over its whole buffer (whole_use()), so every copy the
  // engine makes, into or out of any device, is of a whole buffer.
  bool whole_buffers = false;

  cl_device_id device(Location at) const { return device_at[at] < 0 ? nullptr : ctx->devices[device_at[at]]; }
  // Where a migration reads: a device, or the host copy (nullptr) even when
  // a CPU device computes on it (location 0).
  cl_device_id source(Location at) const { return at == kHost ? nullptr : device(at); }
  cl_command_queue queue(Location at) const {
    return device_at[at] < 0 ? nullptr : ctx->default_queues[device_at[at]];
  }
};

BufferState::BufferState(ContextState& context, cl_mem m)
    : mem(m), tracked(context.engine, this, m->size, m->mem_host_ptr_version > 0) {}

BufferState& buffer_of(void* cookie) { return *static_cast<BufferState*>(cookie); }

bool ensure_host_copy(BufferState& s) {
  if (s.host_ref) return true;
  POCL_LOCK_OBJ(s.mem);
  const int err = pocl_alloc_or_retain_mem_host_ptr(s.mem);
  if (err == 0) compat::follow_parent(s.mem, nullptr);
  POCL_UNLOCK_OBJ(s.mem);
  if (err != 0) return false;
  s.host_ref = true;
  return true;
}

void free_device_storage(cl_device_id dev, cl_mem mem) {
  POCL_LOCK_OBJ(mem);
  if (mem->device_ptrs[dev->global_mem_id].mem_ptr != nullptr) {
    dev->ops->free(dev, mem);
    mem->device_ptrs[dev->global_mem_id].mem_ptr = nullptr;
    compat::follow_parent(mem, dev);
  }
  POCL_UNLOCK_OBJ(mem);
}

Allocation PoclHost::allocate(Location at, void* cookie, std::uint64_t size) {
  BufferState& b = buffer_of(cookie);
  Allocation a;
  if (at == kHost) {
    // The host copy; PoCL's CPU devices (location 0) compute on it through
    // their own device_ptrs entry, which points at it.
    cl_device_id cpu = cs_.device(kHost);
    cl_int err = ensure_host_copy(b) ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    if (err == CL_SUCCESS && cpu != nullptr) {
      POCL_LOCK_OBJ(b.mem);
      if (b.mem->device_ptrs[cpu->global_mem_id].mem_ptr == nullptr) err = cpu->ops->alloc_mem_obj(cpu, b.mem, nullptr);
      if (err == CL_SUCCESS) err = compat::follow_parent(b.mem, cpu);
      POCL_UNLOCK_OBJ(b.mem);
    }
    if (err == CL_SUCCESS) {
      a.outcome = Allocation::Outcome::ok;
      a.handle = reinterpret_cast<std::uintptr_t>(b.mem->mem_host_ptr);
    } else {
      a.message = "no host memory for a " + std::to_string(size) + "-byte host copy";
    }
    return a;
  }
  cl_device_id dev = cs_.device(at);
  collect();
  {
    // Storage an eviction gave back and nothing freed yet: the same bytes
    // again, written only after their old users.
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    for (auto it = deferred_.begin(); it != deferred_.end(); ++it) {
      if (it->mem != b.mem || it->dev != dev) continue;
      a.fences.assign(it->after.begin(), it->after.end());  // their references go to the engine
      deferred_.erase(it);
      a.outcome = Allocation::Outcome::ok;
      a.handle = reinterpret_cast<std::uintptr_t>(b.mem->device_ptrs[dev->global_mem_id].mem_ptr);
      return a;
    }
  }
  POCL_LOCK_OBJ(b.mem);
  pocl_mem_identifier& id = b.mem->device_ptrs[dev->global_mem_id];
  // Placed already by PoCL itself (a map's early allocation): adopted.
  cl_int err = id.mem_ptr != nullptr ? CL_SUCCESS : dev->ops->alloc_mem_obj(dev, b.mem, nullptr);
  // Sub-buffers the driver could not make: the parent's storage stays
  // placed, adopted by the next allocation.
  if (err == CL_SUCCESS) err = compat::follow_parent(b.mem, dev);
  const void* ptr = id.mem_ptr;
  POCL_UNLOCK_OBJ(b.mem);
  if (err == CL_SUCCESS) {
    a.outcome = Allocation::Outcome::ok;
    a.handle = reinterpret_cast<std::uintptr_t>(ptr);
  } else {
    a.outcome = Allocation::Outcome::full;
    a.message = std::string(dev->short_name) + " has no room for " + std::to_string(size) + " bytes";
    room_after(dev, a.room_after);
  }
  return a;
}

// What must finish before the storage kept for `dev`'s deferred frees can
// go: each unfinished event once, retained for the engine.
void PoclHost::room_after(cl_device_id dev, std::vector<Event>& out) {
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  for (const DeferredFree& d : deferred_) {
    if (d.dev != dev) continue;
    for (cl_event e : d.after) {
      if (::finished(e) || std::find(out.begin(), out.end(), e) != out.end()) continue;
      POname(clRetainEvent)(e);
      out.push_back(e);
    }
  }
}

void PoclHost::free(Location at, void* cookie, StorageHandle, std::uint64_t, std::span<const Event> after) noexcept {
  BufferState& b = buffer_of(cookie);
  if (at == kHost || b.releasing.load()) return;  // the host copy goes with the buffer; PoCL frees the rest
  cl_device_id dev = cs_.device(at);
  DeferredFree d{b.mem, dev, {}};
  for (Event e : after) {
    if (::finished(event_of(e))) continue;
    POname(clRetainEvent)(event_of(e));
    d.after.push_back(event_of(e));
  }
  if (d.after.empty()) {
    free_device_storage(dev, b.mem);
    return;
  }
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  deferred_.push_back(std::move(d));
}

void PoclHost::collect() {
  std::vector<cl_event> drop;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    std::erase_if(deferred_, [&](DeferredFree& d) {
      for (cl_event e : d.after)
        if (!::finished(e)) return false;
      free_device_storage(d.dev, d.mem);
      drop.insert(drop.end(), d.after.begin(), d.after.end());
      return true;
    });
  }
  for (cl_event e : drop) POname(clReleaseEvent)(e);
}

void PoclHost::forget(cl_mem mem) {
  std::vector<cl_event> drop;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    std::erase_if(deferred_, [&](DeferredFree& d) {
      if (d.mem != mem) return false;
      drop.insert(drop.end(), d.after.begin(), d.after.end());
      return true;
    });
  }
  for (cl_event e : drop) POname(clReleaseEvent)(e);
}

// A mapped buffer keeps its storage: the unmap writes the mapping back
// there. Once the unmap of every mapping is committed (the engine has its
// command: compat::mark_unmap_committed, in make_command) it may go, as any
// busy buffer does: the unmap uses and writes that storage, so the storage
// stays until it has run, and the bytes are written back after it. (Kept,
// such a buffer failed a command that fitted its device at once, "nothing
// more can be evicted": pocl_oversubscribed_test.) Only on a memlayer
// device, whose mappings are host memory of their own or the host copy
// (pocl_memlayer_get_mapping_ptr), never its storage.
bool PoclHost::can_evict(void* cookie, Location at) const noexcept {
  cl_mem mem = buffer_of(cookie).mem;
  if (!compat::mapped(mem)) return true;
  cl_device_id dev = at == kHost ? nullptr : cs_.device(at);
  if (dev == nullptr || !is_memlayer_device(dev)) return false;
  POCL_LOCK_OBJ(mem);
  const bool unmapping = compat::unmaps_committed(mem);
  POCL_UNLOCK_OBJ(mem);
  return unmapping;
}

CopyHandle PoclHost::create_copy(const CopyRequest& r) {
  BufferState& b = buffer_of(r.cookie);
  cl_mem mem = b.mem;
  // Every copy, an eviction's write-back included, is a migration command
  // on a queue, whose failure the engine sees: its storage stays until the
  // write-back has completed (engine/src/transaction.cpp: write_back), and
  // the enqueue that wanted the room waits for it (device_busy). What
  // starting it needs is made here, before the engine commits it: the
  // command, and the nodes that link it to what it waits for
  // (submit_copy cannot fail).
  std::shared_ptr<PendingCopy> pending;
  try {
    pending = std::make_shared<PendingCopy>();
  } catch (const std::bad_alloc&) {
    return {};
  }
  if (!reserve_links(pending->links, running(r.after), running(r.after))) return {};
  // The copy holds the buffer until it has run; one whose last reference
  // is gone (being released) is not copied.
  POCL_LOCK_OBJ(mem);
  const bool alive = mem->pocl_refcount > 0;
  if (alive) ++mem->pocl_refcount;
  POCL_UNLOCK_OBJ(mem);
  if (!alive) return {};
  // A copy into a device runs on that device (H2D, or D2D through its
  // driver); a copy to the host runs on the source device.
  cl_command_queue q = cs_.queue(r.dst != kHost ? r.dst : r.src);
  _cl_command_node* node = nullptr;
  cl_event ev = nullptr;
  if (compat::create_command(&node, q, CL_COMMAND_MIGRATE_MEM_OBJECTS, &ev, std::span(&mem, 1)) != CL_SUCCESS) {
    POname(clReleaseMemObject)(mem);
    return {};
  }
  if (!compat::set_migration_range(node, mem, r.offset, r.size)) {
    compat::discard_command(node);
    POname(clReleaseMemObject)(mem);
    return {};
  }
  if (r.dst == kHost) compat::point_to_host(node, cs_.device(r.src));
  else compat::point_into_device(node, cs_.device(r.dst), cs_.source(r.src));
  record_fallbacks(r, ev);
  pending->node = node;
  CopyHandle h;
  h.event = ev;
  h.host_data = std::move(pending);
  return h;
}

// What the copy may fall back on when its transfer keeps failing
// (pocl_ml_migration_retry): the other complete copies the engine named,
// for a copy into a device (a copy to the host copy runs on its source
// device's queue: another source would be another driver's work), and, for
// the last copy of bytes being evicted, more tries. Only the memlayer
// driver asks; other drivers' copies are tried as their drivers try them.
void PoclHost::record_fallbacks(const CopyRequest& r, cl_event ev) {
  cl_device_id runner = cs_.device(r.dst != kHost ? r.dst : r.src);
  if (!is_memlayer_device(runner)) return;
  std::vector<cl_device_id> also;
  if (r.dst != kHost)
    for (const memlayer::engine::CopySource& s : r.also) also.push_back(cs_.source(s.at));
  cs_.retries.add(ev, runner, std::move(also), r.last_copy);
}

// A command whose wait list held an event that had failed already is failed
// by PoCL's pocl_command_enqueue at once
// (patches/pocl-*-failed-dependency-fails-command.patch), even while another
// of its dependencies is still pending. That dependency's notify list still
// names it, without a reference: once ending it dropped the last reference,
// the later broadcast would lock a freed event (PTHREAD ERROR in
// pocl_lock_events_inorder). pocl_command_enqueue itself links the command
// to an in-order queue's last command before it fails it, so an event with
// an empty wait list here may have one there. Such an event is held here
// until its wait list is empty; each enqueue lets go of those whose lists
// have emptied.
class HeldFailures {
 public:
  // Call with the command made and its syncs created, before it is enqueued.
  void hold_if_failing_early(cl_event e) {
    // The flag only ever goes from 0 to 1, under the event's lock: a look
    // under the lock that read 0 would be no later than this one.
    if (__atomic_load_n(&e->dependency_failed, __ATOMIC_ACQUIRE) == 0) return;
    POCL_LOCK_OBJ(e);
    const bool hold = e->dependency_failed != 0;
    if (hold) ++e->pocl_refcount;
    POCL_UNLOCK_OBJ(e);
    if (!hold) return;
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      held_.push_back(e);
    } catch (const std::bad_alloc&) {
      return;  // out of host memory: the reference stays, and the event with it (never a freed one linked)
    }
    count_.store(held_.size(), std::memory_order_release);
  }
  // Releases the held events whose dependencies have all ended. O(1) when
  // none is held.
  void release_settled() {
    if (count_.load(std::memory_order_acquire) == 0) return;
    std::vector<cl_event> done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::erase_if(held_, [&](cl_event e) {
        POCL_LOCK_OBJ(e);
        const bool settled = e->wait_list == nullptr;
        POCL_UNLOCK_OBJ(e);
        if (settled) done.push_back(e);
        return settled;
      });
      count_.store(held_.size(), std::memory_order_release);
    }
    for (cl_event e : done) POname(clReleaseEvent)(e);
  }

 private:
  std::mutex mutex_;
  std::vector<cl_event> held_;
  std::atomic<std::size_t> count_{0};
};

// Never destroyed, as the other globals here (Immortal, above); made
// before anything runs (constinit): no guard to check at each use.
constinit Immortal<HeldFailures> g_held_failures;
HeldFailures& held_failures() { return g_held_failures.value; }

void PoclHost::submit_copy(CopyHandle copy, std::span<const Event> deps) noexcept {
  auto& pending = *static_cast<PendingCopy*>(copy.host_data.get());
  cl_event ev = event_of(copy.event);
  // The same events as the request's `after`: create_copy reserved a link
  // for each one running then, and none has started running since.
  for (Event d : deps) compat::link(ev, event_of(d), pending.links);
  if (ev->dependency_failed) cs_.retries.forget(ev);  // PoCL fails it at enqueue: no driver will
  held_failures().hold_if_failing_early(ev);
  pocl_command_enqueue(ev->queue, pending.node);
  POname(clReleaseEvent)(ev);  // the handle's reference; the engine holds its own
}

void PoclHost::discard_copy(CopyHandle copy) noexcept {
  auto* node = static_cast<PendingCopy*>(copy.host_data.get())->node;
  cs_.retries.forget(node->sync.event.event);
  compat::discard_migration(node);
}

const memlayer::migration::CostModel& PoclHost::cost_model() const noexcept { return cs_.cost; }

// The device's global memory (a memlayer device's arena: its global_mem
// parameter).
std::uint64_t PoclHost::capacity(Location at) const noexcept {
  cl_device_id dev = at == kHost ? nullptr : cs_.device(at);
  return dev == nullptr ? UINT64_MAX : dev->global_mem_size;
}

std::string PoclHost::location_name(Location at) const {
  cl_device_id dev = at == kHost ? nullptr : cs_.device(at);
  if (dev == nullptr) return Host::location_name(at);
  return std::string(dev->short_name) + " (location " + std::to_string(at) + ")";
}

// ---- per-context state ----------------------------------------------------------

std::mutex g_context_mutex;
Immortal<std::list<ContextState*>> g_live_contexts_storage;  // under g_context_mutex, for statistics
std::list<ContextState*>& g_live_contexts = g_live_contexts_storage.value;

// Link costs only rank sources: the host links are typical of a PCIe card,
// and a peer copy is cheaper by its driver's can_migrate_d2d priority.
constexpr double kPeerLatency = 5e-6;
constexpr double kPeerBandwidth = 24e9;

// Under g_context_mutex. Throws std::bad_alloc, with nothing kept.
ContextState* new_context_state(cl_context ctx, const char** error) {
  auto state = std::make_unique<ContextState>(ctx);
  state->device_at.fill(-1);
  for (cl_uint i = 0; i < ctx->num_devices; ++i) {
    cl_device_id d = ctx->devices[i];
    if (d->global_mem_id < 0 || static_cast<unsigned>(d->global_mem_id) + 1 >= kMaxLocations) {
      *error = "a device's global_mem_id is beyond the engine's 63 device locations";
      return nullptr;
    }
    const Location loc = location_of(d);
    if (state->device_at[loc] < 0) state->device_at[loc] = static_cast<int>(i);
    if (loc != kHost && !compat::honours_migration_ranges(d)) state->whole_buffers = true;
  }
  // A direct path src -> dst where the destination's driver copies from
  // the source device itself (PoCL runs a D2D migration on the
  // destination's queue).
  for (cl_uint s = 0; s < ctx->num_devices; ++s) {
    for (cl_uint t = 0; t < ctx->num_devices; ++t) {
      cl_device_id src = ctx->devices[s];
      cl_device_id dst = ctx->devices[t];
      if (location_of(src) == location_of(dst) || location_of(src) == kHost || location_of(dst) == kHost) continue;
      // With whole buffers only, any driver's device-to-device copy will do.
      const bool direct = state->whole_buffers ? compat::migrates_d2d(dst) : compat::migrates_d2d_ranges(dst);
      if (!direct || dst->ops->can_migrate_d2d == nullptr) continue;
      const int priority = dst->ops->can_migrate_d2d(dst, src);
      if (priority <= 0) continue;
      state->cost.set_direct(location_of(src), location_of(dst), {kPeerLatency / priority, kPeerBandwidth * priority});
    }
  }
  g_live_contexts.push_back(state.get());  // the last step that may throw
  ContextState* const s = state.release();  // owned by the C struct; pocl_ml_release_context takes it back
  __atomic_store_n(&ctx->memlayer_state, s, __ATOMIC_RELEASE);
  return s;
}

// context_state()'s first call for `ctx`, out of line: the engine's state
// of `ctx`, made by its first command; nullptr when it cannot have one
// (`error` says why).
[[gnu::noinline]] ContextState* make_context_state(cl_context ctx, const char** error) {
  std::lock_guard<std::mutex> lock(g_context_mutex);
  if (ctx->memlayer_state != nullptr) return static_cast<ContextState*>(ctx->memlayer_state);
  try {
    return new_context_state(ctx, error);
  } catch (const std::bad_alloc&) {  // nothing kept: the next command tries again
    *error = "no host memory for the context's engine";
    return nullptr;
  }
}

// Every command's look: inline, so that a context made already costs a load.
inline ContextState* context_state(cl_context ctx, const char** error) {
  auto* s = static_cast<ContextState*>(__atomic_load_n(&ctx->memlayer_state, __ATOMIC_ACQUIRE));
  if (s != nullptr) [[likely]]
    return s;
  return make_context_state(ctx, error);
}

// ---- statistics -------------------------------------------------------------

struct Counters {
  std::atomic<uint64_t> commands[4]{};
  std::atomic<uint64_t> bytes[4]{};
  // Evictions of released contexts (live ones are read from their engines).
  std::atomic<uint64_t> retired_evictions{0}, retired_written_back{0}, retired_enqueues{0}, retired_fast_path{0};
  // pocl_ml_migration_retry's outcomes.
  std::atomic<uint64_t> resourced{0}, last_copy_retries{0};
  // What a reset subtracted.
  std::atomic<uint64_t> evictions_base{0}, written_back_base{0}, enqueues_base{0}, fast_path_base{0};
};
Counters g_counters;

// buffer_state()'s first call for `mem`, out of line: the check of every
// later one is inline in each command's loop over its buffers.
[[gnu::noinline]] BufferState* make_buffer_state(ContextState& cs, cl_mem mem) {
  POCL_LOCK_OBJ(mem);
  auto* s = static_cast<BufferState*>(mem->memlayer_state);
  if (s == nullptr) {
    try {
      s = std::make_unique<BufferState>(cs, mem).release();  // owned by the C struct; pocl_ml_release_mem takes it back
    } catch (const std::bad_alloc&) {
      s = nullptr;
    }
    __atomic_store_n(&mem->memlayer_state, s, __ATOMIC_RELEASE);
  }
  POCL_UNLOCK_OBJ(mem);
  return s;
}

// The engine's state of `mem`, made by its first command; nullptr out of
// host memory.
inline BufferState* buffer_state(ContextState& cs, cl_mem mem) {
  auto* s = static_cast<BufferState*>(__atomic_load_n(&mem->memlayer_state, __ATOMIC_ACQUIRE));
  if (s != nullptr) [[likely]]
    return s;
  return make_buffer_state(cs, mem);
}

// ---- one command ------------------------------------------------------------

// Per-thread scratch: once warm, an enqueue allocates nothing here.
struct Scratch;
// What every command reads (scratch()): a plain pointer, no destructor, so
// that its look is one __tls_get_addr and a load. The owner is t_scratch.
thread_local Scratch* t_scratch_ptr = nullptr;
struct Scratch {
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { t_scratch_ptr = nullptr; }
  std::vector<memlayer::engine::BufferUse> uses;
  std::vector<cl_mem> mems;  // the command's buffers
  // 3.1: the buffers of the last command with many, as given and each
  // once (pocl_ml_create_command reuses the second for the same first).
  std::vector<cl_mem> many_given, many_once;
  memlayer::engine::Submission submission;
  compat::LinkNodes links;  // for the command's links; what one leaves serves the next

  // Room for `n` uses and buffers (after begin_command()), so that filling
  // them cannot throw. False out of host memory.
  bool make_room(std::size_t n) noexcept {
    try {
      uses.reserve(n);
      mems.reserve(n);
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
};
// Made at a thread's first command, not as the thread_local is: with GCC 12
// a handler around the first use of a thread_local does not catch what its
// initializer throws (pocl_alloc_failure_test.cpp ended in std::terminate),
// and out of host memory that would leave through PoCL's C frames. Gone
// with the thread.
thread_local std::unique_ptr<Scratch> t_scratch;

// The first command of a thread, out of line. nullptr out of host memory
// (the next call tries again).
[[gnu::noinline]] Scratch* make_scratch() noexcept {
  try {
    t_scratch = std::make_unique<Scratch>();
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  t_scratch_ptr = t_scratch.get();
  return t_scratch_ptr;
}

// In a shared library each thread_local access is a call to __tls_get_addr,
// which GCC makes again at every use: one here, per command.
inline Scratch* scratch() noexcept {
  if (Scratch* s = t_scratch_ptr) [[likely]]
    return s;
  return make_scratch();
}
constexpr const char* kNoScratch = "memlayer migration: no host memory for this thread's scratch\n";

#if MEMLAYER_POCL_MAJOR >= 7
// `u` over a whole buffer of `size` bytes, for contexts with a device that
// moves only whole buffers (ContextState::whole_buffers): a read reads it
// all; a write of part of it reads the rest, which must stay as it was
// wherever the command leaves the only complete copy.
memlayer::migration::Use whole_use(memlayer::migration::Use u, std::uint64_t size) {
  if (u.offset == 0 && u.size == size) return u;
  return {0, size, memlayer::migration::writes(u.access) ? Access::read_write : Access::read};
}

// How a command uses an entry's bytes (pocl_buffer_migration_info::access).
Access access_of(const pocl_buffer_migration_info& entry) {
  switch (entry.access) {
    case POCL_MIGR_ACCESS_READ: return Access::read;
    case POCL_MIGR_ACCESS_WRITE: return Access::write;
    case POCL_MIGR_ACCESS_READ_WRITE: return Access::read_write;
    case POCL_MIGR_ACCESS_OVERWRITE: return Access::overwrite;
    default: break;
  }
  return entry.read_only ? Access::read : Access::read_write;
}
#else
Access access_of(ml_access a) {
  switch (a) {
    case ML_ACCESS_READ: return Access::read;
    case ML_ACCESS_WRITE: return Access::write;
    case ML_ACCESS_READ_WRITE: return Access::read_write;
    case ML_ACCESS_OVERWRITE: break;
  }
  return Access::overwrite;
}

// The buffer whose storage holds `m`'s bytes: an image's storage buffer,
// else `m` itself. Only an image names one (`buffer`), and a kernel's
// buffer arguments are looked at by type first: the type shares a cache
// line with the flags, which PoCL has just read for the kernel's argument
// checks, while `buffer` lies 300 bytes on, a line of its own that
// nothing else of a buffer's enqueue reads (doc/performance.md).
cl_mem storage_of(cl_mem m) {
  if (m->type == CL_MEM_OBJECT_BUFFER) return m;
  return m->buffer != nullptr ? m->buffer : m;
}
#endif

cl_int error_code(const memlayer::engine::EnqueueError& e) {
  switch (e.code) {
    case memlayer::engine::EnqueueError::Code::device_full:
    case memlayer::engine::EnqueueError::Code::device_busy: return CL_MEM_OBJECT_ALLOCATION_FAILURE;
    case memlayer::engine::EnqueueError::Code::host_out_of_memory: return CL_OUT_OF_HOST_MEMORY;
    case memlayer::engine::EnqueueError::Code::host_failed: break;
  }
  return CL_OUT_OF_RESOURCES;
}

// After a failed enqueue or placement: true when it only had to wait for
// room (device_busy) and some of that room came within `wait`, so it
// should be tried again; else the failure is reported and `err` is its OpenCL error.
bool try_again(const memlayer::engine::EnqueueError& failed, memlayer::engine::Submission& sub,
               memlayer::engine::RoomWait& wait, cl_int& err) {
  const bool again =
      failed.code == memlayer::engine::EnqueueError::Code::device_busy && wait.wait(sub.waits(), room_wait_limit());
  sub.clear();
  if (again) return true;
  POCL_MSG_ERR("memlayer migration: %s\n", failed.message.c_str());
  err = error_code(failed);
  return false;
}

// Where a command runs for the engine: its device's location, or the host
// copy for clEnqueueMigrateMemObjects(CL_MIGRATE_MEM_OBJECT_HOST).
Location destination(cl_command_queue queue, cl_mem_migration_flags mig_flags) {
  return (mig_flags & CL_MIGRATE_MEM_OBJECT_HOST) != 0 ? kHost : location_of(pocl_real_dev(queue->device));
}

// What each command with buffers starts with: the failures held for
// earlier commands let go of where they may be, this thread's scratch
// emptied, and the engine of `queue`'s context (nullptr: it cannot have one,
// `error` says why).
ContextState* begin_command(cl_command_queue queue, Scratch& sc, const char** error) {
  held_failures().release_settled();
  sc.uses.clear();
  sc.mems.clear();
  return context_state(queue->context, error);
}

void link_waits(cl_event final_event, std::span<const cl_event> wait_list, std::size_t user_links, Scratch& sc);

// Makes the command for sc.uses (`mems`: the buffers 3.1 lists in its
// event, each once) and enqueues it through the engine: storage placed, copies made,
// and the command made to wait for them, its wait list and what the engine
// names. The command first (the engine records its event), without the
// user's wait list: a command that fails below is then freed with nothing
// pointing at it. A device full of storage that queued work still holds
// (deferred frees, write-backs) makes room once that work finishes: wait,
// try again, within one room wait. For an unmap, `unmapped` is the cl_mem
// whose mapping it unmaps: once committed, one of its mappings is marked
// (compat::mark_unmap_committed; PoclHost::can_evict reads it).
cl_int make_command(ContextState& cs, _cl_command_node** cmd, cl_command_queue queue, cl_command_type type,
                    cl_event* event_p, cl_uint num_events, const cl_event* wait_list, Location at,
                    std::span<cl_mem> mems, Scratch& sc, cl_mem unmapped) {
  // The links to the user's wait list first: without them the enqueue
  // fails with nothing done.
  const std::size_t user_links = running(std::span(wait_list, num_events));
  if (!reserve_links(sc.links, user_links, user_links)) {
    POCL_MSG_ERR("memlayer migration: no host memory to order a command after its wait list\n");
    return CL_OUT_OF_HOST_MEMORY;
  }
  cl_event final_event = nullptr;
  memlayer::engine::RoomWait room(cs.engine.host());
  for (;;) {
    cl_int err = compat::create_command(cmd, queue, type, event_p, mems);
    if (err != CL_SUCCESS) return err;
    final_event = (*cmd)->sync.event.event;
    auto failed = cs.engine.enqueue(sc.uses, at, final_event, sc.submission);
    if (!failed) break;
    compat::discard_command(*cmd);
    *cmd = nullptr;
    if (event_p != nullptr) *event_p = nullptr;
    if (!try_again(*failed, sc.submission, room, err)) return err;
  }
  link_waits(final_event, std::span(wait_list, num_events), user_links, sc);
  // Not yet enqueued: nothing reads it before pocl_command_enqueue.
  final_event->memlayer_command = static_cast<std::uintptr_t>(sc.submission.command());
  sc.submission.clear();
  held_failures().hold_if_failing_early(final_event);
  if (type == CL_COMMAND_UNMAP_MEM_OBJECT && unmapped != nullptr) compat::mark_unmap_committed(unmapped);
  return CL_SUCCESS;
}

// Links the command of `final_event`, which the engine has committed, to
// the user's `wait_list` (its `user_links` reserved) and to the engine's
// waits. An event that failed since the engine planned (it names none that
// had failed then) is linked all the same: the command then fails, and
// must not run on what the failed one did not make (a copy into its
// storage, say). Nor is a link left to an in-order queue's order when the
// event is the queue's last command: PoCL forgets a queue's last command
// once it ends, failed or not, so a command enqueued after that would not
// wait for it, and would run although it failed. When the links cannot all
// be made (out of host memory), none is: the command fails without running,
// as one whose dependency failed (PoCL fails it at enqueue), and the engine
// undoes what it committed for it, as for any command that wrote nothing
// (PoclHost::status: cancelled); the application sees its event fail.
void link_waits(cl_event final_event, std::span<const cl_event> wait_list, std::size_t user_links, Scratch& sc) {
  const std::size_t engine_links = running(sc.submission.waits());
  if (!reserve_links(sc.links, engine_links, user_links + engine_links)) {
    POCL_MSG_ERR("memlayer migration: no host memory to order a command after what it waits for: it fails "
                 "without running\n");
    POCL_LOCK_OBJ(final_event);
    final_event->dependency_failed = 1;
    POCL_UNLOCK_OBJ(final_event);
    return;
  }
  for (cl_event e : wait_list) compat::link(final_event, e, sc.links);
  for (Event w : sc.submission.waits()) compat::link(final_event, event_of(w), sc.links);
}

}  // namespace

extern "C" {

int pocl_ml_migration_enabled(void) {
  static const int enabled = read_engine_choice();
  return enabled;
}

cl_int pocl_ml_alloc(cl_device_id dev, cl_mem mem) {
  const char* error = nullptr;
  ContextState* cs = context_state(mem->context, &error);
  POCL_RETURN_ERROR_ON(cs == nullptr, CL_OUT_OF_RESOURCES, "memlayer migration: %s\n", error);
  if (mem->parent != nullptr) mem = mem->parent;  // 7.1: a sub-buffer's storage is its parent's (it follows)
  BufferState* b = buffer_state(*cs, mem);
  POCL_RETURN_ERROR_ON(b == nullptr, CL_OUT_OF_HOST_MEMORY, "memlayer migration: no host memory\n");
  Scratch* scp = scratch();
  POCL_RETURN_ERROR_ON(scp == nullptr, CL_OUT_OF_HOST_MEMORY, "%s", kNoScratch);
  Scratch& sc = *scp;
  memlayer::engine::RoomWait room(cs->engine.host());
  for (;;) {
    auto failed = cs->engine.place(b->tracked, location_of(dev), sc.submission);
    if (!failed) return CL_SUCCESS;
    cl_int err = CL_SUCCESS;
    if (!try_again(*failed, sc.submission, room, err)) return err;
  }
}

#if MEMLAYER_POCL_MAJOR >= 7
int pocl_ml_runs_context(cl_context context) {
  if (!pocl_ml_migration_enabled()) return 0;
  const char* error = nullptr;
  ContextState* cs = context_state(context, &error);
  return cs != nullptr ? 1 : 0;
}

cl_int pocl_ml_create_command(_cl_command_node** cmd, cl_command_queue command_queue, cl_command_type command_type,
                              cl_event* event_p, cl_uint num_events, const cl_event* wait_list,
                              pocl_buffer_migration_info* buffer_usage, cl_mem_migration_flags mig_flags) {
  Scratch* scp = scratch();
  POCL_RETURN_ERROR_ON(scp == nullptr, CL_OUT_OF_HOST_MEMORY, "%s", kNoScratch);
  Scratch& sc = *scp;
  const char* error = nullptr;
  ContextState* cs = begin_command(command_queue, sc, &error);
  POCL_RETURN_ERROR_ON(cs == nullptr, CL_OUT_OF_RESOURCES, "memlayer migration: %s\n", error);
  const bool undefined = (mig_flags & CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED) != 0;

  // A sub-buffer is its range of its parent, which the engine tracks.
  pocl_buffer_migration_info* entry = nullptr;
  std::size_t entries = 0;
  LL_FOREACH(buffer_usage, entry) ++entries;
  POCL_RETURN_ERROR_ON(!sc.make_room(entries), CL_OUT_OF_HOST_MEMORY, "memlayer migration: no host memory\n");
  LL_FOREACH(buffer_usage, entry) {
    cl_mem mem = entry->buffer;
    memlayer::engine::BufferUse u;
    u.use = {entry->offset, entry->size != 0 ? entry->size : mem->size - entry->offset,
             undefined ? Access::overwrite : access_of(*entry)};
    if (mem->parent != nullptr) {
      u.use.offset += mem->origin;
      mem = mem->parent;
    }
    if (cs->whole_buffers) u.use = whole_use(u.use, mem->size);
    BufferState* b = buffer_state(*cs, mem);
    POCL_RETURN_ERROR_ON(b == nullptr, CL_OUT_OF_HOST_MEMORY, "memlayer migration: no host memory\n");
    u.buffer = &b->tracked;
    sc.uses.push_back(u);  // within make_room()'s room
  }
  const cl_int err = make_command(*cs, cmd, command_queue, command_type, event_p, num_events, wait_list,
                                  destination(command_queue, mig_flags), {}, sc,
                                  buffer_usage != nullptr ? buffer_usage->buffer : nullptr);
  if (err != CL_SUCCESS) return err;
  // The node holds each entry's buffer until it has run
  // (pocl_mem_manager_free_command releases them with the list).
  LL_FOREACH(buffer_usage, entry) POCL_RETAIN_OBJECT(entry->buffer);
  (*cmd)->migr_infos = buffer_usage;
  return CL_SUCCESS;
}
#else
cl_int pocl_ml_create_command(_cl_command_node** cmd, cl_command_queue command_queue, cl_command_type command_type,
                              cl_event* event_p, cl_uint num_events, const cl_event* wait_list, size_t num_buffers,
                              cl_mem* buffers, const char* readonly_flags, const ml_use* uses,
                              cl_mem_migration_flags mig_flags) {
  if (num_buffers == 0) {
    held_failures().release_settled();
    return pocl_create_command_struct(cmd, command_queue, command_type, event_p, num_events, wait_list, 0, nullptr);
  }
  Scratch* scp = scratch();
  POCL_RETURN_ERROR_ON(scp == nullptr, CL_OUT_OF_HOST_MEMORY, "%s", kNoScratch);
  Scratch& sc = *scp;
  const char* error = nullptr;
  ContextState* cs = begin_command(command_queue, sc, &error);
  POCL_RETURN_ERROR_ON(cs == nullptr, CL_OUT_OF_RESOURCES, "memlayer migration: %s\n", error);
  const bool undefined = (mig_flags & CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED) != 0;
  // The buffers, each once, that 3.1 lists in the event. A few (copies,
  // maps: PoCL reads mem_objs[0] of an unmap) keep their order; many
  // (kernel arguments) are sorted, as a search per argument would be
  // quadratic. A command with the same many as this thread's last one with
  // many (a kernel enqueued again) reuses its list: none is built. (Only a
  // list with no image: an image's storage buffer is another object, which
  // the same address given again need not name.) The engine orders the
  // uses itself, as cheaply.
  const std::span<cl_mem> given(buffers, num_buffers);
  bool again = num_buffers > 8 && std::ranges::equal(given, sc.many_given);
  POCL_RETURN_ERROR_ON(!sc.make_room(num_buffers), CL_OUT_OF_HOST_MEMORY, "memlayer migration: no host memory\n");
  bool images = false;
  for (size_t i = 0; i < num_buffers; ++i) {
    const cl_mem mem = storage_of(buffers[i]);
    memlayer::engine::BufferUse u;
    if (uses != nullptr && mem == buffers[i]) {
      u.use = {uses[i].offset, uses[i].size == 0 ? mem->size - uses[i].offset : uses[i].size,
               access_of(uses[i].access)};
    } else {
      u.use = {0, mem->size, readonly_flags[i] ? Access::read : Access::read_write};
    }
    images |= mem != buffers[i];
    if (undefined) u.use.access = Access::overwrite;
    BufferState* b = buffer_state(*cs, mem);
    POCL_RETURN_ERROR_ON(b == nullptr, CL_OUT_OF_HOST_MEMORY, "memlayer migration: no host memory\n");
    u.buffer = &b->tracked;
    sc.uses.push_back(u);  // within make_room()'s room
    if (!again) sc.mems.push_back(mem);
  }
  if (again && images) {  // the addresses of the last list, which had no image, name other objects now
    again = false;
    for (cl_mem m : given) sc.mems.push_back(storage_of(m));
  }
  std::span<cl_mem> mems = sc.many_once;  // again: the last list
  if (!again && num_buffers <= 8) {
    if (num_buffers > 1) {  // (one is once)
      auto end = sc.mems.begin();
      for (cl_mem m : sc.mems)
        if (std::find(sc.mems.begin(), end, m) == end) *end++ = m;
      sc.mems.erase(end, sc.mems.end());
    }
    mems = sc.mems;
  } else if (!again) {
    sc.many_given.clear();  // first: out of memory below, no stale list is reused
    try {
      sc.many_once = sc.mems;
      if (!images) sc.many_given.assign(given.begin(), given.end());
    } catch (const std::bad_alloc&) {
      sc.many_given.clear();
      POCL_MSG_ERR("memlayer migration: no host memory\n");
      return CL_OUT_OF_HOST_MEMORY;
    }
    std::sort(sc.many_once.begin(), sc.many_once.end());
    sc.many_once.erase(std::unique(sc.many_once.begin(), sc.many_once.end()), sc.many_once.end());
    mems = sc.many_once;
  }
  const cl_int err = make_command(*cs, cmd, command_queue, command_type, event_p, num_events, wait_list,
                                  destination(command_queue, mig_flags), mems, sc, buffers[0]);
  if (err != CL_SUCCESS) return err;
  // Held until the command finishes (pocl_free_event_memobjs); an unmap
  // releases the reference its map took.
  if (command_type != CL_COMMAND_UNMAP_MEM_OBJECT)
    for (cl_mem mem : mems) POCL_RETAIN_OBJECT(mem);
  return CL_SUCCESS;
}
#endif

void pocl_ml_release_mem(cl_mem mem) {
  auto* s = static_cast<BufferState*>(mem->memlayer_state);
  if (s == nullptr) return;
  auto* cs = static_cast<ContextState*>(mem->context->memlayer_state);
  s->releasing.store(true);
  mem->memlayer_state = nullptr;
  std::unique_ptr<BufferState> owned(s);  // the ownership the C struct held
  owned.reset();                           // waits for an eviction working on it
  if (cs != nullptr) cs->host.forget(mem);
}

void pocl_ml_release_context(cl_context context) {
  std::unique_ptr<ContextState> owned(static_cast<ContextState*>(context->memlayer_state));  // as above
  context->memlayer_state = nullptr;
  if (owned) {
    const auto st = owned->engine.stats();
    g_counters.retired_evictions += st.evictions;
    g_counters.retired_written_back += st.bytes_written_back;
    g_counters.retired_enqueues += st.enqueues;
    g_counters.retired_fast_path += st.fast_path;
    std::lock_guard<std::mutex> lock(g_context_mutex);
    g_live_contexts.remove(owned.get());
  }
}

void pocl_ml_command_ended(cl_event event, cl_int status) {
  const auto name = static_cast<memlayer::engine::CommandName>(event->memlayer_command);
  event->memlayer_command = 0;
  // The event holds its queue, which holds the context: its engine lives.
  auto* cs = static_cast<ContextState*>(__atomic_load_n(&event->context->memlayer_state, __ATOMIC_ACQUIRE));
  if (cs != nullptr) cs->engine.ended(name, PoclHost::status_of(event, status));
}

int pocl_ml_migration_retry(_cl_command_node* node) {
  using Retry = memlayer::pocl_core::MigrationRetries::Retry;
  auto* cs = static_cast<ContextState*>(node->sync.event.event->context->memlayer_state);
  if (cs == nullptr) return 0;
  switch (cs->retries.next(node, room_wait_limit())) {
    case Retry::resourced: g_counters.resourced.fetch_add(1, std::memory_order_relaxed); return 1;
    case Retry::again: g_counters.last_copy_retries.fetch_add(1, std::memory_order_relaxed); return 1;
    case Retry::give_up: break;
  }
  return 0;
}

void pocl_ml_migration_ended(_cl_command_node* node) {
  auto* cs = static_cast<ContextState*>(node->sync.event.event->context->memlayer_state);
  if (cs != nullptr) cs->retries.forget(node->sync.event.event);
}

void pocl_ml_count_migration(pocl_migration_type_t type, size_t bytes) {
  auto t = static_cast<size_t>(type);
  if (t >= 4) return;
  g_counters.commands[t].fetch_add(1, std::memory_order_relaxed);
  g_counters.bytes[t].fetch_add(bytes, std::memory_order_relaxed);
}

void memlayer_pocl_get_migration_stats(memlayer_pocl_migration_stats* out, int reset) {
  auto take = [reset](std::atomic<uint64_t>& c) { return reset ? c.exchange(0) : c.load(); };
  out->d2h_commands = take(g_counters.commands[ENQUEUE_MIGRATE_TYPE_D2H]);
  out->d2h_bytes = take(g_counters.bytes[ENQUEUE_MIGRATE_TYPE_D2H]);
  out->h2d_commands = take(g_counters.commands[ENQUEUE_MIGRATE_TYPE_H2D]);
  out->h2d_bytes = take(g_counters.bytes[ENQUEUE_MIGRATE_TYPE_H2D]);
  out->d2d_commands = take(g_counters.commands[ENQUEUE_MIGRATE_TYPE_D2D]);
  out->d2d_bytes = take(g_counters.bytes[ENQUEUE_MIGRATE_TYPE_D2D]);
  out->migrations_resourced = take(g_counters.resourced);
  out->last_copy_retries = take(g_counters.last_copy_retries);
  const auto nodes = memlayer::pocl_core::node_pool().links_took(reset != 0);
  out->link_nodes_recycled = nodes.recycled;
  out->link_nodes_allocated = nodes.allocated;
  uint64_t evictions = g_counters.retired_evictions, written = g_counters.retired_written_back;
  uint64_t enqueues = g_counters.retired_enqueues, fast = g_counters.retired_fast_path;
  {
    std::lock_guard<std::mutex> lock(g_context_mutex);
    for (ContextState* cs : g_live_contexts) {
      const auto st = cs->engine.stats();
      evictions += st.evictions;
      written += st.bytes_written_back;
      enqueues += st.enqueues;
      fast += st.fast_path;
    }
  }
  out->evictions = evictions - g_counters.evictions_base;
  out->eviction_bytes_written_back = written - g_counters.written_back_base;
  out->enqueues = enqueues - g_counters.enqueues_base;
  out->fast_path_enqueues = fast - g_counters.fast_path_base;
  if (reset) {
    g_counters.evictions_base = evictions;
    g_counters.written_back_base = written;
    g_counters.enqueues_base = enqueues;
    g_counters.fast_path_base = fast;
  }
}

}  // extern "C"

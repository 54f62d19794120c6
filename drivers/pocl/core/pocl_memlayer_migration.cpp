// memlayer's migration engine inside PoCL's core: PoCL commands in, plans
// from memlayer's planner (through its C API), PoCL migration commands out.
// The contract is in pocl_memlayer_migration.h; the model and ordering rules
// in doc/migration.md.
// PoCL declares its internal API entry points (POclRetainEvent, ...)
// without C linkage for C++; its headers are C.
extern "C" {
#include "pocl_memlayer_migration.h"
#include "pocl_mem_management.h"
#include "pocl_util.h"
#include "common_driver.h"
}

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

namespace {

constexpr unsigned kMaxLocations = 64;  // the planner's limit
constexpr uint32_t kHost = 0;

// PoCL's CPU drivers (basic, pthread) keep a buffer in mem_host_ptr itself:
// their memory is the host copy. Every other device's memory is location
// global_mem_id + 1.
uint32_t location_of(cl_device_id dev) {
  if (dev->ops->alloc_mem_obj == pocl_driver_alloc_mem_obj) return kHost;
  return static_cast<uint32_t>(dev->global_mem_id) + 1;
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

// ---- RAII for the planner's C handles ---------------------------------------

struct PlanDeleter {
  void operator()(ml_plan* p) const { ml_plan_destroy(p); }
};
struct CostModelDeleter {
  void operator()(ml_cost_model* m) const { ml_cost_model_destroy(m); }
};
struct VersionsDeleter {
  void operator()(ml_versions* v) const { ml_versions_destroy(v); }
};
using Plan = std::unique_ptr<ml_plan, PlanDeleter>;
using CostModel = std::unique_ptr<ml_cost_model, CostModelDeleter>;
using Versions = std::unique_ptr<ml_versions, VersionsDeleter>;

// ---- how the planner holds PoCL events --------------------------------------
//
// The planner retains and releases cl_events (each takes the event's lock)
// while a buffer's lock is held. While buffers are locked for planning, a
// buffer's callbacks record into the command's RefLog instead: its
// retains are applied before any of those buffers is unlocked, so no other
// thread can drop an event first; its releases after, which only keeps an
// event alive a little longer. The log counts repeats of one event, so a
// command's 64 buffers that each add its event and drop the previous one
// take two event locks in all, not 256.

struct RefLog {
  struct Run {
    ml_event event;
    int count;  // the type of pocl_refcount
  };
  std::vector<Run> retains;
  std::vector<Run> releases;

  static void add(std::vector<Run>& runs, ml_event e) {
    if (!runs.empty() && runs.back().event == e)
      ++runs.back().count;
    else
      runs.push_back({e, 1});
  }
};

// A buffer's callback context: where its references go while it is locked
// for planning (nullptr: straight to PoCL).
struct EventRefs {
  RefLog* recording = nullptr;
};

void retain_event(void* context, ml_event e) {
  auto* refs = static_cast<EventRefs*>(context);
  if (refs->recording != nullptr)
    RefLog::add(refs->recording->retains, e);
  else
    POname(clRetainEvent)(static_cast<cl_event>(e));
}
void release_event(void* context, ml_event e) {
  auto* refs = static_cast<EventRefs*>(context);
  if (refs->recording != nullptr)
    RefLog::add(refs->recording->releases, e);
  else
    POname(clReleaseEvent)(static_cast<cl_event>(e));
}
int event_finished(void*, ml_event e) {
  // CL_COMPLETE is 0, failures are negative; status only decreases.
  return __atomic_load_n(&static_cast<cl_event>(e)->status, __ATOMIC_ACQUIRE) <= CL_COMPLETE;
}

// Applies each run of k references to one event with one lock.
void apply_runs(std::vector<RefLog::Run>& runs, bool retain) {
  for (const RefLog::Run& r : runs) {
    auto e = static_cast<cl_event>(r.event);
    const int k = r.count;
    POCL_LOCK_OBJ(e);
    if (retain || e->pocl_refcount > k) {
      e->pocl_refcount += retain ? k : -k;
      POCL_UNLOCK_OBJ(e);
    } else {
      e->pocl_refcount -= k - 1;  // the last one frees it
      POCL_UNLOCK_OBJ(e);
      POname(clReleaseEvent)(e);
    }
  }
  runs.clear();
}

// Before the recorded buffers are unlocked.
void apply_retains(RefLog& log) { apply_runs(log.retains, true); }
// With no buffer locked.
void apply_releases(RefLog& log) { apply_runs(log.releases, false); }

// ---- per-context state: where each location lives, and link costs ----------

struct ContextState {
  CostModel cost;
  // index into context->devices of a device with that global memory, -1: none
  std::array<int, kMaxLocations> device_at{};
};

std::mutex g_context_mutex;

// Link costs only rank sources; these are typical of a PCIe card (host
// links) and of a peer copy. PoCL's can_migrate_d2d priority orders peers.
constexpr double kHostLatency = 10e-6;
constexpr double kHostBandwidth = 12e9;
constexpr double kPeerLatency = 5e-6;

ContextState* context_state(cl_context ctx, const char** error) {
  auto* s = static_cast<ContextState*>(__atomic_load_n(&ctx->memlayer_state, __ATOMIC_ACQUIRE));
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(g_context_mutex);
  if (ctx->memlayer_state != nullptr) return static_cast<ContextState*>(ctx->memlayer_state);
  auto state = std::make_unique<ContextState>();
  state->device_at.fill(-1);
  ml_cost_model* model = nullptr;
  if (ml_cost_model_create(kHostLatency, kHostBandwidth, &model) != ML_MIG_OK) {
    *error = ml_migration_last_error();
    return nullptr;
  }
  state->cost.reset(model);
  for (cl_uint i = 0; i < ctx->num_devices; ++i) {
    cl_device_id d = ctx->devices[i];
    if (d->global_mem_id < 0 || static_cast<unsigned>(d->global_mem_id) + 1 >= kMaxLocations) {
      *error = "a device's global_mem_id is beyond the planner's 63 device locations";
      return nullptr;
    }
    uint32_t loc = location_of(d);
    if (state->device_at[loc] < 0) state->device_at[loc] = static_cast<int>(i);
  }
  // A direct path src -> dst where the destination's driver copies from
  // the source device itself (it runs the copy: PoCL executes a D2D
  // migration on the destination's queue).
  for (cl_uint s = 0; s < ctx->num_devices; ++s) {
    for (cl_uint t = 0; t < ctx->num_devices; ++t) {
      cl_device_id src = ctx->devices[s];
      cl_device_id dst = ctx->devices[t];
      if (location_of(src) == location_of(dst) || location_of(src) == kHost || location_of(dst) == kHost) continue;
      if (dst->ops->migrate_d2d == nullptr || dst->ops->can_migrate_d2d == nullptr) continue;
      int priority = dst->ops->can_migrate_d2d(dst, src);
      if (priority <= 0) continue;
      ml_cost_model_set_direct(state->cost.get(), location_of(src), location_of(dst), kPeerLatency / priority,
                               2 * kHostBandwidth * priority);
    }
  }
  s = state.release();
  __atomic_store_n(&ctx->memlayer_state, s, __ATOMIC_RELEASE);
  return s;
}

// ---- per-buffer state, and the registry eviction walks ----------------------

struct BufferState {
  EventRefs refs;  // the planner's event callbacks' context
  Versions versions;
  cl_mem mem = nullptr;
  bool host_ref = false;  // holds one mem_host_ptr reference for the host copy
  std::list<BufferState*>::iterator registered;
  // The stamp of the last command that used it (eviction takes the least
  // recently used first). Written under the buffer's lock, read by
  // eviction without it: a stale stamp only changes the order.
  std::atomic<uint64_t> last_use{0};
};

// Command stamps: one increment per command, not per buffer.
std::atomic<uint64_t> g_command_stamp{0};

struct Registry {
  std::mutex mutex;
  std::list<BufferState*> buffers;  // every buffer with versions
};

// Never destroyed: a program may return from main while PoCL's worker
// threads still finish events, and finishing an event releases its buffers
// (pocl_ml_release_mem) while exit() runs static destructors. A destroyed
// list there crashed PoCL's test_command_buffer_images under load.
union ImmortalRegistry {
  Registry value;
  ImmortalRegistry() : value() {}
  ~ImmortalRegistry() {}
};
ImmortalRegistry g_registry_storage;
Registry& g_registry = g_registry_storage.value;

// A buffer with host content (COPY_HOST_PTR, USE_HOST_PTR) starts valid at
// the host only; one without is undefined, so every location holds it.
BufferState* buffer_state(cl_mem mem, const char** error) {
  auto* s = static_cast<BufferState*>(__atomic_load_n(&mem->memlayer_state, __ATOMIC_ACQUIRE));
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(g_registry.mutex);
  if (mem->memlayer_state != nullptr) return static_cast<BufferState*>(mem->memlayer_state);
  auto state = std::make_unique<BufferState>();
  state->mem = mem;
  uint64_t valid = mem->mem_host_ptr_version > 0 ? (1ULL << kHost) : ~0ULL;
  ml_versions* v = nullptr;
  const ml_event_ops ops = {&state->refs, retain_event, release_event, event_finished};
  if (ml_versions_create(mem->size, valid, &ops, &v) != ML_MIG_OK) {
    *error = ml_migration_last_error();
    return nullptr;
  }
  state->versions.reset(v);
  g_registry.buffers.push_front(state.get());
  state->registered = g_registry.buffers.begin();
  s = state.release();
  __atomic_store_n(&mem->memlayer_state, s, __ATOMIC_RELEASE);
  return s;
}

// ---- statistics -------------------------------------------------------------

struct Counters {
  std::atomic<uint64_t> commands[4]{};
  std::atomic<uint64_t> bytes[4]{};
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> eviction_bytes{0};
};
Counters g_counters;

// ---- eviction ---------------------------------------------------------------

bool mem_allocated_at(cl_mem mem, int gid) {
  return __atomic_load_n(&mem->device_ptrs[gid].mem_ptr, __ATOMIC_ACQUIRE) != nullptr;
}

bool ensure_host_copy(BufferState& s) {
  if (s.host_ref) return true;
  if (pocl_alloc_or_retain_mem_host_ptr(s.mem) != 0) return false;
  s.host_ref = true;
  return true;
}

// Evicts one buffer that is idle on dev's memory (no unfinished use, no
// mapping, not locked by a command being planned), the least recently used
// first: its bytes held only there are written back to the host copy, then
// its storage is freed.
// Busy buffers (locked by another thread) are skipped, so eviction never
// waits on a lock while holding one. Returns whether it freed anything.
bool evict_one(cl_device_id dev, cl_mem keep) {
  const int gid = dev->global_mem_id;
  const uint32_t at = location_of(dev);
  if (at == kHost) return false;  // the host copy itself: nowhere to write back to
  std::vector<std::pair<uint64_t, cl_mem>> candidates;  // (last use, buffer)
  {
    std::lock_guard<std::mutex> lock(g_registry.mutex);
    for (BufferState* b : g_registry.buffers) {
      cl_mem m = b->mem;
      if (m == keep) continue;
      if (pthread_mutex_trylock(&m->pocl_lock) != 0) continue;
      if (m->pocl_refcount > 0 && m->map_count == 0 && mem_allocated_at(m, gid)) {
        ++m->pocl_refcount;  // kept alive until we are done with it
        candidates.emplace_back(b->last_use.load(std::memory_order_relaxed), m);
      }
      POCL_UNLOCK_OBJ(m);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  Plan plan;
  {
    ml_plan* p = nullptr;
    if (ml_plan_create(&p) != ML_MIG_OK) return false;
    plan.reset(p);
  }
  bool evicted = false;
  RefLog dropped;
  for (const auto& [stamp, m] : candidates) {
    if (!evicted && pthread_mutex_trylock(&m->pocl_lock) == 0) {
      auto* s = static_cast<BufferState*>(m->memlayer_state);
      const char* error = nullptr;
      ContextState* cs = context_state(m->context, &error);
      bool idle = cs != nullptr && m->map_count == 0 && mem_allocated_at(m, gid) &&
                  ml_versions_plan_evict(s->versions.get(), at, cs->cost.get(),
                                         plan.get()) == ML_MIG_OK;
      if (idle) {
        const ml_event* waits = ml_plan_waits(plan.get());
        for (size_t i = 0; i < ml_plan_wait_count(plan.get()) && idle; ++i) idle = event_finished(nullptr, waits[i]);
      }
      size_t copies = idle ? ml_plan_copy_count(plan.get()) : 0;
      if (idle && copies > 0) idle = ensure_host_copy(*s);
      if (idle) {
        // Nothing uses the buffer on this device: write back synchronously.
        uint64_t written = 0;
        for (size_t i = 0; i < copies; ++i) {
          ml_copy c = ml_plan_copy(plan.get(), i);
          dev->ops->read(dev->data, static_cast<char*>(m->mem_host_ptr) + c.offset, &m->device_ptrs[gid], m,
                         c.offset, c.size);
          written += c.size;
        }
        std::vector<ml_event> none(copies, nullptr);
        s->refs.recording = &dropped;
        ml_versions_commit_evict(s->versions.get(), plan.get(), none.data(), none.size(), at);
        s->refs.recording = nullptr;
        apply_retains(dropped);
        dev->ops->free(dev, m);
        g_counters.evictions.fetch_add(1, std::memory_order_relaxed);
        g_counters.eviction_bytes.fetch_add(written, std::memory_order_relaxed);
        evicted = true;
      }
      POCL_UNLOCK_OBJ(m);
      apply_releases(dropped);
    }
    POname(clReleaseMemObject)(m);
  }
  return evicted;
}

// Called with mem's lock held (eviction skips locked buffers, this one too).
cl_int alloc_locked_or_evict(cl_device_id dev, cl_mem mem) {
  for (;;) {
    if (dev->ops->alloc_mem_obj(dev, mem, nullptr) == CL_SUCCESS) return CL_SUCCESS;
    if (!evict_one(dev, mem)) {
      POCL_MSG_ERR("Failed to allocate %zu bytes on device %s (nothing left to evict)\n", mem->size,
                   dev->short_name);
      return CL_MEM_OBJECT_ALLOCATION_FAILURE;
    }
  }
}

// ---- one command ------------------------------------------------------------

// One buffer of a command: its uses are uses[first, first + count) of the
// command's scratch, sorted by buffer.
struct Buffer {
  cl_mem mem;
  BufferState* state;
  size_t first;
  size_t count;
  ml_plan* plan;
  size_t first_copy;  // its copies' events: copy_events[first_copy, ...)
};

// A migration command made under the buffer locks, finished after.
struct Migration {
  _cl_command_node* node;
  cl_command_queue queue;
  size_t first_wait, wait_count;  // in Scratch::copy_waits
};

// Per-thread scratch: once warm, an enqueue allocates nothing here. Not
// used once the migration commands are enqueued: a command run at once may
// complete, and its callbacks may enqueue on this thread.
struct Scratch {
  std::vector<std::pair<cl_mem, ml_use>> entries;
  std::vector<ml_use> uses;
  std::vector<Buffer> buffers;
  std::vector<cl_mem> mems;
  std::vector<ml_event> copy_events;
  std::vector<cl_event> copy_waits;
  std::vector<cl_event> command_waits;
  std::vector<Plan> plans;
  RefLog refs;
};
thread_local Scratch t_scratch;

// Out of line: in a shared library each thread_local access is a call to
// __tls_get_addr, and GCC recomputes the address at every use rather than
// keep it in a register (it was 6% of an enqueue's instructions).
[[gnu::noinline]] Scratch& scratch() { return t_scratch; }

ml_plan* scratch_plan(Scratch& s, size_t i) {
  while (s.plans.size() <= i) {
    ml_plan* p = nullptr;
    if (ml_plan_create(&p) != ML_MIG_OK) return nullptr;
    s.plans.emplace_back(p);
  }
  return s.plans[i].get();
}

cl_device_id device_at(cl_context ctx, const ContextState& cs, uint32_t location) {
  int i = cs.device_at[location];
  return i < 0 ? nullptr : ctx->devices[i];
}
cl_command_queue queue_at(cl_context ctx, const ContextState& cs, uint32_t location) {
  int i = cs.device_at[location];
  return i < 0 ? nullptr : ctx->default_queues[i];
}

// Adds e to the wait list of a command for `queue` unless the command
// waits on it anyway: already listed (a kernel with 64 arguments written by
// the previous kernel waits on it once), finished, or the last command
// enqueued on the same in-order queue (the queue orders them; an event
// becomes a queue's last only once enqueued there, so a stale read only
// costs a redundant dependency).
void add_wait(std::vector<cl_event>& waits, size_t from, cl_event e, cl_command_queue queue) {
  if (e == nullptr || event_finished(nullptr, e)) return;
  if (e->queue == queue && (queue->properties & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) == 0 &&
      __atomic_load_n(&queue->last_event.event, __ATOMIC_ACQUIRE) == e)
    return;
  if (std::find(waits.begin() + static_cast<std::ptrdiff_t>(from), waits.end(), e) == waits.end()) waits.push_back(e);
}

}  // namespace

extern "C" {

int pocl_ml_migration_enabled(void) {
  static const int enabled = read_engine_choice();
  return enabled;
}

cl_int pocl_ml_alloc(cl_device_id dev, cl_mem mem) {
  POCL_LOCK_OBJ(mem);
  cl_int err = mem_allocated_at(mem, dev->global_mem_id) ? CL_SUCCESS : alloc_locked_or_evict(dev, mem);
  POCL_UNLOCK_OBJ(mem);
  return err;
}

cl_int pocl_ml_create_command(_cl_command_node** cmd, cl_command_queue command_queue, cl_command_type command_type,
                              cl_event* event_p, cl_uint num_events, const cl_event* wait_list, size_t num_buffers,
                              cl_mem* buffers, const char* readonly_flags, const ml_use* uses,
                              cl_mem_migration_flags mig_flags) {
  if (num_buffers == 0)
    return pocl_create_command_struct(cmd, command_queue, command_type, event_p, num_events, wait_list, 0, nullptr);

  cl_device_id dev = pocl_real_dev(command_queue->device);
  cl_context ctx = command_queue->context;
  const char* error = nullptr;
  ContextState* cs = context_state(ctx, &error);
  POCL_RETURN_ERROR_ON(cs == nullptr, CL_OUT_OF_RESOURCES, "memlayer migration: %s\n", error);
  const bool to_host = (mig_flags & CL_MIGRATE_MEM_OBJECT_HOST) != 0;
  const bool undefined = (mig_flags & CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED) != 0;
  const uint32_t at = to_host ? kHost : location_of(dev);

  // Every use, grouped by buffer in id order (the order buffer locks are
  // taken in, and the order of the command's buffer list, as in PoCL).
  Scratch& sc = scratch();
  sc.entries.clear();
  for (size_t i = 0; i < num_buffers; ++i) {
    cl_mem mem = buffers[i];
    ml_use u;
    if (uses != nullptr && mem->buffer == nullptr) {
      u = uses[i];
      if (u.size == 0) u.size = mem->size - u.offset;
    } else {
      if (mem->buffer != nullptr) mem = mem->buffer;  // an image's storage buffer
      u = {0, mem->size, readonly_flags[i] ? ML_ACCESS_READ : ML_ACCESS_READ_WRITE};
    }
    if (undefined) u.access = ML_ACCESS_OVERWRITE;
    sc.entries.emplace_back(mem, u);
  }
  // Insertion sort: a few buffers, and no allocation (std::stable_sort's).
  for (size_t i = 1; i < sc.entries.size(); ++i)
    for (size_t j = i; j > 0 && sc.entries[j - 1].first->id > sc.entries[j].first->id; --j)
      std::swap(sc.entries[j - 1], sc.entries[j]);
  sc.uses.clear();
  sc.buffers.clear();
  sc.mems.clear();
  for (const auto& [mem, use] : sc.entries) {
    if (sc.buffers.empty() || sc.buffers.back().mem != mem) {
      sc.buffers.push_back({mem, nullptr, sc.uses.size(), 0, nullptr, 0});
      sc.mems.push_back(mem);
    }
    sc.uses.push_back(use);
    ++sc.buffers.back().count;
  }
  std::vector<Buffer>& list = sc.buffers;

  // Phase 1: state and storage on the device (a full device evicts idle
  // buffers). Failing here leaves nothing behind.
  for (Buffer& b : list) {
    b.state = buffer_state(b.mem, &error);
    POCL_RETURN_ERROR_ON(b.state == nullptr, CL_OUT_OF_HOST_MEMORY, "memlayer migration: %s\n", error);
    if (!to_host && !mem_allocated_at(b.mem, dev->global_mem_id)) {
      POCL_LOCK_OBJ(b.mem);
      cl_int err = mem_allocated_at(b.mem, dev->global_mem_id) ? CL_SUCCESS : alloc_locked_or_evict(dev, b.mem);
      POCL_UNLOCK_OBJ(b.mem);
      if (err != CL_SUCCESS) return err;
    }
  }

  // Phase 2: the command (its user wait list locks events: no buffer lock
  // may be held).
  cl_int err = pocl_create_command_struct(cmd, command_queue, command_type, event_p, num_events, wait_list,
                                          sc.mems.size(), sc.mems.data());
  if (err != CL_SUCCESS) return err;
  cl_event final_event = (*cmd)->sync.event.event;

  // Phase 3, under the buffer locks: plan, make the migration commands,
  // commit. Event locks are not taken here (deferred references, no syncs).
  for (Buffer& b : list) {
    POCL_LOCK_OBJ(b.mem);
    b.state->refs.recording = &sc.refs;
  }
  sc.copy_events.clear();
  sc.copy_waits.clear();
  sc.command_waits.clear();
  std::vector<Migration> migrations;  // empty (no allocation) when nothing moves
  const uint64_t stamp = g_command_stamp.fetch_add(1, std::memory_order_relaxed) + 1;
  // Plan every buffer first: a failure then leaves nothing recorded. A
  // buffer evicted by another thread since phase 1 is allocated again.
  ml_mig_status st = ML_MIG_OK;
  cl_int alloc_err = CL_SUCCESS;
  for (size_t i = 0; i < list.size() && st == ML_MIG_OK && alloc_err == CL_SUCCESS; ++i) {
    Buffer& b = list[i];
    if (!to_host && !mem_allocated_at(b.mem, dev->global_mem_id)) {
      alloc_err = alloc_locked_or_evict(dev, b.mem);
      if (alloc_err != CL_SUCCESS) break;
    }
    b.plan = scratch_plan(sc, i);
    st = b.plan == nullptr ? ML_MIG_HOST_OUT_OF_MEMORY
                           : ml_versions_plan(b.state->versions.get(), sc.uses.data() + b.first, b.count, at,
                                              cs->cost.get(), b.plan);
    const size_t copies = st == ML_MIG_OK ? ml_plan_copy_count(b.plan) : 0;
    for (size_t c = 0; st == ML_MIG_OK && c < copies; ++c) {
      ml_copy copy = ml_plan_copy(b.plan, c);
      if ((copy.src == kHost || copy.dst == kHost) && !ensure_host_copy(*b.state)) st = ML_MIG_HOST_OUT_OF_MEMORY;
    }
  }
  if (st != ML_MIG_OK || alloc_err != CL_SUCCESS) {
    // Rare: another thread evicted a buffer since phase 1 and no memory is
    // left, or (not expected with PoCL's validated ranges) the planner
    // refused. The command struct stays unenqueued: its event is never
    // submitted, and nothing was recorded.
    if (st != ML_MIG_OK)
      POCL_MSG_ERR("memlayer migration: %s\n",
                   st == ML_MIG_HOST_OUT_OF_MEMORY ? "no host memory for the host copy" : ml_migration_last_error());
    apply_retains(sc.refs);
    for (Buffer& b : list) {
      b.state->refs.recording = nullptr;
      POCL_UNLOCK_OBJ(b.mem);
    }
    apply_releases(sc.refs);
    if (alloc_err != CL_SUCCESS) return alloc_err;
    return st == ML_MIG_HOST_OUT_OF_MEMORY ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES;
  }
  for (Buffer& b : list) {
    const ml_use* u = sc.uses.data() + b.first;
    const size_t n = ml_plan_copy_count(b.plan);
    // Held until the command finishes (pocl_free_event_memobjs); an unmap
    // releases the reference its map took.
    if (command_type != CL_COMMAND_UNMAP_MEM_OBJECT) POCL_RETAIN_OBJECT_UNLOCKED(b.mem);
    b.state->last_use.store(stamp, std::memory_order_relaxed);

    b.first_copy = sc.copy_events.size();
    for (size_t c = 0; c < n; ++c) {
      ml_copy copy = ml_plan_copy(b.plan, c);
      // A copy into a device runs on that device (H2D, or D2D through its
      // driver); a copy to the host runs on the source device.
      cl_command_queue q = queue_at(ctx, *cs, copy.dst != kHost ? copy.dst : copy.src);
      _cl_command_node* node = nullptr;
      cl_event ev = nullptr;
      if (pocl_create_command_struct(&node, q, CL_COMMAND_MIGRATE_MEM_OBJECTS, &ev, 0, nullptr, 1, &b.mem) !=
          CL_SUCCESS) {
        // Host memory ran out mid-command: PoCL's own engine asserts here.
        POCL_ABORT("memlayer migration: cannot create a migration command\n");
      }
      POCL_RETAIN_OBJECT_UNLOCKED(b.mem);  // released when the copy finishes
      _cl_command_migrate& m = node->command.migrate;
      m.offset = copy.offset;
      m.size = copy.size;
      pocl_mem_identifier* ids = b.mem->device_ptrs;
      if (copy.dst == kHost) {
        m.type = ENQUEUE_MIGRATE_TYPE_D2H;
        m.mem_id = &ids[device_at(ctx, *cs, copy.src)->global_mem_id];
      } else if (copy.src == kHost) {
        m.type = ENQUEUE_MIGRATE_TYPE_H2D;
        m.mem_id = &ids[device_at(ctx, *cs, copy.dst)->global_mem_id];
      } else {
        m.type = ENQUEUE_MIGRATE_TYPE_D2D;
        m.src_device = device_at(ctx, *cs, copy.src);
        m.src_id = &ids[m.src_device->global_mem_id];
        m.dst_id = &ids[device_at(ctx, *cs, copy.dst)->global_mem_id];
      }
      const size_t first_wait = sc.copy_waits.size();
      for (size_t w = 0; w < copy.wait_count; ++w)
        add_wait(sc.copy_waits, first_wait, static_cast<cl_event>(copy.wait[w]), q);
      if (copy.after >= 0)
        add_wait(sc.copy_waits, first_wait, static_cast<cl_event>(sc.copy_events[b.first_copy + copy.after]), q);
      migrations.push_back({node, q, first_wait, sc.copy_waits.size() - first_wait});
      sc.copy_events.push_back(ev);
      add_wait(sc.command_waits, 0, ev, command_queue);
    }
    const ml_event* waits = ml_plan_waits(b.plan);
    const size_t wait_count = ml_plan_wait_count(b.plan);
    for (size_t w = 0; w < wait_count; ++w)
      add_wait(sc.command_waits, 0, static_cast<cl_event>(waits[w]), command_queue);
    // Commit cannot fail here: same plan, same uses, one event per copy.
    ml_versions_commit(b.state->versions.get(), b.plan, sc.copy_events.data() + b.first_copy, n, u, b.count, at,
                       final_event);
  }
  // The events the syncs below name are kept alive across the unlock:
  // another thread may then drop the planner's references to them.
  for (const auto* waits : {&sc.copy_waits, &sc.command_waits}) {
    for (cl_event e : *waits) {
      RefLog::add(sc.refs.retains, e);
      RefLog::add(sc.refs.releases, e);
    }
  }
  apply_retains(sc.refs);
  for (Buffer& b : list) {
    b.state->refs.recording = nullptr;
    POCL_UNLOCK_OBJ(b.mem);
  }

  // Phase 4, no buffer locked: dependencies, deferred releases, then the
  // copies.
  for (const Migration& m : migrations)
    for (size_t w = 0; w < m.wait_count; ++w)
      pocl_create_event_sync(m.node->sync.event.event, sc.copy_waits[m.first_wait + w]);
  for (cl_event w : sc.command_waits) pocl_create_event_sync(final_event, w);
  apply_releases(sc.refs);
  for (const Migration& m : migrations) {
    cl_event ev = m.node->sync.event.event;
    pocl_command_enqueue(m.queue, m.node);
    POname(clReleaseEvent)(ev);  // ours from event_p; the planner holds its own
  }
  return CL_SUCCESS;
}

void pocl_ml_release_mem(cl_mem mem) {
  auto* s = static_cast<BufferState*>(mem->memlayer_state);
  if (s == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_registry.mutex);
    g_registry.buffers.erase(s->registered);
  }
  mem->memlayer_state = nullptr;
  std::unique_ptr<BufferState> owned(s);  // the ownership release() handed to the C struct
}

void pocl_ml_release_context(cl_context context) {
  std::unique_ptr<ContextState> owned(static_cast<ContextState*>(context->memlayer_state));  // as above
  context->memlayer_state = nullptr;
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
  out->evictions = take(g_counters.evictions);
  out->eviction_bytes_written_back = take(g_counters.eviction_bytes);
}

}  // extern "C"

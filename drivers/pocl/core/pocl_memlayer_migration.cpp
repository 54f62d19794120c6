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

void retain_event(void*, ml_event e) { POname(clRetainEvent)(static_cast<cl_event>(e)); }
void release_event(void*, ml_event e) { POname(clReleaseEvent)(static_cast<cl_event>(e)); }
int event_finished(void*, ml_event e) {
  // CL_COMPLETE is 0, failures are negative; status only decreases.
  return __atomic_load_n(&static_cast<cl_event>(e)->status, __ATOMIC_ACQUIRE) <= CL_COMPLETE;
}
const ml_event_ops kEventOps = {nullptr, retain_event, release_event, event_finished};

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
  Versions versions;
  cl_mem mem = nullptr;
  int pins = 0;           // commands between allocation and commit: not evictable
  bool host_ref = false;  // holds one mem_host_ptr reference for the host copy
  std::list<BufferState*>::iterator registered;
};

std::mutex g_registry_mutex;
std::list<BufferState*> g_registry;  // oldest first: eviction's order

// A buffer with host content (COPY_HOST_PTR, USE_HOST_PTR) starts valid at
// the host only; one without is undefined, so every location holds it.
BufferState* buffer_state(cl_mem mem, const char** error) {
  auto* s = static_cast<BufferState*>(__atomic_load_n(&mem->memlayer_state, __ATOMIC_ACQUIRE));
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  if (mem->memlayer_state != nullptr) return static_cast<BufferState*>(mem->memlayer_state);
  auto state = std::make_unique<BufferState>();
  state->mem = mem;
  uint64_t valid = mem->mem_host_ptr_version > 0 ? (1ULL << kHost) : ~0ULL;
  ml_versions* v = nullptr;
  if (ml_versions_create(mem->size, valid, &kEventOps, &v) != ML_MIG_OK) {
    *error = ml_migration_last_error();
    return nullptr;
  }
  state->versions.reset(v);
  g_registry.push_front(state.get());
  state->registered = g_registry.begin();
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

bool mem_allocated_at(cl_mem mem, int gid) { return mem->device_ptrs[gid].mem_ptr != nullptr; }

bool ensure_host_copy(BufferState& s) {
  if (s.host_ref) return true;
  if (pocl_alloc_or_retain_mem_host_ptr(s.mem) != 0) return false;
  s.host_ref = true;
  return true;
}

// Evicts one buffer that is idle on dev's memory (no unfinished use, no
// mapping, no command between allocation and commit): its bytes held only
// there are written back to the host copy, then its storage is freed.
// Busy buffers (locked by another thread) are skipped, so eviction never
// waits on a lock while holding one. Returns whether it freed anything.
bool evict_one(cl_device_id dev, cl_mem keep) {
  const int gid = dev->global_mem_id;
  const uint32_t at = location_of(dev);
  if (at == kHost) return false;  // the host copy itself: nowhere to write back to
  std::vector<cl_mem> candidates;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    for (auto it = g_registry.rbegin(); it != g_registry.rend(); ++it) {
      cl_mem m = (*it)->mem;
      if (m == keep) continue;
      if (pthread_mutex_trylock(&m->pocl_lock) != 0) continue;
      if (m->pocl_refcount > 0 && (*it)->pins == 0 && m->map_count == 0 && mem_allocated_at(m, gid)) {
        ++m->pocl_refcount;  // kept alive until we are done with it
        candidates.push_back(m);
      }
      POCL_UNLOCK_OBJ(m);
    }
  }
  Plan plan;
  {
    ml_plan* p = nullptr;
    if (ml_plan_create(&p) != ML_MIG_OK) return false;
    plan.reset(p);
  }
  bool evicted = false;
  for (cl_mem m : candidates) {
    if (!evicted && pthread_mutex_trylock(&m->pocl_lock) == 0) {
      auto* s = static_cast<BufferState*>(m->memlayer_state);
      const char* error = nullptr;
      ContextState* cs = context_state(m->context, &error);
      bool idle = cs != nullptr && s->pins == 0 && m->map_count == 0 && mem_allocated_at(m, gid) &&
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
        ml_versions_commit_evict(s->versions.get(), plan.get(), none.data(), none.size(), at);
        dev->ops->free(dev, m);
        g_counters.evictions.fetch_add(1, std::memory_order_relaxed);
        g_counters.eviction_bytes.fetch_add(written, std::memory_order_relaxed);
        evicted = true;
      }
      POCL_UNLOCK_OBJ(m);
    }
    POname(clReleaseMemObject)(m);
  }
  return evicted;
}

// Called with mem's lock held.
cl_int alloc_locked_or_evict(cl_device_id dev, cl_mem mem) {
  for (;;) {
    if (dev->ops->alloc_mem_obj(dev, mem, nullptr) == CL_SUCCESS) return CL_SUCCESS;
    POCL_UNLOCK_OBJ(mem);
    bool freed = evict_one(dev, mem);
    POCL_LOCK_OBJ(mem);
    if (mem_allocated_at(mem, dev->global_mem_id)) return CL_SUCCESS;  // another thread did it
    if (!freed) {
      POCL_MSG_ERR("Failed to allocate %zu bytes on device %s (nothing left to evict)\n", mem->size,
                   dev->short_name);
      return CL_MEM_OBJECT_ALLOCATION_FAILURE;
    }
  }
}

// ---- one command ------------------------------------------------------------

struct Use {
  cl_mem mem;
  ml_use use;
};

struct Buffer {
  cl_mem mem;
  BufferState* state;
  std::vector<ml_use> uses;
  ml_plan* plan;
  std::vector<ml_event> copy_events;
};

// Plans are reused per thread: an enqueue allocates nothing once warm.
ml_plan* thread_plan(size_t i) {
  thread_local std::vector<Plan> plans;
  while (plans.size() <= i) {
    ml_plan* p = nullptr;
    if (ml_plan_create(&p) != ML_MIG_OK) return nullptr;
    plans.emplace_back(p);
  }
  return plans[i].get();
}

cl_device_id device_at(cl_context ctx, const ContextState& cs, uint32_t location) {
  int i = cs.device_at[location];
  return i < 0 ? nullptr : ctx->devices[i];
}
cl_command_queue queue_at(cl_context ctx, const ContextState& cs, uint32_t location) {
  int i = cs.device_at[location];
  return i < 0 ? nullptr : ctx->default_queues[i];
}

void unpin_all(std::vector<Buffer>& buffers, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    POCL_LOCK_OBJ(buffers[i].mem);
    --buffers[i].state->pins;
    POCL_UNLOCK_OBJ(buffers[i].mem);
  }
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

  // The buffers, each once in first-use order, with all their uses.
  std::vector<Buffer> list;
  list.reserve(num_buffers);
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
    auto it = std::find_if(list.begin(), list.end(), [&](const Buffer& b) { return b.mem == mem; });
    if (it == list.end()) {
      list.push_back({mem, nullptr, {}, nullptr, {}});
      it = list.end() - 1;
    }
    it->uses.push_back(u);
  }

  // Phase 1: state, storage on the device, and a pin against eviction.
  for (size_t i = 0; i < list.size(); ++i) {
    Buffer& b = list[i];
    b.state = buffer_state(b.mem, &error);
    cl_int err = CL_SUCCESS;
    if (b.state == nullptr) {
      POCL_MSG_ERR("memlayer migration: %s\n", error);
      err = CL_OUT_OF_HOST_MEMORY;
    } else {
      POCL_LOCK_OBJ(b.mem);
      if (!to_host && !mem_allocated_at(b.mem, dev->global_mem_id)) err = alloc_locked_or_evict(dev, b.mem);
      if (err == CL_SUCCESS) ++b.state->pins;
      POCL_UNLOCK_OBJ(b.mem);
    }
    if (err != CL_SUCCESS) {
      unpin_all(list, i);
      return err;
    }
  }

  // Phase 2: plan every buffer under its lock, taken in id order. A failed
  // plan leaves nothing behind.
  std::vector<Buffer*> order;
  order.reserve(list.size());
  for (Buffer& b : list) order.push_back(&b);
  std::sort(order.begin(), order.end(), [](const Buffer* a, const Buffer* b) { return a->mem->id < b->mem->id; });
  for (Buffer* b : order) POCL_LOCK_OBJ(b->mem);
  auto unlock_all = [&] {
    for (Buffer* b : order) {
      --b->state->pins;
      POCL_UNLOCK_OBJ(b->mem);
    }
  };
  for (size_t i = 0; i < list.size(); ++i) {
    Buffer& b = list[i];
    b.plan = thread_plan(i);
    ml_mig_status st = b.plan == nullptr ? ML_MIG_HOST_OUT_OF_MEMORY
                                         : ml_versions_plan(b.state->versions.get(), b.uses.data(), b.uses.size(),
                                                            at, cs->cost.get(), b.plan);
    bool host_ok = true;
    if (st == ML_MIG_OK) {
      for (size_t c = 0; c < ml_plan_copy_count(b.plan) && host_ok; ++c) {
        ml_copy copy = ml_plan_copy(b.plan, c);
        if (copy.src == kHost || copy.dst == kHost) host_ok = ensure_host_copy(*b.state);
      }
    }
    if (st != ML_MIG_OK || !host_ok) {
      unlock_all();
      POCL_RETURN_ERROR_ON(1, st == ML_MIG_HOST_OUT_OF_MEMORY || !host_ok ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES,
                           "memlayer migration: %s\n",
                           host_ok ? ml_migration_last_error() : "no host memory for the host copy");
    }
  }

  // Phase 3: the command itself, then its migrations.
  std::vector<cl_mem> mems;
  mems.reserve(list.size());
  for (const Buffer& b : list) mems.push_back(b.mem);
  cl_int err = pocl_create_command_struct(cmd, command_queue, command_type, event_p, num_events, wait_list,
                                          mems.size(), mems.data());
  if (err != CL_SUCCESS) {
    unlock_all();
    return err;
  }
  cl_event final_event = (*cmd)->sync.event.event;
  std::vector<_cl_command_node*> migrations;
  std::vector<cl_command_queue> migration_queues;
  for (size_t i = 0; i < list.size(); ++i) {
    Buffer& b = list[i];
    // Held until the command finishes (pocl_free_event_memobjs); an unmap
    // releases the reference its map took.
    if (command_type != CL_COMMAND_UNMAP_MEM_OBJECT) POCL_RETAIN_OBJECT_UNLOCKED(b.mem);

    const size_t n = ml_plan_copy_count(b.plan);
    b.copy_events.assign(n, nullptr);
    for (size_t c = 0; c < n; ++c) {
      ml_copy copy = ml_plan_copy(b.plan, c);
      // A copy into a device runs on that device (H2D, or D2D through its
      // driver); a copy to the host on the source device.
      uint32_t runs_at = copy.dst != kHost ? copy.dst : copy.src;
      cl_command_queue q = queue_at(ctx, *cs, runs_at);
      std::vector<cl_event> waits;
      for (size_t w = 0; w < copy.wait_count; ++w) waits.push_back(static_cast<cl_event>(copy.wait[w]));
      if (copy.after >= 0) waits.push_back(static_cast<cl_event>(b.copy_events[copy.after]));
      _cl_command_node* node = nullptr;
      cl_event ev = nullptr;
      err = pocl_create_command_struct(&node, q, CL_COMMAND_MIGRATE_MEM_OBJECTS, &ev,
                                       static_cast<cl_uint>(waits.size()), waits.empty() ? nullptr : waits.data(), 1,
                                       &b.mem);
      if (err != CL_SUCCESS) {
        // Host memory ran out in the middle: PoCL's own engine asserts
        // here. Commands already made cannot be unmade; fail loudly.
        POCL_ABORT("memlayer migration: cannot create a migration command (%d)\n", err);
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
      b.copy_events[c] = ev;
      pocl_create_event_sync(final_event, ev);
      migrations.push_back(node);
      migration_queues.push_back(q);
    }
    const ml_event* waits = ml_plan_waits(b.plan);
    for (size_t w = 0; w < ml_plan_wait_count(b.plan); ++w)
      pocl_create_event_sync(final_event, static_cast<cl_event>(waits[w]));
    ml_versions_commit(b.state->versions.get(), b.plan, b.copy_events.data(), n, b.uses.data(), b.uses.size(), at,
                       final_event);
  }
  unlock_all();

  for (size_t i = 0; i < migrations.size(); ++i) {
    cl_event ev = migrations[i]->sync.event.event;
    pocl_command_enqueue(migration_queues[i], migrations[i]);
    POname(clReleaseEvent)(ev);  // ours from event_p; the planner holds its own
  }
  return CL_SUCCESS;
}

void pocl_ml_release_mem(cl_mem mem) {
  auto* s = static_cast<BufferState*>(mem->memlayer_state);
  if (s == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    g_registry.erase(s->registered);
  }
  mem->memlayer_state = nullptr;
  delete s;  // NOLINT: owned through the C struct's opaque pointer
}

void pocl_ml_release_context(cl_context context) {
  delete static_cast<ContextState*>(context->memlayer_state);  // NOLINT: as above
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

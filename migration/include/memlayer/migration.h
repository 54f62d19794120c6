/* memlayer/migration.h — the C API of memlayer's migration planner.
 *
 * For runtimes written in C, the same planner as
 * memlayer/migration/range_versions.hpp: per-buffer content versions by byte
 * range, and at each enqueue the copies that make exactly the stale bytes
 * valid where a command runs, with what everything must wait for.
 * doc/migration.md explains the model and the ordering rules.
 *
 * Terms. A location is one memory that can hold a copy of a buffer: 0 is the
 * host copy, 1..63 are device memories (devices sharing a memory share a
 * location). An event is the runtime's opaque handle (a cl_event); the
 * planner keeps references through ml_event_ops and never waits on one.
 *
 * Errors: every fallible function returns an ml_status (memlayer/status.h,
 * shared with the allocators' C API; ML_OK = 0); ml_last_error_message()
 * then describes the failure. A failed call
 * changes nothing.
 *
 * Thread-safety: an ml_versions is not synchronised; the runtime serialises
 * plan + commit per buffer (e.g. under the buffer's lock). An ml_plan is
 * used by one thread at a time, commit included (it reuses the plan's
 * scratch, so planning allocates nothing once warm). ml_cost_model is
 * read-only while planning. ml_last_error_message() is per thread.
 */
#ifndef MEMLAYER_MIGRATION_H
#define MEMLAYER_MIGRATION_H

#include <stddef.h>
#include <stdint.h>

#include "memlayer/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ml_status: memlayer/status.h, the one status of memlayer's C APIs. */

typedef void* ml_event; /* NULL: no event */

/* How the planner holds events. Any member may be NULL. */
typedef struct ml_event_ops {
  void* context;
  void (*retain)(void* context, ml_event e);
  void (*release)(void* context, ml_event e);
  /* How e stands: ML_EVENT_RUNNING until it finishes, then for good one of
   * ML_EVENT_COMPLETE (any positive value), ML_EVENT_CANCELLED (failed
   * without starting: it wrote nothing) or ML_EVENT_FAILED (any other
   * negative value: failed after it started, its writes may be partial).
   * NULL: nothing ever finishes early. A failed writer is undone: the planner
   * goes back to the content before it (doc/migration.md, failures). */
  int (*status)(void* context, ml_event e);
} ml_event_ops;

enum {
  ML_EVENT_RUNNING = 0,
  ML_EVENT_COMPLETE = 1,
  ML_EVENT_CANCELLED = -1,
  ML_EVENT_FAILED = -2
};

typedef enum ml_access {
  ML_ACCESS_READ = 0,
  ML_ACCESS_WRITE = 1,      /* may leave bytes unwritten: stale bytes migrate first */
  ML_ACCESS_READ_WRITE = 2,
  ML_ACCESS_OVERWRITE = 3   /* writes every byte: nothing migrates */
} ml_access;

typedef struct ml_use {
  uint64_t offset;
  uint64_t size;
  ml_access access;
} ml_use;

/* One planned migration command. `wait` points into the plan and is valid
 * until the next call that uses the plan or the commit. */
typedef struct ml_copy {
  uint32_t src;
  uint32_t dst;
  uint64_t offset;
  uint64_t size;
  int after; /* index of an earlier copy in the plan it must wait for, or -1 */
  const ml_event* wait;
  size_t wait_count;
  /* Other locations (a bit each) holding the range complete when planned,
   * each with a direct path to dst: sources to read from instead when the
   * transfer from src fails (memlayer/migration/plan.hpp: Copy::also). */
  uint64_t also;
} ml_copy;

/* ---- cost model ------------------------------------------------------- */
typedef struct ml_cost_model ml_cost_model;

/* Every device gets this host link unless set otherwise; no direct
 * device-to-device links until set. Errors: INVALID_ARGUMENT. O(1). */
ml_status ml_cost_model_create(double host_latency_s, double host_bytes_per_s, ml_cost_model** out);
void ml_cost_model_destroy(ml_cost_model* model);
ml_status ml_cost_model_set_host_link(ml_cost_model* model, uint32_t device, double latency_s,
                                          double bytes_per_s);
/* A direct copy path from src to dst (one direction). */
ml_status ml_cost_model_set_direct(ml_cost_model* model, uint32_t src, uint32_t dst, double latency_s,
                                       double bytes_per_s);

/* ---- plans ------------------------------------------------------------ */
typedef struct ml_plan ml_plan;

ml_status ml_plan_create(ml_plan** out);
void ml_plan_destroy(ml_plan* plan);
size_t ml_plan_copy_count(const ml_plan* plan);
/* Copy i (< ml_plan_copy_count). */
ml_copy ml_plan_copy(const ml_plan* plan, size_t i);
/* What the command must wait for besides its copies. */
size_t ml_plan_wait_count(const ml_plan* plan);
const ml_event* ml_plan_waits(const ml_plan* plan);

/* ---- one buffer's versions --------------------------------------------- */
typedef struct ml_versions ml_versions;

/* A buffer of `size` bytes whose initial content is valid at the locations
 * in `valid_mask` (bit l = location l; usually 1: the host). `ops` is copied.
 * Errors: INVALID_ARGUMENT (size 0, empty mask, null out). O(1). */
ml_status ml_versions_create(uint64_t size, uint64_t valid_mask, const ml_event_ops* ops, ml_versions** out);
/* Releases every event reference it holds. NULL is ignored. */
void ml_versions_destroy(ml_versions* versions);

/* Plans one command's uses of the buffer at location `at` into `plan`
 * (its previous content is replaced). Changes no version; first applies
 * what ops->status reports about the events it holds (a failed writer is
 * undone: migration/range_versions.hpp, failures).
 * Errors: INVALID_ARGUMENT, OUT_OF_RANGE, NO_PATH.
 * O(log spans + spans touched x (locations + readers + unfinished writers)). */
ml_status ml_versions_plan(ml_versions* versions, const ml_use* uses, size_t use_count, uint32_t at,
                               const ml_cost_model* cost, ml_plan* plan);

/* Records a plan made with the same uses and location, with nothing else in
 * between: copy_events[i] is the event of copy i (count must match), command
 * the command's event. Errors: INVALID_ARGUMENT, MISMATCH. */
ml_status ml_versions_commit(ml_versions* versions, const ml_plan* plan, const ml_event* copy_events,
                                 size_t copy_event_count, const ml_use* uses, size_t use_count, uint32_t at,
                                 ml_event command);

/* Eviction of the copy at location `at` (> 0): write-backs of the bytes held
 * only there, and (ml_plan_waits) what must finish before its storage goes. */
ml_status ml_versions_plan_evict(ml_versions* versions, uint32_t at, const ml_cost_model* cost,
                                     ml_plan* plan);
/* Records an eviction planned by ml_versions_plan_evict: the write-backs
 * (copy_events[i] for copy i) become the host's copies, and `at` holds
 * nothing any more. Errors: INVALID_ARGUMENT (also for a plan that does not
 * write back every byte only `at` holds: one not made by plan_evict for the
 * current versions; nothing is changed), MISMATCH. */
ml_status ml_versions_commit_evict(ml_versions* versions, const ml_plan* plan, const ml_event* copy_events,
                                       size_t copy_event_count, uint32_t at);

/* 1 when [offset, offset + size) is valid at `at`, else 0 (also for a range
 * beyond the buffer). */
int ml_versions_valid_at(const ml_versions* versions, uint32_t at, uint64_t offset, uint64_t size);
/* Bytes whose newest version is held only at `at`. */
uint64_t ml_versions_bytes_only_at(const ml_versions* versions, uint32_t at);
size_t ml_versions_span_count(const ml_versions* versions);
/* Bytes whose content failures lost so far (undefined since). */
uint64_t ml_versions_bytes_lost(const ml_versions* versions);

#ifdef __cplusplus
}
#endif

#endif /* MEMLAYER_MIGRATION_H */

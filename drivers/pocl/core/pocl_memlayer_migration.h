/* pocl_memlayer_migration.h — memlayer's migration engine inside PoCL's core.
 *
 * PoCL keeps one content version per buffer (7.1: per sub-buffer piece).
 * Our build-time patch routes every command that uses buffers through
 * pocl_ml_create_command() instead of PoCL's own migration code: each
 * command states, per buffer, the byte ranges it uses and how, and
 * memlayer's one migration engine (engine/, doc/engine.md), with PoCL as its
 * host, places storage, evicts, decides which stale bytes move where as PoCL
 * migration commands over byte ranges (device to host, host to device,
 * device to device through the driver's migrate_d2d hook) on the context's
 * hidden queues, and what the command waits for. doc/pocl-driver.md
 * explains the wiring.
 *
 * Two PoCL versions, one engine: PoCL 3.1 (patches/pocl-3.1-memlayer.patch)
 * passes arrays of buffers and ml_use ranges; PoCL 7.1
 * (patches/pocl-7.1-memlayer-engine.patch, which defines
 * BUILD_MEMLAYER_ENGINE in PoCL's config.h) passes its own list of
 * pocl_buffer_migration_info, sub-buffers as cl_mems of their own, and
 * migration commands carry their byte range in that list's entry.
 *
 * Locations: location 0 is the buffer's host copy (mem_host_ptr), which
 * PoCL's CPU drivers (basic, pthread) use as their device memory; any other
 * device's memory is location global_mem_id + 1 (at most 63 devices).
 *
 * Which engine runs is decided once per process: the environment variable
 * POCL_MEMLAYER_MIGRATION=1 (memlayer) or 0 (PoCL's own), else the build's
 * default (CMake option MEMLAYER_MIGRATION_DEFAULT).
 *
 * Thread-safety: every function may be called from any thread. A buffer's
 * engine state is changed under the engine's lock for that buffer.
 */
#ifndef POCL_MEMLAYER_MIGRATION_H
#define POCL_MEMLAYER_MIGRATION_H

#include "pocl_cl.h"
#ifndef BUILD_MEMLAYER_ENGINE
#include "memlayer/migration.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when memlayer's engine decides migrations in this process. */
int pocl_ml_migration_enabled (void);

#ifdef BUILD_MEMLAYER_ENGINE
/* PoCL 7.1: 1 when memlayer's engine decides the migrations of `context`'s
 * commands: it is enabled (above). It plans byte ranges when each of the
 * context's devices either computes on the host memory (PoCL's CPU devices)
 * or honours byte-range migrations (cl_device_id: honours_migration_ranges),
 * else whole buffers for all of them. Decided once per context. O(1) after
 * the first call. */
int pocl_ml_runs_context (cl_context context);

/* PoCL 7.1's pocl_create_command_full() for the contexts the engine runs.
 * buffer_usage: the command's buffers, images as their storage buffers
 * already (POCL_MEM_BS), sub-buffers as themselves (each is that range of
 * its parent), read_only per entry; several entries may name one buffer.
 * mig_flags: clEnqueueMigrateMemObjects' flags (HOST plans for the host
 * copy; CONTENT_UNDEFINED makes each use an overwrite). On success the list
 * becomes (*cmd)->migr_infos, each entry holding one reference to its
 * buffer. Errors and waits as the 3.1 form below; on an error the list is
 * the caller's again, nothing is recorded, no command exists and *event_p
 * is NULL. */
cl_int pocl_ml_create_command (_cl_command_node **cmd,
                               cl_command_queue command_queue,
                               cl_command_type command_type, cl_event *event_p,
                               cl_uint num_events, const cl_event *wait_list,
                               pocl_buffer_migration_info *buffer_usage,
                               cl_mem_migration_flags mig_flags);
#else

/* pocl_create_command() for the memlayer engine. buffers[i] is used as
 * uses[i] says (offset within buffers[i], size 0 = to its end); a buffer may
 * appear several times, and all its uses are planned together. uses == NULL
 * means whole buffers, read (readonly_flags[i] != 0) or read and written.
 * Sub-buffers must already be their parent plus an offset.
 * mig_flags: clEnqueueMigrateMemObjects' flags (HOST plans for the host
 * copy; CONTENT_UNDEFINED makes each use an overwrite).
 *
 * Device memory is allocated here; when it is full, other buffers are
 * evicted (their only copies written back to the host by migration
 * commands, the storage kept until those have completed), least recently
 * used first; when the room is held by queued commands or write-backs, the
 * call waits until one of them has finished and tries again (at most
 * POCL_MEMLAYER_ROOM_WAIT_MS over all its tries, default 60000).
 * CL_MEM_OBJECT_ALLOCATION_FAILURE when the command's own buffers do not
 * fit, or the wait ran out; CL_OUT_OF_HOST_MEMORY when a copy, or the links
 * to the user's wait list, could not be made. On any error nothing is
 * recorded, no command exists and *event_p is NULL. When the links to what
 * the engine made the command wait for cannot be made (out of host memory)
 * the command is made all the same and fails without running (its event
 * fails, as one whose dependency failed): the engine had committed it.
 * Cost: O(uses log uses + copies) plus the planner's per-buffer cost. */
cl_int pocl_ml_create_command (_cl_command_node **cmd,
                               cl_command_queue command_queue,
                               cl_command_type command_type, cl_event *event_p,
                               cl_uint num_events, const cl_event *wait_list,
                               size_t num_buffers, cl_mem *buffers,
                               const char *readonly_flags, const ml_use *uses,
                               cl_mem_migration_flags mig_flags);
#endif

/* Allocates mem on dev now (a map's early allocation), evicting and
 * waiting for room as pocl_ml_create_command() does; a sub-buffer (7.1):
 * its parent, which the sub-buffer follows. Call without mem's lock. CL_SUCCESS, CL_MEM_OBJECT_ALLOCATION_FAILURE or
 * CL_OUT_OF_HOST_MEMORY. */
cl_int pocl_ml_alloc (cl_device_id dev, cl_mem mem);

/* Forgets a buffer (its versions, the event references they hold). Called
 * by clReleaseMemObject when the buffer is freed. */
void pocl_ml_release_mem (cl_mem mem);

/* Forgets a context's engine and cost model. Called when the context is
 * freed. */
void pocl_ml_release_context (cl_context context);

/* The command of `event`, which the engine recorded (its memlayer_command,
 * set by pocl_ml_create_command), ends with `status` (CL_COMPLETE, or a
 * failure): the engine reads it so from now on without asking PoCL, and
 * for a command that completed gives its reference to the event back now
 * (memlayer::engine::Engine::ended). Called by pocl_update_event_finished
 * first, before anything can see the command ended, with no lock held and
 * while PoCL still holds the event, so that the event's last release stays
 * on that path rather than at a later enqueue. Clears memlayer_command.
 * O(1). */
void pocl_ml_command_ended (cl_event event, cl_int status);

/* For the driver that runs a migration command memlayer's engine made
 * (node, still to run): call when its transfer has failed as often as the
 * driver tries one. 1: try it again, because the node now reads from
 * another complete copy of its bytes that the engine named (an H2D from the
 * host copy, or a D2D from that device; only copies into a device are
 * re-sourced), or because it is the last copy of bytes being evicted
 * (engine/host.hpp: CopyRequest::last_copy), tried until
 * POCL_MEMLAYER_ROOM_WAIT_MS has passed since this was first called for it
 * (the call pauses first: 1 ms, doubling up to 100 ms). 0: nothing is left
 * to try, fail it. Only commands on memlayer devices' queues are recorded;
 * 0 for any other, and under PoCL's own engine. */
POCL_EXPORT int pocl_ml_migration_retry (_cl_command_node *node);

/* The driver has run migration command `node`, or failed it: what
 * pocl_ml_migration_retry could try for it is forgotten. Call once per
 * migration command, before its event completes. O(1). */
POCL_EXPORT void pocl_ml_migration_ended (_cl_command_node *node);

/* Counts one executed migration command of `bytes` (both engines; drivers
 * that run migrations themselves, as PoCL's remote driver, call it too).
 * Thread-safe, O(1). */
POCL_EXPORT void pocl_ml_count_migration (pocl_migration_type_t type,
                                          size_t bytes);

#ifndef BUILD_MEMLAYER_ENGINE
/* The range a rectangle of a buffer covers, from its first to its last
 * byte: origin (bytes, rows, slices) and region as in clEnqueue*Rect with
 * the pitches already defaulted. `base` is added (a sub-buffer's origin).
 * The access is `partial_access` unless the rectangle is every byte of the
 * range (rows back to back), when it is `whole_access`. */
static inline ml_use
pocl_ml_rect_use (size_t base, const size_t *origin, const size_t *region,
                  size_t row_pitch, size_t slice_pitch,
                  ml_access partial_access, ml_access whole_access)
{
  ml_use u;
  size_t first = origin[2] * slice_pitch + origin[1] * row_pitch + origin[0];
  size_t last = (region[2] - 1) * slice_pitch + (region[1] - 1) * row_pitch
                + region[0];
  int dense = (region[1] == 1 || row_pitch == region[0])
              && (region[2] == 1 || slice_pitch == region[0] * region[1]);
  u.offset = base + first;
  u.size = last;
  u.access = dense ? whole_access : partial_access;
  return u;
}
#endif

/* Process-wide counters of executed migration commands, for tests and
 * benchmarks (dlsym it from libpocl). reset != 0 zeroes them after reading. */
typedef struct memlayer_pocl_migration_stats
{
  uint64_t d2h_commands, d2h_bytes;
  uint64_t h2d_commands, h2d_bytes;
  uint64_t d2d_commands, d2d_bytes;
  uint64_t evictions, eviction_bytes_written_back;
  /* pocl_ml_migration_retry: commands re-pointed at another copy, and
   * pauses before a last copy's next tries */
  uint64_t migrations_resourced, last_copy_retries;
  /* memlayer's engine: commands it enqueued, and those its fast path took
   * (engine/include/memlayer/engine/engine.hpp: EngineStats) */
  uint64_t enqueues, fast_path_enqueues;
  /* event nodes the engine's links took (pocl_node_pool.hpp): recycled
   * from those PoCL freed, and newly allocated */
  uint64_t link_nodes_recycled, link_nodes_allocated;
} memlayer_pocl_migration_stats;

__attribute__ ((visibility ("default"))) void
memlayer_pocl_get_migration_stats (memlayer_pocl_migration_stats *out,
                                   int reset);

#ifdef __cplusplus
}
#endif

#endif /* POCL_MEMLAYER_MIGRATION_H */

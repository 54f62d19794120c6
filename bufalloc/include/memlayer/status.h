/* memlayer/status.h — the one status type of memlayer's C APIs.
 *
 * Every fallible function of memlayer/bufalloc.h (the region allocators)
 * and memlayer/migration.h (the migration planner) returns an ml_status:
 * ML_OK (0) on success, else the code of what went wrong, and
 * ml_last_error_message() describes that failure with its figures. A failed
 * call changes nothing.
 *
 * Codes 1-16 and 20-22 are the allocators' (equal to memlayer::bufalloc::Errc),
 * 17-19 the planner's; ML_ERROR_INVALID_ARGUMENT and
 * ML_ERROR_HOST_OUT_OF_MEMORY serve both. Values never change.
 */
#ifndef MEMLAYER_STATUS_H
#define MEMLAYER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ml_status {
  ML_OK = 0,
  ML_ERROR_ZERO_SIZE = 1,                    /* a request of 0 bytes */
  ML_ERROR_SIZE_OVERFLOW = 2,                /* size rounded to the granularity exceeds 2^64-1 */
  ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO = 3,   /* alignment neither 0 nor a power of two */
  ML_ERROR_ALIGNMENT_OVERFLOW = 4,           /* size + alignment padding exceeds 2^64-1 */
  ML_ERROR_OUT_OF_MEMORY = 5,                /* no free block can hold the request */
  ML_ERROR_ADDRESS_OUTSIDE_REGION = 6,       /* free: address not in the region */
  ML_ERROR_NOT_BLOCK_START = 7,              /* free: address inside a live block */
  ML_ERROR_DOUBLE_FREE = 8,                  /* free: address in free space */
  ML_ERROR_REGION_EMPTY = 9,                 /* create: usable size is 0 */
  ML_ERROR_REGION_WRAPS = 10,                /* create: base + size exceeds 2^64-1 */
  ML_ERROR_GRANULARITY_NOT_POWER_OF_TWO = 11,/* create: bad granularity */
  ML_ERROR_MISALIGNED_BASE = 12,             /* create: base not a multiple of the granularity */
  ML_ERROR_STALE_MARK = 13,                  /* rollback: mark no longer valid */
  ML_ERROR_INVARIANT_VIOLATION = 14,         /* check: bookkeeping inconsistent (a bug) */
  ML_ERROR_INVALID_ARGUMENT = 15,            /* a null pointer or a value outside its domain */
  ML_ERROR_HOST_OUT_OF_MEMORY = 16,          /* the host could not grow the bookkeeping */
  ML_ERROR_OUT_OF_RANGE = 17,                /* planner: a use beyond the buffer's size */
  ML_ERROR_NO_PATH = 18,                     /* planner: no way to reach a location (host links missing) */
  ML_ERROR_MISMATCH = 19,                    /* planner: commit's copy events do not match the plan */
  ML_ERROR_STALE_HANDLE = 20,                /* free: the handle's block was freed, its record reused */
  ML_ERROR_FOREIGN_HANDLE = 21,              /* free: a handle this region did not issue */
  ML_ERROR_NO_HOLE = 22                      /* cheapest_hole: no run of free and evictable blocks holds the request */
} ml_status;

/* The fixed name of a status ("ML_ERROR_OUT_OF_MEMORY"); "ML_UNKNOWN_STATUS"
 * for values not listed above. O(1). Thread-safe. */
const char* ml_status_name(ml_status status);

/* A description of the last failure of an ml_* call on the calling thread,
 * with its figures, e.g. "out_of_memory: request of 4096 bytes (alignment 64)
 * failed; 1024 bytes free, largest free block 512 bytes". "" when no call on
 * this thread has failed. The pointer stays valid until the next ml_* call on
 * this thread. O(1). Thread-safe (thread-local). */
const char* ml_last_error_message(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMLAYER_STATUS_H */

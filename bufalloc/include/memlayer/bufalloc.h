/* memlayer/bufalloc.h — the C API of memlayer's region allocators.
 *
 * For C drivers (PoCL's among them) that manage a device's memory spaces:
 *
 *   ml_region: the global-space allocator. Hands out address ranges of one
 *              contiguous space [base, base + size) in O(1), coalesces on
 *              free, never reports full while a fitting free block exists,
 *              and has no limit on live blocks. Blocks come as an ml_block
 *              handle (ml_region_alloc_block, freed in O(1) without a
 *              lookup) or as a bare address (ml_region_alloc, freed through
 *              an address index the region keeps once it is first needed).
 *   ml_linear: the local-space allocator. A stack for one kernel launch's
 *              local buffers: O(1) aligned bump allocation, mark/rollback,
 *              reset.
 *
 * Both are bookkeeping only: they never read or write the managed space, so
 * it may be device memory the host cannot touch. Addresses and sizes are
 * 64-bit integers in that space.
 *
 * Errors: every fallible function returns an ml_status (memlayer/status.h,
 * shared by every memlayer C API; ML_OK = 0) and
 * writes its result through an out-pointer only on success. On failure,
 * ml_last_error_message() describes the failure with its figures (the
 * request, free bytes, largest free block...). Nothing is ever left half-done:
 * a failed call changes no state except the failed-request counter.
 *
 * Thread-safety: each function's note says. In short: an ml_region created
 * with ML_REGION_THREAD_SAFE may be used from any number of threads at once
 * (one mutex per region, held for each call); without the flag, and for
 * ml_linear, one thread at a time. create/destroy are never concurrent with
 * other calls on the same object. ml_last_error_message() is per thread.
 *
 * Host memory: the bookkeeping grows on the host as blocks are made; if the
 * host runs out, the call fails with ML_ERROR_HOST_OUT_OF_MEMORY.
 */
#ifndef MEMLAYER_BUFALLOC_H
#define MEMLAYER_BUFALLOC_H

#include <stdint.h>

#include "memlayer/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ml_status, ml_status_name() and ml_last_error_message(): memlayer/status.h. */

/* ------------------------------------------------------------------------ */
/* ml_region: the global-space allocator                                    */

typedef struct ml_region ml_region;

/* Flags for ml_region_create. */
#define ML_REGION_THREAD_SAFE 1u /* guard every call with the region's mutex */

typedef struct ml_region_stats {
  uint64_t total_bytes;     /* usable size: size rounded down to granularity */
  uint64_t used_bytes;      /* bytes in live blocks */
  uint64_t free_bytes;      /* total_bytes - used_bytes */
  uint64_t largest_free;    /* size of the largest free block */
  uint64_t peak_used_bytes; /* highest used_bytes since create */
  uint64_t live_blocks;     /* blocks allocated and not freed */
  uint64_t free_blocks;     /* free blocks (holes) after coalescing */
  uint64_t failed_requests; /* allocations that returned OUT_OF_MEMORY */
  uint64_t slow_searches;   /* allocations that needed the fallback search */
  double fragmentation;     /* 1 - largest_free / free_bytes; 0 if nothing free */
} ml_region_stats;

/* A block as ml_region_alloc_block hands it out and ml_region_free_block
 * takes it back: its address, plus the name of its bookkeeping record. A
 * plain value: copy and store it as it is. Only the region that issued it
 * can free it, once; a handle of all zeros is never valid. */
typedef struct ml_block {
  uint64_t address;    /* the block's first byte */
  uint32_t index;      /* its record in the region */
  uint32_t generation; /* the record's use count when the block was made */
  uint32_t region;     /* the id of the issuing region */
  uint32_t reserved;   /* 0; ignored */
} ml_block;

/* Creates a region managing [base, base + size). Every block address and size
 * is a multiple of `granularity` (a power of two, e.g. the device's base
 * address alignment); base must be a multiple of it; the usable size is size
 * rounded down to it. flags: 0 or ML_REGION_THREAD_SAFE.
 * Errors: INVALID_ARGUMENT (out NULL), GRANULARITY_NOT_POWER_OF_TWO,
 * MISALIGNED_BASE, REGION_WRAPS, REGION_EMPTY, HOST_OUT_OF_MEMORY.
 * O(1). Thread-safe. */
ml_status ml_region_create(uint64_t base, uint64_t size, uint64_t granularity, uint32_t flags,
                           ml_region** out);

/* Destroys a region and its bookkeeping (the managed space is not touched).
 * NULL is ignored. No other call on the region may be running. O(blocks). */
void ml_region_destroy(ml_region* region);

/* Reserves `size` bytes at a multiple of `alignment` and writes its handle to
 * *out_block (the address is out_block->address). alignment 0 means the
 * granularity; any power of two is accepted. size is rounded up to the
 * granularity.
 * Errors: INVALID_ARGUMENT (region or out_block NULL), ZERO_SIZE,
 * SIZE_OVERFLOW, ALIGNMENT_NOT_POWER_OF_TWO, ALIGNMENT_OVERFLOW,
 * OUT_OF_MEMORY (only when no free block fits), HOST_OUT_OF_MEMORY.
 * O(1) in the number of live blocks; when the O(1) search fails, a fallback
 * best-fit scan of the request's size classes; plus one hash insert once
 * ml_region_free has been called on this region. Thread-safe with
 * ML_REGION_THREAD_SAFE. */
ml_status ml_region_alloc_block(ml_region* region, uint64_t size, uint64_t alignment, ml_block* out_block);

/* Frees the block *block names, coalescing it with free neighbours: the fast
 * way to free, no lookup. Errors (nothing changes): INVALID_ARGUMENT (region
 * or block NULL), FOREIGN_HANDLE (not issued by this region: another
 * region's, zeroed, or altered), DOUBLE_FREE (its block was freed already),
 * STALE_HANDLE (its block was freed and its record serves, or has served,
 * another block since: that block is never freed by mistake).
 * O(1), errors included; plus one hash erase once ml_region_free has been
 * called on this region. Thread-safe with ML_REGION_THREAD_SAFE. */
ml_status ml_region_free_block(ml_region* region, const ml_block* block);

/* As ml_region_alloc_block, but writes only the address to *out_address: for
 * callers that will free with ml_region_free. Same errors and cost. */
ml_status ml_region_alloc(ml_region* region, uint64_t size, uint64_t alignment, uint64_t* out_address);

/* Frees the block that starts at `address` (from either alloc function),
 * coalescing it with free neighbours. The first call on a region builds an
 * index of the live blocks' addresses, O(live blocks) once and 43-85 bytes of
 * host memory per live block; from then on every alloc and free of the region
 * keeps it up to date (one hash operation each). Callers that can keep the
 * ml_block should free with ml_region_free_block instead.
 * Errors (nothing changes): INVALID_ARGUMENT, ADDRESS_OUTSIDE_REGION,
 * NOT_BLOCK_START, DOUBLE_FREE, HOST_OUT_OF_MEMORY (building the index).
 * O(1) expected after the first call; O(blocks) on the error path.
 * Thread-safe with ML_REGION_THREAD_SAFE. */
ml_status ml_region_free(ml_region* region, uint64_t address);

/* Frees every block at once (peak and failed-request counters are kept); every
 * ml_block from before becomes stale. Errors: INVALID_ARGUMENT.
 * O(the most blocks the region ever had). Thread-safe with ML_REGION_THREAD_SAFE. */
ml_status ml_region_reset(ml_region* region);

/* Writes the region's statistics to *out. Errors: INVALID_ARGUMENT.
 * O(1) (after the largest free block changed, one size class is rescanned).
 * Thread-safe with ML_REGION_THREAD_SAFE. */
ml_status ml_region_get_stats(const ml_region* region, ml_region_stats* out);

/* Calls visit(user, address, size, is_free) for every block in ascending
 * address order; the blocks tile the usable space. The callback must not call
 * into the same region. Errors: INVALID_ARGUMENT. O(blocks).
 * Thread-safe with ML_REGION_THREAD_SAFE (the mutex is held during the walk). */
typedef void (*ml_block_visitor)(void* user, uint64_t address, uint64_t size, int is_free);
ml_status ml_region_walk(const ml_region* region, ml_block_visitor visit, void* user);

/* The run of blocks to free so that a request of `size` bytes aligned to
 * `alignment` fits (Region::cheapest_hole in memlayer/bufalloc/region.hpp):
 * among the runs of adjacent blocks that would hold it once their live
 * blocks were freed and whose every live block evictable(user, address,
 * size) accepts (nonzero; NULL accepts all), the one with the fewest live
 * bytes (ties: fewest live blocks, then the first in address order; the
 * C++ call also weighs blocks against each other). Calls
 * visit(user, address, size, 0) for each of its live blocks in address
 * order (visit may be NULL), then writes the run to *out. Nothing changes.
 * Neither callback may call into the same region. Errors: INVALID_ARGUMENT
 * (region or out NULL), ZERO_SIZE, SIZE_OVERFLOW,
 * ALIGNMENT_NOT_POWER_OF_TWO, ALIGNMENT_OVERFLOW, NO_HOLE (no run can hold
 * it: larger than the region, or every such run has a refused live block).
 * O(blocks), allocates nothing. Thread-safe with ML_REGION_THREAD_SAFE (the
 * mutex is held during the search). */
typedef int (*ml_block_filter)(void* user, uint64_t address, uint64_t size);
typedef struct ml_hole {
  uint64_t address;     /* the run's first byte */
  uint64_t size;        /* bytes it spans, free and live */
  uint64_t live_bytes;  /* bytes of its live blocks */
  uint64_t live_blocks; /* how many (0: an allocation would succeed) */
} ml_hole;
ml_status ml_region_cheapest_hole(const ml_region* region, uint64_t size, uint64_t alignment,
                                  ml_block_filter evictable, ml_block_visitor visit, void* user, ml_hole* out);

/* Verifies every invariant of the bookkeeping (tiling, no adjacent free
 * blocks, size-class index, counters, address index). Returns
 * INVARIANT_VIOLATION naming the broken rule in ml_last_error_message().
 * For tests and debugging. O(blocks). Thread-safe with ML_REGION_THREAD_SAFE. */
ml_status ml_region_check(const ml_region* region);

/* ------------------------------------------------------------------------ */
/* ml_linear: the local-space allocator                                     */

typedef struct ml_linear ml_linear;

/* A point to roll back to; opaque to callers. */
typedef struct ml_linear_mark {
  uint64_t top;
  uint64_t owner;
} ml_linear_mark;

typedef struct ml_linear_stats {
  uint64_t total_bytes;
  uint64_t used_bytes;      /* base to top, padding included */
  uint64_t peak_used_bytes;
  uint64_t allocations;
  uint64_t failed_requests;
} ml_linear_stats;

/* Creates a stack allocator over [base, base + size).
 * Errors: INVALID_ARGUMENT, REGION_EMPTY (size 0), REGION_WRAPS,
 * HOST_OUT_OF_MEMORY. O(1). Thread-safe. */
ml_status ml_linear_create(uint64_t base, uint64_t size, ml_linear** out);

/* Destroys it; NULL is ignored. O(1). */
void ml_linear_destroy(ml_linear* linear);

/* The next `size` bytes at a multiple of `alignment` (0 means 1).
 * Errors: INVALID_ARGUMENT, ZERO_SIZE, ALIGNMENT_NOT_POWER_OF_TWO,
 * OUT_OF_MEMORY. O(1). One thread at a time. */
ml_status ml_linear_alloc(ml_linear* linear, uint64_t size, uint64_t alignment, uint64_t* out_address);

/* Records the current top in *out. Errors: INVALID_ARGUMENT. O(1). */
ml_status ml_linear_mark_get(const ml_linear* linear, ml_linear_mark* out);

/* Releases everything allocated since `mark`. Errors: INVALID_ARGUMENT,
 * STALE_MARK (another allocator's mark, one from before a reset, or one above
 * the top after an earlier rollback). O(1). One thread at a time. */
ml_status ml_linear_rollback(ml_linear* linear, ml_linear_mark mark);

/* Releases everything and invalidates all marks. Errors: INVALID_ARGUMENT.
 * O(1). One thread at a time. */
ml_status ml_linear_reset(ml_linear* linear);

/* Writes the statistics to *out. Errors: INVALID_ARGUMENT. O(1). */
ml_status ml_linear_get_stats(const ml_linear* linear, ml_linear_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* MEMLAYER_BUFALLOC_H */

// A global operator new that fails on request, for the allocation-failure
// tests (tests/engine/alloc_failure_test.cpp, tests/runtime/alloc_failure_test.cpp,
// tests/migration/range_versions_alloc_failure_test.cpp): a test arms it so
// that the k-th allocation from then on throws std::bad_alloc, for k = 0, 1,
// ... in turn, and so reaches every allocation of the call it tries.
//
// It replaces the binary's operator new: include it in exactly one source
// file of a test binary of its own. (GCC then takes the replaced delete's
// free() for a mismatch with new: such a binary builds with
// -Wno-mismatched-new-delete.)
#pragma once

#include <cstdlib>
#include <new>
#include <utility>

namespace memlayer::testing {

// Allocations this thread may still make before one fails; negative: none
// fails. Only the thread that arms it counts: other threads (a runtime's
// device workers) allocate at times no test can pin down.
inline thread_local long t_allocations_left = -1;

/// From now on, this thread's allocation `k` (0: the next one) throws
/// std::bad_alloc; one allocation fails, those after it succeed again.
inline void fail_allocation(long k) { t_allocations_left = k; }

/// From now on, this thread's allocation `k` and every one after it throw
/// std::bad_alloc, until stop_counting(): a host out of memory for good.
inline thread_local bool t_keep_failing = false;
inline void fail_allocations_from(long k) {
  t_allocations_left = k;
  t_keep_failing = true;
}

/// Stops counting. Returns how many allocations were left before the armed
/// one: negative when it failed.
inline long stop_counting() {
  t_keep_failing = false;
  return std::exchange(t_allocations_left, -1);
}

/// Stops failing. True when the allocation armed by fail_allocation() failed
/// (the call tried made at least k + 1 allocations).
inline bool stop_failing() { return stop_counting() < 0; }

/// While it lives no allocation fails, and none is counted: for the test's
/// own bookkeeping inside the calls it tries (a host's calls that must not
/// fail, event reference counts kept in a map), which a real runtime does
/// without allocating.
class AllocationsSucceed {
 public:
  AllocationsSucceed() = default;
  AllocationsSucceed(const AllocationsSucceed&) = delete;
  AllocationsSucceed& operator=(const AllocationsSucceed&) = delete;
  ~AllocationsSucceed() {
    t_allocations_left = left_;
    t_keep_failing = keep_;
  }

 private:
  bool keep_ = t_keep_failing;
  long left_ = stop_counting();
};

}  // namespace memlayer::testing

namespace memlayer::testing {

// Counts one allocation; throws std::bad_alloc for the armed one.
inline void count_allocation() {
  long& left = t_allocations_left;
  if (left >= 0 && left-- == 0) {
    if (t_keep_failing) left = 0;  // the next one fails too
    throw std::bad_alloc();
  }
}

}  // namespace memlayer::testing

void* operator new(std::size_t n) {
  memlayer::testing::count_allocation();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
// The nothrow forms too: the standard library's temporary buffers use them,
// and must be freed by the operator delete below.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return operator new(n, std::nothrow); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The aligned forms, counted as the others: the planner's undo records and
// span-tree nodes start on cache lines (migration/detail/line_aligned.hpp).
void* operator new(std::size_t n, std::align_val_t a) {
  memlayer::testing::count_allocation();
  const auto align = static_cast<std::size_t>(a);
  const std::size_t size = n == 0 ? align : (n + align - 1) / align * align;  // aligned_alloc's rule
  if (void* p = std::aligned_alloc(align, size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return operator new(n, a);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return operator new(n, a, std::nothrow);
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

// A global operator new that fails on request, for the allocation-failure
// tests (tests/engine/alloc_failure_test.cpp,
// tests/migration/range_versions_alloc_failure_test.cpp): a test arms it so
// that the k-th allocation from then on throws std::bad_alloc, for k = 0, 1,
// ... in turn, and so reaches every allocation of the call it tries.
//
// It replaces the binary's operator new: include it in exactly one source
// file of a test binary of its own. (GCC then takes the replaced delete's
// free() for a mismatch with new: such a binary builds with
// -Wno-mismatched-new-delete.)
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace memlayer::testing {

// Allocations left before one fails; negative: none fails.
inline std::atomic<long> g_allocations_left{-1};

/// From now on, allocation `k` (0: the next one) throws std::bad_alloc; one
/// allocation fails, those after it succeed again.
inline void fail_allocation(long k) { g_allocations_left.store(k, std::memory_order_relaxed); }

/// Stops failing. True when the allocation armed by fail_allocation() failed
/// (the call tried made at least k + 1 allocations).
inline bool stop_failing() { return g_allocations_left.exchange(-1, std::memory_order_relaxed) < 0; }

/// While it lives no allocation fails, and none is counted: for the test's
/// own bookkeeping inside the calls it tries (a host's calls that must not
/// fail, event reference counts kept in a map), which a real runtime does
/// without allocating.
class AllocationsSucceed {
 public:
  AllocationsSucceed() = default;
  AllocationsSucceed(const AllocationsSucceed&) = delete;
  AllocationsSucceed& operator=(const AllocationsSucceed&) = delete;
  ~AllocationsSucceed() { g_allocations_left.store(left_, std::memory_order_relaxed); }

 private:
  long left_ = g_allocations_left.exchange(-1, std::memory_order_relaxed);
};

}  // namespace memlayer::testing

void* operator new(std::size_t n) {
  auto& left = memlayer::testing::g_allocations_left;
  if (left.load(std::memory_order_relaxed) >= 0 && left.fetch_sub(1, std::memory_order_relaxed) == 0)
    throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

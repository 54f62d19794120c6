// bounded(): runs a test step under a watchdog, so that a hang (a lock
// never released, a wait that cannot end) fails the test instead of
// stalling it until ctest's timeout.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

namespace memlayer::testing {

/// Runs `f` on a thread of its own and returns its result; if it has not
/// returned within `seconds`, prints "HANG: <what> ..." and ends the process
/// with status 3 (a stuck thread cannot be joined). Allocates (the thread):
/// not under an allocation-failure countdown.
template <class F>
auto bounded(const char* what, int seconds, F f) {
  auto done = std::async(std::launch::async, f);
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "HANG: %s did not return within %d s\n", what, seconds);
    std::fflush(stderr);
    std::_Exit(3);
  }
  return done.get();
}

}  // namespace memlayer::testing

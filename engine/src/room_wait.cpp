#include "memlayer/engine/room_wait.hpp"

#include <algorithm>
#include <thread>

namespace memlayer::engine {

bool RoomWait::wait(std::span<const Event> events, std::chrono::milliseconds limit) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    deadline_ = now + limit;
  }
  if (now >= deadline_) return false;
  if (events.empty()) {
    std::this_thread::yield();
    return true;
  }
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    if (std::any_of(events.begin(), events.end(), [&](Event e) { return host_.finished(e); })) return true;
    if (std::chrono::steady_clock::now() >= deadline_) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace memlayer::engine

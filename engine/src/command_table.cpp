#include "command_table.hpp"

#include <algorithm>
#include <new>
#include <thread>

namespace memlayer::engine {

CommandTable::CommandTable(Host& host) : host_(host), chunks_(std::make_unique<std::atomic<Slot*>[]>(kMaxChunks)) {}

CommandTable::~CommandTable() {
  const std::uint32_t n = capacity_.load();
  for (std::uint32_t i = 0; i < n; ++i) {
    Slot& s = slot(i);
    const std::uint64_t w = s.word.load();
    if (state_of(w) != kFree && (w & kReleased) == 0) host_.release(s.host, 1);
  }
}

EventStatus CommandTable::status_of(std::uint64_t state) {
  switch (state) {
    case kRunning: return EventStatus::running;
    case kCancelled: return EventStatus::cancelled;
    case kFailed: return EventStatus::failed;
    default: return EventStatus::completed;  // kCompleted, or kFree: recycled
  }
}

std::uint64_t CommandTable::state_for(EventStatus s) {
  switch (s) {
    case EventStatus::running: return kRunning;
    case EventStatus::completed: return kCompleted;
    case EventStatus::cancelled: return kCancelled;
    case EventStatus::failed: return kFailed;
  }
  return kFailed;
}

// A new block of slots, all free, generation 1.
bool CommandTable::grow() noexcept {
  const std::uint32_t first = capacity_.load(std::memory_order_relaxed);
  const std::size_t chunk = first >> kChunkBits;
  if (chunk >= kMaxChunks) return false;
  try {
    owned_.reserve(owned_.size() + 1);
    auto block = std::make_unique<Slot[]>(kChunk);
    for (std::size_t i = 0; i < kChunk; ++i) {
      block[i].word.store(word(1, kFree), std::memory_order_relaxed);
      block[i].next_free.store(i + 1 < kChunk ? static_cast<std::uint32_t>(first + i + 2) : 0, std::memory_order_relaxed);
    }
    chunks_[chunk].store(block.get(), std::memory_order_release);
    owned_.push_back(std::move(block));
  } catch (const std::bad_alloc&) {
    return false;
  }
  capacity_.store(static_cast<std::uint32_t>(first + kChunk), std::memory_order_release);
  push_free(first, static_cast<std::uint32_t>(first + kChunk - 1));
  return true;
}

void CommandTable::push_free(std::uint32_t first, std::uint32_t last) noexcept {
  Slot& tail = slot(last);
  std::uint64_t top = free_top_.load(std::memory_order_relaxed);
  do {
    tail.next_free.store(static_cast<std::uint32_t>(top), std::memory_order_relaxed);
  } while (!free_top_.compare_exchange_weak(top, (top & ~std::uint64_t{0xffffffff}) | (std::uint64_t{first} + 1),
                                            std::memory_order_release, std::memory_order_relaxed));
}

inline bool CommandTable::pop_free(std::uint32_t& index) noexcept {
  std::uint64_t top = free_top_.load(std::memory_order_acquire);
  for (;;) {
    const auto top_index = static_cast<std::uint32_t>(top);
    if (top_index == 0) return false;
    const std::uint32_t next = slot(top_index - 1).next_free.load(std::memory_order_relaxed);
    const std::uint64_t tag = (top >> 32) + 1;
    if (free_top_.compare_exchange_weak(top, tag << 32 | next, std::memory_order_acquire, std::memory_order_acquire)) {
      index = top_index - 1;
      return true;
    }
  }
}

// Slots whose command completed with nobody looking (a buffer not used
// again) would hold their event for ever: before the table grows, up to 64
// running slots are asked again, round the table.
void CommandTable::look_again() noexcept {
  const std::uint32_t n = capacity_.load(std::memory_order_acquire);
  if (n == 0) return;
  for (int k = 0; k < 64; ++k) {
    const std::uint32_t i = hand_.fetch_add(1, std::memory_order_relaxed) % n;
    const std::uint64_t w = slot(i).word.load(std::memory_order_acquire);
    if (state_of(w) == kRunning) (void)ask_host(i, slot(i), gen_of(w));
  }
}

Event CommandTable::make(Event e, Ref ref, bool told, Location where) noexcept {
  std::uint32_t index = 0;
  if (!pop_free(index)) {
    look_again();
    std::lock_guard lock(mutex_);
    if (!pop_free(index) && !(grow() && pop_free(index))) return nullptr;
  }
  Slot& s = slot(index);
  if (ref == Ref::retain) host_.retain(e, 1);
  else if (ref == Ref::retain_unshared) host_.retain_unshared(e);
  s.host = e;
  s.where.store(where, std::memory_order_relaxed);
  const std::uint32_t gen = gen_of(s.word.load(std::memory_order_relaxed));
  s.word.store(word(gen, kRunning) | (told ? kTold : 0), std::memory_order_release);
  return name_of(index, gen);
}

void CommandTable::discard(Event name) noexcept {
  if (name == nullptr) return;
  const std::uint32_t index = index_of(name);
  Slot& s = slot(index);
  const std::uint64_t w = s.word.load(std::memory_order_acquire);
  if (gen_of(w) != gen_of(name)) return;
  if (state_of(w) == kCancelled || state_of(w) == kFailed) failed_kept_.fetch_sub(1, std::memory_order_relaxed);
  if ((w & kReleased) == 0) host_.release(s.host, 1);
  recycle(index, s, gen_of(w));
}

// A look at a slot that read running with generation `gen`.
EventStatus CommandTable::ask_host(std::uint32_t index, Slot& s, std::uint32_t gen) noexcept {
  // Pinned, the slot keeps its event until this look is done (try_release).
  std::uint64_t w = pin(s, gen);
  EventStatus r;
  if (gen_of(w) != gen) {
    r = EventStatus::completed;
  } else if (state_of(w) != kRunning) {
    r = status_of(state_of(w));
  } else {
    r = host_.status(s.host);
    if (r != EventStatus::running &&
        s.word.compare_exchange_strong(w, word(gen, state_for(r)), std::memory_order_seq_cst) &&
        r != EventStatus::completed)
      failed_kept_.fetch_add(1, std::memory_order_relaxed);
  }
  unpin(index, s);
  return r;
}

void CommandTable::learned(Event name, EventStatus status) noexcept {
  if (name == nullptr || status == EventStatus::running) return;
  const std::uint32_t index = index_of(name), gen = gen_of(name);
  Slot& s = slot(index);
  std::uint64_t w = s.word.load(std::memory_order_acquire);
  if (gen_of(w) != gen || state_of(w) != kRunning) return;
  if (!s.word.compare_exchange_strong(w, word(gen, state_for(status)), std::memory_order_seq_cst)) return;
  if (status != EventStatus::completed) {
    failed_kept_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A look that pinned it releases it when it unpins (unpin()).
  if (s.pins.load(std::memory_order_seq_cst) == 0) try_release(index, s);
}

Event CommandTable::retain_host(Event name) noexcept {
  const Event e = lease_host(name);
  if (e != nullptr) {
    host_.retain(e, 1);
    end_lease(name);
  }
  return e;
}

// pin()'s wait for a slot that recycle_unnamed() is taking: the pin that
// saw it is dropped, and pins are tried again until it recycled the slot
// or put it back.
std::uint64_t CommandTable::pin_again(Slot& s, std::uint32_t gen) noexcept {
  for (;;) {
    s.pins.fetch_sub(1, std::memory_order_seq_cst);  // nothing to release here: the taker does
    std::this_thread::yield();
    s.pins.fetch_add(1, std::memory_order_seq_cst);
    const std::uint64_t w = s.word.load(std::memory_order_seq_cst);
    if (!taking(w, gen)) return w;
  }
}

// A completed slot nobody is looking into gives its event back and is
// recycled. Whoever sees the last pin go, or the status become final with
// no pin left, tries; the flag makes one of them do it.
void CommandTable::try_release(std::uint32_t index, Slot& s) noexcept {
  std::uint64_t w = s.word.load(std::memory_order_seq_cst);
  if (state_of(w) != kCompleted || (w & kReleased) != 0) return;
  if (s.pins.load(std::memory_order_seq_cst) != 0) return;
  if (!s.word.compare_exchange_strong(w, w | kReleased, std::memory_order_seq_cst)) return;
  host_.release(s.host, 1);
  recycle(index, s, gen_of(w));
}

void CommandTable::recycle(std::uint32_t index, Slot& s, std::uint32_t gen) noexcept {
  s.host = nullptr;
  const std::uint32_t next = gen + 1 == 0 ? 1 : gen + 1;
  s.word.store(word(next, kFree), std::memory_order_release);
  push_free(index, index);
}

void CommandTable::failed_names(std::vector<Event>& out) const {
  const std::uint32_t n = capacity_.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t w = slot(i).word.load(std::memory_order_acquire);
    if ((state_of(w) == kCancelled || state_of(w) == kFailed) && (w & kReleased) == 0)
      out.push_back(name_of(i, gen_of(w)));
  }
}

void CommandTable::recycle_unnamed(std::span<const Event> candidates, std::span<const Event> named) noexcept {
  for (Event name : candidates) {
    if (std::binary_search(named.begin(), named.end(), name)) continue;
    const std::uint32_t index = index_of(name);
    Slot& s = slot(index);
    std::uint64_t w = s.word.load(std::memory_order_acquire);
    if (gen_of(w) != gen_of(name) || (state_of(w) != kCancelled && state_of(w) != kFailed) || (w & kReleased) != 0)
      continue;
    if (!s.word.compare_exchange_strong(w, w | kReleased, std::memory_order_seq_cst)) continue;
    // Flag first, pins after; a pinner pins first, flag after (pin()): one
    // of the two sees the other. A lease or a look holds it: the next sweep.
    if (s.pins.load(std::memory_order_seq_cst) != 0) {
      std::uint64_t flagged = w | kReleased;
      s.word.compare_exchange_strong(flagged, w, std::memory_order_seq_cst);  // nothing else changes it
      continue;
    }
    failed_kept_.fetch_sub(1, std::memory_order_relaxed);
    host_.release(s.host, 1);
    recycle(index, s, gen_of(w));
  }
}

std::size_t CommandTable::holding() const noexcept {
  std::size_t held = 0;
  const std::uint32_t n = capacity_.load();
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t w = slot(i).word.load();
    if (state_of(w) != kFree && (w & kReleased) == 0) ++held;
  }
  return held;
}

}  // namespace memlayer::engine

#include "memlayer/engine/engine.hpp"

#include "transaction.hpp"

#include <cstdlib>
#include <cstring>

namespace memlayer::engine {

namespace {

// MEMLAYER_FAST_PATH=0 starts engines with the fast path off, so that a
// benchmark or a driver (PoCL's) compares both without a rebuild.
bool fast_path_by_default() {
  const char* v = std::getenv("MEMLAYER_FAST_PATH");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

Engine::Engine(Host& host) : host_(host) { fast_path_on_.store(fast_path_by_default(), std::memory_order_relaxed); }

Engine::~Engine() = default;

std::optional<EnqueueError> Engine::enqueue(std::span<const BufferUse> uses, Location at, Event command,
                                            Submission& out) {
  out.clear();
  out.host_ = &host_;
  return Transaction(*this, uses, at, command, out).run();
}

std::optional<EnqueueError> Engine::place(Buffer& buffer, Location at, Submission& out) {
  out.clear();
  out.host_ = &host_;
  const BufferUse use{&buffer, {0, buffer.size(), migration::Access::read}};
  return Transaction(*this, std::span(&use, 1), at, nullptr, out).run_place();
}

EngineStats Engine::stats() const noexcept {
  EngineStats s;
  s.bytes_migrated = counters_.bytes_migrated.load();
  s.copies_direct = counters_.copies_direct.load();
  s.copies_to_host = counters_.copies_to_host.load();
  s.copies_from_host = counters_.copies_from_host.load();
  s.evictions = counters_.evictions.load();
  s.write_backs = counters_.write_backs.load();
  s.bytes_written_back = counters_.bytes_written_back.load();
  s.bytes_lost = counters_.bytes_lost.load();
  s.compactions = counters_.compactions.load();
  s.fast_path = fast_path_taken_.load();
  const std::uint64_t places = places_.load();  // first: each counted there is in stamp_ already
  s.enqueues = stamp_.load() - places;
  return s;
}

Submission::Submission() : scratch_(std::make_unique<EnqueueScratch>()) {}
Submission::~Submission() { clear(); }

void Submission::clear() noexcept {
  if (host_ != nullptr)
    for (Event e : waits_) host_->release(e, 1);
  waits_.clear();
  storage_.clear();
}

}  // namespace memlayer::engine

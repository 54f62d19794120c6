#include "engine_host.hpp"

#include <algorithm>
#include <chrono>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "buffer_state.hpp"
#include "context_state.hpp"
#include "scheduler.hpp"

namespace memlayer::runtime::detail {

namespace {

using migration::kHost;

EventState* state(engine::Event e) { return static_cast<EventState*>(e); }

std::byte* host_bytes(engine::StorageHandle h) { return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(h)); }

// The dependencies a storage's fence has room for when allocate() makes it
// (free(): its users still queued, the write-backs reading it out).
constexpr std::size_t kFenceRoom = 4;

// How many of `events` have not ended.
std::size_t count_pending(std::span<const engine::Event> events) {
  return static_cast<std::size_t>(
      std::count_if(events.begin(), events.end(), [](engine::Event e) { return state(e)->status() > cl::kComplete; }));
}

// A hidden migration's transfer is tried this many times from each source
// before the next is tried: a fault is often transient, and a transfer
// writes its whole destination range, so trying again is harmless.
constexpr int kTransferAttempts = 3;

// One transfer of bytes [offset, offset + n) of a buffer from storage
// `from` at `src` to storage `to` at `dst`, by whichever driver moves them.
Status transfer(const ContextState& ctx, engine::Location src, engine::StorageHandle from, engine::Location dst,
                engine::StorageHandle to, std::uint64_t offset, std::uint64_t n) {
  if (src == kHost) return ctx.by_location[dst]->driver().write(to + offset, host_bytes(from) + offset, n);
  DeviceState& source = *ctx.by_location[src];
  if (dst == kHost) return source.driver().read(from + offset, host_bytes(to) + offset, n);
  return ctx.by_location[dst]->driver().copy_from_peer(source.driver(), from + offset, to + offset, n);
}

// A copy's work (doc/runtime.md, failures): the transfer from its source,
// tried kTransferAttempts times; then from each other complete copy of the
// bytes the planner named (CopyRequest::also), as often. A last copy (the
// write-back of bytes whose storage goes after it, whatever its outcome)
// then goes on trying them all, pausing longer each round, until
// ContextOptions::room_wait has passed since its first try: giving up loses
// the bytes. The error of the last try, naming the buffer and the range,
// when none succeeds.
Work copy_work(ContextState& ctx, const engine::CopyRequest& r, std::uint64_t buffer_id) {
  std::vector<engine::CopySource> sources{{r.src, r.src_storage}};
  sources.insert(sources.end(), r.also.begin(), r.also.end());
  return [&ctx, sources = std::move(sources), dst = r.dst, to = r.dst_storage, offset = r.offset, n = r.size,
          last_copy = r.last_copy, buffer_id](std::span<const DeviceAddress>) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point give_up = Clock::now() + ctx.room_wait;
    std::chrono::milliseconds pause{1};
    Status s;
    int rounds = 0;
    for (;; ++rounds) {
      for (std::size_t i = 0; i < sources.size(); ++i) {
        for (int attempt = 0; attempt < kTransferAttempts; ++attempt) {
          if (rounds > 0 || i > 0 || attempt > 0) ctx.transfer_retries.fetch_add(1, std::memory_order_relaxed);
          s = transfer(ctx, sources[i].at, sources[i].storage, dst, to, offset, n);
          if (!s.ok()) continue;
          if (i > 0) ctx.copies_resourced.fetch_add(1, std::memory_order_relaxed);
          return s;
        }
      }
      const Clock::time_point now = Clock::now();
      if (!last_copy || now >= give_up) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, give_up - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
    s.message = "buffer " + std::to_string(buffer_id) + ", bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + n) + "): no copy could be moved to " + ctx.location_name(dst) + " (" +
                std::to_string(sources.size()) + (sources.size() == 1 ? " source" : " sources") + ", " +
                std::to_string(kTransferAttempts * (rounds + 1)) + " tries each" +
                (last_copy ? ", for " + std::to_string(ctx.room_wait.count()) + " ms: the bytes are lost" : "") +
                "); the last error: " + s.message;
    return s;
  };
}

}  // namespace

void EngineHost::retain(engine::Event e, std::uint32_t count) noexcept { state(e)->planner_retain(count); }
void EngineHost::release(engine::Event e, std::uint32_t count) noexcept { state(e)->planner_release(count); }
void EngineHost::retain_unshared(engine::Event e) noexcept { state(e)->planner_retain_unshared(); }
engine::EventStatus EngineHost::status(engine::Event e) const noexcept { return state(e)->outcome(); }

engine::Allocation EngineHost::allocate(engine::Location at, void* cookie, std::uint64_t size) {
  using Outcome = engine::Allocation::Outcome;
  engine::Allocation a;
  if (at == kHost) {
    try {
      a.handle = reinterpret_cast<std::uintptr_t>(static_cast<BufferState*>(cookie)->host());
      a.outcome = Outcome::ok;
    } catch (const std::bad_alloc&) {
      a.message = "no host memory for a " + std::to_string(size) + "-byte host copy";
    }
    return a;
  }
  DeviceState& dev = *context_.by_location[at];
  // What free() needs is made with the storage: free() must not fail.
  auto fence = make_node(nullptr, nullptr);
  reserve_deps(*fence, kFenceRoom);
  std::lock_guard mem(dev.memory_mutex);
  if (!dev.memory->usable()) {
    a.message = dev.info().name + ": no global memory";
    return a;
  }
  auto r = dev.memory->allocate(size, dev.info().base_alignment);
  if (!r) {
    a.outcome = r.error().code == bufalloc::Errc::out_of_memory ? Outcome::full : Outcome::error;
    a.message = dev.info().name + ": " + r.error().message();
    return a;
  }
  const bufalloc::BlockHandle& block = r.value();
  if (Status s = dev.driver().on_allocate(block.address, size); !s.ok()) {
    dev.memory->free(block, false);
    a.message = dev.info().name + ": " + s.message;
    return a;
  }
  try {
    // Placed over storage an eviction freed, maybe still being read out?
    for (const auto& f : dev.memory->fences_over(block.address, size)) a.fences.push_back(f.get());
    dev.memory->promise_quarantine();
  } catch (const std::bad_alloc&) {
    dev.driver().on_free(block.address, size);
    dev.memory->free(block, false);
    throw;  // the engine's enqueue fails: host_out_of_memory
  }
  // The quarantine holds them (under the memory lock): the references the engine takes over.
  for (engine::Event f : a.fences) state(f)->planner_retain(1);
  // The engine keeps only the address; the handle stays with the buffer for free().
  static_cast<BufferState*>(cookie)->device_storage(at) = {block, std::move(fence)};
  a.outcome = Outcome::ok;
  a.handle = block.address;
  return a;
}

// Must not fail (host.hpp), and allocates nothing as long as at most
// kFenceRoom events of `after` are unfinished: allocate() made the fence and
// its room in the quarantine. With more, the fence needs more room; without
// memory for it, the storage stays allocated, unused, until the context
// goes: correct (nothing is placed over bytes still being used), and it
// costs only that storage's room.
void EngineHost::free(engine::Location at, void* cookie, engine::StorageHandle storage, std::uint64_t size,
                      std::span<const engine::Event> after) noexcept {
  if (at == kHost) return;  // the host copy is the BufferState's own
  DeviceState& dev = *context_.by_location[at];
  // allocate() kept the handle of `storage` (its address) and its fence in the buffer.
  auto [block, fence] = std::exchange(static_cast<BufferState*>(cookie)->device_storage(at), {});
  bool room = true;
  if (const std::size_t pending = count_pending(after); pending == 0) {
    fence.reset();
  } else if (deps_room(*fence) < pending) {
    try {
      reserve_deps(*fence, pending);
    } catch (const std::bad_alloc&) {
      room = false;
    }
  }
  if (fence && room) {
    // Its users failing frees the storage as well: the fence only orders (a
    // failed fence would fail whatever is placed over the storage next).
    for (engine::Event e : after)
      if (state(e)->status() > cl::kComplete) add_dep(*fence, state(e)->shared_from_this(), false);
  }
  {
    std::lock_guard mem(dev.memory_mutex);
    if (!room) {
      dev.memory->forgo_quarantine();
      return;
    }
    dev.driver().on_free(storage, size);  // before the heap may hand the segment back
    if (fence) {
      // Quarantined: whatever is placed over it waits for the fence.
      dev.memory->free_after(block, size, fence->event);
    } else {
      dev.memory->free(block, true);
    }
  }
  // Work-less, and nothing waits on it yet: it can only complete, here or on
  // the thread that finishes its last dependency.
  if (fence) submit(fence);
}

// The device's region names the cheapest hole (bufalloc's
// Region::cheapest_hole): storage of no candidate cannot go, and among
// holes of equal cost the least recently used candidates go. A
// candidate's storage handle is its block's address (allocate()).
bool EngineHost::hole_victims(engine::Location at, std::uint64_t size,
                              std::span<const engine::EvictionCandidate> candidates,
                              std::vector<std::size_t>& victims) {
  if (at == kHost) return false;
  std::vector<std::pair<engine::StorageHandle, std::size_t>> by_address;
  by_address.reserve(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) by_address.emplace_back(candidates[i].storage, i);
  std::sort(by_address.begin(), by_address.end());
  auto candidate_at = [&](bufalloc::Address a) -> const std::size_t* {
    auto it = std::lower_bound(by_address.begin(), by_address.end(), std::make_pair(a, std::size_t{0}));
    return it != by_address.end() && it->first == a ? &it->second : nullptr;
  };
  const std::size_t first = victims.size();
  DeviceState& dev = *context_.by_location[at];
  std::lock_guard mem(dev.memory_mutex);
  if (!dev.memory->usable()) return false;
  auto hole = dev.memory->cheapest_hole(
      size, dev.info().base_alignment,
      [&](const bufalloc::BlockInfo& b) -> std::optional<std::uint64_t> {
        const std::size_t* i = candidate_at(b.address);
        if (i == nullptr) return std::nullopt;
        return candidates[*i].last_use;
      },
      [&](const bufalloc::BlockInfo& b) { victims.push_back(*candidate_at(b.address)); });
  if (!hole) victims.resize(first);
  return hole.ok();
}

engine::CopyHandle EngineHost::create_copy(const engine::CopyRequest& r) {
  // The copy keeps its buffer alive; one being destroyed is not copied.
  auto buffer = static_cast<BufferState*>(r.cookie)->weak_from_this().lock();
  if (!buffer) return {};
  try {
    const engine::Location runner = r.src == kHost ? r.dst : (r.dst == kHost ? r.src : r.dst);
    auto node = make_node(context_.by_location[runner], copy_work(context_, r, buffer->id()));
    reserve_deps(*node, r.after.size());  // submit_copy() must not fail
    node->held.push_back(std::move(buffer));
    engine::CopyHandle h;
    h.event = node->event.get();
    h.host_data = std::move(node);
    return h;
  } catch (const std::bad_alloc&) {
    return {};
  }
}

// Allocates nothing: `deps` are the request's `after` (host.hpp), which
// create_copy() made room for.
void EngineHost::submit_copy(engine::CopyHandle copy, std::span<const engine::Event> deps) noexcept {
  auto node = std::static_pointer_cast<CommandNode>(std::move(copy.host_data));
  for (engine::Event e : deps) add_dep(*node, state(e)->shared_from_this(), true);
  submit(node);
}

void EngineHost::discard_copy(engine::CopyHandle copy) noexcept { copy.host_data.reset(); }

const migration::CostModel& EngineHost::cost_model() const noexcept { return context_.cost; }

std::string EngineHost::location_name(engine::Location at) const {
  return at == kHost ? std::string("the host copy") : context_.location_name(at);
}

// What the driver lets memlayer allocate (DeviceInfo::global_mem_size),
// arena or native allocator alike.
std::uint64_t EngineHost::capacity(engine::Location at) const noexcept {
  return at == kHost ? UINT64_MAX : context_.by_location[at]->info().global_mem_size;
}

}  // namespace memlayer::runtime::detail

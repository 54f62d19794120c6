#include "context_state.hpp"

#include <algorithm>
#include <new>
#include <string>

#include "scheduler.hpp"

namespace memlayer::runtime::detail {

namespace {

using migration::kHost;
using migration::Location;
using EventPtr = std::shared_ptr<EventState>;

EventPtr state_of(migration::Event e) { return static_cast<EventState*>(e)->shared_from_this(); }

// A node ready to be submitted once every lock is released.
struct Launch {
  std::shared_ptr<CommandNode> node;
  std::vector<EventPtr> deps;
};

std::shared_ptr<CommandNode> make_node(DeviceState* device, std::function<Status()> work) {
  auto node = std::make_shared<CommandNode>();
  node->event = std::make_shared<EventState>(false);
  node->device = device;
  node->work = std::move(work);
  return node;
}

void append(std::vector<EventPtr>& to, const std::vector<EventPtr>& from) { to.insert(to.end(), from.begin(), from.end()); }

}  // namespace

void Instance::add_user(const EventPtr& e) {
  if (users.size() >= 16) {
    std::erase_if(users, [](const EventPtr& u) { return u->status() <= cl::kComplete; });
  }
  users.push_back(e);
}

ContextState::ContextState(std::vector<std::unique_ptr<DeviceDriver>> drivers, const ContextOptions& options) {
  event_ops.retain = [](void*, migration::Event e) { static_cast<EventState*>(e)->planner_retain(); };
  event_ops.release = [](void*, migration::Event e) { static_cast<EventState*>(e)->planner_release(); };
  event_ops.finished = [](void*, migration::Event e) -> int {
    return static_cast<EventState*>(e)->status() <= cl::kComplete;
  };
  by_location.push_back(nullptr);  // the host copy
  for (auto& driver : drivers) {
    const bool shared = driver->info().shares_host_memory;
    const Location loc = shared ? kHost : static_cast<Location>(by_location.size());
    const LinkCost host_link = driver->host_link();
    devices.push_back(std::make_unique<DeviceState>(std::move(driver), loc, options.device_heap));
    if (!shared) {
      by_location.push_back(devices.back().get());
      cost.set_host_link(loc, {host_link.latency_s, host_link.bytes_per_s});
    }
  }
  for (DeviceState* src : by_location) {
    for (DeviceState* dst : by_location) {
      if (src == nullptr || dst == nullptr || src == dst) continue;
      if (auto link = dst->driver().peer_link(src->driver()))
        cost.set_direct(src->location(), dst->location(), {link->latency_s, link->bytes_per_s});
    }
  }
}

namespace {

// Everything one enqueue does, with the locks it holds and the nodes it will
// submit once they are released.
class Enqueue {
 public:
  Enqueue(ContextState& ctx, CommandSpec& spec) : ctx_(ctx), spec_(spec) {}

  Result<Event> run(QueueState& queue, std::span<const Event> wait) {
    for (const Event& e : wait) {
      if (!e.valid()) return Status::error(cl::kInvalidEventWaitList, "the wait list holds an empty event");
    }
    auto node = make_node(spec_.device, nullptr);
    Status error;
    std::vector<EventPtr> deps;
    for (const Event& e : wait) deps.push_back(e.state());
    {
      // Queue order and buffer-version order must agree, or two threads on
      // one queue could each wait for the other: the queue lock comes first.
      std::lock_guard queue_lock(queue.mutex);
      lock_parents();
      Status failed = allocate_storage();
      if (failed.ok()) failed = plan_all();
      if (!failed.ok()) {
        rollback();
      } else {
        commit_all(node, deps);
        order_in_queue(queue, node->event, deps);
      }
      locks_.clear();
      if (!failed.ok()) error = std::move(failed);
    }
    // Submitting may run work-less nodes and user callbacks on this thread:
    // never under a memlayer lock.
    for (Launch& l : launches_) submit(l.node, l.deps);
    if (!error.ok()) return error;
    submit(node, deps);
    return Event(node->event);
  }

 private:
  void lock_parents() {
    for (const BufferUse& u : spec_.uses) parents_.push_back(u.parent.get());
    std::sort(parents_.begin(), parents_.end());
    parents_.erase(std::unique(parents_.begin(), parents_.end()), parents_.end());
    for (BufferState* p : parents_) locks_.emplace_back(p->mutex);
  }

  DeviceState* device_at() const { return ctx_.by_location[spec_.at]; }

  Status allocate_storage() {
    try {
      for (BufferState* p : parents_) {
        if (spec_.at == kHost) {
          p->host();
          continue;
        }
        if (p->instances.size() <= spec_.at) p->instances.resize(ctx_.by_location.size());
        if (p->instances[spec_.at].allocated) continue;
        if (Status s = allocate_instance(*device_at(), *p); !s.ok()) return s;
        fresh_.push_back(p);
      }
    } catch (const std::bad_alloc&) {
      return Status::error(cl::kOutOfHostMemory, "no host memory for a buffer's host copy");
    }
    return {};
  }

  // Undoes this enqueue's allocations. Evictions stay (their write-backs
  // are still submitted): each is correct on its own and already committed.
  void rollback() {
    DeviceState* dev = device_at();
    for (BufferState* p : fresh_) {
      Instance& inst = p->instances[spec_.at];
      std::lock_guard mem(dev->memory_mutex);
      dev->driver().on_free(inst.address, p->size());  // before the heap may hand the segment back
      dev->memory->free(inst.address);
      inst = Instance{};
    }
  }

  Status allocate_instance(DeviceState& dev, BufferState& p) {
    std::lock_guard mem(dev.memory_mutex);
    if (!dev.memory->usable())
      return Status::error(cl::kMemObjectAllocationFailure, dev.info().name + ": no global memory");
    for (;;) {
      auto r = dev.memory->allocate(p.size(), dev.info().base_alignment);
      if (r.ok()) {
        if (Status s = dev.driver().on_allocate(r.value(), p.size()); !s.ok()) {
          dev.memory->free(r.value());
          return s;
        }
        Instance& inst = p.instances[dev.location()];
        inst.allocated = true;
        inst.address = r.value();
        inst.last_use = ctx_.next_tick();
        // Placed over storage an eviction freed, maybe still being read out?
        inst.fences = dev.memory->fences_over(r.value(), p.size());
        std::lock_guard res(ctx_.residents_mutex);
        ctx_.residents.try_emplace(&p, p.weak_from_this());
        return {};
      }
      if (r.error().code != bufalloc::Errc::out_of_memory)
        return Status::error(cl::kMemObjectAllocationFailure, dev.info().name + ": " + r.error().message());
      if (!evict_one(dev)) {
        return Status::error(cl::kMemObjectAllocationFailure,
                             dev.info().name + ": cannot place a " + std::to_string(p.size()) +
                                 "-byte buffer and nothing more can be evicted (" + r.error().message() + ")");
      }
    }
  }

  // Evicts the least recently used instance on `dev` of a buffer this
  // command does not use, preferring copies valid elsewhere (nothing to
  // write back). Its storage goes into quarantine until its last users and
  // the write-back finish. False when nothing can be evicted. Caller holds
  // dev.memory_mutex.
  bool evict_one(DeviceState& dev) {
    const Location loc = dev.location();
    std::shared_ptr<BufferState> victim;
    std::unique_lock<std::mutex> victim_lock;
    bool victim_clean = false;
    {
      std::lock_guard res(ctx_.residents_mutex);
      std::erase_if(ctx_.residents, [](const auto& r) { return r.second.expired(); });
      for (const auto& [key, weak] : ctx_.residents) {
        auto b = weak.lock();
        if (!b || b == victim || std::binary_search(parents_.begin(), parents_.end(), b.get())) continue;
        std::unique_lock lock(b->mutex, std::try_to_lock);  // never wait: another enqueue may hold it
        if (!lock.owns_lock()) continue;
        if (b->instances.size() <= loc || !b->instances[loc].allocated) continue;
        const bool clean = b->versions.bytes_only_at(loc) == 0;
        const bool better = !victim || (clean && !victim_clean) ||
                            (clean == victim_clean && b->instances[loc].last_use < victim->instances[loc].last_use);
        if (better) {
          victim = std::move(b);
          victim_lock = std::move(lock);
          victim_clean = clean;
        }
      }
    }
    if (!victim) return false;

    Instance& inst = victim->instances[loc];
    migration::Plan plan;
    victim->versions.plan_evict(loc, ctx_.cost, plan);
    std::byte* host = plan.copies.empty() ? nullptr : victim->host();
    std::vector<migration::Event> copy_events;
    std::vector<EventPtr> after;
    for (const migration::Copy& c : plan.copies) {
      const DeviceAddress from = inst.address + c.offset;
      std::byte* to = host + c.offset;
      const std::uint64_t n = c.size;
      DeviceState* d = &dev;
      auto copy = make_node(&dev, [d, from, to, n] { return d->driver().read(from, to, n); });
      copy->keep_alive.push_back(victim);
      Launch l{copy, {}};
      for (migration::Event e : c.wait) l.deps.push_back(state_of(e));
      copy_events.push_back(copy->event.get());
      after.push_back(copy->event);
      launches_.push_back(std::move(l));
      ctx_.bytes_migrated += n;
      ++ctx_.copies_to_host;
    }
    auto fence = make_node(nullptr, nullptr);
    Launch l{fence, after};
    for (migration::Event e : plan.wait) l.deps.push_back(state_of(e));  // before the commit releases them
    victim->versions.commit_evict(plan, copy_events, loc);
    append(l.deps, inst.users);
    append(l.deps, inst.fences);
    launches_.push_back(std::move(l));
    dev.driver().on_free(inst.address, victim->size());
    dev.memory->free_after(inst.address, victim->size(), fence->event);
    inst = Instance{};
    ++ctx_.evictions;
    if (!plan.copies.empty()) ++ctx_.write_backs;
    return true;
  }

  Status plan_all() {
    try {
      for (BufferState* p : parents_) {
        std::vector<migration::Use> uses;
        for (const BufferUse& u : spec_.uses)
          if (u.parent.get() == p) uses.push_back(u.use);
        migration::Plan plan;
        p->versions.plan(uses, spec_.at, ctx_.cost, plan);
        for (const migration::Copy& c : plan.copies)
          if (c.src == kHost || c.dst == kHost) p->host();  // staging needs the host copy
        plans_.push_back({p, std::move(uses), std::move(plan)});
      }
    } catch (const std::bad_alloc&) {
      return Status::error(cl::kOutOfHostMemory, "no host memory for a buffer's host copy");
    }
    return {};
  }

  // A copy's work: which driver moves the bytes, and how.
  std::function<Status()> copy_work(BufferState& p, const migration::Copy& c) {
    const std::uint64_t off = c.offset, n = c.size;
    if (c.src == kHost) {
      DeviceState* dst = ctx_.by_location[c.dst];
      const DeviceAddress to = p.instances[c.dst].address + off;
      const std::byte* from = p.host() + off;
      return [dst, to, from, n] { return dst->driver().write(to, from, n); };
    }
    DeviceState* src = ctx_.by_location[c.src];
    const DeviceAddress from = p.instances[c.src].address + off;
    if (c.dst == kHost) {
      std::byte* to = p.host() + off;
      return [src, from, to, n] { return src->driver().read(from, to, n); };
    }
    DeviceState* dst = ctx_.by_location[c.dst];
    const DeviceAddress to = p.instances[c.dst].address + off;
    return [src, dst, from, to, n] { return dst->driver().copy_from_peer(src->driver(), from, to, n); };
  }

  void commit_all(const std::shared_ptr<CommandNode>& node, std::vector<EventPtr>& deps) {
    const std::uint64_t tick = ctx_.next_tick();
    for (auto& [p, uses, plan] : plans_) {
      std::vector<migration::Event> copy_events;
      std::vector<EventPtr> copy_states;
      for (const migration::Copy& c : plan.copies) {
        DeviceState* runner = ctx_.by_location[c.src == kHost ? c.dst : (c.dst == kHost ? c.src : c.dst)];
        auto copy = make_node(runner, copy_work(*p, c));
        copy->keep_alive.push_back(p->shared_from_this());
        Launch l{copy, {}};
        for (migration::Event e : c.wait) l.deps.push_back(state_of(e));
        if (c.after >= 0) l.deps.push_back(copy_states[static_cast<std::size_t>(c.after)]);
        for (Location end : {c.src, c.dst}) {
          if (end == kHost) continue;
          Instance& inst = p->instances[end];
          if (end == c.dst) append(l.deps, inst.fences);
          inst.add_user(copy->event);
        }
        copy_events.push_back(copy->event.get());
        copy_states.push_back(copy->event);
        launches_.push_back(std::move(l));
        ctx_.bytes_migrated += c.size;
        if (c.src != kHost && c.dst != kHost) ++ctx_.copies_direct;
        else if (c.dst == kHost) ++ctx_.copies_to_host;
        else ++ctx_.copies_from_host;
      }
      // plan.wait's events are valid only until the commit releases them.
      for (migration::Event e : plan.wait) deps.push_back(state_of(e));
      p->versions.commit(plan, copy_events, uses, spec_.at, node->event.get());
      append(deps, copy_states);
      if (spec_.at != kHost) {
        Instance& inst = p->instances[spec_.at];
        std::erase_if(inst.fences, [](const EventPtr& f) { return f->status() <= cl::kComplete; });
        append(deps, inst.fences);
        inst.add_user(node->event);
        inst.last_use = tick;
      }
      node->keep_alive.push_back(p->shared_from_this());
    }
    std::vector<Target> targets;
    for (const BufferUse& u : spec_.uses) {
      Target t;
      if (spec_.at == kHost) {
        t.host = u.parent->host() + u.use.offset;
        t.address = reinterpret_cast<std::uintptr_t>(t.host);
      } else {
        t.address = u.parent->instances[spec_.at].address + u.use.offset;
      }
      targets.push_back(t);
    }
    if (spec_.make_work) node->work = spec_.make_work(targets);
  }

  void order_in_queue(QueueState& q, const EventPtr& event, std::vector<EventPtr>& deps) {
    if (!q.out_of_order) {
      if (q.last) deps.push_back(q.last);
      q.last = event;
    } else if (spec_.barrier) {
      append(deps, q.since_barrier);
      if (q.barrier) deps.push_back(q.barrier);
      q.barrier = event;
      q.since_barrier.clear();
    } else {
      if (q.barrier) deps.push_back(q.barrier);
      q.since_barrier.push_back(event);
    }
    if (q.outstanding.size() >= 64)
      std::erase_if(q.outstanding, [](const EventPtr& e) { return e->status() <= cl::kComplete; });
    q.outstanding.push_back(event);
  }

  struct PlannedUse {
    BufferState* parent;
    std::vector<migration::Use> uses;
    migration::Plan plan;
  };

  ContextState& ctx_;
  CommandSpec& spec_;
  std::vector<BufferState*> parents_;
  std::vector<std::unique_lock<std::mutex>> locks_;
  std::vector<BufferState*> fresh_;
  std::vector<PlannedUse> plans_;
  std::vector<Launch> launches_;
};

}  // namespace

Result<Event> ContextState::enqueue(QueueState& queue, CommandSpec spec, std::span<const Event> wait) {
  return Enqueue(*this, spec).run(queue, wait);
}

}  // namespace memlayer::runtime::detail

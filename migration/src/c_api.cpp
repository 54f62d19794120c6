// The C boundary of the migration planner: preconditions become statuses,
// exceptions become statuses, and the message stays with the thread.
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "memlayer/c_status.hpp"
#include "memlayer/migration.h"
#include "memlayer/migration/range_versions.hpp"

using namespace memlayer::migration;

struct ml_cost_model {
  LinkCostModel model;
};

struct ml_plan {
  Plan plan;
  // The converted use list of the last plan or commit made with this plan:
  // reused, so planning allocates nothing once warm.
  mutable std::vector<Use> uses;
};

struct ml_versions {
  ml_versions(std::uint64_t size, LocationSet valid, const ml_event_ops& c)
      : ops{c.context, c.retain, c.release, c.status}, versions(size, valid, ops) {}
  // The C callbacks themselves: EventOps has ml_event_ops's members and types.
  EventOps ops;
  RangeVersions versions;
};

static_assert(ML_EVENT_RUNNING == static_cast<int>(memlayer::migration::EventStatus::running) &&
              ML_EVENT_COMPLETE == static_cast<int>(memlayer::migration::EventStatus::completed) &&
              ML_EVENT_CANCELLED == static_cast<int>(memlayer::migration::EventStatus::cancelled) &&
              ML_EVENT_FAILED == static_cast<int>(memlayer::migration::EventStatus::failed),
              "ml_event_ops.status and EventOps::status share their values");

namespace {

using memlayer::c_api::fail;

template <class F>
ml_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(ML_ERROR_HOST_OUT_OF_MEMORY, "migration: host memory ran out");
  } catch (const std::invalid_argument& e) {  // a call the arguments' checks above let through
    return fail(ML_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::logic_error& e) {  // the cost model has no path
    return fail(ML_ERROR_NO_PATH, e.what());
  }
}

// A use's access as the C caller stored it: any int, which C allows in an
// enum, while C++ may assume an ml_access holds a value of its range (so
// it is never loaded as one before it is checked).
int access_value(const ml_use& u) {
  static_assert(sizeof(ml_access) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &u.access, sizeof v);
  return v;
}
bool known_access(int a) { return a >= ML_ACCESS_READ && a <= ML_ACCESS_OVERWRITE; }

// Why use i of a list failed to_uses' checks. Out of line: the messages are
// built only on failure, and keep the check loop small.
[[gnu::cold, gnu::noinline]] ml_status bad_use(const ml_use& u, std::size_t i, std::uint64_t size) {
  const std::string which = "migration: use " + std::to_string(i);
  if (u.size == 0) return fail(ML_ERROR_INVALID_ARGUMENT, which + " has size 0");
  if (!known_access(access_value(u))) return fail(ML_ERROR_INVALID_ARGUMENT, which + " has an unknown access");
  return fail(ML_ERROR_OUT_OF_RANGE, which + " [" + std::to_string(u.offset) + ", +" + std::to_string(u.size) +
                                       ") is beyond the buffer's " + std::to_string(size) + " bytes");
}

// Checks and converts a C use list against a buffer of `size` bytes.
ml_status to_uses(const ml_use* uses, std::size_t n, std::uint64_t size, std::vector<Use>& out) {
  if (uses == nullptr || n == 0) return fail(ML_ERROR_INVALID_ARGUMENT, "migration: no uses");
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const ml_use& u = uses[i];
    const int access = access_value(u);
    if (u.size == 0 || !known_access(access) || u.offset > size || u.size > size - u.offset) return bad_use(u, i, size);
    out[i] = Use{u.offset, u.size, static_cast<Access>(access)};
  }
  return ML_OK;
}

ml_status check_location(std::uint32_t at) {
  return at < kMaxLocations ? ML_OK
                            : fail(ML_ERROR_INVALID_ARGUMENT, "migration: location " + std::to_string(at) + " >= 64");
}

}  // namespace

extern "C" {

ml_status ml_cost_model_create(double host_latency_s, double host_bytes_per_s, ml_cost_model** out) {
  if (out == nullptr || !(host_bytes_per_s > 0) || !(host_latency_s >= 0))
    return fail(ML_ERROR_INVALID_ARGUMENT, "cost model: need out, latency >= 0 and bandwidth > 0");
  return guarded([&] {
    *out = std::make_unique<ml_cost_model>(
               ml_cost_model{LinkCostModel({host_latency_s, host_bytes_per_s})})
               .release();  // owned by the caller until ml_cost_model_destroy
    return ML_OK;
  });
}

void ml_cost_model_destroy(ml_cost_model* model) { std::unique_ptr<ml_cost_model> owned(model); }

ml_status ml_cost_model_set_host_link(ml_cost_model* model, uint32_t device, double latency_s,
                                          double bytes_per_s) {
  if (model == nullptr || device == kHost || device >= kMaxLocations || !(bytes_per_s > 0) || !(latency_s >= 0))
    return fail(ML_ERROR_INVALID_ARGUMENT, "cost model: bad host link");
  return guarded([&] {
    model->model.set_host_link(device, {latency_s, bytes_per_s});
    return ML_OK;
  });
}

ml_status ml_cost_model_set_direct(ml_cost_model* model, uint32_t src, uint32_t dst, double latency_s,
                                       double bytes_per_s) {
  if (model == nullptr || src >= kMaxLocations || dst >= kMaxLocations || src == dst || !(bytes_per_s > 0) ||
      !(latency_s >= 0))
    return fail(ML_ERROR_INVALID_ARGUMENT, "cost model: bad direct link");
  return guarded([&] {
    model->model.set_direct(src, dst, {latency_s, bytes_per_s});
    return ML_OK;
  });
}

ml_status ml_plan_create(ml_plan** out) {
  if (out == nullptr) return fail(ML_ERROR_INVALID_ARGUMENT, "plan: null out");
  return guarded([&] {
    *out = std::make_unique<ml_plan>().release();  // owned by the caller until ml_plan_destroy
    return ML_OK;
  });
}

void ml_plan_destroy(ml_plan* plan) { std::unique_ptr<ml_plan> owned(plan); }

size_t ml_plan_copy_count(const ml_plan* plan) { return plan == nullptr ? 0 : plan->plan.copies.size(); }

ml_copy ml_plan_copy(const ml_plan* plan, size_t i) {
  if (plan == nullptr || i >= plan->plan.copies.size()) return ml_copy{0, 0, 0, 0, -1, nullptr, 0, 0};
  const Copy& c = plan->plan.copies[i];
  return ml_copy{c.src, c.dst, c.offset, c.size, c.after, c.wait.data(), c.wait.size(), c.also.bits()};
}

size_t ml_plan_wait_count(const ml_plan* plan) { return plan == nullptr ? 0 : plan->plan.wait.size(); }
const ml_event* ml_plan_waits(const ml_plan* plan) { return plan == nullptr ? nullptr : plan->plan.wait.data(); }

ml_status ml_versions_create(uint64_t size, uint64_t valid_mask, const ml_event_ops* ops, ml_versions** out) {
  if (out == nullptr || size == 0 || valid_mask == 0)
    return fail(ML_ERROR_INVALID_ARGUMENT, "versions: need out, a size > 0 and a non-empty valid mask");
  LocationSet valid;
  for (Location l = 0; l < kMaxLocations; ++l)
    if ((valid_mask >> l) & 1u) valid.insert(l);
  const ml_event_ops c_ops = ops != nullptr ? *ops : ml_event_ops{nullptr, nullptr, nullptr, nullptr};
  return guarded([&] {
    *out = std::make_unique<ml_versions>(size, valid, c_ops).release();  // until ml_versions_destroy
    return ML_OK;
  });
}

void ml_versions_destroy(ml_versions* versions) { std::unique_ptr<ml_versions> owned(versions); }

ml_status ml_versions_plan(ml_versions* versions, const ml_use* uses, size_t use_count, uint32_t at,
                               const ml_cost_model* cost, ml_plan* plan) {
  if (versions == nullptr || cost == nullptr || plan == nullptr)
    return fail(ML_ERROR_INVALID_ARGUMENT, "plan: null argument");
  if (ml_status s = check_location(at); s != ML_OK) return s;
  std::vector<Use>& u = plan->uses;
  if (ml_status s = to_uses(uses, use_count, versions->versions.size(), u); s != ML_OK) return s;
  return guarded([&] {
    versions->versions.plan(u, at, cost->model, plan->plan);
    return ML_OK;
  });
}

ml_status ml_versions_commit(ml_versions* versions, const ml_plan* plan, const ml_event* copy_events,
                                 size_t copy_event_count, const ml_use* uses, size_t use_count, uint32_t at,
                                 ml_event command) {
  if (versions == nullptr || plan == nullptr || (copy_event_count > 0 && copy_events == nullptr))
    return fail(ML_ERROR_INVALID_ARGUMENT, "commit: null argument");
  if (copy_event_count != plan->plan.copies.size())
    return fail(ML_ERROR_MISMATCH, "commit: " + std::to_string(copy_event_count) + " copy events for " +
                                     std::to_string(plan->plan.copies.size()) + " planned copies");
  if (ml_status s = check_location(at); s != ML_OK) return s;
  std::vector<Use>& u = plan->uses;
  if (ml_status s = to_uses(uses, use_count, versions->versions.size(), u); s != ML_OK) return s;
  return guarded([&] {
    versions->versions.commit(plan->plan, std::span<const Event>(copy_events, copy_event_count), u, at, command);
    return ML_OK;
  });
}

ml_status ml_versions_plan_evict(ml_versions* versions, uint32_t at, const ml_cost_model* cost,
                                     ml_plan* plan) {
  if (versions == nullptr || cost == nullptr || plan == nullptr || at == kHost)
    return fail(ML_ERROR_INVALID_ARGUMENT, "plan evict: null argument, or the host location");
  if (ml_status s = check_location(at); s != ML_OK) return s;
  return guarded([&] {
    versions->versions.plan_evict(at, cost->model, plan->plan);
    return ML_OK;
  });
}

ml_status ml_versions_commit_evict(ml_versions* versions, const ml_plan* plan, const ml_event* copy_events,
                                       size_t copy_event_count, uint32_t at) {
  if (versions == nullptr || plan == nullptr || (copy_event_count > 0 && copy_events == nullptr) || at == kHost)
    return fail(ML_ERROR_INVALID_ARGUMENT, "commit evict: null argument, or the host location");
  if (copy_event_count != plan->plan.copies.size())
    return fail(ML_ERROR_MISMATCH, "commit evict: copy events do not match the planned copies");
  if (ml_status s = check_location(at); s != ML_OK) return s;
  return guarded([&] {
    versions->versions.commit_evict(plan->plan, std::span<const Event>(copy_events, copy_event_count), at);
    return ML_OK;
  });
}

int ml_versions_valid_at(const ml_versions* versions, uint32_t at, uint64_t offset, uint64_t size) {
  if (versions == nullptr || at >= kMaxLocations || size == 0) return 0;
  const std::uint64_t n = versions->versions.size();
  if (offset > n || size > n - offset) return 0;
  return versions->versions.valid_at(at, offset, size) ? 1 : 0;
}

uint64_t ml_versions_bytes_only_at(const ml_versions* versions, uint32_t at) {
  return versions == nullptr || at >= kMaxLocations ? 0 : versions->versions.bytes_only_at(at);
}

size_t ml_versions_span_count(const ml_versions* versions) {
  return versions == nullptr ? 0 : versions->versions.span_count();
}

uint64_t ml_versions_bytes_lost(const ml_versions* versions) {
  return versions == nullptr ? 0 : versions->versions.bytes_lost();
}

}  // extern "C"

// The migration planner's C API: the same planner behind checked arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "memlayer/migration.h"

extern "C" int migration_c_smoke(void);

namespace {

// A C runtime's events as ml_event_ops sees them: the references the
// planner holds on each, and each one's status (absent: ML_EVENT_RUNNING).
struct EventTable {
  std::map<ml_event, int> refs;
  std::map<ml_event, int> status;
  ml_event_ops ops() {
    return {this, [](void* c, ml_event e) { ++static_cast<EventTable*>(c)->refs[e]; },
            [](void* c, ml_event e) { --static_cast<EventTable*>(c)->refs[e]; },
            [](void* c, ml_event e) {
              auto& s = static_cast<EventTable*>(c)->status;
              auto it = s.find(e);
              return it == s.end() ? int{ML_EVENT_RUNNING} : it->second;
            }};
  }
};

// One 4096-byte buffer's versions, valid at the host, planned with a
// default cost model and the events of an EventTable.
struct OneBuffer {
  EventTable events;
  ml_cost_model* cost = nullptr;
  ml_plan* plan = nullptr;
  ml_versions* v = nullptr;
  bool made = false;
  OneBuffer() {
    const ml_event_ops ops = events.ops();  // copied by ml_versions_create
    made = ml_cost_model_create(1e-5, 1e9, &cost) == ML_OK && ml_plan_create(&plan) == ML_OK &&
           ml_versions_create(4096, 1, &ops, &v) == ML_OK;
  }
  OneBuffer(const OneBuffer&) = delete;
  OneBuffer& operator=(const OneBuffer&) = delete;
  ~OneBuffer() {
    ml_versions_destroy(v);
    ml_plan_destroy(plan);
    ml_cost_model_destroy(cost);
  }
  // Destroys the versions: every reference they took is given back.
  void expect_balanced_references() {
    ml_versions_destroy(v);
    v = nullptr;
    for (auto& [e, n] : events.refs) EXPECT_EQ(n, 0) << e;
  }
};

}  // namespace

TEST(MigrationCApi, UsableFromC) { EXPECT_EQ(migration_c_smoke(), 0); }

TEST(MigrationCApi, BadArgumentsGetStatusesAndMessages) {
  ml_cost_model* cost = nullptr;
  ml_plan* plan = nullptr;
  ml_versions* v = nullptr;
  EXPECT_EQ(ml_cost_model_create(1e-5, 0, &cost), ML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(ml_cost_model_create(1e-5, 1e9, &cost), ML_OK);
  ASSERT_EQ(ml_plan_create(&plan), ML_OK);
  EXPECT_EQ(ml_versions_create(0, 1, nullptr, &v), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_versions_create(64, 0, nullptr, &v), ML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(ml_versions_create(64, 1, nullptr, &v), ML_OK);
  ml_use beyond{60, 8, ML_ACCESS_READ};
  EXPECT_EQ(ml_versions_plan(v, &beyond, 1, 1, cost, plan), ML_ERROR_OUT_OF_RANGE);
  EXPECT_NE(std::string(ml_last_error_message()).find("beyond"), std::string::npos);
  ml_use zero{0, 0, ML_ACCESS_READ};
  EXPECT_EQ(ml_versions_plan(v, &zero, 1, 1, cost, plan), ML_ERROR_INVALID_ARGUMENT);
  ml_use ok{0, 64, ML_ACCESS_READ};
  EXPECT_EQ(ml_versions_plan(v, &ok, 1, 64, cost, plan), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_versions_plan(v, nullptr, 0, 1, cost, plan), ML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(ml_versions_plan(v, &ok, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_plan_copy_count(plan), 1u);
  EXPECT_EQ(ml_versions_commit(v, plan, nullptr, 0, &ok, 1, 1, nullptr), ML_ERROR_MISMATCH);
  EXPECT_EQ(ml_versions_plan_evict(v, 0, cost, plan), ML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ml_plan_copy(plan, 99).size, 0u);
  EXPECT_EQ(ml_versions_valid_at(v, 0, 60, 8), 0);
  EXPECT_EQ(ml_versions_valid_at(v, 0, 0, 64), 1);
  ml_versions_destroy(v);
  ml_versions_destroy(nullptr);
  ml_plan_destroy(plan);
  ml_cost_model_destroy(cost);
}

// Each refused call names its problem in ml_last_error_message().
TEST(MigrationCApi, EachBadArgumentIsNamed) {
  auto says = [](ml_status got, ml_status want, const char* words) {
    EXPECT_EQ(got, want) << ml_status_name(got);
    const std::string message = ml_last_error_message();
    EXPECT_NE(message.find(words), std::string::npos) << message;
  };
  ml_cost_model* cost = nullptr;
  ml_plan* plan = nullptr;
  ml_versions* v = nullptr;
  says(ml_cost_model_create(-1, 1e9, &cost), ML_ERROR_INVALID_ARGUMENT, "latency >= 0 and bandwidth > 0");
  says(ml_cost_model_create(1e-5, 1e9, nullptr), ML_ERROR_INVALID_ARGUMENT, "need out");
  ASSERT_EQ(ml_cost_model_create(1e-5, 1e9, &cost), ML_OK);
  says(ml_cost_model_set_host_link(cost, 0, 1e-6, 1e9), ML_ERROR_INVALID_ARGUMENT, "bad host link");  // 0 is the host
  says(ml_cost_model_set_host_link(cost, 64, 1e-6, 1e9), ML_ERROR_INVALID_ARGUMENT, "bad host link");
  says(ml_cost_model_set_host_link(cost, 1, 1e-6, 0), ML_ERROR_INVALID_ARGUMENT, "bad host link");
  EXPECT_EQ(ml_cost_model_set_host_link(cost, 1, 1e-6, 2e9), ML_OK);
  says(ml_cost_model_set_direct(cost, 1, 1, 1e-6, 1e9), ML_ERROR_INVALID_ARGUMENT, "bad direct link");
  says(ml_cost_model_set_direct(cost, 1, 64, 1e-6, 1e9), ML_ERROR_INVALID_ARGUMENT, "bad direct link");
  says(ml_cost_model_set_direct(nullptr, 1, 2, 1e-6, 1e9), ML_ERROR_INVALID_ARGUMENT, "bad direct link");
  says(ml_plan_create(nullptr), ML_ERROR_INVALID_ARGUMENT, "null out");
  ASSERT_EQ(ml_plan_create(&plan), ML_OK);
  says(ml_versions_create(64, 1, nullptr, nullptr), ML_ERROR_INVALID_ARGUMENT, "need out");
  ASSERT_EQ(ml_versions_create(64, 1, nullptr, &v), ML_OK);
  ml_use unknown{0, 8, ML_ACCESS_READ};
  const int not_an_access = 99;  // what a C caller can pass
  static_assert(sizeof unknown.access == sizeof not_an_access);
  std::memcpy(&unknown.access, &not_an_access, sizeof not_an_access);
  says(ml_versions_plan(v, &unknown, 1, 1, cost, plan), ML_ERROR_INVALID_ARGUMENT, "use 0 has an unknown access");
  ml_use ok{0, 64, ML_ACCESS_READ}, zero{0, 0, ML_ACCESS_READ};
  ml_use two[] = {ok, zero};
  says(ml_versions_plan(v, two, 2, 1, cost, plan), ML_ERROR_INVALID_ARGUMENT, "use 1 has size 0");
  says(ml_versions_plan(v, &ok, 1, 64, cost, plan), ML_ERROR_INVALID_ARGUMENT, "location 64 >= 64");
  says(ml_versions_plan(v, &ok, 1, 1, nullptr, plan), ML_ERROR_INVALID_ARGUMENT, "null argument");
  ASSERT_EQ(ml_versions_plan(v, &ok, 1, 1, cost, plan), ML_OK);
  says(ml_versions_commit(v, plan, nullptr, 0, &ok, 1, 1, nullptr), ML_ERROR_MISMATCH, "0 copy events for 1 planned copies");
  says(ml_versions_plan_evict(v, 0, cost, plan), ML_ERROR_INVALID_ARGUMENT, "the host location");
  says(ml_versions_commit_evict(v, plan, nullptr, 0, 0), ML_ERROR_INVALID_ARGUMENT, "the host location");
  ml_versions_destroy(v);
  ml_plan_destroy(plan);
  ml_cost_model_destroy(cost);
}

TEST(MigrationCApi, EventReferencesAreBalanced) {
  std::map<ml_event, int> refs;
  ml_event_ops ops{&refs, [](void* c, ml_event e) { ++(*static_cast<std::map<ml_event, int>*>(c))[e]; },
                   [](void* c, ml_event e) { --(*static_cast<std::map<ml_event, int>*>(c))[e]; },
                   [](void*, ml_event) { return 0; }};
  ml_cost_model* cost = nullptr;
  ml_plan* plan = nullptr;
  ml_versions* v = nullptr;
  ASSERT_EQ(ml_cost_model_create(1e-5, 1e9, &cost), ML_OK);
  ASSERT_EQ(ml_cost_model_set_direct(cost, 1, 2, 1e-6, 1e10), ML_OK);
  ASSERT_EQ(ml_plan_create(&plan), ML_OK);
  ASSERT_EQ(ml_versions_create(4096, 1, &ops, &v), ML_OK);
  ml_use w{0, 4096, ML_ACCESS_OVERWRITE}, r{0, 4096, ML_ACCESS_READ};
  ASSERT_EQ(ml_versions_plan(v, &w, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_versions_commit(v, plan, nullptr, 0, &w, 1, 1, reinterpret_cast<ml_event>(16)), ML_OK);
  ASSERT_EQ(ml_versions_plan(v, &r, 1, 2, cost, plan), ML_OK);
  ASSERT_EQ(ml_plan_copy_count(plan), 1u);
  EXPECT_EQ(ml_plan_copy(plan, 0).src, 1u) << "the direct link";
  ml_event copy = reinterpret_cast<ml_event>(32);
  ASSERT_EQ(ml_versions_commit(v, plan, &copy, 1, &r, 1, 2, reinterpret_cast<ml_event>(48)), ML_OK);
  EXPECT_GT(refs[copy], 0);
  EXPECT_EQ(ml_versions_bytes_only_at(v, 1), 0u);
  ml_versions_destroy(v);
  for (auto& [e, n] : refs) EXPECT_EQ(n, 0) << e;
  ml_plan_destroy(plan);
  ml_cost_model_destroy(cost);
}

// A C runtime reports a failed writer through ml_event_ops.status: the
// planner goes back to the content before it, and counts what it lost.
TEST(MigrationCApi, AFailedWriterIsUndone) {
  OneBuffer b;
  ASSERT_TRUE(b.made);
  EventTable& st = b.events;
  ml_cost_model* cost = b.cost;
  ml_plan* plan = b.plan;
  ml_versions* v = b.v;
  ml_use w{0, 1024, ML_ACCESS_OVERWRITE}, r{0, 4096, ML_ACCESS_READ};
  ml_event writer = reinterpret_cast<ml_event>(16), failed_half_way = reinterpret_cast<ml_event>(32);
  ASSERT_EQ(ml_versions_plan(v, &w, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_versions_commit(v, plan, nullptr, 0, &w, 1, 1, writer), ML_OK);
  st.status[writer] = ML_EVENT_CANCELLED;
  ASSERT_EQ(ml_versions_plan(v, &r, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_plan_copy_count(plan), 1u);
  EXPECT_EQ(ml_plan_copy(plan, 0).size, 4096u) << "all of it from the host: the cancelled write made nothing valid";
  EXPECT_EQ(ml_plan_wait_count(plan), 0u);

  // Written on device 1 only, then a writer there fails half-way: lost.
  ASSERT_EQ(ml_versions_plan(v, &w, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_versions_commit(v, plan, nullptr, 0, &w, 1, 1, reinterpret_cast<ml_event>(48)), ML_OK);
  st.status[reinterpret_cast<ml_event>(48)] = ML_EVENT_COMPLETE;
  ml_use rw{0, 1024, ML_ACCESS_READ_WRITE};
  ASSERT_EQ(ml_versions_plan(v, &rw, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_versions_commit(v, plan, nullptr, 0, &rw, 1, 1, failed_half_way), ML_OK);
  st.status[failed_half_way] = ML_EVENT_FAILED;
  ASSERT_EQ(ml_versions_plan(v, &r, 1, 2, cost, plan), ML_OK);
  EXPECT_EQ(ml_versions_bytes_lost(v), 1024u);
  EXPECT_EQ(ml_versions_bytes_lost(nullptr), 0u);
  b.expect_balanced_references();
}

// An eviction is committed with the plan ml_versions_plan_evict made for it;
// another plan (here one that writes nothing back, made before a write)
// would leave the bytes only the evicted location holds valid nowhere: the
// call fails, names why, and changes nothing.
TEST(MigrationCApi, AnEvictionWhosePlanWouldDropTheOnlyCopyIsRefused) {
  std::map<ml_event, int> refs;
  ml_event_ops ops{&refs, [](void* c, ml_event e) { ++(*static_cast<std::map<ml_event, int>*>(c))[e]; },
                   [](void* c, ml_event e) { --(*static_cast<std::map<ml_event, int>*>(c))[e]; },
                   [](void*, ml_event) { return int{ML_EVENT_COMPLETE}; }};
  ml_cost_model* cost = nullptr;
  ml_plan *stale = nullptr, *plan = nullptr;
  ml_versions* v = nullptr;
  ASSERT_EQ(ml_cost_model_create(1e-5, 1e9, &cost), ML_OK);
  ASSERT_EQ(ml_plan_create(&stale), ML_OK);
  ASSERT_EQ(ml_plan_create(&plan), ML_OK);
  ASSERT_EQ(ml_versions_create(4096, 1, &ops, &v), ML_OK);
  ASSERT_EQ(ml_versions_plan_evict(v, 1, cost, stale), ML_OK);  // nothing at 1 yet: nothing to write back
  EXPECT_EQ(ml_plan_copy_count(stale), 0u);
  ml_use w{1024, 2048, ML_ACCESS_OVERWRITE};
  ASSERT_EQ(ml_versions_plan(v, &w, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_versions_commit(v, plan, nullptr, 0, &w, 1, 1, reinterpret_cast<ml_event>(16)), ML_OK);
  ASSERT_EQ(ml_versions_bytes_only_at(v, 1), 2048u);
  const std::size_t spans = ml_versions_span_count(v);

  EXPECT_EQ(ml_versions_commit_evict(v, stale, nullptr, 0, 1), ML_ERROR_INVALID_ARGUMENT);
  const std::string why = ml_last_error_message();
  EXPECT_NE(why.find("only copy of bytes [1024, 3072)"), std::string::npos) << why;
  EXPECT_EQ(ml_versions_bytes_only_at(v, 1), 2048u) << "nothing changed";
  EXPECT_EQ(ml_versions_valid_at(v, 1, 1024, 2048), 1);
  EXPECT_EQ(ml_versions_span_count(v), spans);

  // Its own plan: written back, then gone from location 1.
  ASSERT_EQ(ml_versions_plan_evict(v, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_plan_copy_count(plan), 1u);
  EXPECT_EQ(ml_plan_copy(plan, 0).offset, 1024u);
  EXPECT_EQ(ml_plan_copy(plan, 0).size, 2048u);
  ml_event write_back = reinterpret_cast<ml_event>(32);
  EXPECT_EQ(ml_versions_commit_evict(v, plan, &write_back, 1, 1), ML_OK);
  EXPECT_EQ(ml_versions_bytes_only_at(v, 1), 0u);
  EXPECT_EQ(ml_versions_valid_at(v, 1, 0, 1), 0);
  EXPECT_EQ(ml_versions_valid_at(v, 0, 0, 4096), 1);
  ml_versions_destroy(v);
  for (auto& [e, n] : refs) EXPECT_EQ(n, 0) << e;
  ml_plan_destroy(stale);
  ml_plan_destroy(plan);
  ml_cost_model_destroy(cost);
}

// Bytes still being imported to the host when their device is evicted: the
// plan writes nothing back beside the import (it would write host bytes a
// reader there may be reading) and its storage waits for the import.
TEST(MigrationCApi, AnEvictionLeavesBytesStillBeingImportedToTheImport) {
  OneBuffer b;
  ASSERT_TRUE(b.made);
  ml_cost_model* cost = b.cost;
  ml_plan* plan = b.plan;
  ml_versions* v = b.v;
  const ml_event writer = reinterpret_cast<ml_event>(16), import = reinterpret_cast<ml_event>(48);
  ml_use write{0, 4096, ML_ACCESS_OVERWRITE};
  ASSERT_EQ(ml_versions_plan(v, &write, 1, 1, cost, plan), ML_OK);
  ASSERT_EQ(ml_versions_commit(v, plan, nullptr, 0, &write, 1, 1, writer), ML_OK);
  b.events.status[writer] = ML_EVENT_COMPLETE;
  ml_use read{0, 4096, ML_ACCESS_READ};  // at the host: imported by copy `import`, still running
  ASSERT_EQ(ml_versions_plan(v, &read, 1, 0, cost, plan), ML_OK);
  ASSERT_EQ(ml_plan_copy_count(plan), 1u);
  ASSERT_EQ(ml_versions_commit(v, plan, &import, 1, &read, 1, 0, reinterpret_cast<ml_event>(64)), ML_OK);

  ASSERT_EQ(ml_versions_plan_evict(v, 1, cost, plan), ML_OK);
  EXPECT_EQ(ml_plan_copy_count(plan), 0u);
  const ml_event* waits = ml_plan_waits(plan);
  EXPECT_NE(std::find(waits, waits + ml_plan_wait_count(plan), import), waits + ml_plan_wait_count(plan));
  EXPECT_EQ(ml_versions_commit_evict(v, plan, nullptr, 0, 1), ML_OK);
  EXPECT_EQ(ml_versions_valid_at(v, 1, 0, 1), 0);
  EXPECT_EQ(ml_versions_valid_at(v, 0, 0, 4096), 1);
  EXPECT_EQ(ml_versions_bytes_lost(v), 0u);
  b.expect_balanced_references();
}

/* The migration C API compiled as C: what PoCL's core would write. Returns 0
 * when a disjoint-sub-buffer scenario plans what it should. */
#include <memlayer/migration.h>

int migration_c_smoke(void) {
  ml_cost_model* cost = NULL;
  ml_plan* plan = NULL;
  ml_versions* v = NULL;
  ml_event_ops ops = {NULL, NULL, NULL, NULL};
  int result = 0;
  if (ml_cost_model_create(1e-5, 1e10, &cost) != ML_OK) return 1;
  if (ml_plan_create(&plan) != ML_OK) return 2;
  if (ml_versions_create(2048, 1u, &ops, &v) != ML_OK) return 3;

  /* Two disjoint sub-buffers overwritten on devices 1 and 2. */
  ml_use lo = {0, 1024, ML_ACCESS_OVERWRITE}, hi = {1024, 1024, ML_ACCESS_OVERWRITE};
  ml_event e1 = (ml_event)0x100, e2 = (ml_event)0x200, e3 = (ml_event)0x300;
  if (ml_versions_plan(v, &lo, 1, 1, cost, plan) != ML_OK || ml_plan_copy_count(plan) != 0) result = 4;
  if (!result && ml_versions_commit(v, plan, NULL, 0, &lo, 1, 1, e1) != ML_OK) result = 5;
  if (!result && ml_versions_plan(v, &hi, 1, 2, cost, plan) != ML_OK) result = 6;
  if (!result && ml_versions_commit(v, plan, NULL, 0, &hi, 1, 2, e2) != ML_OK) result = 7;
  /* Reading the parent on device 1 stages only [1024, 2048) through the host. */
  ml_use all = {0, 2048, ML_ACCESS_READ};
  if (!result && ml_versions_plan(v, &all, 1, 1, cost, plan) != ML_OK) result = 8;
  if (!result && ml_plan_copy_count(plan) != 2) result = 9;
  if (!result) {
    ml_copy up = ml_plan_copy(plan, 0), down = ml_plan_copy(plan, 1);
    if (up.src != 2 || up.dst != 0 || up.offset != 1024 || up.size != 1024 || down.after != 0) result = 10;
  }
  if (!result) {
    ml_event copies[2] = {(ml_event)0x400, (ml_event)0x500};
    if (ml_versions_commit(v, plan, copies, 2, &all, 1, 1, e3) != ML_OK) result = 11;
  }
  if (!result && !ml_versions_valid_at(v, 1, 0, 2048)) result = 12;
  ml_versions_destroy(v);
  ml_plan_destroy(plan);
  ml_cost_model_destroy(cost);
  return result;
}

/* A C user of the installed memlayer: the C API is all it sees. */
#include <memlayer/bufalloc.h>
#include <stdio.h>

int main(void) {
  ml_region* region = NULL;
  uint64_t address = 0;
  if (ml_region_create(0, 1u << 20, 64, ML_REGION_THREAD_SAFE, &region) != ML_OK) return 1;
  if (ml_region_alloc(region, 1000, 256, &address) != ML_OK || address % 256 != 0) return 2;
  if (ml_region_free(region, address) != ML_OK) return 3;
  if (ml_region_free(region, address) != ML_ERROR_DOUBLE_FREE) return 4;
  printf("installed memlayer works: %s\n", ml_last_error_message());
  ml_region_destroy(region);
  return 0;
}

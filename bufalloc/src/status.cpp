#include <string>
#include <utility>

#include "memlayer/c_status.hpp"

namespace {

thread_local std::string last_message;

}  // namespace

namespace memlayer::c_api {

ml_status fail(ml_status status, std::string message) {
  last_message = std::move(message);
  return status;
}

}  // namespace memlayer::c_api

extern "C" {

const char* ml_status_name(ml_status status) {
  switch (status) {
    case ML_OK: return "ML_OK";
    case ML_ERROR_ZERO_SIZE: return "ML_ERROR_ZERO_SIZE";
    case ML_ERROR_SIZE_OVERFLOW: return "ML_ERROR_SIZE_OVERFLOW";
    case ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO: return "ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO";
    case ML_ERROR_ALIGNMENT_OVERFLOW: return "ML_ERROR_ALIGNMENT_OVERFLOW";
    case ML_ERROR_OUT_OF_MEMORY: return "ML_ERROR_OUT_OF_MEMORY";
    case ML_ERROR_ADDRESS_OUTSIDE_REGION: return "ML_ERROR_ADDRESS_OUTSIDE_REGION";
    case ML_ERROR_NOT_BLOCK_START: return "ML_ERROR_NOT_BLOCK_START";
    case ML_ERROR_DOUBLE_FREE: return "ML_ERROR_DOUBLE_FREE";
    case ML_ERROR_REGION_EMPTY: return "ML_ERROR_REGION_EMPTY";
    case ML_ERROR_REGION_WRAPS: return "ML_ERROR_REGION_WRAPS";
    case ML_ERROR_GRANULARITY_NOT_POWER_OF_TWO: return "ML_ERROR_GRANULARITY_NOT_POWER_OF_TWO";
    case ML_ERROR_MISALIGNED_BASE: return "ML_ERROR_MISALIGNED_BASE";
    case ML_ERROR_STALE_MARK: return "ML_ERROR_STALE_MARK";
    case ML_ERROR_INVARIANT_VIOLATION: return "ML_ERROR_INVARIANT_VIOLATION";
    case ML_ERROR_INVALID_ARGUMENT: return "ML_ERROR_INVALID_ARGUMENT";
    case ML_ERROR_HOST_OUT_OF_MEMORY: return "ML_ERROR_HOST_OUT_OF_MEMORY";
    case ML_ERROR_OUT_OF_RANGE: return "ML_ERROR_OUT_OF_RANGE";
    case ML_ERROR_NO_PATH: return "ML_ERROR_NO_PATH";
    case ML_ERROR_MISMATCH: return "ML_ERROR_MISMATCH";
    case ML_ERROR_STALE_HANDLE: return "ML_ERROR_STALE_HANDLE";
    case ML_ERROR_FOREIGN_HANDLE: return "ML_ERROR_FOREIGN_HANDLE";
    case ML_ERROR_NO_HOLE: return "ML_ERROR_NO_HOLE";
  }
  return "ML_UNKNOWN_STATUS";
}

const char* ml_last_error_message(void) { return last_message.c_str(); }

}  // extern "C"

// memlayer/c_status.hpp — for the implementations of memlayer's C APIs
// (bufalloc/src/c_api.cpp, migration/src/c_api.cpp): records the message
// ml_last_error_message() returns (memlayer/status.h).
#pragma once

#include <string>

#include "memlayer/status.h"

namespace memlayer::c_api {

/// Records `message` as the calling thread's last error and returns `status`.
/// May throw std::bad_alloc (callers turn it into ML_ERROR_HOST_OUT_OF_MEMORY).
ml_status fail(ml_status status, std::string message);

}  // namespace memlayer::c_api

// A buffer released after main returns, once libpocl's static destructors
// have run: what happens when PoCL's worker threads finish a program's last
// commands (and release their buffers) while exit() is tearing the process
// down. memlayer's migration engine inside PoCL keeps a registry of buffers;
// releasing one must still work then. ctest runs this under valgrind, which
// fails the run on any read of freed memory; it exits non-zero itself when
// a call fails.
//
// The atexit handler is registered before the first OpenCL call loads
// libpocl, so it runs after libpocl's static destructors (exit runs
// handlers in the reverse order of their registration).
#include <cstdlib>

#include "cl_check.hpp"

using namespace memlayer::cltest;

namespace {

cl_mem g_left_over = nullptr;

void release_left_over() {
  if (g_left_over == nullptr) return;
  cl_int err = clReleaseMemObject(g_left_over);
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "clReleaseMemObject at exit: OpenCL error %d\n", err);
    std::_Exit(1);
  }
  std::printf("released at exit\n");
}

}  // namespace

int main() {
  std::atexit(release_left_over);
  std::vector<cl_device_id> devices = all_devices();
  if (devices.empty()) {
    std::fprintf(stderr, "no OpenCL devices\n");
    return 2;
  }
  cl_int err = CL_SUCCESS;
  cl_context ctx = clCreateContext(nullptr, 1, devices.data(), nullptr, nullptr, &err);
  check(err, "clCreateContext");
  cl_command_queue queue = clCreateCommandQueueWithProperties(ctx, devices[0], nullptr, &err);
  check(err, "clCreateCommandQueueWithProperties");
  // A write makes the buffer known to the migration engine (its versions
  // and its place in the registry).
  const unsigned data[256] = {1, 2, 3};
  g_left_over = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof data, nullptr, &err);
  check(err, "clCreateBuffer");
  CL_CHECK(clEnqueueWriteBuffer(queue, g_left_over, CL_TRUE, 0, sizeof data, data, 0, nullptr, nullptr));
  CL_CHECK(clFinish(queue));
  // The queue and the context stay alive, as a program's often do at exit.
  return 0;
}

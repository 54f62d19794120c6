// Small helpers for memlayer's OpenCL test programs: a checked call that
// names the failing function and its error code, and RAII for CL handles.
#pragma once

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace memlayer::cltest {

/// Aborts the program with the call and the code: a test program has no
/// way to go on after an unexpected OpenCL error.
inline void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS) {
    std::fprintf(stderr, "OpenCL error %d in %s\n", err, what);
    std::exit(2);
  }
}
#define CL_CHECK(call) ::memlayer::cltest::check((call), #call)

/// Owns one reference to a CL object.
template <class T, cl_int (*Release)(T)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T h) : h_(h) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : h_(o.h_) { o.h_ = nullptr; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = o.h_;
      o.h_ = nullptr;
    }
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (h_ != nullptr) Release(h_);
    h_ = nullptr;
  }
  [[nodiscard]] T get() const { return h_; }
  T* out() {
    reset();
    return &h_;
  }

 private:
  T h_ = nullptr;
};

using Context = Handle<cl_context, clReleaseContext>;
using Queue = Handle<cl_command_queue, clReleaseCommandQueue>;
using Mem = Handle<cl_mem, clReleaseMemObject>;
using Program = Handle<cl_program, clReleaseProgram>;
using Kernel = Handle<cl_kernel, clReleaseKernel>;
using Event = Handle<cl_event, clReleaseEvent>;

/// cl_khr_command_buffer's entry points, looked up through the ICD loader
/// for `platform` (any left null when the platform lacks it). Declared here,
/// not taken from the system's headers, which may declare another revision
/// or none. The recording calls' signatures depend on the revision the
/// device reports (CL_DEVICE_EXTENSIONS_WITH_VERSION): from 0.9.5 (PoCL
/// 7.1) they take a properties list after the queue, before (PoCL 3.1:
/// 0.9.0) they do not; `with_properties` says which, and the caller casts
/// `fill` or `copy` to the matching type below.
struct CommandBufferKhr {
  using Buffer = void*;         // cl_command_buffer_khr
  using Properties = cl_ulong;  // cl_command_buffer_properties_khr, cl_command_properties_khr
  using SyncPoint = cl_uint;    // cl_sync_point_khr
  using Fill = cl_int (*)(Buffer, cl_command_queue, cl_mem, const void*, std::size_t, std::size_t, std::size_t,
                          cl_uint, const SyncPoint*, SyncPoint*, void*);
  using FillWithProperties = cl_int (*)(Buffer, cl_command_queue, const Properties*, cl_mem, const void*,
                                        std::size_t, std::size_t, std::size_t, cl_uint, const SyncPoint*,
                                        SyncPoint*, void*);
  using CopyWithProperties = cl_int (*)(Buffer, cl_command_queue, const Properties*, cl_mem, cl_mem, std::size_t,
                                        std::size_t, std::size_t, cl_uint, const SyncPoint*, SyncPoint*, void*);

  Buffer (*create)(cl_uint, const cl_command_queue*, const Properties*, cl_int*) = nullptr;
  void* fill = nullptr;  // clCommandFillBufferKHR: Fill or FillWithProperties
  void* copy = nullptr;  // clCommandCopyBufferKHR
  cl_int (*finalize)(Buffer) = nullptr;
  cl_int (*enqueue)(cl_uint, cl_command_queue*, Buffer, cl_uint, const cl_event*, cl_event*) = nullptr;
  cl_int (*get_info)(Buffer, cl_uint, std::size_t, void*, std::size_t*) = nullptr;
  cl_int (*release)(Buffer) = nullptr;
  bool with_properties = false;

  /// `device`'s platform's entry points and `device`'s revision; nullopt
  /// when the device does not report the extension or an entry is missing.
  static std::optional<CommandBufferKhr> load(cl_device_id device) {
    cl_platform_id platform = nullptr;
    std::size_t n = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, nullptr) != CL_SUCCESS ||
        clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, 0, nullptr, &n) != CL_SUCCESS)
      return std::nullopt;
    std::vector<cl_name_version> extensions(n / sizeof(cl_name_version));
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, n, extensions.data(), nullptr) != CL_SUCCESS)
      return std::nullopt;
    auto it = std::find_if(extensions.begin(), extensions.end(),
                           [](const cl_name_version& e) { return std::string(e.name) == "cl_khr_command_buffer"; });
    if (it == extensions.end()) return std::nullopt;
    CommandBufferKhr api;
    api.with_properties = it->version >= CL_MAKE_VERSION(0, 9, 5);
    auto find = [&](auto& entry, const char* name) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(
          clGetExtensionFunctionAddressForPlatform(platform, name));
      return entry != nullptr;
    };
    if (!find(api.create, "clCreateCommandBufferKHR") || !find(api.fill, "clCommandFillBufferKHR") ||
        !find(api.copy, "clCommandCopyBufferKHR") || !find(api.finalize, "clFinalizeCommandBufferKHR") ||
        !find(api.enqueue, "clEnqueueCommandBufferKHR") || !find(api.get_info, "clGetCommandBufferInfoKHR") ||
        !find(api.release, "clReleaseCommandBufferKHR"))
      return std::nullopt;
    return api;
  }
};

/// Every device of the first platform that has any.
inline std::vector<cl_device_id> all_devices(cl_platform_id* platform_out = nullptr) {
  cl_uint np = 0;
  CL_CHECK(clGetPlatformIDs(0, nullptr, &np));
  std::vector<cl_platform_id> platforms(np);
  CL_CHECK(clGetPlatformIDs(np, platforms.data(), nullptr));
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> d(nd);
    CL_CHECK(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, d.data(), nullptr));
    if (platform_out != nullptr) *platform_out = p;
    return d;
  }
  return {};
}

inline Program build_program(cl_context ctx, const std::vector<cl_device_id>& devices, const char* source) {
  cl_int err = CL_SUCCESS;
  Program program(clCreateProgramWithSource(ctx, 1, &source, nullptr, &err));
  check(err, "clCreateProgramWithSource");
  err = clBuildProgram(program.get(), static_cast<cl_uint>(devices.size()), devices.data(), "", nullptr, nullptr);
  if (err != CL_SUCCESS) {
    std::size_t n = 0;
    clGetProgramBuildInfo(program.get(), devices[0], CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    clGetProgramBuildInfo(program.get(), devices[0], CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    std::fprintf(stderr, "build log:\n%s\n", log.c_str());
    check(err, "clBuildProgram");
  }
  return program;
}

/// Every device of the first platform in one context, `queues_per_device`
/// in-order queues for each (device d's are queues[d * queues_per_device ...]),
/// and `source` built for all of them: the set-up the OpenCL programs share.
struct DeviceSet {
  std::vector<cl_device_id> devices;
  Context ctx;
  std::vector<Queue> queues;
  Program program;
};

/// Exits like check() when a call fails or there is no OpenCL device.
inline DeviceSet open_device_set(const char* source, unsigned queues_per_device = 1) {
  DeviceSet s;
  s.devices = all_devices();
  if (s.devices.empty()) {
    std::fprintf(stderr, "no OpenCL devices\n");
    std::exit(2);
  }
  cl_int err = CL_SUCCESS;
  s.ctx = Context(clCreateContext(nullptr, static_cast<cl_uint>(s.devices.size()), s.devices.data(), nullptr,
                                  nullptr, &err));
  check(err, "clCreateContext");
  for (cl_device_id d : s.devices)
    for (unsigned q = 0; q < queues_per_device; ++q) {
      s.queues.emplace_back(clCreateCommandQueueWithProperties(s.ctx.get(), d, nullptr, &err));
      check(err, "clCreateCommandQueueWithProperties");
    }
  s.program = build_program(s.ctx.get(), s.devices, source);
  return s;
}

/// The PoCL build's migration counters (memlayer_pocl_get_migration_stats
/// in drivers/pocl/core/pocl_memlayer_migration.h), read from the libpocl
/// the ICD loader opened (OCL_ICD_VENDORS names it in the test environment).
struct MigrationStats {
  std::uint64_t d2h_commands, d2h_bytes;
  std::uint64_t h2d_commands, h2d_bytes;
  std::uint64_t d2d_commands, d2d_bytes;
  std::uint64_t evictions, eviction_bytes_written_back;
  std::uint64_t migrations_resourced, last_copy_retries;
  std::uint64_t enqueues, fast_path_enqueues;
  std::uint64_t link_nodes_recycled, link_nodes_allocated;
  [[nodiscard]] std::uint64_t bytes() const { return d2h_bytes + h2d_bytes + d2d_bytes; }
  /// The bytes a step moved, each counted once whatever its path: what left
  /// devices (device to device, or to the host) or what arrived on them
  /// (from a device, or from the host), whichever is more. A device-to-device
  /// move through the host (where no driver copies the range directly)
  /// reads N bytes and writes the same N: N, as a direct one.
  [[nodiscard]] std::uint64_t moved() const { return std::max(d2d_bytes + d2h_bytes, d2d_bytes + h2d_bytes); }
};

/// Reads (and with reset, zeroes) the counters; nullopt when libpocl has
/// none (a PoCL without memlayer's engine in its core: 7.1).
inline std::optional<MigrationStats> find_migration_stats(bool reset = false) {
  const char* lib = std::getenv("OCL_ICD_VENDORS");
  void* handle = lib != nullptr ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  using Fn = void (*)(MigrationStats*, int);
  auto fn = handle != nullptr ? reinterpret_cast<Fn>(dlsym(handle, "memlayer_pocl_get_migration_stats")) : nullptr;
  if (fn == nullptr) return std::nullopt;
  MigrationStats s{};
  fn(&s, reset ? 1 : 0);
  return s;
}

/// find_migration_stats(), aborting when libpocl has none.
inline MigrationStats migration_stats(bool reset = false) {
  const auto s = find_migration_stats(reset);
  if (!s) {
    const char* lib = std::getenv("OCL_ICD_VENDORS");
    std::fprintf(stderr, "no memlayer_pocl_get_migration_stats in %s\n", lib != nullptr ? lib : "(OCL_ICD_VENDORS unset)");
    std::exit(2);
  }
  return *s;
}

/// One server of the cluster a test runs as the client of
/// (drivers/pocl/pocl-cluster.sh run names its state folder in
/// POCL_CLUSTER_STATE): its PID and the first of its three ports.
struct ClusterServer {
  long pid = 0;
  long port = 0;
};

/// The cluster's servers, in device order (its `servers` file); empty when
/// the program does not run under pocl-cluster.sh.
inline std::vector<ClusterServer> cluster_servers() {
  const char* state = std::getenv("POCL_CLUSTER_STATE");
  std::vector<ClusterServer> servers;
  if (state == nullptr) return servers;
  std::ifstream in(std::string(state) + "/servers");
  long pid = 0, port = 0, devices = 0;
  while (in >> pid >> port >> devices) servers.push_back({pid, port});
  return servers;
}

/// Runs `f` with a watchdog: fails the test (and ends the program, which
/// cannot recover a thread stuck in OpenCL) when it takes over `seconds`.
template <class F>
auto bounded(const char* what, int seconds, F f) {
  auto done = std::async(std::launch::async, f);
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "HANG: %s did not return within %d s\n", what, seconds);
    std::_Exit(3);
  }
  return done.get();
}

}  // namespace memlayer::cltest

#include "memlayer/drivers/cuda_device.hpp"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

namespace memlayer::drivers {

using runtime::DeviceAddress;
using runtime::Status;
namespace cl = runtime::cl;

namespace {

constexpr int kDeviceNotFound = -1;  // CL_DEVICE_NOT_FOUND

// The CUDA driver API, resolved from libcuda at run time. The _v2 names are
// what cuda.h's macros map the plain names to; decltype takes the prototype
// from cuda.h through the same macros, so the two always agree.
struct CudaApi {
#define MEMLAYER_CUDA_FN(name) decltype(&::name) name = nullptr;
  MEMLAYER_CUDA_FN(cuInit)
  MEMLAYER_CUDA_FN(cuGetErrorString)
  MEMLAYER_CUDA_FN(cuDeviceGetCount)
  MEMLAYER_CUDA_FN(cuDeviceGet)
  MEMLAYER_CUDA_FN(cuDeviceGetName)
  MEMLAYER_CUDA_FN(cuDeviceGetAttribute)
  MEMLAYER_CUDA_FN(cuDeviceCanAccessPeer)
  MEMLAYER_CUDA_FN(cuDevicePrimaryCtxRetain)
  MEMLAYER_CUDA_FN(cuDevicePrimaryCtxRelease)
  MEMLAYER_CUDA_FN(cuCtxPushCurrent)
  MEMLAYER_CUDA_FN(cuCtxPopCurrent)
  MEMLAYER_CUDA_FN(cuCtxSetCurrent)
  MEMLAYER_CUDA_FN(cuCtxEnablePeerAccess)
  MEMLAYER_CUDA_FN(cuMemGetInfo)
  MEMLAYER_CUDA_FN(cuMemAlloc)
  MEMLAYER_CUDA_FN(cuMemFree)
  MEMLAYER_CUDA_FN(cuMemcpyHtoD)
  MEMLAYER_CUDA_FN(cuMemcpyDtoH)
  MEMLAYER_CUDA_FN(cuMemcpyDtoD)
  MEMLAYER_CUDA_FN(cuMemcpyPeer)
  MEMLAYER_CUDA_FN(cuMemsetD8)
  MEMLAYER_CUDA_FN(cuMemsetD16)
  MEMLAYER_CUDA_FN(cuMemsetD32)
#undef MEMLAYER_CUDA_FN
  std::string error;  // why loading failed; empty when every symbol resolved
};

#define MEMLAYER_STR2(x) #x
#define MEMLAYER_STR(x) MEMLAYER_STR2(x)

const CudaApi& cuda() {
  static const CudaApi api = [] {
    CudaApi a;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // kept open for the process's life
    if (lib == nullptr) {
      const char* why = dlerror();
      a.error = std::string("cannot load libcuda.so.1 (no NVIDIA driver?): ") + (why ? why : "unknown");
      return a;
    }
    auto resolve = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (fn == nullptr && a.error.empty()) a.error = std::string("libcuda.so.1 lacks ") + symbol;
    };
    // MEMLAYER_STR expands cuda.h's macro first: cuMemAlloc -> "cuMemAlloc_v2".
#define MEMLAYER_RESOLVE(name) resolve(a.name, MEMLAYER_STR(name));
    MEMLAYER_RESOLVE(cuInit)
    MEMLAYER_RESOLVE(cuGetErrorString)
    MEMLAYER_RESOLVE(cuDeviceGetCount)
    MEMLAYER_RESOLVE(cuDeviceGet)
    MEMLAYER_RESOLVE(cuDeviceGetName)
    MEMLAYER_RESOLVE(cuDeviceGetAttribute)
    MEMLAYER_RESOLVE(cuDeviceCanAccessPeer)
    MEMLAYER_RESOLVE(cuDevicePrimaryCtxRetain)
    MEMLAYER_RESOLVE(cuDevicePrimaryCtxRelease)
    MEMLAYER_RESOLVE(cuCtxPushCurrent)
    MEMLAYER_RESOLVE(cuCtxPopCurrent)
    MEMLAYER_RESOLVE(cuCtxSetCurrent)
    MEMLAYER_RESOLVE(cuCtxEnablePeerAccess)
    MEMLAYER_RESOLVE(cuMemGetInfo)
    MEMLAYER_RESOLVE(cuMemAlloc)
    MEMLAYER_RESOLVE(cuMemFree)
    MEMLAYER_RESOLVE(cuMemcpyHtoD)
    MEMLAYER_RESOLVE(cuMemcpyDtoH)
    MEMLAYER_RESOLVE(cuMemcpyDtoD)
    MEMLAYER_RESOLVE(cuMemcpyPeer)
    MEMLAYER_RESOLVE(cuMemsetD8)
    MEMLAYER_RESOLVE(cuMemsetD16)
    MEMLAYER_RESOLVE(cuMemsetD32)
#undef MEMLAYER_RESOLVE
    return a;
  }();
  return api;
}

std::string describe(CUresult r) {
  const char* text = nullptr;
  if (cuda().cuGetErrorString != nullptr) cuda().cuGetErrorString(r, &text);
  return text != nullptr ? std::string(text) + " (" + std::to_string(static_cast<int>(r)) + ")"
                         : "CUDA error " + std::to_string(static_cast<int>(r));
}

CUdeviceptr ptr(DeviceAddress a) { return static_cast<CUdeviceptr>(a); }

}  // namespace

struct CudaDevice::State {
  CUdevice device = 0;
  CUcontext context = nullptr;  // the primary context, retained
  std::vector<int> peers;       // ordinals this device can copy from directly
};

namespace {
// Makes a device's context current for one call, on any thread.
class ContextScope {
 public:
  explicit ContextScope(CUcontext c) : ok_(cuda().cuCtxPushCurrent(c) == CUDA_SUCCESS) {}
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (ok_) cuda().cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  bool ok_;
};
}  // namespace

Status CudaDevice::create(const CudaOptions& options, std::vector<std::unique_ptr<CudaDevice>>& out,
                          std::vector<int> ordinals) {
  if (options.worker_threads == 0) return Status::error(cl::kInvalidValue, "cuda: worker_threads must be > 0");
  if (!(options.memory_fraction > 0 && options.memory_fraction <= 1))
    return Status::error(cl::kInvalidValue, "cuda: memory_fraction must be in (0, 1]");
  const CudaApi& api = cuda();
  if (!api.error.empty()) return Status::error(kDeviceNotFound, "cuda: " + api.error);
  if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) return Status::error(kDeviceNotFound, "cuda: cuInit: " + describe(r));
  int count = 0;
  if (CUresult r = api.cuDeviceGetCount(&count); r != CUDA_SUCCESS)
    return Status::error(kDeviceNotFound, "cuda: cuDeviceGetCount: " + describe(r));
  if (count == 0) return Status::error(kDeviceNotFound, "cuda: no GPU");
  if (ordinals.empty())
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  for (int o : ordinals)
    if (o < 0 || o >= count)
      return Status::error(cl::kInvalidValue, "cuda: ordinal " + std::to_string(o) + " out of range (" +
                                                  std::to_string(count) + " GPUs)");

  std::vector<std::unique_ptr<CudaDevice>> made;
  for (int o : ordinals) {
    auto state = std::make_unique<State>();
    if (CUresult r = api.cuDeviceGet(&state->device, o); r != CUDA_SUCCESS)
      return Status::error(kDeviceNotFound, "cuda: cuDeviceGet(" + std::to_string(o) + "): " + describe(r));
    if (CUresult r = api.cuDevicePrimaryCtxRetain(&state->context, state->device); r != CUDA_SUCCESS)
      return Status::error(kDeviceNotFound, "cuda: cuDevicePrimaryCtxRetain(" + std::to_string(o) + "): " + describe(r));
    runtime::DeviceInfo info;
    char name[256] = {};
    api.cuDeviceGetName(name, sizeof name - 1, state->device);
    info.name = "cuda" + std::to_string(o) + " (" + name + ")";
    std::size_t free_bytes = 0, total_bytes = 0;
    {
      ContextScope scope(state->context);
      if (CUresult r = api.cuMemGetInfo(&free_bytes, &total_bytes); r != CUDA_SUCCESS)
        return Status::error(kDeviceNotFound, "cuda: cuMemGetInfo(" + std::to_string(o) + "): " + describe(r));
    }
    info.global_mem_size = static_cast<std::uint64_t>(static_cast<double>(free_bytes) * options.memory_fraction);
    info.base_alignment = 256;  // cuMemAlloc's alignment
    int sms = 1, shared = 48 << 10;
    api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, state->device);
    api.cuDeviceGetAttribute(&shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, state->device);
    info.compute_units = static_cast<unsigned>(std::max(sms, 1));
    info.local_mem_size = static_cast<std::uint64_t>(std::max(shared, 0));
    info.worker_threads = options.worker_threads;
    made.push_back(std::make_unique<CudaDevice>(Key{}, std::move(state), o, std::move(info)));
  }
  // Direct paths: where the hardware has one, enable it once, here.
  for (auto& dst : made) {
    for (auto& src : made) {
      if (dst == src) continue;
      int can = 0;
      if (api.cuDeviceCanAccessPeer(&can, dst->state_->device, src->state_->device) != CUDA_SUCCESS || !can) continue;
      ContextScope scope(dst->state_->context);
      const CUresult r = api.cuCtxEnablePeerAccess(src->state_->context, 0);
      if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) dst->state_->peers.push_back(src->ordinal_);
    }
  }
  for (auto& d : made) out.push_back(std::move(d));
  return {};
}

CudaDevice::CudaDevice(Key, std::unique_ptr<State> state, int ordinal, runtime::DeviceInfo info)
    : state_(std::move(state)), ordinal_(ordinal), info_(std::move(info)) {}

CudaDevice::~CudaDevice() {
  if (state_ && state_->context != nullptr) cuda().cuDevicePrimaryCtxRelease(state_->device);
}

Status CudaDevice::check(int result, const char* call) const {
  if (result == CUDA_SUCCESS) return {};
  const auto r = static_cast<CUresult>(result);
  const int code = r == CUDA_ERROR_OUT_OF_MEMORY ? cl::kMemObjectAllocationFailure : cl::kOutOfResources;
  return Status::error(code, info_.name + ": " + call + ": " + describe(r));
}

void CudaDevice::on_worker_start(unsigned) { cuda().cuCtxSetCurrent(state_->context); }

std::optional<DeviceAddress> CudaDevice::native_allocate(std::uint64_t size) {
  ContextScope scope(state_->context);
  CUdeviceptr p = 0;
  if (cuda().cuMemAlloc(&p, size) != CUDA_SUCCESS) return std::nullopt;
  return static_cast<DeviceAddress>(p);
}

void CudaDevice::native_release(DeviceAddress address, std::uint64_t) {
  ContextScope scope(state_->context);
  cuda().cuMemFree(ptr(address));
}

Status CudaDevice::write(DeviceAddress dst, const void* src, std::uint64_t size) {
  ContextScope scope(state_->context);
  return check(cuda().cuMemcpyHtoD(ptr(dst), src, size), "cuMemcpyHtoD");
}

Status CudaDevice::read(DeviceAddress src, void* dst, std::uint64_t size) {
  ContextScope scope(state_->context);
  return check(cuda().cuMemcpyDtoH(dst, ptr(src), size), "cuMemcpyDtoH");
}

Status CudaDevice::copy(DeviceAddress src, DeviceAddress dst, std::uint64_t size) {
  ContextScope scope(state_->context);
  if (src == dst || size == 0) return {};
  const bool overlap = src < dst + size && dst < src + size;
  if (!overlap) return check(cuda().cuMemcpyDtoD(ptr(dst), ptr(src), size), "cuMemcpyDtoD");
  // Pieces no longer than the distance never overlap; copying them in the
  // right order (forwards when moving down, backwards when moving up) reads
  // each source byte before it is overwritten.
  const std::uint64_t step = src > dst ? src - dst : dst - src;
  for (std::uint64_t done = 0; done < size;) {
    const std::uint64_t n = std::min(step, size - done);
    const std::uint64_t at = src > dst ? done : size - done - n;
    if (Status s = check(cuda().cuMemcpyDtoD(ptr(dst + at), ptr(src + at), n), "cuMemcpyDtoD"); !s.ok()) return s;
    done += n;
  }
  return {};
}

Status CudaDevice::fill(DeviceAddress dst, std::uint64_t size, std::span<const std::byte> pattern) {
  if (pattern.empty() || size % pattern.size() != 0)
    return Status::error(cl::kInvalidValue, info_.name + ": fill size " + std::to_string(size) +
                                                " is not a multiple of the pattern size " + std::to_string(pattern.size()));
  ContextScope scope(state_->context);
  const std::size_t n = pattern.size();
  if (n == 1) return check(cuda().cuMemsetD8(ptr(dst), static_cast<unsigned char>(pattern[0]), size), "cuMemsetD8");
  if (n == 2 && dst % 2 == 0) {
    std::uint16_t v;
    std::memcpy(&v, pattern.data(), 2);
    return check(cuda().cuMemsetD16(ptr(dst), v, size / 2), "cuMemsetD16");
  }
  if (n == 4 && dst % 4 == 0) {
    std::uint32_t v;
    std::memcpy(&v, pattern.data(), 4);
    return check(cuda().cuMemsetD32(ptr(dst), v, size / 4), "cuMemsetD32");
  }
  if (size == 0) return {};
  if (Status s = check(cuda().cuMemcpyHtoD(ptr(dst), pattern.data(), n), "cuMemcpyHtoD"); !s.ok()) return s;
  for (std::uint64_t filled = n; filled < size;) {  // doubling: log2(size / n) copies
    const std::uint64_t m = std::min(filled, size - filled);
    if (Status s = check(cuda().cuMemcpyDtoD(ptr(dst + filled), ptr(dst), m), "cuMemcpyDtoD"); !s.ok()) return s;
    filled += m;
  }
  return {};
}

std::optional<runtime::LinkCost> CudaDevice::peer_link(const runtime::DeviceDriver& source) const {
  const auto* peer = dynamic_cast<const CudaDevice*>(&source);
  if (peer == nullptr || peer == this) return std::nullopt;
  if (std::find(state_->peers.begin(), state_->peers.end(), peer->ordinal_) == state_->peers.end()) return std::nullopt;
  return runtime::LinkCost{5e-6, 40e9};
}

Status CudaDevice::copy_from_peer(runtime::DeviceDriver& source, DeviceAddress src, DeviceAddress dst,
                                  std::uint64_t size) {
  auto* peer = dynamic_cast<CudaDevice*>(&source);
  if (peer == nullptr || !peer_link(source)) return DeviceDriver::copy_from_peer(source, src, dst, size);
  ContextScope scope(state_->context);
  return check(cuda().cuMemcpyPeer(ptr(dst), state_->context, ptr(src), peer->state_->context, size), "cuMemcpyPeer");
}

Status CudaDevice::run_kernel(const runtime::KernelFunction& kernel, std::span<const DeviceAddress> buffers,
                              std::span<const std::uint64_t> local_sizes) {
  if (!local_sizes.empty())
    return Status::error(cl::kInvalidKernelArgs, info_.name +
                                                     ": local-memory arguments are not supported: a CUDA kernel "
                                                     "sizes its shared memory at launch");
  std::vector<void*> pointers;
  pointers.reserve(buffers.size());
  for (DeviceAddress a : buffers) pointers.push_back(reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)));
  ContextScope scope(state_->context);
  return kernel(pointers);
}

}  // namespace memlayer::drivers

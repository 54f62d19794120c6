#include "memlayer/runtime/context.hpp"

#include <limits>
#include <new>
#include <string>
#include <thread>

#include "context_state.hpp"
#include "memlayer/runtime/queue.hpp"

namespace memlayer::runtime {

using detail::BufferState;
using detail::ContextState;

namespace {

constexpr std::uint32_t kAccessFlags = mem::kReadWrite | mem::kWriteOnly | mem::kReadOnly;
constexpr std::uint32_t kHostPtrFlags = mem::kUseHostPtr | mem::kAllocHostPtr | mem::kCopyHostPtr;
constexpr std::uint32_t kHostAccessFlags = mem::kHostWriteOnly | mem::kHostReadOnly | mem::kHostNoAccess;
constexpr std::uint32_t kAllFlags = kAccessFlags | kHostPtrFlags | kHostAccessFlags;

bool more_than_one(std::uint32_t bits) { return (bits & (bits - 1)) != 0; }

}  // namespace

Result<std::shared_ptr<Context>> Context::create(std::vector<std::unique_ptr<DeviceDriver>> devices,
                                                 const ContextOptions& options) {
  if (devices.empty()) return Status::error(cl::kInvalidValue, "create context: no devices");
  unsigned own_memory = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i]) return Status::error(cl::kInvalidDevice, "create context: device " + std::to_string(i) + " is null");
    const DeviceInfo& info = devices[i]->info();
    if (info.base_alignment == 0 || more_than_one(static_cast<std::uint32_t>(info.base_alignment)))
      return Status::error(cl::kInvalidDevice, info.name + ": base_alignment is not a power of two");
    if (!info.shares_host_memory && ++own_memory >= migration::kMaxLocations)
      return Status::error(cl::kInvalidValue, "create context: more than 63 devices with their own memory");
  }
  // The last reference to a context's state can drop on one of its own
  // workers (a finished command releasing the last buffer). A thread cannot
  // join itself, so then the state is destroyed on a thread of its own.
  auto destroy = [](ContextState* state) {
    std::unique_ptr<ContextState> owned(state);
    if (detail::on_worker_thread()) std::thread([doomed = std::move(owned)]() mutable { doomed.reset(); }).detach();
  };
  auto state = std::shared_ptr<ContextState>(std::make_unique<ContextState>(std::move(devices), options).release(), destroy);
  for (const auto& dev : state->devices)
    if (!dev->memory->setup_error().empty()) return Status::error(cl::kInvalidValue, "create context: " + dev->memory->setup_error());
  return std::make_shared<Context>(std::move(state));
}

Context::Context(std::shared_ptr<ContextState> state) : state_(std::move(state)) {}
Context::~Context() = default;

std::size_t Context::device_count() const { return state_->devices.size(); }
const DeviceInfo& Context::device_info(std::size_t device) const { return state_->devices.at(device)->info(); }

Result<Buffer> Context::create_buffer(std::uint32_t flags, std::uint64_t size, void* host_ptr) {
  if (size == 0) return Status::error(cl::kInvalidBufferSize, "create buffer: size is 0");
  if ((flags & ~kAllFlags) != 0) return Status::error(cl::kInvalidValue, "create buffer: unknown flag bits");
  if (more_than_one(flags & kAccessFlags))
    return Status::error(cl::kInvalidValue, "create buffer: more than one of READ_WRITE, WRITE_ONLY, READ_ONLY");
  if (more_than_one(flags & kHostAccessFlags))
    return Status::error(cl::kInvalidValue,
                         "create buffer: more than one of HOST_WRITE_ONLY, HOST_READ_ONLY, HOST_NO_ACCESS");
  if ((flags & mem::kUseHostPtr) != 0 && (flags & (mem::kAllocHostPtr | mem::kCopyHostPtr)) != 0)
    return Status::error(cl::kInvalidValue, "create buffer: USE_HOST_PTR excludes ALLOC_HOST_PTR and COPY_HOST_PTR");
  const bool wants_ptr = (flags & (mem::kUseHostPtr | mem::kCopyHostPtr)) != 0;
  if (wants_ptr && host_ptr == nullptr)
    return Status::error(cl::kInvalidHostPtr, "create buffer: USE_HOST_PTR or COPY_HOST_PTR without a host_ptr");
  if (!wants_ptr && host_ptr != nullptr)
    return Status::error(cl::kInvalidHostPtr, "create buffer: host_ptr given without USE_HOST_PTR or COPY_HOST_PTR");
  if ((flags & kAccessFlags) == 0) flags |= mem::kReadWrite;
  try {
    auto parent = std::make_shared<BufferState>(state_, size, flags, host_ptr);
    return Buffer(std::move(parent), 0, size, flags, false);
  } catch (const std::bad_alloc&) {
    return Status::error(cl::kOutOfHostMemory, "create buffer: no host memory for " + std::to_string(size) + " bytes");
  }
}

Result<Buffer> Context::create_sub_buffer(const Buffer& parent, std::uint32_t flags, std::uint64_t origin,
                                          std::uint64_t size) {
  if (!parent.valid()) return Status::error(cl::kInvalidMemObject, "create sub-buffer: the parent is empty");
  if (parent.is_sub_buffer())
    return Status::error(cl::kInvalidMemObject, "create sub-buffer: the parent is itself a sub-buffer");
  if (size == 0) return Status::error(cl::kInvalidBufferSize, "create sub-buffer: size is 0");
  if (origin > parent.size() || size > parent.size() - origin)
    return Status::error(cl::kInvalidValue, "create sub-buffer: [" + std::to_string(origin) + ", +" +
                                                std::to_string(size) + ") exceeds the parent's " +
                                                std::to_string(parent.size()) + " bytes");
  if ((flags & ~kAllFlags) != 0 || (flags & kHostPtrFlags) != 0)
    return Status::error(cl::kInvalidValue, "create sub-buffer: only access and host-access flags are allowed");
  if (more_than_one(flags & kAccessFlags) || more_than_one(flags & kHostAccessFlags))
    return Status::error(cl::kInvalidValue, "create sub-buffer: conflicting flags");
  const std::uint32_t pf = parent.flags();
  const std::uint32_t access = flags & kAccessFlags;
  if (((pf & mem::kWriteOnly) && (access & (mem::kReadWrite | mem::kReadOnly))) ||
      ((pf & mem::kReadOnly) && (access & (mem::kReadWrite | mem::kWriteOnly))))
    return Status::error(cl::kInvalidValue, "create sub-buffer: its access flags contradict the parent's");
  const std::uint32_t host_access = flags & kHostAccessFlags;
  if (((pf & mem::kHostWriteOnly) && (host_access & mem::kHostReadOnly)) ||
      ((pf & mem::kHostReadOnly) && (host_access & mem::kHostWriteOnly)) ||
      ((pf & mem::kHostNoAccess) && (host_access & (mem::kHostReadOnly | mem::kHostWriteOnly))))
    return Status::error(cl::kInvalidValue, "create sub-buffer: its host-access flags contradict the parent's");
  for (const auto& dev : state_->devices) {
    if (origin % dev->info().base_alignment != 0)
      return Status::error(cl::kMisalignedSubBufferOffset,
                           "create sub-buffer: origin " + std::to_string(origin) + " is not a multiple of " +
                               dev->info().name + "'s base alignment " + std::to_string(dev->info().base_alignment));
  }
  if (access == 0) flags |= pf & kAccessFlags;
  if (host_access == 0) flags |= pf & kHostAccessFlags;
  flags |= pf & kHostPtrFlags;
  return Buffer(parent.parent(), origin, size, flags, true);
}

Result<std::shared_ptr<Queue>> Context::create_queue(std::size_t device, bool out_of_order) {
  if (device >= state_->devices.size())
    return Status::error(cl::kInvalidDevice, "create queue: no device " + std::to_string(device));
  auto q = std::make_unique<detail::QueueState>();
  q->context = state_;
  q->device = state_->devices[device].get();
  q->index = device;
  q->out_of_order = out_of_order;
  return std::make_shared<Queue>(std::move(q));
}

Event Context::create_user_event() { return Event(std::make_shared<detail::EventState>(true)); }

ContextStats Context::stats() const {
  ContextStats s;
  const engine::EngineStats e = state_->engine.stats();
  s.bytes_migrated = e.bytes_migrated;
  s.copies_direct = e.copies_direct;
  s.copies_to_host = e.copies_to_host;
  s.copies_from_host = e.copies_from_host;
  s.evictions = e.evictions;
  s.write_backs = e.write_backs;
  s.compactions = e.compactions;
  s.enqueues = e.enqueues;
  s.fast_path = e.fast_path;
  s.transfer_retries = state_->transfer_retries.load();
  s.copies_resourced = state_->copies_resourced.load();
  s.bytes_lost = e.bytes_lost;
  for (const auto& dev : state_->devices) {
    std::lock_guard mem(dev->memory_mutex);
    s.devices.push_back(dev->memory->region_stats());
    s.heaps.push_back(dev->memory->heap_stats());
  }
  return s;
}

}  // namespace memlayer::runtime

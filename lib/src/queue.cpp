#include "memlayer/runtime/queue.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "context_state.hpp"
#include "scheduler.hpp"
#include "memlayer/runtime/local_memory.hpp"

namespace memlayer::runtime {

using engine::BufferUse;
using detail::CommandSpec;
using migration::Access;
using migration::kHost;

namespace {

// Whether `b` may be used on queue `q`: a buffer, of q's context.
bool usable(const detail::QueueState& q, const Buffer& b) {
  return b.valid() && &b.parent()->context() == q.context.get();
}

// Why `b` may not be used on `q` (!usable(q, b)). Out of line: a kernel
// checks every argument, and only one that fails makes a message.
[[gnu::noinline]] Status buffer_error(const Buffer& b, const char* what) {
  if (!b.valid()) return Status::error(cl::kInvalidMemObject, std::string(what) + ": the buffer is empty");
  return Status::error(cl::kInvalidContext, std::string(what) + ": the buffer belongs to another context");
}

Status check_buffer(const detail::QueueState& q, const Buffer& b, const char* what) {
  return usable(q, b) ? Status{} : buffer_error(b, what);
}

Status check_range(const Buffer& b, std::uint64_t offset, std::uint64_t size, const char* what) {
  if (size == 0) return Status::error(cl::kInvalidValue, std::string(what) + ": size is 0");
  if (offset > b.size() || size > b.size() - offset)
    return Status::error(cl::kInvalidValue, std::string(what) + ": [" + std::to_string(offset) + ", +" +
                                                std::to_string(size) + ") exceeds the buffer's " +
                                                std::to_string(b.size()) + " bytes");
  return {};
}

BufferUse use_of(const Buffer& b, std::uint64_t offset, std::uint64_t size, Access access) {
  return BufferUse{&b.parent()->tracked, migration::Use{b.offset() + offset, size, access}};
}

// A box in `b` (offsets from b's start), checked to lie within it.
Result<RectBox> buffer_box(const Buffer& b, const RectLayout& layout, const RectRegion& region, const char* what) {
  Result<RectBox> box = RectBox::make(layout, region, what);
  if (box && box.value().end() > b.size())
    return Status::error(cl::kInvalidValue, std::string(what) + ": the box ends at byte " +
                                                std::to_string(box.value().end()) + ", beyond the buffer's " +
                                                std::to_string(b.size()) + " bytes");
  return box;
}

// The bounding range of a box, for the planner: a box with gaps is a write
// that leaves bytes unwritten.
BufferUse box_use(const Buffer& b, const RectBox& box, bool writes) {
  const Access a = !writes ? Access::read : (box.contiguous() ? Access::overwrite : Access::write);
  return use_of(b, box.first(), box.end() - box.first(), a);
}

// Tries for one row of a box written from the host once an earlier row is
// written: a row that fails then is tried again (a transfer writes its
// whole range, so that is harmless) rather than leave the box half-written,
// its bytes undefined where they were the only copy. The first row is
// tried once: its failure changes nothing (Status::changed_nothing) and is
// the user's to see, as any user transfer's (doc/runtime.md, failures).
constexpr int kRowAttempts = 3;

// The rows of `box` written from `host` (from `from`) into the buffer whose
// byte 0 is at `base` on `dev`.
Status write_rows(detail::DeviceState& dev, const RectBox& box, const RectBox& host, const std::byte* from,
                  DeviceAddress base) {
  bool written = false;  // a row is: the box is half-written if the next fails
  return for_each_row_pair(box, host, [&](std::uint64_t device_row, std::uint64_t host_row) {
    Status s;
    for (int attempt = 0; attempt < (written ? kRowAttempts : 1) && (attempt == 0 || !s.ok()); ++attempt)
      s = dev.driver().write(base + device_row, from + host_row, box.region()[0]);
    written = written || s.ok();
    return s;
  });
}

Result<Event> blocking_wait(Result<Event> r, bool blocking) {
  if (!r || !blocking) return r;
  if (r.value().wait() < 0) return Status::error(r.value().status(), r.value().error_message());
  return r;
}

}  // namespace

Queue::Queue(std::unique_ptr<detail::QueueState> state) : state_(std::move(state)) {}
Queue::~Queue() = default;

std::size_t Queue::device() const { return state_->index; }
bool Queue::out_of_order() const { return state_->out_of_order; }

Result<Event> Queue::enqueue_write(const Buffer& buffer, std::uint64_t offset, std::uint64_t size, const void* source,
                                   bool blocking, WaitList wait) try {
  if (Status s = check_buffer(*state_, buffer, "write"); !s.ok()) return s;
  if (Status s = check_range(buffer, offset, size, "write"); !s.ok()) return s;
  if (source == nullptr) return Status::error(cl::kInvalidValue, "write: the source pointer is null");
  if ((buffer.flags() & (mem::kHostReadOnly | mem::kHostNoAccess)) != 0)
    return Status::error(cl::kInvalidOperation, "write: the buffer is HOST_READ_ONLY or HOST_NO_ACCESS");
  CommandSpec spec;
  spec.uses = {use_of(buffer, offset, size, Access::overwrite)};
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  spec.work = [dev, source, size](std::span<const DeviceAddress> t) { return dev->driver().write(t[0], source, size); };
  return blocking_wait(state_->context->enqueue(*state_, std::move(spec), wait), blocking);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("write");
}

Result<Event> Queue::enqueue_read(const Buffer& buffer, std::uint64_t offset, std::uint64_t size, void* destination,
                                  bool blocking, WaitList wait) try {
  if (Status s = check_buffer(*state_, buffer, "read"); !s.ok()) return s;
  if (Status s = check_range(buffer, offset, size, "read"); !s.ok()) return s;
  if (destination == nullptr) return Status::error(cl::kInvalidValue, "read: the destination pointer is null");
  if ((buffer.flags() & (mem::kHostWriteOnly | mem::kHostNoAccess)) != 0)
    return Status::error(cl::kInvalidOperation, "read: the buffer is HOST_WRITE_ONLY or HOST_NO_ACCESS");
  CommandSpec spec;
  spec.uses = {use_of(buffer, offset, size, Access::read)};
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  spec.work = [dev, destination, size](std::span<const DeviceAddress> t) {
    return dev->driver().read(t[0], destination, size);
  };
  return blocking_wait(state_->context->enqueue(*state_, std::move(spec), wait), blocking);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("read");
}

Result<Event> Queue::enqueue_copy(const Buffer& source, const Buffer& destination, std::uint64_t source_offset,
                                  std::uint64_t destination_offset, std::uint64_t size, WaitList wait) try {
  if (Status s = check_buffer(*state_, source, "copy source"); !s.ok()) return s;
  if (Status s = check_buffer(*state_, destination, "copy destination"); !s.ok()) return s;
  if (Status s = check_range(source, source_offset, size, "copy source"); !s.ok()) return s;
  if (Status s = check_range(destination, destination_offset, size, "copy destination"); !s.ok()) return s;
  const BufferUse from = use_of(source, source_offset, size, Access::read);
  const BufferUse to = use_of(destination, destination_offset, size, Access::overwrite);
  if (from.buffer == to.buffer && from.use.offset < to.use.offset + size && to.use.offset < from.use.offset + size)
    return Status::error(cl::kInvalidValue, "copy: the source and destination ranges overlap");
  CommandSpec spec;
  spec.uses = {from, to};
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  spec.work = [dev, size](std::span<const DeviceAddress> t) { return dev->driver().copy(t[0], t[1], size); };
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("copy");
}

Result<Event> Queue::enqueue_fill(const Buffer& buffer, const void* pattern, std::uint64_t pattern_size,
                                  std::uint64_t offset, std::uint64_t size, WaitList wait) try {
  if (Status s = check_buffer(*state_, buffer, "fill"); !s.ok()) return s;
  if (Status s = check_range(buffer, offset, size, "fill"); !s.ok()) return s;
  if (pattern == nullptr || pattern_size == 0 || pattern_size > 128 || (pattern_size & (pattern_size - 1)) != 0)
    return Status::error(cl::kInvalidValue, "fill: the pattern must be 1, 2, 4, ... or 128 bytes");
  if (offset % pattern_size != 0 || size % pattern_size != 0)
    return Status::error(cl::kInvalidValue, "fill: offset and size must be multiples of the pattern size");
  CommandSpec spec;
  spec.uses = {use_of(buffer, offset, size, Access::overwrite)};
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  std::vector<std::byte> bytes(static_cast<const std::byte*>(pattern),
                               static_cast<const std::byte*>(pattern) + pattern_size);
  spec.work = [dev, size, bytes = std::move(bytes)](std::span<const DeviceAddress> t) {
    return dev->driver().fill(t[0], size, bytes);
  };
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("fill");
}

Result<Event> Queue::enqueue_write_rect(const Buffer& buffer, const RectLayout& buffer_layout,
                                        const RectLayout& host_layout, const RectRegion& region, const void* source,
                                        bool blocking, WaitList wait) try {
  if (Status s = check_buffer(*state_, buffer, "write_rect"); !s.ok()) return s;
  Result<RectBox> in_buffer = buffer_box(buffer, buffer_layout, region, "write_rect (buffer)");
  if (!in_buffer) return in_buffer.error();
  Result<RectBox> in_host = RectBox::make(host_layout, region, "write_rect (host)");
  if (!in_host) return in_host.error();
  if (source == nullptr) return Status::error(cl::kInvalidValue, "write_rect: the source pointer is null");
  if ((buffer.flags() & (mem::kHostReadOnly | mem::kHostNoAccess)) != 0)
    return Status::error(cl::kInvalidOperation, "write_rect: the buffer is HOST_READ_ONLY or HOST_NO_ACCESS");
  CommandSpec spec;
  spec.uses = {box_use(buffer, in_buffer.value(), true)};
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  const auto* from = static_cast<const std::byte*>(source);
  spec.work = [dev, box = in_buffer.value(), host = in_host.value(), from](std::span<const DeviceAddress> t) {
    const DeviceAddress base = t[0] - box.first();  // the buffer's byte 0
    return write_rows(*dev, box, host, from, base);
  };
  return blocking_wait(state_->context->enqueue(*state_, std::move(spec), wait), blocking);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("write_rect");
}

Result<Event> Queue::enqueue_read_rect(const Buffer& buffer, const RectLayout& buffer_layout,
                                       const RectLayout& host_layout, const RectRegion& region, void* destination,
                                       bool blocking, WaitList wait) try {
  if (Status s = check_buffer(*state_, buffer, "read_rect"); !s.ok()) return s;
  Result<RectBox> in_buffer = buffer_box(buffer, buffer_layout, region, "read_rect (buffer)");
  if (!in_buffer) return in_buffer.error();
  Result<RectBox> in_host = RectBox::make(host_layout, region, "read_rect (host)");
  if (!in_host) return in_host.error();
  if (destination == nullptr) return Status::error(cl::kInvalidValue, "read_rect: the destination pointer is null");
  if ((buffer.flags() & (mem::kHostWriteOnly | mem::kHostNoAccess)) != 0)
    return Status::error(cl::kInvalidOperation, "read_rect: the buffer is HOST_WRITE_ONLY or HOST_NO_ACCESS");
  CommandSpec spec;
  spec.uses = {box_use(buffer, in_buffer.value(), false)};
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  auto* to = static_cast<std::byte*>(destination);
  spec.work = [dev, box = in_buffer.value(), host = in_host.value(), to](std::span<const DeviceAddress> t) {
    const DeviceAddress base = t[0] - box.first();
    return for_each_row_pair(box, host, [&](std::uint64_t device_row, std::uint64_t host_row) {
      return dev->driver().read(base + device_row, to + host_row, box.region()[0]);
    });
  };
  return blocking_wait(state_->context->enqueue(*state_, std::move(spec), wait), blocking);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("read_rect");
}

Result<Event> Queue::enqueue_copy_rect(const Buffer& source, const Buffer& destination,
                                       const RectLayout& source_layout, const RectLayout& destination_layout,
                                       const RectRegion& region, WaitList wait) try {
  if (Status s = check_buffer(*state_, source, "copy_rect source"); !s.ok()) return s;
  if (Status s = check_buffer(*state_, destination, "copy_rect destination"); !s.ok()) return s;
  Result<RectBox> from = buffer_box(source, source_layout, region, "copy_rect (source)");
  if (!from) return from.error();
  Result<RectBox> to = buffer_box(destination, destination_layout, region, "copy_rect (destination)");
  if (!to) return to.error();
  if (source.parent() == destination.parent() &&
      overlap(from.value(), source.offset(), to.value(), destination.offset()))
    return Status::error(cl::kInvalidValue, "copy_rect: the source and destination boxes overlap");
  CommandSpec spec;
  spec.uses = {box_use(source, from.value(), false), box_use(destination, to.value(), true)};
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  spec.work = [dev, a = from.value(), b = to.value()](std::span<const DeviceAddress> t) {
    const DeviceAddress a_base = t[0] - a.first(), b_base = t[1] - b.first();
    return for_each_row_pair(a, b, [&](std::uint64_t from_row, std::uint64_t to_row) {
      return dev->driver().copy(a_base + from_row, b_base + to_row, a.region()[0]);
    });
  };
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("copy_rect");
}

Result<Queue::Mapping> Queue::enqueue_map(const Buffer& buffer, std::uint32_t flags, std::uint64_t offset,
                                          std::uint64_t size, bool blocking, WaitList wait) try {
  if (Status s = check_buffer(*state_, buffer, "map"); !s.ok()) return s;
  if (Status s = check_range(buffer, offset, size, "map"); !s.ok()) return s;
  const std::uint32_t known = map::kRead | map::kWrite | map::kWriteInvalidateRegion;
  if ((flags & ~known) != 0 || ((flags & map::kWriteInvalidateRegion) && (flags & (map::kRead | map::kWrite))))
    return Status::error(cl::kInvalidValue, "map: bad flags (WRITE_INVALIDATE_REGION excludes READ and WRITE)");
  if ((flags & map::kRead) && (buffer.flags() & (mem::kHostWriteOnly | mem::kHostNoAccess)))
    return Status::error(cl::kInvalidOperation, "map: reading a HOST_WRITE_ONLY or HOST_NO_ACCESS buffer");
  if ((flags & (map::kWrite | map::kWriteInvalidateRegion)) && (buffer.flags() & (mem::kHostReadOnly | mem::kHostNoAccess)))
    return Status::error(cl::kInvalidOperation, "map: writing a HOST_READ_ONLY or HOST_NO_ACCESS buffer");
  // The host copy is where a map points: a read|write map is a write there
  // (the host may change any byte), a write-invalidate map moves nothing.
  Access access = Access::read;
  if (flags & map::kWriteInvalidateRegion) access = Access::overwrite;
  else if (flags & map::kWrite) access = Access::read_write;
  CommandSpec spec;
  spec.uses = {use_of(buffer, offset, size, access)};
  spec.at = kHost;
  {
    // Room for the mapping first: the command cannot be taken back once enqueued.
    std::lock_guard lock(state_->mutex);
    auto& m = state_->mappings;
    if (m.size() == m.capacity()) m.reserve(std::max<std::size_t>(4, 2 * m.size()));
  }
  auto r = state_->context->enqueue(*state_, std::move(spec), wait);
  if (!r) return r.error();
  void* pointer = buffer.parent()->host() + buffer.offset() + offset;
  {
    std::lock_guard lock(state_->mutex);
    state_->mappings.emplace_back(pointer, buffer);
  }
  auto waited = blocking_wait(std::move(r), blocking);
  if (!waited) {  // the map failed: there is no mapping to unmap
    std::lock_guard lock(state_->mutex);
    auto it = std::find_if(state_->mappings.begin(), state_->mappings.end(),
                           [&](const auto& m) { return m.first == pointer && m.second.parent() == buffer.parent(); });
    if (it != state_->mappings.end()) state_->mappings.erase(it);
    return waited.error();
  }
  return Mapping{pointer, waited.value()};
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("map");
}

Result<Event> Queue::enqueue_unmap(const Buffer& buffer, void* pointer, WaitList wait) try {
  if (Status s = check_buffer(*state_, buffer, "unmap"); !s.ok()) return s;
  {
    std::lock_guard lock(state_->mutex);
    auto it = std::find_if(state_->mappings.begin(), state_->mappings.end(), [&](const auto& m) {
      return m.first == pointer && m.second.parent() == buffer.parent() && m.second.offset() == buffer.offset();
    });
    if (it == state_->mappings.end())
      return Status::error(cl::kInvalidValue, "unmap: the pointer is not a live mapping of this buffer on this queue");
    state_->mappings.erase(it);
  }
  // Later commands must see what the host did through the map, and must not
  // change the bytes while the host may still read them: the unmap takes
  // the host copy's part as a reader (the map already counted the write).
  CommandSpec spec;
  spec.uses = {use_of(buffer, 0, buffer.size(), Access::read)};
  spec.at = kHost;
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("unmap");
}

Result<Event> Queue::enqueue_migrate(std::span<const Buffer> buffers, bool to_host, bool content_undefined,
                                     WaitList wait) try {
  if (buffers.empty()) return Status::error(cl::kInvalidValue, "migrate: no buffers");
  CommandSpec spec;
  for (const Buffer& b : buffers) {
    if (Status s = check_buffer(*state_, b, "migrate"); !s.ok()) return s;
    spec.uses.push_back(use_of(b, 0, b.size(), content_undefined ? Access::overwrite : Access::read));
  }
  spec.at = to_host ? kHost : state_->device->location();
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("migrate");
}

Result<Event> Queue::enqueue_kernel(KernelFunction kernel, std::span<const KernelArg> args, WaitList wait) try {
  return enqueue_kernel(std::move(kernel), args, {}, wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("kernel");
}

Result<Event> Queue::enqueue_kernel(KernelFunction kernel, std::span<const KernelArg> args,
                                    std::span<const std::uint64_t> local_sizes, WaitList wait) try {
  if (!kernel) return Status::error(cl::kInvalidValue, "kernel: no function");
  if (auto layout = layout_local(local_sizes, state_->device->info().local_mem_size); !layout) {
    Status s = layout.error();
    s.message = state_->device->info().name + ": " + s.message;
    return s;
  }
  CommandSpec spec;
  spec.uses.reserve(args.size());
  for (const KernelArg& a : args) {
    if (!usable(*state_, a.buffer)) [[unlikely]]
      return buffer_error(a.buffer, "kernel argument");
    spec.uses.push_back(use_of(a.buffer, 0, a.buffer.size(), a.access));
  }
  spec.device = state_->device;
  spec.at = state_->device->location();
  detail::DeviceState* dev = state_->device;
  std::vector<std::uint64_t> locals(local_sizes.begin(), local_sizes.end());
  spec.work = [dev, kernel = std::move(kernel), locals = std::move(locals)](std::span<const DeviceAddress> t) {
    return dev->driver().run_kernel(kernel, t, locals);
  };
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("kernel");
}

Result<Event> Queue::enqueue_marker(WaitList wait) try {
  CommandSpec spec;
  spec.barrier = wait.empty();  // a marker with no wait list waits for everything before it
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("marker");
}

Result<Event> Queue::enqueue_barrier(WaitList wait) try {
  CommandSpec spec;
  spec.barrier = true;
  return state_->context->enqueue(*state_, std::move(spec), wait);
} catch (const std::bad_alloc&) {
  return detail::out_of_host_memory("barrier");
}

Status Queue::flush() { return {}; }

Status Queue::finish() {
  std::vector<std::shared_ptr<detail::EventState>> outstanding;
  {
    std::lock_guard lock(state_->mutex);
    outstanding = state_->outstanding;
  }
  Status first;
  for (const auto& e : outstanding) {
    if (e->wait() < 0 && first.ok()) first = Status::error(e->status(), e->message());
  }
  return first;
}

}  // namespace memlayer::runtime

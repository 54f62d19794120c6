// The memlayer device's pocl_device_ops: PoCL calls these (C linkage).
//
// What is the driver's own: device set-up from its parameters, global
// memory allocation (memlayer's DeviceMemory instead of PoCL's host
// malloc), the command scheduler and kernel execution with bufalloc-managed
// local memory (memlayer_device.cpp), and direct device-to-device copies.
// What it takes from PoCL, through the public ops tables of the drivers that
// have it: the CPU compilation path, the memcpy transfers, maps and images
// (from basic: they work on any host-addressable device pointer, which the
// arena's are), and the event and queue condition-variable plumbing (from
// pthread).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "memlayer_device.hpp"
#include "svm.hpp"

extern "C" {
GEN_PROTOTYPES(basic)
GEN_PROTOTYPES(pthread)
}

using memlayer::pocl::DriverParameters;
using memlayer::pocl::MemlayerDevice;
using memlayer::pocl::is_memlayer;

namespace {

MemlayerDevice& device_of(cl_device_id device) { return *static_cast<MemlayerDevice*>(device->data); }

// A buffer's block handle, kept in its pocl_mem_identifier: mem_ptr is the
// address, `extra` (the driver's 64-bit field) the record index and
// generation, and the region id is the device memory's own.
std::uint64_t pack_block_record(const memlayer::bufalloc::BlockHandle& block) {
  return std::uint64_t{block.index} | std::uint64_t{block.generation} << 32;
}

memlayer::bufalloc::BlockHandle unpack_block(const void* address, std::uint64_t record, std::uint32_t region) {
  return memlayer::bufalloc::BlockHandle{reinterpret_cast<std::uintptr_t>(address), static_cast<std::uint32_t>(record),
                                         static_cast<std::uint32_t>(record >> 32), region};
}

// Per device index j, the parameters init() parsed, for reinit().
std::vector<DriverParameters>& saved_parameters() {
  static std::vector<DriverParameters> saved;
  return saved;
}

// A device that fails to initialise disappears from the platform; say why
// even when POCL_DEBUG is off, or the user sees only "no devices".
void init_failed(unsigned j, const std::string& why) {
  std::fprintf(stderr, "memlayer device %u: %s\n", j, why.c_str());
}

cl_int start_device(unsigned j, cl_device_id device, const DriverParameters& params) {
  auto made = MemlayerDevice::create(device, params);
  if (!made.ok()) {
    init_failed(j, made.error());
    return CL_OUT_OF_RESOURCES;
  }
  device->data = std::move(made).value().release();  // owned by device->data until uninit()
  if (saved_parameters().size() <= j) saved_parameters().resize(j + 1);
  saved_parameters()[j] = params;
  return CL_SUCCESS;
}

// The command's wait list is empty (and submit() has seen it): queue it.
// Called with the command's event locked.
void push_if_ready(_cl_command_node* node) {
  cl_event event = node->sync.event.event;
  if (!memlayer::pocl::compat::is_submitted(node) || !pocl_command_is_ready(event) || event->status != CL_QUEUED) return;
  pocl_update_event_submitted(event);
  device_of(node->device).push(node);
}

// Arena to arena: both are host-addressable, one memcpy of the range. Two
// copies of a buffer over SVM bytes are those same bytes (svm.hpp): nothing
// to move.
int migrate_range(cl_mem mem, size_t offset, size_t size, const pocl_mem_identifier* src_mem_id,
                  const pocl_mem_identifier* dst_mem_id) {
  if (src_mem_id->mem_ptr == nullptr || dst_mem_id->mem_ptr == nullptr) return CL_INVALID_MEM_OBJECT;
  if (offset > mem->size || size > mem->size - offset) return CL_INVALID_VALUE;
  if (src_mem_id->mem_ptr == dst_mem_id->mem_ptr) return CL_SUCCESS;
  std::memcpy(static_cast<char*>(dst_mem_id->mem_ptr) + offset, static_cast<const char*>(src_mem_id->mem_ptr) + offset,
              size);
  return CL_SUCCESS;
}
int migrate_d2d_range(cl_device_id, cl_device_id, cl_mem mem, size_t offset, size_t size, pocl_mem_identifier* src_mem_id,
                      pocl_mem_identifier* dst_mem_id) {
  return migrate_range(mem, offset, size, src_mem_id, dst_mem_id);
}

// basic's host transfers (a memcpy each), skipped where the host bytes and
// the device bytes are the same: a buffer over SVM bytes (svm.hpp). `data`
// is the device's (pocl_exec_command passes dev->data). One PoCL asks for
// outside a command may fail by fault injection (direct_transfer_fails).
decltype(pocl_device_ops::read) g_basic_read = nullptr;
decltype(pocl_device_ops::write) g_basic_write = nullptr;
void read_unless_shared(void* data, void* __restrict__ dst_host_ptr, pocl_mem_identifier* src_mem_id, cl_mem src_buf,
                        size_t offset, size_t size) {
  if (static_cast<char*>(src_mem_id->mem_ptr) + offset == dst_host_ptr) return;
  if (static_cast<MemlayerDevice*>(data)->direct_transfer_fails("a read")) return;
  g_basic_read(data, dst_host_ptr, src_mem_id, src_buf, offset, size);
}
void write_unless_shared(void* data, const void* __restrict__ src_host_ptr, pocl_mem_identifier* dst_mem_id,
                         cl_mem dst_buf, size_t offset, size_t size) {
  if (static_cast<char*>(dst_mem_id->mem_ptr) + offset == src_host_ptr) return;
  if (static_cast<MemlayerDevice*>(data)->direct_transfer_fails("a write")) return;
  g_basic_write(data, src_host_ptr, dst_mem_id, dst_buf, offset, size);
}

}  // namespace

namespace memlayer::pocl {
bool is_memlayer(cl_device_id d) { return d->ops != nullptr && d->ops->alloc_mem_obj == pocl_memlayer_alloc_mem_obj; }
}  // namespace memlayer::pocl

extern "C" {

void pocl_memlayer_init_device_ops(struct pocl_device_ops* ops) {
  pocl_basic_init_device_ops(ops);
  pocl_device_ops pthread_ops{};
  pocl_pthread_init_device_ops(&pthread_ops);

  ops->device_name = "memlayer";
  ops->probe = pocl_memlayer_probe;
  ops->init = pocl_memlayer_init;
  ops->uninit = pocl_memlayer_uninit;
  ops->reinit = pocl_memlayer_reinit;
  ops->build_hash = pocl_memlayer_build_hash;

  g_basic_read = ops->read;
  g_basic_write = ops->write;
  ops->read = read_unless_shared;
  ops->write = write_unless_shared;
  ops->alloc_mem_obj = pocl_memlayer_alloc_mem_obj;
  ops->free = pocl_memlayer_free;
  ops->get_mapping_ptr = pocl_memlayer_get_mapping_ptr;
  ops->free_mapping_ptr = pocl_memlayer_free_mapping_ptr;
  ops->can_migrate_d2d = pocl_memlayer_can_migrate_d2d;
  ops->migrate_d2d = pocl_memlayer_migrate_d2d;
  memlayer::pocl::compat::set_migrate_d2d_range(ops, migrate_d2d_range);

  ops->submit = pocl_memlayer_submit;
  ops->notify = pocl_memlayer_notify;
  ops->run = pocl_memlayer_run;
  ops->flush = pthread_ops.flush;
  ops->join = pthread_ops.join;
  ops->broadcast = pthread_ops.broadcast;
  ops->wait_event = pthread_ops.wait_event;
  ops->update_event = pthread_ops.update_event;
  ops->free_event_data = pthread_ops.free_event_data;
  ops->notify_event_finished = pthread_ops.notify_event_finished;
  ops->notify_cmdq_finished = pthread_ops.notify_cmdq_finished;
  ops->init_queue = pthread_ops.init_queue;
  ops->free_queue = pthread_ops.free_queue;

  // Coarse-grained buffer SVM out of the process's SVM space (svm.hpp);
  // copies and fills of SVM bytes stay basic's (a memcpy, a pattern fill).
  ops->svm_alloc = pocl_memlayer_svm_alloc;
  ops->svm_free = pocl_memlayer_svm_free;
  ops->svm_map = pocl_memlayer_svm_map;
  ops->svm_unmap = pocl_memlayer_svm_unmap;
}

unsigned int pocl_memlayer_probe(struct pocl_device_ops* ops) {
  // Only when asked for by POCL_DEVICES: a plain PoCL user keeps pthread.
  const int n = pocl_device_get_env_count(ops->device_name);
  return n < 0 ? 0u : static_cast<unsigned>(n);
}

char* pocl_memlayer_build_hash(cl_device_id device) {
  const std::string hash = std::string("memlayer-") + HOST_DEVICE_BUILD_HASH + "-" + device->llvm_cpu;
  return strdup(hash.c_str());  // PoCL frees it
}

cl_int pocl_memlayer_init(unsigned j, cl_device_id device, const char* parameters) {
  auto parsed = memlayer::pocl::parse_parameters(parameters);
  if (!parsed.ok()) {
    init_failed(j, parsed.error());
    return CL_INVALID_VALUE;
  }
  DriverParameters params = parsed.value();

  const cl_int infos = memlayer::pocl::compat::setup_cpu_device_infos(device);
  if (infos != CL_SUCCESS) return infos;
  if (params.compute_units == 0) params.compute_units = device->max_compute_units > 0 ? device->max_compute_units : 1;
  device->max_compute_units = params.compute_units;
  // Then our own memory figures:
  device->global_mem_size = params.global_mem;
  // OpenCL's floor for CL_DEVICE_MAX_MEM_ALLOC_SIZE is max(global/4, 128 MiB),
  // capped here by the memory itself.
  const cl_ulong quarter = params.global_mem / 4;
  const cl_ulong floor = std::min<cl_ulong>(params.global_mem, cl_ulong{128} << 20);
  device->max_mem_alloc_size = std::max(quarter, floor);
  device->local_mem_size = params.local_mem;
  device->local_mem_type = CL_LOCAL;  // a space per compute unit, not global memory
  if (params.migration_ranges) memlayer::pocl::compat::declare_range_migrations(device);
  device->mem_base_addr_align = static_cast<cl_uint>(params.alignment);
  device->device_alloca_locals = 0;
  if (params.svm_space > 0) {
    device->svm_caps = CL_DEVICE_SVM_COARSE_GRAIN_BUFFER;
    // Above the CPU devices' 1: in a context with a memlayer device, SVM
    // comes from the space every memlayer device shares (svm.hpp).
    device->svm_allocation_priority = 2;
  }
  if (device->vendor_id == 0) device->vendor_id = CL_KHRONOS_VENDOR_ID_POCL;

  pocl_init_dlhandle_cache();
  const cl_int started = start_device(j, device, params);
  if (started == CL_SUCCESS) memlayer::pocl::compat::mark_available(device);
  return started;
}

cl_int pocl_memlayer_uninit(unsigned, cl_device_id device) {
  std::unique_ptr<MemlayerDevice> owned(static_cast<MemlayerDevice*>(device->data));
  device->data = nullptr;
  return CL_SUCCESS;
}

cl_int pocl_memlayer_reinit(MEMLAYER_REINIT_PARAMS) {
  if (j >= saved_parameters().size()) return CL_INVALID_DEVICE;
  return start_device(j, device, saved_parameters()[j]);
}

cl_int pocl_memlayer_alloc_mem_obj(cl_device_id device, cl_mem mem, void*) {
  pocl_mem_identifier* p = &mem->device_ptrs[device->global_mem_id];
  if (p->mem_ptr != nullptr) return CL_SUCCESS;
  // A sub-buffer is its range of its parent's storage (which memlayer's
  // engine may have evicted since the sub-buffer was made: placed again).
  if (cl_mem parent = mem->parent; parent != nullptr) {
    POCL_LOCK_OBJ(parent);
    const cl_int placed = pocl_memlayer_alloc_mem_obj(device, parent, nullptr);
    void* base = parent->device_ptrs[device->global_mem_id].mem_ptr;
    POCL_UNLOCK_OBJ(parent);
    if (placed != CL_SUCCESS) return placed;
    p->mem_ptr = static_cast<char*>(base) + mem->origin;
    return CL_SUCCESS;
  }
  // At clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) PoCL offers every device the
  // host copy; that is not this device's memory, so decline and let PoCL's
  // core allocate it. Device memory comes at the first command that uses it.
  if ((mem->flags & CL_MEM_ALLOC_HOST_PTR) != 0 && mem->mem_host_ptr == nullptr) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  // A buffer over SVM bytes shares them on every device (svm.hpp).
  if (void* shared = memlayer::pocl::svm_storage(mem); shared != nullptr) {
    p->mem_ptr = shared;
    p->version = 0;
    p->extra_ptr = nullptr;
    p->extra = 0;
    return CL_SUCCESS;
  }
  auto block = device_of(device).memory().allocate(mem->size, device->mem_base_addr_align);
  if (!block.ok()) {
    POCL_MSG_ERR("%s\n", block.error().c_str());
    return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  }
  p->mem_ptr = block.value().data;
  p->version = 0;  // nothing valid here yet
  p->extra_ptr = nullptr;
  // The rest of the block's handle, so that free needs no address lookup:
  // mem_ptr is its address, and the region id is the device memory's own.
  p->extra = pack_block_record(block.value().handle);
  return CL_SUCCESS;
}

void pocl_memlayer_free(cl_device_id device, cl_mem mem) {
  pocl_mem_identifier* p = &mem->device_ptrs[device->global_mem_id];
  if (p->mem_ptr == nullptr) return;
  if (memlayer::pocl::is_svm_storage(p->mem_ptr)) {  // the SVM allocation's bytes: not ours to free
    p->mem_ptr = nullptr;
    p->version = 0;
    return;
  }
  memlayer::drivers::DeviceMemory& memory = device_of(device).memory();
  auto freed = memory.free(unpack_block(p->mem_ptr, p->extra, memory.region_id()));
  if (!freed.ok()) POCL_MSG_ERR("%s\n", freed.error().c_str());
  p->mem_ptr = nullptr;
  p->version = 0;
  p->extra = 0;
}

// A mapping's host memory. With CL_MEM_USE_HOST_PTR OpenCL requires the
// user's pointer; otherwise the mapping gets memory of its own. (PoCL's
// default points into mem_host_ptr, which on a device with memory of its
// own PoCL may free and reallocate while the mapping lives: the unmap then
// freed a pointer it never allocated.)
cl_int pocl_memlayer_get_mapping_ptr(void*, pocl_mem_identifier*, cl_mem mem, mem_mapping_t* map) {
  if ((mem->flags & CL_MEM_USE_HOST_PTR) != 0) {
    map->host_ptr = static_cast<char*>(mem->mem_host_ptr) + map->offset;
    return CL_SUCCESS;
  }
  map->host_ptr = pocl_aligned_malloc(MAX_EXTENDED_ALIGNMENT, map->size > 0 ? map->size : 1);
  return map->host_ptr != nullptr ? CL_SUCCESS : CL_MAP_FAILURE;
}

cl_int pocl_memlayer_free_mapping_ptr(void*, pocl_mem_identifier*, cl_mem mem, mem_mapping_t* map) {
  if (map->host_ptr != nullptr && (mem->flags & CL_MEM_USE_HOST_PTR) == 0) pocl_aligned_free(map->host_ptr);
  map->host_ptr = nullptr;
  return CL_SUCCESS;
}

int pocl_memlayer_can_migrate_d2d(cl_device_id dest, cl_device_id source) {
  return is_memlayer(dest) && is_memlayer(source) && dest != source ? 1 : 0;
}

int pocl_memlayer_migrate_d2d(MEMLAYER_MIGRATE_D2D_PARAMS) {
  return migrate_range(mem, MEMLAYER_MIGRATE_D2D_RANGE, src_mem_id, dst_mem_id);
}

void pocl_memlayer_submit(_cl_command_node* node, cl_command_queue) {
  // Called with the event locked; must unlock it. A command whose
  // dependency failed (event->dependency_failed: before the enqueue, PoCL's
  // pocl_command_enqueue fails it itself, patches/pocl-*-failed-dependency-fails-command.patch;
  // while it was being made, notify() marked it) is failed by a worker once
  // all its dependencies have ended (see notify()).
  memlayer::pocl::compat::mark_submitted(node);
  push_if_ready(node);
  POCL_UNLOCK_OBJ(node->sync.event.event);
}

void pocl_memlayer_notify(cl_device_id, cl_event event, cl_event finished) {
  // Called with `event` locked, by PoCL's broadcast of `finished` (one of
  // its dependencies), which holds `finished` locked too and names `event`
  // without a reference. Failing `event` here would end it under that
  // broadcast (a failed event is released as it ends: the broadcast would
  // then touch a freed event, and so would the broadcasts of its other
  // dependencies, which still name it: a use after free). So a failed
  // dependency only marks it; once its last dependency has ended, it goes
  // to a worker, which fails it instead of running it
  // (MemlayerDevice::worker).
  if (event->status <= CL_COMPLETE) return;
  if (finished->status < CL_COMPLETE) event->dependency_failed = 1;
  push_if_ready(event->command);
}

void pocl_memlayer_run(void*, _cl_command_node* node) { device_of(node->device).run_inline(node); }

}  // extern "C"

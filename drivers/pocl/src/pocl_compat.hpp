// Where PoCL 3.1 (Debian's, with patches/pocl-3.1-memlayer.patch) and PoCL
// 7.1 (with patches/pocl-7.1-memlayer-driver.patch) differ for this driver:
// every version conditional of drivers/pocl/src is here, so the other files
// read the same for both. MEMLAYER_POCL_MAJOR comes from pocl-tree.cmake
// (PoCL's own MAJOR_VERSION).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include "pocl_headers.hpp"

#ifndef MEMLAYER_POCL_MAJOR
#error "MEMLAYER_POCL_MAJOR is not set (drivers/pocl/pocl-tree.cmake sets it from PoCL's MAJOR_VERSION)"
#endif

#if MEMLAYER_POCL_MAJOR >= 7
#include "pocl_builtin_kernels.h"
extern "C" {
#include "common_utils.h"
}
#ifdef BUILD_MEMLAYER_ENGINE
// memlayer's engine in PoCL's core (drivers/pocl/core): the fallbacks of the
// migrations it makes.
#include "pocl_memlayer_migration.h"
#endif
#else
#include "builtin_kernels.hh"
// memlayer's engine in PoCL's core (drivers/pocl/core): the fallbacks of the
// migrations it makes.
#include "pocl_memlayer_migration.h"
// libpocl's clReleaseEvent, by its exported (C) name: its headers declare
// it without C linkage for C++, so the name would be mangled.
extern "C" cl_int memlayer_release_event(cl_event event) __asm__("POclReleaseEvent");
#endif

// Driver entry points whose signatures differ (prototypes.inc declares them).
// reinit: 7.1 passes the device's parameters again.
// migrate_d2d: the 3.1 patch adds the byte range to move; 7.1 moves the
// whole object (a sub-buffer is an object of its own there), and
// MEMLAYER_MIGRATE_D2D_RANGE names that range inside the function.
#if MEMLAYER_POCL_MAJOR >= 7
#define MEMLAYER_REINIT_PARAMS unsigned j, cl_device_id device, const char*
#define MEMLAYER_MIGRATE_D2D_PARAMS \
  cl_device_id, cl_device_id, cl_mem mem, pocl_mem_identifier *src_mem_id, pocl_mem_identifier *dst_mem_id
#define MEMLAYER_MIGRATE_D2D_RANGE 0, mem->size
#else
#define MEMLAYER_REINIT_PARAMS unsigned j, cl_device_id device
#define MEMLAYER_MIGRATE_D2D_PARAMS                                                          \
  cl_device_id, cl_device_id, cl_mem mem, size_t offset, size_t size, pocl_mem_identifier *src_mem_id, \
      pocl_mem_identifier *dst_mem_id
#define MEMLAYER_MIGRATE_D2D_RANGE offset, size
#endif

namespace memlayer::pocl::compat {

/// The CPU device's standard information (OpenCL C version, extensions,
/// atomics, topology, cpuinfo, image limits), before the driver sets its own
/// memory figures and compute units. global_mem_id stays the one devices.c
/// assigned (the device index): the device has memory of its own.
inline cl_int setup_cpu_device_infos(cl_device_id device) {
#if MEMLAYER_POCL_MAJOR >= 7
  const unsigned global_mem_id = device->global_mem_id;
  const cl_int status = pocl_cpu_init_common(device);  // sets global_mem_id = 0 (host memory)
  device->global_mem_id = global_mem_id;
  if (status != CL_SUCCESS) return status;
  // No USM; SVM only as the driver's init sets it (svm.hpp).
  device->svm_caps = 0;
  device->svm_allocation_priority = 0;
  device->host_usm_capabs = 0;
  device->device_usm_capabs = 0;
  device->single_shared_usm_capabs = 0;
  return CL_SUCCESS;
#else
  pocl_init_default_device_infos(device);
  device->version_of_latest_passed_cts = HOST_DEVICE_LATEST_CTS_PASS;
  device->extensions = HOST_DEVICE_EXTENSIONS;
#if (HOST_DEVICE_CL_VERSION_MAJOR >= 3)
  device->features = HOST_DEVICE_FEATURES_30;
  pocl_setup_opencl_c_with_version(device, CL_TRUE);
  pocl_setup_features_with_version(device);
#else
  pocl_setup_opencl_c_with_version(device, CL_FALSE);
#endif
  pocl_setup_extensions_with_version(device);
  pocl_setup_builtin_kernels_with_version(device);
  pocl_setup_ils_with_version(device);
  device->on_host_queue_props = CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE;
#if (HOST_DEVICE_CL_VERSION_MAJOR >= 3)
  device->atomic_memory_capabilities = CL_DEVICE_ATOMIC_ORDER_RELAXED | CL_DEVICE_ATOMIC_ORDER_ACQ_REL |
                                       CL_DEVICE_ATOMIC_ORDER_SEQ_CST | CL_DEVICE_ATOMIC_SCOPE_WORK_GROUP |
                                       CL_DEVICE_ATOMIC_SCOPE_DEVICE;
  device->atomic_fence_capabilities = CL_DEVICE_ATOMIC_ORDER_RELAXED | CL_DEVICE_ATOMIC_ORDER_ACQ_REL |
                                      CL_DEVICE_ATOMIC_ORDER_SEQ_CST | CL_DEVICE_ATOMIC_SCOPE_WORK_ITEM |
                                      CL_DEVICE_ATOMIC_SCOPE_WORK_GROUP | CL_DEVICE_ATOMIC_SCOPE_DEVICE;
#endif
  device->svm_caps = 0;
  device->svm_allocation_priority = 0;

  device->global_mem_size = 1;  // topology detection asks for a nonzero value
  if (pocl_topology_detect_device_info(device) != 0) return CL_INVALID_DEVICE;
  pocl_cpuinfo_detect_device_info(device);
  pocl_set_buffer_image_limits(device);
  return CL_SUCCESS;
#endif
}

/// 7.1 reads device->available through a pointer, which init sets.
inline void mark_available(cl_device_id device) {
#if MEMLAYER_POCL_MAJOR >= 7
  static cl_bool available = CL_TRUE;
  device->available = &available;
#else
  (void)device;
#endif
}

/// submit() marks the command as seen; notify() queues it only then.
inline void mark_submitted(_cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7
  node->state = POCL_COMMAND_READY;
#else
  node->ready = 1;
#endif
}
inline bool is_submitted(const _cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7
  return node->state == POCL_COMMAND_READY;
#else
  return node->ready != 0;
#endif
}

/// Fails a command's event (not locked by the caller) that a worker took:
/// submitted, every dependency ended. The event may be freed by the time
/// this returns (ending it drops the queue's reference): the caller must
/// not touch it after. (3.1's pocl_update_event_failed() takes the event
/// locked and locks it again after ending it, a use after free when that
/// dropped the last reference: a reference of ours keeps it until then.)
inline void fail_event(cl_event event, const char* message) {
#if MEMLAYER_POCL_MAJOR >= 7
  POCL_UPDATE_EVENT_FAILED_MSG(CL_FAILED, event, message);
#else
  (void)message;
  POCL_LOCK_OBJ(event);
  ++event->pocl_refcount;
  pocl_update_event_failed(event);
  POCL_UNLOCK_OBJ(event);
  memlayer_release_event(event);
#endif
}

/// Compiles (or finds) the work-group function for this launch and leaves
/// it in node->command.run.wg; false when it could not be made.
inline bool load_kernel(_cl_command_node* node) {
  char* saved_name = nullptr;
  pocl_sanitize_builtin_kernel_name(node->command.run.kernel, &saved_name);
#if MEMLAYER_POCL_MAJOR >= 7
  void* handle = pocl_check_kernel_dlhandle_cache(node, CL_TRUE, CL_TRUE);
  node->command.run.device_data = handle;
  pocl_restore_builtin_kernel_name(node->command.run.kernel, saved_name);
  return handle != nullptr && node->command.run.wg != nullptr;
#else
  pocl_check_kernel_dlhandle_cache(node, 1, 1);
  pocl_restore_builtin_kernel_name(node->command.run.kernel, saved_name);
  return node->command.run.wg != nullptr;
#endif
}
inline void release_kernel(_cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7
  pocl_release_dlhandle_cache(node->command.run.device_data);
  node->command.run.device_data = nullptr;
#else
  pocl_release_dlhandle_cache(node);
#endif
}

/// 7.1: a program's program-scope global variables live in a buffer per
/// device, set up by an init kernel before the first launch; the launch's
/// context points at it. False when that set-up failed.
inline bool setup_global_variables(_cl_command_node* node, pocl_context& context) {
#if MEMLAYER_POCL_MAJOR >= 7
  cl_program program = node->command.run.kernel->program;
  const cl_uint dev_i = node->program_device_i;
  if (pocl_driver_build_gvar_init_kernel(program, dev_i, node->device, pocl_cpu_gvar_init_callback) != 0) return false;
  context.global_var_buffer = static_cast<uchar*>(program->gvar_storage[dev_i]);
#else
  (void)node;
  (void)context;
#endif
  return true;
}

/// A pointer argument that passes a raw address (SVM/USM) rather than a cl_mem.
inline bool is_raw_pointer(const pocl_argument& argument) {
#if MEMLAYER_POCL_MAJOR >= 7
  return argument.is_raw_ptr != 0;
#else
  return argument.is_svm != 0;
#endif
}

/// What a chunk of work-groups left in its printf buffer. 3.1's kernels
/// store the formatted text; 7.1's store encoded records, which PoCL
/// decodes, and by default (ENABLE_PRINTF_IMMEDIATE_FLUSH) the kernel has
/// printed each one already.
inline void write_printf_output(char* buffer, std::uint32_t bytes) {
  if (bytes == 0) return;
#if MEMLAYER_POCL_MAJOR >= 7
#ifndef ENABLE_PRINTF_IMMEDIATE_FLUSH
  pocl_write_printf_buffer(buffer, bytes);
#else
  (void)buffer;
#endif
#else
  const ssize_t written = write(STDOUT_FILENO, buffer, bytes);
  (void)written;  // printf output is best effort, as on every PoCL CPU device
#endif
}

/// The calling thread's floating-point environment while it runs a chunk
/// of work-groups: the program's flush-to-zero mode and the default
/// rounding; the previous one is restored at the end.
class KernelFloatMode {
 public:
  KernelFloatMode(cl_device_id device, cl_program program) {
#if MEMLAYER_POCL_MAJOR >= 7
    pocl_cpu_save_rm_and_ftz(&rm_, &ftz_);
    pocl_cpu_setup_rm_and_ftz(device, program);
#else
    (void)device;
    ftz_ = pocl_save_ftz();
    pocl_set_ftz(program->flush_denorms);
#endif
  }
  ~KernelFloatMode() {
#if MEMLAYER_POCL_MAJOR >= 7
    pocl_cpu_restore_rm_and_ftz(rm_, ftz_);
#else
    pocl_restore_ftz(ftz_);
#endif
  }
  KernelFloatMode(const KernelFloatMode&) = delete;
  KernelFloatMode& operator=(const KernelFloatMode&) = delete;

  /// Before each work-group: a kernel may change the rounding mode (3.1;
  /// 7.1's CPU drivers set it once per chunk, and so does this driver).
  static void before_group() {
#if MEMLAYER_POCL_MAJOR < 7
    pocl_set_default_rm();
#endif
  }

 private:
  unsigned rm_ = 0;
  unsigned ftz_ = 0;
};

/// After migration command `node` failed its tries: whether to try it
/// again (it now reads from another complete copy of its bytes, or is the
/// last copy of bytes being evicted: pocl_ml_migration_retry). A PoCL 7.1
/// built without memlayer's engine: never.
inline bool retry_migration(_cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7 && !defined(BUILD_MEMLAYER_ENGINE)
  (void)node;
  return false;
#else
  return pocl_ml_migration_retry(node) != 0;
#endif
}

/// Migration command `node` has been run or failed (pocl_ml_migration_ended).
inline void migration_ended(_cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7 && !defined(BUILD_MEMLAYER_ENGINE)
  (void)node;
#else
  pocl_ml_migration_ended(node);
#endif
}

/// What migration command `node` moves, for messages: a byte range of a
/// buffer (size 0 in the command: all of it).
inline std::string migration_bytes(const _cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7
  const cl_mem mem = node->migr_infos->buffer;
#ifdef BUILD_MEMLAYER_ENGINE
  const std::size_t offset = node->migr_infos->offset, size = node->migr_infos->size;
#else
  const std::size_t offset = 0, size = 0;
#endif
#else
  const cl_mem mem = node->sync.event.event->mem_objs[0];
  const std::size_t offset = node->command.migrate.offset, size = node->command.migrate.size;
#endif
  const std::size_t end = offset + (size != 0 ? size : mem->size);
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(end) + ") of buffer " + std::to_string(mem->id);
}

/// 7.1 with memlayer's engine: this driver's migrations move only their
/// byte range (pocl_exec_command for host transfers, migrate_d2d_range
/// between devices), so the engine plans byte ranges for its devices. 3.1's
/// patch gave every driver ranged migrations: nothing to declare.
inline void declare_range_migrations(cl_device_id device) {
#if MEMLAYER_POCL_MAJOR >= 7 && defined(BUILD_MEMLAYER_ENGINE)
  device->honours_migration_ranges = CL_TRUE;
#else
  (void)device;
#endif
}
/// Makes migration command `node` move its whole buffer, as a driver
/// without the capability above does whatever range it is given (the
/// parameter migration_ranges=0 makes this driver one, for testing how
/// memlayer's engine copes). 7.1 with memlayer's engine only: elsewhere a
/// migration names no range.
inline void widen_to_whole_buffer(_cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7 && defined(BUILD_MEMLAYER_ENGINE)
  if (node->migr_infos == nullptr) return;
  node->migr_infos->offset = 0;
  node->migr_infos->size = 0;
#else
  (void)node;
#endif
}
using MigrateD2DRange = int (*)(cl_device_id, cl_device_id, cl_mem, size_t, size_t, pocl_mem_identifier*,
                                pocl_mem_identifier*);
inline void set_migrate_d2d_range(pocl_device_ops* ops, MigrateD2DRange f) {
#if MEMLAYER_POCL_MAJOR >= 7 && defined(BUILD_MEMLAYER_ENGINE)
  ops->migrate_d2d_range = f;
#else
  (void)ops;
  (void)f;
#endif
}

}  // namespace memlayer::pocl::compat

// SVM on memlayer devices: the process's space and the driver's svm_* ops
// (svm.hpp says why SVM bytes are the same for the host and every device).
#include "svm.hpp"

#include <atomic>
#include <memory>
#include <mutex>

#include "memlayer_device.hpp"

namespace memlayer::pocl {

namespace {

std::atomic<drivers::SvmSpace*> g_space{nullptr};
std::mutex g_space_mutex;

// Every SVM allocation's address and size is a multiple of this: the
// largest OpenCL C type, which bounds clSVMAlloc's alignment on a CPU
// device (min_data_type_align_size).
constexpr std::uint64_t kSvmGranularity = 128;

}  // namespace

drivers::SvmSpace* svm_space() noexcept { return g_space.load(std::memory_order_acquire); }

drivers::DevResult<drivers::SvmSpace*> svm_space(std::uint64_t size) {
  if (drivers::SvmSpace* s = svm_space()) return s;
  std::lock_guard lock(g_space_mutex);
  if (drivers::SvmSpace* s = svm_space()) return s;
  auto made = drivers::SvmSpace::create("memlayer SVM space", size, kSvmGranularity);
  if (!made.ok()) return made.error();
  // Kept until the process ends, never unmapped: PoCL's workers may still
  // run kernels on SVM bytes while exit() destroys statics.
  drivers::SvmSpace* s = std::make_unique<drivers::SvmSpace>(std::move(made).value()).release();
  g_space.store(s, std::memory_order_release);
  return s;
}

void* svm_storage(cl_mem mem) {
  drivers::SvmSpace* space = svm_space();
  if (space == nullptr || (mem->flags & CL_MEM_USE_HOST_PTR) == 0 || mem->mem_host_ptr == nullptr) return nullptr;
  const auto allocation = space->find(mem->mem_host_ptr);
  if (!allocation) return nullptr;
  const auto offset = static_cast<std::uint64_t>(static_cast<std::byte*>(mem->mem_host_ptr) - allocation->data);
  return mem->size <= allocation->size - offset ? mem->mem_host_ptr : nullptr;
}

bool is_svm_storage(const void* p) noexcept {
  drivers::SvmSpace* space = svm_space();
  return space != nullptr && space->contains(p, 1);
}

}  // namespace memlayer::pocl

using memlayer::pocl::MemlayerDevice;

extern "C" {

void* pocl_memlayer_svm_alloc(cl_device_id dev, cl_svm_mem_flags, size_t size) {
  // The core refuses fine-grained flags: the device reports coarse-grained
  // buffers only.
  const auto& params = static_cast<MemlayerDevice*>(dev->data)->parameters();
  auto space = memlayer::pocl::svm_space(params.svm_space);
  if (!space.ok()) {
    POCL_MSG_ERR("%s\n", space.error().c_str());
    return nullptr;
  }
  auto p = space.value()->allocate(size, dev->mem_base_addr_align);
  if (!p.ok()) {
    POCL_MSG_ERR("clSVMAlloc of %zu bytes: %s\n", size, p.error().c_str());
    return nullptr;
  }
  return p.value();
}

void pocl_memlayer_svm_free(cl_device_id, void* svm_ptr) {
  memlayer::drivers::SvmSpace* space = memlayer::pocl::svm_space();
  if (space == nullptr) {
    POCL_MSG_ERR("clSVMFree(%p): no memlayer device made an SVM allocation\n", svm_ptr);
    return;
  }
  auto freed = space->free(svm_ptr);
  if (!freed.ok()) POCL_MSG_ERR("clSVMFree: %s\n", freed.error().c_str());
}

// The host and the device see the same bytes: nothing to move.
void pocl_memlayer_svm_map(cl_device_id, void*) {}
void pocl_memlayer_svm_unmap(cl_device_id, void*) {}

}  // extern "C"

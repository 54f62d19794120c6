#include "memlayer/drivers/device_memory.hpp"

#include <hwloc.h>

#include <mutex>
#include <new>
#include <utility>

namespace memlayer::drivers {

// One hwloc topology per process: loading it is slow (tens of ms), and its
// objects must outlive every arena bound through it. Arenas share it by
// shared_ptr; it is loaded again only after every arena is gone.
class NumaTopology {
 public:
  static DevResult<std::shared_ptr<NumaTopology>> shared() {
    static std::mutex mutex;
    static std::weak_ptr<NumaTopology> current;
    std::lock_guard lock(mutex);
    if (auto t = current.lock()) return t;
    auto t = std::make_shared<NumaTopology>();
    if (hwloc_topology_init(&t->topology_) != 0) return std::string("hwloc_topology_init failed");
    t->initialised_ = true;
    if (hwloc_topology_load(t->topology_) != 0) return std::string("hwloc_topology_load failed");
    current = t;
    return t;
  }

  NumaTopology() = default;
  NumaTopology(const NumaTopology&) = delete;
  NumaTopology& operator=(const NumaTopology&) = delete;
  ~NumaTopology() {
    if (initialised_) hwloc_topology_destroy(topology_);
  }

  [[nodiscard]] hwloc_topology_t get() const { return topology_; }
  [[nodiscard]] int node_count() const {
    const int n = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
    return n > 0 ? n : 1;
  }
  [[nodiscard]] hwloc_obj_t node(int index) const {
    return index < 0 ? nullptr : hwloc_get_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(index));
  }

 private:
  hwloc_topology_t topology_ = nullptr;
  bool initialised_ = false;
};

DevResult<DeviceArena> DeviceArena::create(std::uint64_t size, int numa_node) {
  if (size == 0) return std::string("device arena: size must be > 0");
  auto topology = NumaTopology::shared();
  if (!topology.ok()) return "device arena: " + topology.error();
  std::shared_ptr<NumaTopology> topo = std::move(topology).value();
  const int node = numa_node < 0 ? -1 : numa_node % topo->node_count();
  void* p = nullptr;
  bool bound = false;
  if (hwloc_obj_t obj = topo->node(node); obj != nullptr) {
    p = hwloc_alloc_membind(topo->get(), size, obj->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    bound = p != nullptr;
  }
  if (p == nullptr) p = hwloc_alloc(topo->get(), size);
  if (p == nullptr) return "device arena: cannot allocate " + std::to_string(size) + " bytes of host memory";
  return DeviceArena(std::move(topo), static_cast<std::byte*>(p), size, node, bound);
}

int DeviceArena::numa_node_count() {
  auto topology = NumaTopology::shared();
  return topology.ok() ? topology.value()->node_count() : 1;
}

DeviceArena::DeviceArena(std::shared_ptr<NumaTopology> topology, std::byte* data, std::uint64_t size, int node,
                         bool bound)
    : topology_(std::move(topology)), data_(data), size_(size), numa_node_(node), bound_(bound) {}

DeviceArena::DeviceArena(DeviceArena&& other) noexcept
    : topology_(std::move(other.topology_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      numa_node_(other.numa_node_),
      bound_(other.bound_) {}

DeviceArena& DeviceArena::operator=(DeviceArena&& other) noexcept {
  if (this != &other) {
    release();
    topology_ = std::move(other.topology_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    numa_node_ = other.numa_node_;
    bound_ = other.bound_;
  }
  return *this;
}

DeviceArena::~DeviceArena() { release(); }

void DeviceArena::release() noexcept {
  if (data_ != nullptr) hwloc_free(topology_->get(), data_, size_);
  data_ = nullptr;
}

std::byte* DeviceArena::locate(std::uint64_t offset, std::uint64_t length) const noexcept {
  if (offset > size_ || length > size_ - offset) return nullptr;
  return data_ + offset;
}

bool DeviceArena::contains(const void* p, std::uint64_t length) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto base = reinterpret_cast<std::uintptr_t>(data_);
  return a >= base && locate(a - base, length) != nullptr;
}

bool DeviceArena::bind_current_thread() const {
  hwloc_obj_t obj = topology_ ? topology_->node(numa_node_) : nullptr;
  if (obj == nullptr || obj->cpuset == nullptr) return false;
  return hwloc_set_cpubind(topology_->get(), obj->cpuset, HWLOC_CPUBIND_THREAD) == 0;
}

DevResult<DeviceMemory> DeviceMemory::create(std::string name, std::uint64_t size, int numa_node,
                                             std::uint64_t granularity) {
  if (granularity == 0 || granularity > 4096 || (granularity & (granularity - 1)) != 0)
    return name + ": granularity " + std::to_string(granularity) + " is not a power of two in [1, 4096]";
  auto arena = DeviceArena::create(size, numa_node);
  if (!arena.ok()) return name + ": " + arena.error();
  // The region's addresses are the arena's host addresses (page-aligned, so a
  // multiple of any granularity up to 4096): a block address is a pointer.
  const auto base = reinterpret_cast<std::uintptr_t>(arena.value().data());
  auto region = bufalloc::LockedRegion::create(base, size, bufalloc::RegionOptions{granularity});
  if (!region.ok()) return name + ": " + region.error().message();
  return DeviceMemory(std::move(name), std::move(arena).value(),
                      std::make_unique<bufalloc::LockedRegion>(std::move(region).value()));
}

DeviceMemory::DeviceMemory(std::string name, DeviceArena arena, std::unique_ptr<bufalloc::LockedRegion> region)
    : name_(std::move(name)), arena_(std::move(arena)), region_(std::move(region)) {}

DevResult<DeviceBlock> DeviceMemory::allocate(std::uint64_t size, std::uint64_t alignment) {
  auto a = region_->allocate(size, alignment);
  if (!a.ok()) return name_ + ": " + a.error().message();
  return DeviceBlock{reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(a.value().address)), a.value()};
}

DevResult<void> DeviceMemory::free(const bufalloc::BlockHandle& block) {
  auto r = region_->free(block);
  if (!r.ok()) return name_ + ": " + r.error().message();
  return {};
}

DevResult<void> DeviceMemory::free(const std::byte* block) {
  try {
    auto r = region_->free(reinterpret_cast<std::uintptr_t>(block));
    if (!r.ok()) return name_ + ": " + r.error().message();
  } catch (const std::bad_alloc&) {  // building the address index
    return name_ + ": " + bufalloc::Error{bufalloc::Errc::host_out_of_memory}.message();
  }
  return {};
}

}  // namespace memlayer::drivers

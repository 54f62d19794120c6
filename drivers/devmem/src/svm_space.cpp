#include "memlayer/drivers/svm_space.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <utility>

#include "memlayer/bufalloc/region.hpp"

namespace memlayer::drivers {

namespace {

std::string pointer_text(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

}  // namespace

struct SvmSpace::State {
  State(std::string n, std::byte* b, std::uint64_t s, bufalloc::Region r)
      : name(std::move(n)), base(b), size(s), region(std::move(r)) {}
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() { ::munmap(base, size); }

  struct Live {
    std::uint64_t size;         // as requested
    bufalloc::BlockHandle handle;
  };

  const std::string name;
  std::byte* const base;
  const std::uint64_t size;
  mutable std::mutex mutex;
  bufalloc::Region region;                   // guarded by mutex
  std::map<std::uintptr_t, Live> live;       // by first byte; guarded by mutex

  // The whole pages inside [p, p + bytes) back to the system. Pages an
  // allocation shares with a neighbour stay.
  void release_pages(std::uintptr_t p, std::uint64_t bytes) const {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t first = (p + page - 1) / page * page;
    const std::uintptr_t end = (p + bytes) / page * page;
    if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  }
};

DevResult<SvmSpace> SvmSpace::create(std::string name, std::uint64_t size, std::uint64_t granularity) {
  if (size == 0) return name + ": the SVM space's size must be > 0";
  if (granularity == 0 || granularity > 4096 || (granularity & (granularity - 1)) != 0)
    return name + ": granularity " + std::to_string(granularity) + " is not a power of two in [1, 4096]";
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)  // NOLINT: the C API's own cast
    return name + ": cannot reserve " + std::to_string(size) + " bytes of address space (" + std::strerror(errno) +
           ")";
  auto* base = static_cast<std::byte*>(p);
  auto region = bufalloc::Region::create(reinterpret_cast<std::uintptr_t>(base), size, {granularity});
  if (!region.ok()) {
    ::munmap(p, size);
    return name + ": " + region.error().message();
  }
  return SvmSpace(std::make_unique<State>(std::move(name), base, size, std::move(region).value()));
}

SvmSpace::SvmSpace(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
SvmSpace::SvmSpace(SvmSpace&&) noexcept = default;
SvmSpace& SvmSpace::operator=(SvmSpace&&) noexcept = default;
SvmSpace::~SvmSpace() = default;

DevResult<std::byte*> SvmSpace::allocate(std::uint64_t size, std::uint64_t alignment) {
  std::lock_guard lock(state_->mutex);
  auto block = state_->region.allocate(size, alignment);
  if (!block.ok()) return state_->name + ": " + block.error().message();
  try {
    state_->live.emplace(block.value().address, State::Live{size, block.value()});
  } catch (const std::bad_alloc&) {
    (void)state_->region.free(block.value());
    return state_->name + ": " + bufalloc::Error{bufalloc::Errc::host_out_of_memory}.message();
  }
  return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(block.value().address));
}

DevResult<void> SvmSpace::free(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(state_->mutex);
  auto it = state_->live.find(a);
  if (it == state_->live.end()) {
    if (p == nullptr) return state_->name + ": cannot free a null pointer";
    if (!contains(p, 1)) return state_->name + ": " + pointer_text(p) + " is not in the SVM space";
    return state_->name + ": " + pointer_text(p) + " is not the start of a live SVM allocation";
  }
  auto r = state_->region.free(it->second.handle);
  if (!r.ok()) return state_->name + ": " + r.error().message();
  const std::uint64_t granularity = state_->region.granularity();
  state_->release_pages(a, (it->second.size + granularity - 1) / granularity * granularity);
  state_->live.erase(it);
  return {};
}

std::optional<SvmSpace::Allocation> SvmSpace::find(const void* p) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(state_->mutex);
  auto it = state_->live.upper_bound(a);
  if (it == state_->live.begin()) return std::nullopt;
  --it;
  if (a - it->first >= it->second.size) return std::nullopt;
  return Allocation{reinterpret_cast<std::byte*>(it->first), it->second.size};
}

bool SvmSpace::contains(const void* p, std::uint64_t length) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto base = reinterpret_cast<std::uintptr_t>(state_->base);
  return a >= base && a - base <= state_->size && length <= state_->size - (a - base);
}

bufalloc::RegionStats SvmSpace::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->region.stats();
}

std::uint64_t SvmSpace::size() const noexcept { return state_->size; }
const std::string& SvmSpace::name() const noexcept { return state_->name; }

}  // namespace memlayer::drivers

#include "memlayer/runtime/local_memory.hpp"

#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "memlayer/bufalloc/linear_region.hpp"

namespace memlayer::runtime {

Result<std::vector<std::uint64_t>> layout_local(std::span<const std::uint64_t> sizes, std::uint64_t capacity) {
  std::vector<std::uint64_t> offsets;
  if (sizes.empty()) return offsets;
  auto space = bufalloc::LinearRegion::create(0, capacity);
  if (!space) return Status::error(cl::kOutOfResources, "local memory: the device has none");
  std::uint64_t requested = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0)
      return Status::error(cl::kInvalidKernelArgs, "local memory: argument " + std::to_string(i) + " has size 0");
    requested += sizes[i];
    auto at = space.value().allocate(sizes[i], kLocalAlignment);
    if (!at) {
      return Status::error(cl::kOutOfResources, "local memory: the launch needs at least " +
                                                    std::to_string(requested) + " bytes in " +
                                                    std::to_string(sizes.size()) + " arguments; the device has " +
                                                    std::to_string(capacity));
    }
    offsets.push_back(at.value());
  }
  return offsets;
}

namespace {
std::byte* worker_local_memory(std::uint64_t capacity) {
  struct FreeDeleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  thread_local std::unique_ptr<std::byte, FreeDeleter> memory;
  thread_local std::uint64_t size = 0;
  if (size < capacity) {
    const std::uint64_t rounded = (capacity + kLocalAlignment - 1) / kLocalAlignment * kLocalAlignment;
    memory.reset(static_cast<std::byte*>(std::aligned_alloc(kLocalAlignment, rounded)));
    if (!memory) throw std::bad_alloc();
    size = rounded;
  }
  return memory.get();
}
}  // namespace

Status append_local_pointers(std::span<const std::uint64_t> sizes, std::uint64_t capacity,
                             std::vector<void*>& pointers) {
  auto layout = layout_local(sizes, capacity);
  if (!layout) return layout.error();
  if (sizes.empty()) return {};
  try {
    std::byte* local = worker_local_memory(capacity);
    for (std::uint64_t offset : layout.value()) pointers.push_back(local + offset);
  } catch (const std::bad_alloc&) {
    return Status::error(cl::kOutOfHostMemory, "local memory: no host memory to simulate it");
  }
  return {};
}

}  // namespace memlayer::runtime

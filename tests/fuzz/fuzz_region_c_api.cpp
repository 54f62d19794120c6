// libFuzzer target for the C API. The input is a little program: a region
// geometry, then operations (allocate by address or as a block handle, free a
// live block by handle or by address, free an arbitrary address, free a dead
// or foreign handle, reset, linear-allocator calls, ask for the cheapest
// hole, checked against a brute-force search). After every operation
// the results are checked against a reference set of live blocks and,
// regularly, against the allocator's own invariant checker. A refused free
// must change nothing. Any disagreement traps.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "memlayer/bufalloc.h"

namespace {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  template <class T>
  T take() {
    T v{};
    const std::size_t n = size_ - pos_ < sizeof(T) ? size_ - pos_ : sizeof(T);
    std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

[[noreturn]] void fail() { __builtin_trap(); }
void require(bool ok) {
  if (!ok) fail();
}

struct Live {
  std::uint64_t size;  // rounded to the granularity
  ml_block block;      // all zero when allocated by address
  bool has_handle;
};

bool overlaps(const std::map<std::uint64_t, Live>& live, std::uint64_t a, std::uint64_t size) {
  auto next = live.lower_bound(a);
  if (next != live.end() && next->first < a + size) return true;
  if (next != live.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > a) return true;
  }
  return false;
}

std::uint64_t live_blocks(const ml_region* region) {
  ml_region_stats st{};
  require(ml_region_get_stats(region, &st) == ML_OK);
  return st.live_blocks;
}


// The region's blocks in address order, from the reference set: each live
// block, and the free space between them (one free block: the region merges
// neighbours).
struct RefBlock {
  std::uint64_t address, size;
  bool live;
};
std::vector<RefBlock> tiling(const std::map<std::uint64_t, Live>& live, std::uint64_t base, std::uint64_t usable) {
  std::vector<RefBlock> blocks;
  std::uint64_t at = base;
  for (const auto& [a, l] : live) {
    if (a > at) blocks.push_back({at, a - at, false});
    blocks.push_back({a, l.size, true});
    at = a + l.size;
  }
  if (at < base + usable) blocks.push_back({at, base + usable - at, false});
  return blocks;
}

// As the region's cheapest_hole() judges a run [start, end): the request,
// its alignment padding included, lies within it.
bool holds(std::uint64_t start, std::uint64_t end, std::uint64_t asize, std::uint64_t align) {
  const std::uint64_t pad = (align - (start % align)) % align;
  return end - start >= asize && end - start - asize >= pad;
}

// The fuzzer's eviction filter: refuses some live blocks, by address.
struct Filter {
  std::uint64_t granularity;
  std::uint8_t seed;
  bool accepts(std::uint64_t address) const { return ((address / granularity) ^ seed) % 5 != 0; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  const std::uint64_t granularity = std::uint64_t{1} << (in.take<std::uint8_t>() % 13);
  const std::uint64_t base = in.take<std::uint32_t>() * granularity;
  const std::uint64_t region_size = in.take<std::uint32_t>() % (std::uint64_t{1} << 26);
  const std::uint32_t flags = in.take<std::uint8_t>() & 1u;

  ml_region* region = nullptr;
  const ml_status made = ml_region_create(base, region_size, granularity, flags, &region);
  if (made != ML_OK) {
    require(region == nullptr && ml_last_error_message()[0] != '\0');
    return 0;
  }
  ml_linear* linear = nullptr;
  require(ml_linear_create(base, region_size == 0 ? 1 : region_size, &linear) == ML_OK);
  // Same geometry: its handles differ from the region's only by region id.
  ml_region* other = nullptr;
  require(ml_region_create(base, region_size, granularity, flags, &other) == ML_OK);

  std::map<std::uint64_t, Live> live;  // by address
  std::vector<ml_block> dead;          // handles of freed blocks
  ml_linear_mark mark{};
  require(ml_linear_mark_get(linear, &mark) == ML_OK);
  int steps = 0;
  while (!in.empty()) {
    const std::uint8_t op = in.take<std::uint8_t>();
    switch (op % 10) {
      case 0:
      case 1:
      case 6: {  // allocate: by address (0) or as a block handle (1, 6)
        const std::uint64_t want = in.take<std::uint16_t>() * (std::uint64_t{1} << (op >> 4));
        const std::uint8_t a = in.take<std::uint8_t>();
        const std::uint64_t align = a == 0 ? 0 : (a < 64 ? std::uint64_t{1} << a : a);
        std::uint64_t addr = 0;
        ml_block block{};
        const bool as_block = op % 10 != 0;
        const ml_status s = as_block ? ml_region_alloc_block(region, want, align, &block)
                                     : ml_region_alloc(region, want, align, &addr);
        if (as_block) addr = block.address;
        if (s == ML_OK) {
          const std::uint64_t rounded = (want + granularity - 1) / granularity * granularity;
          require(want != 0 && addr % granularity == 0);
          require(align == 0 || addr % align == 0);
          require(addr >= base && addr - base + rounded <= region_size);
          require(!overlaps(live, addr, rounded));
          live[addr] = Live{rounded, block, as_block};
        } else {
          require(s == ML_ERROR_ZERO_SIZE || s == ML_ERROR_OUT_OF_MEMORY || s == ML_ERROR_SIZE_OVERFLOW ||
                  s == ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO || s == ML_ERROR_ALIGNMENT_OVERFLOW);
        }
        break;
      }
      case 2:
      case 7: {  // free a live block: by handle when it has one (mostly), else by address
        if (live.empty()) break;
        auto it = live.lower_bound(base + in.take<std::uint32_t>() % (region_size + 1));
        if (it == live.end()) it = live.begin();
        const bool by_handle = it->second.has_handle && op % 10 == 7;
        require((by_handle ? ml_region_free_block(region, &it->second.block) : ml_region_free(region, it->first)) ==
                ML_OK);
        if (it->second.has_handle && dead.size() < 256) dead.push_back(it->second.block);
        live.erase(it);
        break;
      }
      case 8: {  // a dead, foreign or altered handle: refused, by name, changing nothing
        const std::uint64_t before = live_blocks(region);
        const std::uint8_t sub = in.take<std::uint8_t>();
        ml_status s = ML_OK;
        if (sub % 3 == 0 && !dead.empty()) {
          s = ml_region_free_block(region, &dead[sub % dead.size()]);
          require(s == ML_ERROR_DOUBLE_FREE || s == ML_ERROR_STALE_HANDLE);
        } else if (sub % 3 == 1) {
          ml_block theirs{};
          if (ml_region_alloc_block(other, 1 + sub, 0, &theirs) != ML_OK) {
            require(ml_region_reset(other) == ML_OK);
            break;
          }
          s = ml_region_free_block(region, &theirs);
          require(s == ML_ERROR_FOREIGN_HANDLE);
        } else {
          ml_block altered{};
          for (auto& [a, l] : live)
            if (l.has_handle) altered = l.block;
          altered.index ^= 1u + (sub >> 2);  // another record, or none at all
          s = ml_region_free_block(region, &altered);
          require(s == ML_ERROR_FOREIGN_HANDLE || s == ML_ERROR_STALE_HANDLE || s == ML_ERROR_DOUBLE_FREE);
        }
        require(live_blocks(region) == before);
        break;
      }
      case 3: {  // free an arbitrary address: must fail unless it starts a live block
        const std::uint64_t addr = base + in.take<std::uint32_t>() - 0x100;
        const ml_status s = ml_region_free(region, addr);
        if (auto it = live.find(addr); it != live.end()) {
          require(s == ML_OK);
          if (it->second.has_handle && dead.size() < 256) dead.push_back(it->second.block);
          live.erase(it);
        } else {
          require(s == ML_ERROR_ADDRESS_OUTSIDE_REGION || s == ML_ERROR_NOT_BLOCK_START || s == ML_ERROR_DOUBLE_FREE);
        }
        break;
      }
      case 4: {  // reset, rarely
        if (in.take<std::uint8_t>() < 8) {
          require(ml_region_reset(region) == ML_OK);
          for (auto& [a, l] : live)
            if (l.has_handle && dead.size() < 256) dead.push_back(l.block);  // stale from now on
          live.clear();
        }
        break;
      }
      case 5: {  // the linear allocator
        std::uint64_t addr = 0;
        const std::uint8_t sub = in.take<std::uint8_t>();
        if (sub % 4 == 0) {
          require(ml_linear_mark_get(linear, &mark) == ML_OK);
        } else if (sub % 4 == 1) {
          const ml_status s = ml_linear_rollback(linear, mark);
          require(s == ML_OK || s == ML_ERROR_STALE_MARK);
        } else if (sub % 4 == 2 && sub > 250) {
          require(ml_linear_reset(linear) == ML_OK);
        } else {
          const std::uint64_t align = std::uint64_t{1} << (sub % 16);
          const ml_status s = ml_linear_alloc(linear, in.take<std::uint16_t>(), align, &addr);
          if (s == ML_OK) require(addr % align == 0 && addr >= base);
        }
        break;
      }
      case 9: {  // the cheapest hole: checked against every run of the reference tiling
        const std::uint64_t want = in.take<std::uint16_t>() * (std::uint64_t{1} << (op >> 4));
        const std::uint8_t a = in.take<std::uint8_t>();
        const std::uint64_t align = a == 0 ? 0 : (a < 64 ? std::uint64_t{1} << a : a);
        const Filter filter{granularity, in.take<std::uint8_t>()};
        struct Seen {
          const Filter* filter;
          std::vector<RefBlock> visited;
        } seen{&filter, {}};
        ml_region_stats before{}, after{};
        require(ml_region_get_stats(region, &before) == ML_OK);
        ml_hole hole{};
        const ml_status s = ml_region_cheapest_hole(
            region, want, align,
            filter.seed == 0 ? nullptr
                             : +[](void* user, std::uint64_t address, std::uint64_t) {
                                 return static_cast<Seen*>(user)->filter->accepts(address) ? 1 : 0;
                               },
            +[](void* user, std::uint64_t address, std::uint64_t bytes, int is_free) {
              static_cast<Seen*>(user)->visited.push_back({address, bytes, is_free == 0});
            },
            &seen, &hole);
        require(ml_region_get_stats(region, &after) == ML_OK);
        require(after.live_blocks == before.live_blocks && after.free_bytes == before.free_bytes);
        if (want == 0 || (align & (align - 1)) != 0) {
          require(s == (want == 0 ? ML_ERROR_ZERO_SIZE : ML_ERROR_ALIGNMENT_NOT_POWER_OF_TWO) && seen.visited.empty());
          break;
        }
        if (s == ML_ERROR_ALIGNMENT_OVERFLOW) {  // want < 2^31: only an alignment near 2^64 overflows
          require(align > (std::uint64_t{1} << 40) && seen.visited.empty());
          break;
        }
        const std::uint64_t asize = (want + granularity - 1) / granularity * granularity;
        const std::uint64_t g_align = align > granularity ? align : granularity;
        const std::vector<RefBlock> blocks = tiling(live, base, region_size / granularity * granularity);
        if (blocks.size() > 256) break;  // the brute force below is quadratic
        auto accepted = [&](const RefBlock& b) { return !b.live || filter.seed == 0 || filter.accepts(b.address); };
        // The cheapest run from each start: the first end that holds the request.
        bool found = false;
        std::uint64_t best_bytes = 0, best_blocks = 0;
        for (std::size_t i = 0; i < blocks.size(); ++i) {
          std::uint64_t bytes = 0, count = 0;
          for (std::size_t j = i; j < blocks.size() && accepted(blocks[j]); ++j) {
            if (blocks[j].live) bytes += blocks[j].size, ++count;
            if (!holds(blocks[i].address, blocks[j].address + blocks[j].size, asize, g_align)) continue;
            if (!found || bytes < best_bytes || (bytes == best_bytes && count < best_blocks))
              best_bytes = bytes, best_blocks = count;
            found = true;
            break;
          }
        }
        if (!found) {
          require(s == ML_ERROR_NO_HOLE && seen.visited.empty());
          break;
        }
        require(s == ML_OK);
        require(hole.live_bytes == best_bytes && hole.live_blocks == best_blocks);
        require(holds(hole.address, hole.address + hole.size, asize, g_align));
        // The run is whole blocks; its live ones, all accepted, are what visit saw, in order.
        std::vector<RefBlock> inside;
        bool starts = false, ends = false;
        for (const RefBlock& b : blocks) {
          starts = starts || b.address == hole.address;
          ends = ends || b.address + b.size == hole.address + hole.size;
          if (b.address >= hole.address && b.address + b.size <= hole.address + hole.size) {
            require(accepted(b));
            if (b.live) inside.push_back(b);
          } else {
            require(b.address + b.size <= hole.address || b.address >= hole.address + hole.size);
          }
        }
        require(starts && ends && seen.visited.size() == inside.size());
        for (std::size_t i = 0; i < inside.size(); ++i)
          require(seen.visited[i].address == inside[i].address && seen.visited[i].size == inside[i].size &&
                  seen.visited[i].live);
        break;
      }
    }
    if (++steps % 16 == 0) require(ml_region_check(region) == ML_OK);
  }
  ml_region_stats st{};
  require(ml_region_get_stats(region, &st) == ML_OK);
  require(st.live_blocks == live.size());
  require(ml_region_check(region) == ML_OK);
  ml_linear_destroy(linear);
  ml_region_destroy(other);
  ml_region_destroy(region);
  return 0;
}

// Randomised model test: 10^6 mixed operations per seed against a plain
// reference (an ordered map of live blocks). Every result is checked:
// addresses aligned, inside the region and disjoint; every out_of_memory
// confirmed by the reference to have no fitting gap; every bad free's error
// code matched to what the reference says the address is; statistics equal
// to the reference's sums; the invariant checker run as it goes.
//
// Blocks are freed by handle, and from a chosen operation on also by address
// (a random mix), which builds the region's address index mid-run: before
// that the index must not exist. Bad frees cover both kinds: bad addresses,
// and handles that are stale (freed blocks, also from before a reset),
// foreign (another region's, zeroed, altered). A bad handle must get its
// named error and change nothing; one whose record the reference knows to
// serve another live block must be stale_handle exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <vector>

#include "memlayer/bufalloc/region.hpp"

using namespace memlayer::bufalloc;

namespace {

struct ModelParams {
  std::uint64_t seed;
  Size granularity;
  Size region_size;
  unsigned max_align_log2;
  int ops;
  int address_frees_from;  ///< the first op that may free by address (ops: never)
};

// Readable test names and failure messages instead of a byte dump.
void PrintTo(const ModelParams& p, std::ostream* os) {
  *os << "seed " << p.seed << ", granularity " << p.granularity << ", region " << p.region_size
      << " B, frees by address from op " << p.address_frees_from;
}

class Model {
 public:
  explicit Model(const ModelParams& p)
      : p_(p),
        rng_(p.seed),
        region_(std::move(Region::create(base(), p.region_size, {p.granularity})).value()),
        other_(std::move(Region::create(base(), p.region_size, {p.granularity})).value()) {}

  void run() {
    for (int op = 0; op < p_.ops; ++op) {
      by_address_ok_ = op >= p_.address_frees_from;
      const unsigned roll = static_cast<unsigned>(rng_() % 1000);
      if (roll == 0 && rng_() % 200 == 0) {
        do_reset();
      } else if (roll < 10 && by_address_ok_) {
        do_bad_free();
      } else if (roll < 20) {
        do_bad_handle_free();
      } else if (roll < 470 && !live_.empty()) {
        do_free();
      } else {
        do_allocate();
      }
      if (::testing::Test::HasFatalFailure()) return;
      if (op % 997 == 0) verify_everything(op);
      if (::testing::Test::HasFatalFailure()) return;
    }
    verify_everything(p_.ops);
    EXPECT_GT(allocs_, p_.ops / 3);
    EXPECT_GT(ooms_, 0) << "the workload never filled the region";
    EXPECT_GT(stale_, 0) << "no stale handle was ever tried";
    EXPECT_GT(double_frees_, 0) << "no freed handle was ever tried while its record was unused";
    EXPECT_GT(foreign_, 0);
    EXPECT_EQ(saw_address_free_, p_.address_frees_from < p_.ops);
  }

 private:
  static constexpr Address kBase = 0x7f0000000000;
  Address base() const { return kBase; }
  Size rounded(Size s) const { return (s + p_.granularity - 1) / p_.granularity * p_.granularity; }

  Size random_size() {
    // log-uniform 1 B .. 64 KiB, with a tail up to 1 MiB
    const double hi = (rng_() % 50 == 0) ? 20.0 : 16.0;
    std::uniform_real_distribution<double> d(0.0, hi);
    return static_cast<Size>(std::exp2(d(rng_))) + 1;
  }
  Size random_alignment() {
    if (rng_() % 2 == 0) return 0;
    return Size{1} << (rng_() % (p_.max_align_log2 + 1));
  }

  void do_allocate() {
    const Size size = random_size();
    const Size align = random_alignment();
    auto r = region_.allocate(size, align);
    const Size eff_align = std::max(align, p_.granularity);
    if (r.ok()) {
      const Address a = r.value().address;
      ASSERT_EQ(r.value().region, region_.id());
      const Size rs = rounded(size);
      ASSERT_EQ(a % eff_align, 0u) << "misaligned";
      ASSERT_GE(a, kBase);
      ASSERT_LE(a - kBase + rs, region_.size());
      auto next = live_.lower_bound(a);
      if (next != live_.end()) {
        ASSERT_LE(a + rs, next->first) << "overlaps the next live block";
      }
      if (next != live_.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second.size, a) << "overlaps the previous live block";
      }
      live_[a] = Live{rs, r.value()};
      used_ += rs;
      ++allocs_;
    } else {
      ASSERT_EQ(r.error().code, Errc::out_of_memory) << r.error().message();
      ++ooms_;
      // The guarantee: out_of_memory only when no gap can hold the request.
      const Size rs = rounded(size);
      Address gap_start = kBase;
      auto fits = [&](Address start, Address end) {
        const Address aligned = (start + eff_align - 1) / eff_align * eff_align;
        return aligned >= start && aligned <= end && end - aligned >= rs;
      };
      for (auto& [a, l] : live_) {
        ASSERT_FALSE(fits(gap_start, a)) << "out_of_memory although the gap at " << gap_start << " fits " << rs;
        gap_start = a + l.size;
      }
      ASSERT_FALSE(fits(gap_start, kBase + region_.size())) << "out_of_memory although the tail fits";
      ASSERT_EQ(r.error().free_bytes, region_.size() - used_);
    }
  }

  void do_free() {
    auto it = live_.begin();
    std::advance(it, static_cast<long>(rng_() % std::min<size_t>(live_.size(), 64)));
    if (rng_() % 2) it = live_.lower_bound(kBase + rng_() % region_.size());
    if (it == live_.end()) it = live_.begin();
    const bool by_address = by_address_ok_ && rng_() % 2 == 0;
    saw_address_free_ = saw_address_free_ || by_address;
    auto r = by_address ? region_.free(it->first) : region_.free(it->second.handle);
    ASSERT_TRUE(r.ok()) << r.error().message();
    used_ -= it->second.size;
    remember_dead(it->second.handle);
    live_.erase(it);
  }

  void remember_dead(const BlockHandle& h) {
    if (dead_.size() < 4096) {
      dead_.push_back(h);
    } else {
      dead_[rng_() % dead_.size()] = h;
    }
  }

  // The record of a dead handle serves a block the reference knows is live.
  bool record_serves_live_block(const BlockHandle& h) const {
    for (auto& [a, l] : live_)
      if (l.handle.index == h.index) return true;
    return false;
  }

  void do_bad_handle_free() {
    const Size used_before = region_.stats().used_bytes;
    const unsigned kind = static_cast<unsigned>(rng_() % 4);
    if (kind <= 1 && !dead_.empty()) {  // a freed block's handle: stale or a double free
      const BlockHandle h = dead_[rng_() % dead_.size()];
      // Only worth the O(live) scan now and then.
      const bool known_reused = rng_() % 16 == 0 && record_serves_live_block(h);
      auto r = region_.free(h);
      ASSERT_FALSE(r.ok()) << "a dead handle freed something";
      ASSERT_EQ(r.error().address, h.address);
      if (known_reused) {
        ASSERT_EQ(r.error().code, Errc::stale_handle) << r.error().message();
      } else {
        ASSERT_TRUE(r.error().code == Errc::stale_handle || r.error().code == Errc::double_free)
            << r.error().message();
      }
      (r.error().code == Errc::stale_handle ? stale_ : double_frees_) += 1;
    } else {  // foreign: another region's, zeroed, or a live handle altered
      BlockHandle h{};
      const unsigned how = static_cast<unsigned>(rng_() % 4);
      if (how == 0) {
        auto o = other_.allocate(64);
        if (!o.ok()) {
          other_.reset();
          return;
        }
        h = o.value();  // same base and geometry: only the region id tells it apart
      } else if (how == 1 && !live_.empty()) {
        h = live_.begin()->second.handle;
        h.address += p_.granularity;
      } else if (how == 2 && !live_.empty()) {
        h = live_.begin()->second.handle;
        h.index = std::numeric_limits<std::uint32_t>::max();
      }
      auto r = region_.free(h);
      ASSERT_FALSE(r.ok());
      ASSERT_EQ(r.error().code, Errc::foreign_handle) << r.error().message();
      ++foreign_;
    }
    ASSERT_EQ(region_.stats().used_bytes, used_before) << "a refused free changed the region";
  }

  void do_bad_free() {
    const Address addr = kBase - 4096 + rng_() % (region_.size() + 8192);
    Errc expect = Errc::double_free;
    if (addr < kBase || addr >= kBase + region_.size()) {
      expect = Errc::address_outside_region;
    } else {
      auto it = live_.upper_bound(addr);
      if (it != live_.begin()) {
        --it;
        if (addr == it->first) return;  // a valid free; not this operation's job
        if (addr < it->first + it->second.size) expect = Errc::not_block_start;
      }
    }
    saw_address_free_ = true;
    auto r = region_.free(addr);
    ASSERT_FALSE(r.ok());
    ASSERT_EQ(r.error().code, expect) << r.error().message();
  }

  void do_reset() {
    region_.reset();
    for (auto& [a, l] : live_) remember_dead(l.handle);  // each now stale
    live_.clear();
    used_ = 0;
  }

  void verify_everything(int op) {
    std::string what;
    ASSERT_TRUE(region_.check(&what).ok()) << "after op " << op << ": " << what;
    // The index exists once, and only once, a free by address has run.
    ASSERT_EQ(region_.indexes_addresses(), saw_address_free_);
    const RegionStats s = region_.stats();
    ASSERT_EQ(s.used_bytes, used_);
    ASSERT_EQ(s.live_blocks, live_.size());
    Size largest = 0, prev_end = kBase;
    for (auto& [a, l] : live_) {
      largest = std::max(largest, a - prev_end);
      prev_end = a + l.size;
    }
    largest = std::max(largest, kBase + region_.size() - prev_end);
    ASSERT_EQ(s.largest_free, largest);
  }

  struct Live {
    Size size;
    BlockHandle handle;
  };

  ModelParams p_;
  std::mt19937_64 rng_;
  Region region_;
  Region other_;  // a foreign region with the same base and geometry
  std::map<Address, Live> live_;
  std::vector<BlockHandle> dead_;  // handles of freed blocks, a bounded sample
  Size used_ = 0;
  bool by_address_ok_ = false;
  bool saw_address_free_ = false;
  int allocs_ = 0;
  int ooms_ = 0;
  int stale_ = 0;
  int double_frees_ = 0;
  int foreign_ = 0;
};

class RegionModel : public ::testing::TestWithParam<ModelParams> {};

}  // namespace

TEST_P(RegionModel, MatchesReferenceOverAMillionOperations) { Model(GetParam()).run(); }

INSTANTIATE_TEST_SUITE_P(Seeds, RegionModel,
                         ::testing::Values(ModelParams{1, 64, 4 << 20, 12, 1000000, 500000},
                                           ModelParams{2, 1, 4 << 20, 8, 1000000, 0},
                                           ModelParams{3, 256, 8 << 20, 16, 1000000, 1000000},
                                           ModelParams{4, 4096, 16 << 20, 20, 1000000, 250000}),
                         [](const auto& test) {
                           return "seed" + std::to_string(test.param.seed) + "_g" +
                                  std::to_string(test.param.granularity);
                         });

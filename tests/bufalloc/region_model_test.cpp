// Randomised model test: 10^6 mixed operations per seed against a plain
// reference (an ordered map of live blocks). Every result is checked:
// addresses aligned, inside the region and disjoint; every out_of_memory
// confirmed by the reference to have no fitting gap; every bad free's error
// code matched to what the reference says the address is; statistics equal
// to the reference's sums; the invariant checker run as it goes.
#include <gtest/gtest.h>

#include <cmath>
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
};

// Readable test names and failure messages instead of a byte dump.
void PrintTo(const ModelParams& p, std::ostream* os) {
  *os << "seed " << p.seed << ", granularity " << p.granularity << ", region " << p.region_size << " B";
}

class Model {
 public:
  explicit Model(const ModelParams& p)
      : p_(p), rng_(p.seed), region_(std::move(Region::create(base(), p.region_size, {p.granularity})).value()) {}

  void run() {
    for (int op = 0; op < p_.ops; ++op) {
      const unsigned roll = static_cast<unsigned>(rng_() % 1000);
      if (roll == 0 && rng_() % 200 == 0) {
        do_reset();
      } else if (roll < 20) {
        do_bad_free();
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
      const Address a = r.value();
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
        ASSERT_LE(prev->first + prev->second, a) << "overlaps the previous live block";
      }
      live_[a] = rs;
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
      for (auto& [a, s] : live_) {
        ASSERT_FALSE(fits(gap_start, a)) << "out_of_memory although the gap at " << gap_start << " fits " << rs;
        gap_start = a + s;
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
    ASSERT_TRUE(region_.free(it->first).ok());
    used_ -= it->second;
    live_.erase(it);
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
        if (addr < it->first + it->second) expect = Errc::not_block_start;
      }
    }
    auto r = region_.free(addr);
    ASSERT_FALSE(r.ok());
    ASSERT_EQ(r.error().code, expect) << r.error().message();
  }

  void do_reset() {
    region_.reset();
    live_.clear();
    used_ = 0;
  }

  void verify_everything(int op) {
    std::string what;
    ASSERT_TRUE(region_.check(&what).ok()) << "after op " << op << ": " << what;
    const RegionStats s = region_.stats();
    ASSERT_EQ(s.used_bytes, used_);
    ASSERT_EQ(s.live_blocks, live_.size());
    Size largest = 0, prev_end = kBase;
    for (auto& [a, sz] : live_) {
      largest = std::max(largest, a - prev_end);
      prev_end = a + sz;
    }
    largest = std::max(largest, kBase + region_.size() - prev_end);
    ASSERT_EQ(s.largest_free, largest);
  }

  ModelParams p_;
  std::mt19937_64 rng_;
  Region region_;
  std::map<Address, Size> live_;
  Size used_ = 0;
  int allocs_ = 0;
  int ooms_ = 0;
};

class RegionModel : public ::testing::TestWithParam<ModelParams> {};

}  // namespace

TEST_P(RegionModel, MatchesReferenceOverAMillionOperations) { Model(GetParam()).run(); }

INSTANTIATE_TEST_SUITE_P(Seeds, RegionModel,
                         ::testing::Values(ModelParams{1, 64, 4 << 20, 12, 1000000},
                                           ModelParams{2, 1, 4 << 20, 8, 1000000},
                                           ModelParams{3, 256, 8 << 20, 16, 1000000},
                                           ModelParams{4, 4096, 16 << 20, 20, 1000000}),
                         [](const auto& test) {
                           return "seed" + std::to_string(test.param.seed) + "_g" +
                                  std::to_string(test.param.granularity);
                         });

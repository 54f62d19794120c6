// The PoCL memlayer driver's parameter parser (POCL_MEMLAYER<n>_PARAMETERS).
// Compiled here from drivers/pocl/src: it needs no PoCL.
#include "parameters.hpp"

#include <gtest/gtest.h>

using memlayer::pocl::parse_parameters;

TEST(PoclParameters, DefaultsWhenUnset) {
  for (const char* text : {static_cast<const char*>(nullptr), "", ",,"}) {
    auto p = parse_parameters(text);
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_EQ(p.value().global_mem, 1u << 30);
    EXPECT_EQ(p.value().local_mem, 64u << 10);
    EXPECT_EQ(p.value().compute_units, 0u);
    EXPECT_EQ(p.value().numa_node, -1);
    EXPECT_EQ(p.value().alignment, 128u);
    EXPECT_EQ(p.value().transfer_faults, 0.0);
    EXPECT_EQ(p.value().peer_read_faults, 0.0);
    EXPECT_EQ(p.value().svm_space, std::uint64_t{64} << 30);
  }
}

TEST(PoclParameters, SvmSpace) {
  auto off = parse_parameters("svm_space=0");
  ASSERT_TRUE(off.ok()) << off.error();
  EXPECT_EQ(off.value().svm_space, 0u);
  auto g = parse_parameters("svm_space=2G");
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_EQ(g.value().svm_space, std::uint64_t{2} << 30);
  for (const char* bad : {"svm_space=4K", "svm_space=65537G", "svm_space=lots", "svm_space="}) {
    auto b = parse_parameters(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.error().find("0, or a size from 1M to 64T"), std::string::npos) << b.error();
  }
}

TEST(PoclParameters, FaultInjection) {
  auto p = parse_parameters("transfer_faults=0.25,peer_read_faults=1,fault_seed=7");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p.value().transfer_faults, 0.25);
  EXPECT_EQ(p.value().peer_read_faults, 1.0);
  EXPECT_EQ(p.value().fault_seed, 7u);
  for (const char* bad : {"transfer_faults=1.5", "transfer_faults=-0.1", "transfer_faults=often", "transfer_faults=",
                          "peer_read_faults=2", "peer_read_faults="}) {
    auto b = parse_parameters(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.error().find("a probability from 0 to 1"), std::string::npos) << b.error();
  }
  EXPECT_FALSE(parse_parameters("fault_seed=x").ok());
}

TEST(PoclParameters, MigrationRanges) {
  auto d = parse_parameters(nullptr);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d.value().migration_ranges);
  auto off = parse_parameters("migration_ranges=0");
  ASSERT_TRUE(off.ok()) << off.error();
  EXPECT_FALSE(off.value().migration_ranges);
  for (const char* bad : {"migration_ranges=2", "migration_ranges=yes", "migration_ranges="}) {
    auto b = parse_parameters(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.error().find("bad value"), std::string::npos) << b.error();
    EXPECT_NE(b.error().find("(0 or 1)"), std::string::npos) << b.error();
  }
}

TEST(PoclParameters, ParsesEveryKeyAndSuffix) {
  auto p = parse_parameters("global_mem=256M,local_mem=48K,compute_units=3,numa_node=1,alignment=256");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p.value().global_mem, 256u << 20);
  EXPECT_EQ(p.value().local_mem, 48u << 10);
  EXPECT_EQ(p.value().compute_units, 3u);
  EXPECT_EQ(p.value().numa_node, 1);
  EXPECT_EQ(p.value().alignment, 256u);
  auto g = parse_parameters("global_mem=2g");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g.value().global_mem, std::uint64_t{2} << 30);
  auto plain = parse_parameters("global_mem=16777216");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value().global_mem, 16u << 20);
}

TEST(PoclParameters, BadInputNamesTheProblem) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"size=1G", "unknown key 'size'"},
      {"global_mem", "'global_mem' has no value"},
      {"global_mem=12Q", "bad value '12Q' for global_mem"},
      {"global_mem=", "bad value '' for global_mem"},
      {"global_mem=100K", "at least 1M"},
      {"global_mem=99999999999999999999", "bad value"},
      {"global_mem=17179869184G", "bad value"},  // overflows 64 bits
      {"local_mem=16K", "from 32K to 1G"},
      {"compute_units=0", "from 1 to 1024"},
      {"compute_units=-2", "bad value '-2'"},
      {"alignment=100", "power of two from 128"},
      {"alignment=64", "power of two from 128"},
      {"global_mem=1M,local_mem=2M", "local_mem is larger than global_mem"},
  };
  for (const Case& c : cases) {
    auto p = parse_parameters(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_NE(p.error().find(c.expect), std::string::npos) << c.text << " -> " << p.error();
  }
}

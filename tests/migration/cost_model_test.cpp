#include <gtest/gtest.h>

#include "memlayer/migration/cost_model.hpp"

using namespace memlayer::migration;

TEST(LinkCostModel, HostLinksAlwaysExistDirectOnlyWhereSet) {
  LinkCostModel m({1e-5, 1e9});
  ASSERT_TRUE(m.cost(kHost, 3, 1000).has_value());
  EXPECT_DOUBLE_EQ(*m.cost(kHost, 3, 1000), 1e-5 + 1000 / 1e9);
  EXPECT_DOUBLE_EQ(*m.cost(3, kHost, 0), 1e-5);
  EXPECT_FALSE(m.cost(1, 2, 1000).has_value());
  m.set_direct(1, 2, {1e-6, 1e10});
  ASSERT_TRUE(m.cost(1, 2, 1000).has_value());
  EXPECT_DOUBLE_EQ(*m.cost(1, 2, 1000), 1e-6 + 1000 / 1e10);
  EXPECT_FALSE(m.cost(2, 1, 1000).has_value()) << "links are one-way";
  m.set_host_link(2, {0.5, 1.0});
  EXPECT_DOUBLE_EQ(*m.cost(2, kHost, 1), 1.5);
  EXPECT_DOUBLE_EQ(*m.cost(kHost, 1, 0), 1e-5) << "other devices keep the default";
  EXPECT_DOUBLE_EQ(*m.cost(4, 4, 99), 0.0);
}

TEST(LocationSet, Basics) {
  LocationSet s;
  EXPECT_TRUE(s.empty());
  s.insert(0), s.insert(5), s.insert(63);
  EXPECT_EQ(s.count(), 3u);
  EXPECT_TRUE(s.contains(63));
  s.erase(5);
  std::vector<Location> seen;
  s.for_each([&](Location l) { seen.push_back(l); });
  EXPECT_EQ(seen, (std::vector<Location>{0, 63}));
}

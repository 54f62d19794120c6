// InlineList (migration/detail/inline_list.hpp): the first N elements live
// inside the list, more in one heap array; every copy, move and growth
// leaves the elements where begin() finds them.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "memlayer/migration/detail/inline_list.hpp"

namespace {

using memlayer::migration::detail::InlineList;
using List = InlineList<std::uint64_t, 2>;

std::vector<std::uint64_t> items(const List& l) { return {l.begin(), l.end()}; }

List of(std::uint64_t n) {
  List l;
  for (std::uint64_t i = 0; i < n; ++i) l.push_back(10 + i);
  return l;
}

std::vector<std::uint64_t> expected(std::uint64_t n) {
  std::vector<std::uint64_t> v;
  for (std::uint64_t i = 0; i < n; ++i) v.push_back(10 + i);
  return v;
}

// Within the list itself while the elements fit, elsewhere once they do not.
TEST(InlineList, ElementsStayInsideUntilTheyOutgrowIt) {
  List l = of(2);
  const auto* self = reinterpret_cast<const char*>(&l);
  const auto* first = reinterpret_cast<const char*>(l.begin());
  EXPECT_TRUE(first >= self && first < self + sizeof l) << "two elements left the list";
  l.push_back(12);
  first = reinterpret_cast<const char*>(l.begin());
  EXPECT_FALSE(first >= self && first < self + sizeof l) << "three elements are still inside";
  EXPECT_EQ(items(l), expected(3));
}

// Copies and moves, inline and on the heap, each way round: the elements
// are found where they went, and a list moved from is empty and usable.
TEST(InlineList, CopiesAndMovesKeepTheElements) {
  for (std::uint64_t n : {0, 1, 2, 3, 9}) {
    SCOPED_TRACE(n);
    const List source = of(n);
    List copy(source);
    EXPECT_EQ(items(copy), expected(n));
    List moved(std::move(copy));
    EXPECT_EQ(items(moved), expected(n));
    EXPECT_TRUE(copy.empty());
    copy.push_back(7);  // usable after the move
    EXPECT_EQ(items(copy), std::vector<std::uint64_t>{7});
    for (std::uint64_t m : {0, 1, 5}) {
      List target = of(m);
      target = moved;  // copy-assigned
      EXPECT_EQ(items(target), expected(n));
      List other = of(m);
      other = std::move(target);  // move-assigned over inline or heap elements
      EXPECT_EQ(items(other), expected(n));
      EXPECT_TRUE(target.empty());
      target.push_back(8);
      EXPECT_EQ(items(target), std::vector<std::uint64_t>{8});
      other.push_back(99);
      EXPECT_EQ(other.back(), 99u);
      EXPECT_EQ(other.size(), n + 1);
    }
  }
}

TEST(InlineList, InsertEraseAndAssignOne) {
  List l = of(4);
  l.insert(l.begin() + 1, 5);
  EXPECT_EQ(items(l), (std::vector<std::uint64_t>{10, 5, 11, 12, 13}));
  l.erase(l.begin());
  l.erase_if([](std::uint64_t v) { return v % 2 == 0; });
  EXPECT_EQ(items(l), (std::vector<std::uint64_t>{5, 11, 13}));
  l.assign_one(3);
  EXPECT_EQ(items(l), std::vector<std::uint64_t>{3});
  l.reserve(40);
  for (std::uint64_t i = 0; i < 39; ++i) l.push_back(i);
  EXPECT_EQ(l.size(), 40u);
  EXPECT_EQ(l[39], 38u);
}

// erase_if(pred, n): every match among the first n, then matches only up to
// the first element past n that stays; the rest keeps its order unlooked at.
TEST(InlineList, EraseIfLooksAtTheFirstNThenUpToOneThatStays) {
  List l;
  for (std::uint64_t v : {2, 3, 4, 6, 8, 5, 10, 12}) l.push_back(v);
  std::vector<std::uint64_t> looked;
  l.erase_if([&](std::uint64_t v) { looked.push_back(v); return v % 2 == 0; }, 3);
  EXPECT_EQ(items(l), (std::vector<std::uint64_t>{3, 5, 10, 12}));
  EXPECT_EQ(looked, (std::vector<std::uint64_t>{2, 3, 4, 6, 8, 5})) << "it stopped at 5, past the first 3";
  l.erase_if([](std::uint64_t v) { return v % 2 == 0; }, 0);
  EXPECT_EQ(items(l), (std::vector<std::uint64_t>{3, 5, 10, 12})) << "the first stays: nothing looked at past it";
  l.erase_if([](std::uint64_t v) { return v > 4; }, 1);
  EXPECT_EQ(items(l), std::vector<std::uint64_t>{3}) << "past the first n, matches to the end";
  l.erase_if([](std::uint64_t) { return true; }, 99);
  EXPECT_TRUE(l.empty());
}

}  // namespace

// Rect commands (read/write/copy of a box of rows and slices): the box
// geometry and OpenCL's layout rules, then the commands on sim devices
// against a host model, with migration between devices.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <set>
#include <vector>

#include "memlayer/drivers/sim_device.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"
#include "memlayer/runtime/rect.hpp"

using namespace memlayer;
using namespace memlayer::runtime;

namespace {

// Every byte offset of a box, by brute force.
std::set<std::uint64_t> bytes_of(const RectBox& box, std::uint64_t base) {
  std::set<std::uint64_t> out;
  box.for_each_row([&](std::uint64_t row) {
    for (std::uint64_t x = 0; x < box.region()[0]; ++x) out.insert(base + row + x);
  });
  return out;
}

RectBox box(RectLayout layout, RectRegion region) {
  auto b = RectBox::make(layout, region, "test");
  EXPECT_TRUE(b.ok()) << b.error().message;
  return b.value();
}

}  // namespace

TEST(RectBox, PacksTightlyWhenPitchesAreZero) {
  const RectBox b = box({{2, 1, 1}, 0, 0}, {4, 3, 2});
  EXPECT_EQ(b.row_pitch(), 4u);
  EXPECT_EQ(b.slice_pitch(), 12u);
  EXPECT_EQ(b.first(), 12u + 4u + 2u);
  EXPECT_EQ(b.end(), b.first() + 12u + 8u + 4u);
  EXPECT_TRUE(b.contiguous()) << "tightly packed rows and slices leave no gap, wherever the origin";
  EXPECT_TRUE(box({{0, 0, 0}, 0, 0}, {4, 3, 2}).contiguous());
  EXPECT_TRUE(box({{0, 5, 0}, 16, 0}, {16, 3, 1}).contiguous()) << "full-width rows of a 2D buffer";
  EXPECT_FALSE(box({{0, 0, 0}, 16, 0}, {8, 3, 1}).contiguous());
}

TEST(RectBox, RowsComeInOrderAndNeverOverlap) {
  const RectBox b = box({{3, 2, 1}, 10, 40}, {5, 3, 2});
  std::vector<std::uint64_t> rows;
  b.for_each_row([&](std::uint64_t r) { rows.push_back(r); });
  ASSERT_EQ(rows.size(), 6u);
  for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i], rows[i - 1] + 5);
  EXPECT_EQ(rows.front(), b.first());
  EXPECT_EQ(rows.back() + 5, b.end());
}

TEST(RectBox, BadLayoutsAreNamed) {
  auto expect_bad = [](RectLayout l, RectRegion r, const char* words) {
    auto b = RectBox::make(l, r, "write_rect (buffer)");
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.error().code, cl::kInvalidValue);
    EXPECT_NE(b.error().message.find("write_rect (buffer)"), std::string::npos) << b.error().message;
    EXPECT_NE(b.error().message.find(words), std::string::npos) << b.error().message;
  };
  expect_bad({}, {0, 1, 1}, "region element is 0");
  expect_bad({}, {4, 0, 1}, "region element is 0");
  expect_bad({}, {4, 1, 0}, "region element is 0");
  expect_bad({{0, 0, 0}, 3, 0}, {4, 1, 1}, "row pitch is below");
  expect_bad({{0, 0, 0}, 8, 15}, {4, 2, 1}, "slice pitch is below");
  expect_bad({{0, 0, 0}, 8, 20}, {4, 2, 1}, "not a multiple");
  expect_bad({{UINT64_MAX, 0, 0}, 0, 0}, {4, 1, 1}, "64 bits");
  expect_bad({{0, UINT64_MAX / 2, 0}, 0, 0}, {4, 1, 1}, "64 bits");
  expect_bad({}, {UINT64_MAX / 2, 4, 1}, "64 bits");
}

// The exact overlap test against brute force, on random small boxes.
TEST(RectBox, OverlapIsExact) {
  std::mt19937_64 rng(7);
  auto pick = [&](std::uint64_t n) { return rng() % n; };
  int overlapping = 0, apart = 0, interleaved = 0;
  for (int i = 0; i < 3000; ++i) {
    const RectRegion r{1 + pick(6), 1 + pick(4), 1 + pick(3)};
    auto layout = [&] {
      const std::uint64_t row = r[0] + pick(5);
      const std::uint64_t slice = row * (r[1] + pick(3));
      return RectLayout{{pick(8), pick(4), pick(3)}, row, slice};
    };
    const RectBox a = box(layout(), r), b = box(layout(), r);
    const std::uint64_t a_base = pick(40), b_base = pick(40);
    const auto x = bytes_of(a, a_base), y = bytes_of(b, b_base);
    bool brute = false;
    for (std::uint64_t v : x) brute = brute || y.count(v) > 0;
    ASSERT_EQ(overlap(a, a_base, b, b_base), brute) << "case " << i;
    ASSERT_EQ(overlap(b, b_base, a, a_base), brute) << "case " << i;
    const bool bounds_meet = a_base + a.first() < b_base + b.end() && b_base + b.first() < a_base + a.end();
    (brute ? overlapping : apart) += 1;
    interleaved += bounds_meet && !brute ? 1 : 0;
  }
  EXPECT_GT(overlapping, 100);
  EXPECT_GT(interleaved, 100) << "boxes whose ranges meet but whose rows do not";
}

namespace {

struct RectRig {
  std::shared_ptr<Context> ctx;
  std::vector<std::shared_ptr<Queue>> queues;
};

RectRig make_rect_rig() {
  std::vector<std::unique_ptr<drivers::SimDevice>> sims;
  drivers::SimOptions o;
  o.memory_size = 4 << 20;
  EXPECT_TRUE(drivers::SimDevice::create(2, o, sims).ok());
  std::vector<std::unique_ptr<DeviceDriver>> drivers;
  for (auto& d : sims) drivers.push_back(std::move(d));
  RectRig rig{Context::create(std::move(drivers)).value(), {}};
  for (std::size_t i = 0; i < 2; ++i) rig.queues.push_back(rig.ctx->create_queue(i).value());
  return rig;
}

std::vector<std::uint8_t> read_all(Queue& q, const Buffer& b) {
  std::vector<std::uint8_t> out(b.size());
  EXPECT_TRUE(q.enqueue_read(b, 0, b.size(), out.data(), true).ok());
  return out;
}

// The model of a box transfer: dst[box_d rows] = src[box_s rows].
void model_copy(std::vector<std::uint8_t>& dst, const RectBox& d, const std::uint8_t* src, const RectBox& s) {
  (void)for_each_row_pair(s, d, [&](std::uint64_t from, std::uint64_t to) {
    std::memcpy(dst.data() + to, src + from, s.region()[0]);
    return Status{};
  });
}

}  // namespace

TEST(RectCommands, WriteReadAndCopyBoxesAcrossDevicesMatchAModel) {
  RectRig rig = make_rect_rig();
  constexpr std::uint64_t kSize = 64 * 32 * 4;  // a 64-byte-wide, 32-row, 4-slice volume
  Buffer a = rig.ctx->create_buffer(mem::kReadWrite, kSize).value();
  Buffer b = rig.ctx->create_buffer(mem::kReadWrite, kSize).value();
  std::vector<std::uint8_t> model_a(kSize), model_b(kSize);
  for (std::uint64_t i = 0; i < kSize; ++i) model_a[i] = static_cast<std::uint8_t>(i * 13 + 1);
  for (std::uint64_t i = 0; i < kSize; ++i) model_b[i] = static_cast<std::uint8_t>(i * 7 + 5);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(a, 0, kSize, model_a.data(), true).ok());
  ASSERT_TRUE(rig.queues[1]->enqueue_write(b, 0, kSize, model_b.data(), true).ok());

  std::mt19937_64 rng(11);
  auto pick = [&](std::uint64_t n) { return rng() % n; };
  const RectLayout volume{{0, 0, 0}, 64, 64 * 32};
  std::deque<std::vector<std::uint8_t>> sources;
  for (int step = 0; step < 200; ++step) {
    const RectRegion region{1 + pick(40), 1 + pick(20), 1 + pick(4)};
    RectLayout where = volume;
    where.origin = {pick(64 - region[0] + 1), pick(32 - region[1] + 1), pick(4 - region[2] + 1)};
    const RectBox in_buffer = box(where, region);
    const std::size_t q = pick(2);
    Buffer& target = pick(2) ? a : b;
    auto& model = &target == &a ? model_a : model_b;
    switch (pick(3)) {
      case 0: {  // write from a padded host box, blocking or not
        const RectLayout host{{pick(3), pick(2), 0}, region[0] + pick(8), 0};
        const RectBox in_host = box(host, region);
        std::vector<std::uint8_t>& src = sources.emplace_back(in_host.end());  // alive until the writes finish
        for (auto& v : src) v = static_cast<std::uint8_t>(rng());
        ASSERT_TRUE(rig.queues[q]->enqueue_write_rect(target, where, host, region, src.data(), pick(2) == 0).ok());
        model_copy(model, in_buffer, src.data(), in_host);
        break;
      }
      case 1: {  // read into a padded host box; untouched host bytes stay
        const RectLayout host{{pick(3), pick(2), 0}, region[0] + pick(8), 0};
        const RectBox in_host = box(host, region);
        std::vector<std::uint8_t> got(in_host.end(), 0xEE), want(in_host.end(), 0xEE);
        ASSERT_TRUE(rig.queues[q]->enqueue_read_rect(target, where, host, region, got.data(), true).ok());
        model_copy(want, in_host, model.data(), in_buffer);
        ASSERT_EQ(got, want) << "step " << step;
        break;
      }
      default: {  // copy a box from the other buffer
        Buffer& other = &target == &a ? b : a;
        auto& other_model = &target == &a ? model_b : model_a;
        RectLayout from = volume;
        from.origin = {pick(64 - region[0] + 1), pick(32 - region[1] + 1), pick(4 - region[2] + 1)};
        ASSERT_TRUE(rig.queues[q]->enqueue_copy_rect(other, target, from, where, region).ok());
        model_copy(model, in_buffer, other_model.data(), box(from, region));
        break;
      }
    }
  }
  EXPECT_EQ(read_all(*rig.queues[0], a), model_a);
  EXPECT_EQ(read_all(*rig.queues[1], b), model_b);
  EXPECT_GT(rig.ctx->stats().bytes_migrated, 0u) << "the boxes moved between the devices";
}

TEST(RectCommands, AGappedWriteKeepsTheGapsAndAGaplessOneMigratesNothing) {
  RectRig rig = make_rect_rig();
  constexpr std::uint64_t kSize = 16 * 16;
  Buffer buf = rig.ctx->create_buffer(mem::kReadWrite, kSize).value();
  std::vector<std::uint8_t> model(kSize);
  for (std::uint64_t i = 0; i < kSize; ++i) model[i] = static_cast<std::uint8_t>(i);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(buf, 0, kSize, model.data(), true).ok());
  // Device 1 writes the left half of rows 2..9: bytes between them (the
  // right halves) were written on device 0 and must survive.
  const std::vector<std::uint8_t> ones(8 * 8, 1);
  const RectLayout left{{0, 2, 0}, 16, 0};
  auto before = rig.ctx->stats().bytes_migrated;
  ASSERT_TRUE(rig.queues[1]->enqueue_write_rect(buf, left, {}, {8, 8, 1}, ones.data(), true).ok());
  EXPECT_GT(rig.ctx->stats().bytes_migrated, before) << "the stale gaps came first";
  for (std::uint64_t y = 2; y < 10; ++y) std::memset(model.data() + y * 16, 1, 8);
  EXPECT_EQ(read_all(*rig.queues[0], buf), model);
  // Full rows 4..7: one gapless range, an overwrite.
  const std::vector<std::uint8_t> twos(16 * 4, 2);
  before = rig.ctx->stats().bytes_migrated;
  ASSERT_TRUE(rig.queues[1]->enqueue_write_rect(buf, {{0, 4, 0}, 16, 0}, {}, {16, 4, 1}, twos.data(), true).ok());
  EXPECT_EQ(rig.ctx->stats().bytes_migrated, before) << "a gapless box overwrites";
  std::memset(model.data() + 4 * 16, 2, 4 * 16);
  EXPECT_EQ(read_all(*rig.queues[1], buf), model);
}

TEST(RectCommands, CopyWithinOneBufferBetweenInterleavedColumns) {
  RectRig rig = make_rect_rig();
  constexpr std::uint64_t kSize = 32 * 8;
  Buffer buf = rig.ctx->create_buffer(mem::kReadWrite, kSize).value();
  std::vector<std::uint8_t> model(kSize);
  for (std::uint64_t i = 0; i < kSize; ++i) model[i] = static_cast<std::uint8_t>(i * 3);
  ASSERT_TRUE(rig.queues[0]->enqueue_write(buf, 0, kSize, model.data(), true).ok());
  // Columns 0..7 to columns 16..23 of every row: the ranges interleave, the
  // boxes do not touch.
  const RectLayout left{{0, 0, 0}, 32, 0}, right{{16, 0, 0}, 32, 0};
  ASSERT_TRUE(rig.queues[1]->enqueue_copy_rect(buf, buf, left, right, {8, 8, 1}).ok());
  for (std::uint64_t y = 0; y < 8; ++y) std::memcpy(model.data() + y * 32 + 16, model.data() + y * 32, 8);
  EXPECT_EQ(read_all(*rig.queues[0], buf), model);
  // Between sub-buffers of one parent, the same rule on parent offsets.
  Buffer lo = rig.ctx->create_sub_buffer(buf, mem::kReadWrite, 0, 128).value();
  Buffer hi = rig.ctx->create_sub_buffer(buf, mem::kReadWrite, 128, 128).value();
  ASSERT_TRUE(rig.queues[0]->enqueue_copy_rect(lo, hi, left, left, {8, 4, 1}).ok());
  for (std::uint64_t y = 0; y < 4; ++y) std::memcpy(model.data() + 128 + y * 32, model.data() + y * 32, 8);
  EXPECT_EQ(read_all(*rig.queues[1], buf), model);
}

TEST(RectCommands, BadArgumentsAreRefusedWithNothingEnqueued) {
  RectRig rig = make_rect_rig();
  Buffer buf = rig.ctx->create_buffer(mem::kReadWrite, 1024).value();
  std::vector<std::uint8_t> host(4096);
  Queue& q = *rig.queues[0];
  auto expect = [](const Result<Event>& r, int code, const char* words) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, code);
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  };
  const RectLayout rows32{{0, 0, 0}, 32, 0};
  expect(q.enqueue_write_rect(buf, rows32, {}, {32, 33, 1}, host.data(), true), cl::kInvalidValue,
         "beyond the buffer's 1024 bytes");
  expect(q.enqueue_read_rect(buf, {{1, 31, 0}, 32, 0}, {}, {32, 1, 1}, host.data(), true), cl::kInvalidValue,
         "beyond the buffer");
  expect(q.enqueue_write_rect(buf, rows32, {}, {0, 1, 1}, host.data(), true), cl::kInvalidValue,
         "region element is 0");
  expect(q.enqueue_read_rect(buf, rows32, {{0, 0, 0}, 16, 0}, {32, 2, 1}, host.data(), true), cl::kInvalidValue,
         "read_rect (host): the row pitch is below");
  expect(q.enqueue_write_rect(buf, rows32, {}, {32, 2, 1}, nullptr, true), cl::kInvalidValue, "source pointer is null");
  expect(q.enqueue_read_rect(buf, rows32, {}, {32, 2, 1}, nullptr, true), cl::kInvalidValue,
         "destination pointer is null");
  expect(q.enqueue_copy_rect(buf, buf, rows32, {{8, 0, 0}, 32, 0}, {16, 4, 1}), cl::kInvalidValue,
         "boxes overlap");
  expect(q.enqueue_copy_rect(buf, buf, rows32, {{0, 0, 0}, 32, 0}, {16, 4, 1}), cl::kInvalidValue, "boxes overlap");
  expect(q.enqueue_copy_rect(buf, Buffer{}, rows32, rows32, {16, 4, 1}), cl::kInvalidMemObject, "empty");
  Buffer read_only = rig.ctx->create_buffer(mem::kReadWrite | mem::kHostReadOnly, 1024).value();
  expect(q.enqueue_write_rect(read_only, rows32, {}, {32, 2, 1}, host.data(), true), cl::kInvalidOperation,
         "HOST_READ_ONLY");
  EXPECT_EQ(rig.ctx->stats().devices[0].live_blocks, 0u) << "nothing was enqueued";
}

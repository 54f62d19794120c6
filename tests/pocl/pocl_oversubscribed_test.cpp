// Oversubscribed memlayer devices, asynchronously (issue 33): a working set
// of 2-3 times a device's memory in buffers of about 1 MiB, on every device
// of the context (ctest: 2, 3 and 4 memlayer devices of 8 MiB), through
// non-blocking calls on out-of-order queues, many commands in flight:
// kernels, writes, reads, copies, fills, migrations to a device and to the
// host. Some commands wait for a user event that the test opens after more
// enqueues. No enqueue may fail (each command's buffers fit its device), and
// every byte is checked against a host model at the end. Each run is under
// a watchdog: a wait that cannot end fails the test. Last, a mapped buffer
// whose unmap is queued gives up its room to a command that needs it.
//
// Ordering is the application's, as OpenCL requires on out-of-order
// queues: a command that reads a buffer waits for its last writer, one that
// writes it for its last writer and every reader since, so readers run
// side by side, and the model is the commands in enqueue order.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cl_check.hpp"

using namespace memlayer::cltest;

namespace {

// The fuzzer's buffer size: 1 MiB and a little, so that seven fit a device
// of 8 MiB and the eighth does not.
constexpr std::size_t kBufferBytes = (1u << 20) + 120;
constexpr std::size_t kElements = kBufferBytes / 4;

const char* kSource = R"CLC(
kernel void combine(global const uint* a, global const uint* b, global uint* c) {
  size_t i = get_global_id(0);
  c[i] = c[i] * 3u + a[i] + b[i];
}
)CLC";

// How a run varies (the workload's shapes the issue names).
struct Shape {
  std::uint64_t seed = 1;
  int ops = 400;
  double working_set = 2.6;  // times one device's memory
  bool flush = false;        // clFlush every queue after each enqueue
  bool gate_closed_long = false;  // the gate opens only after half the ops
  bool blocking_middle = false;   // blocking maps and reads in the middle
};

struct Tracked {
  Event writer;
  std::vector<Event> readers;  // since the writer
};

struct PendingRead {
  Event done;
  std::size_t buffer, first;
  std::vector<std::uint32_t> got, expected;
};

class Workload {
 public:
  explicit Workload(const Shape& s) : shape_(s), rng_(s.seed) {}
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  // A run that stopped half-way opens its gate and lets its commands end:
  // they would hold device memory (each device's, not the context's) for
  // the next run.
  ~Workload() {
    if (gate_.get() != nullptr && !gate_open_) clSetUserEventStatus(gate_.get(), CL_COMPLETE);
    for (auto& q : queues_) clFinish(q.get());
  }

  // Runs the whole workload; any failure is a gtest failure.
  void run() {
    ASSERT_NO_FATAL_FAILURE(open());
    ASSERT_NO_FATAL_FAILURE(make_buffers());
    const int open_at = shape_.gate_closed_long ? shape_.ops / 2 : shape_.ops / 10;
    for (int i = 0; i < shape_.ops; ++i) {
      if (i == open_at) {
        ASSERT_EQ(clSetUserEventStatus(gate_.get(), CL_COMPLETE), CL_SUCCESS);
        gate_open_ = true;
      }
      ASSERT_NO_FATAL_FAILURE(step(i, i < open_at)) << "op " << i << " (seed " << shape_.seed << ")";
    }
    for (auto& q : queues_) ASSERT_EQ(clFinish(q.get()), CL_SUCCESS);
    ASSERT_NO_FATAL_FAILURE(check_reads());
    ASSERT_NO_FATAL_FAILURE(check_buffers());
  }

 private:
  void open() {
    devices_ = all_devices();
    ASSERT_GE(devices_.size(), 2u) << "run with two or more memlayer devices in POCL_DEVICES";
    cl_int err = CL_SUCCESS;
    ctx_ = Context(clCreateContext(nullptr, static_cast<cl_uint>(devices_.size()), devices_.data(), nullptr, nullptr,
                                   &err));
    ASSERT_EQ(err, CL_SUCCESS);
    cl_ulong memory = 0;
    ASSERT_EQ(clGetDeviceInfo(devices_[0], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof memory, &memory, nullptr), CL_SUCCESS);
    buffers_ = static_cast<std::size_t>(shape_.working_set * static_cast<double>(memory) / kBufferBytes);
    ASSERT_GE(buffers_, 4u);
    cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, 0};
    for (cl_device_id d : devices_)
      for (int k = 0; k < 2; ++k) {
        queues_.emplace_back(clCreateCommandQueueWithProperties(ctx_.get(), d, props, &err));
        ASSERT_EQ(err, CL_SUCCESS);
      }
    program_ = build_program(ctx_.get(), devices_, kSource);
    combine_ = Kernel(clCreateKernel(program_.get(), "combine", &err));
    ASSERT_EQ(err, CL_SUCCESS);
    gate_ = Event(clCreateUserEvent(ctx_.get(), &err));
    ASSERT_EQ(err, CL_SUCCESS);
  }

  // Each buffer written once, non-blocking, on a device chosen at random;
  // the first three wait for the gate as well.
  void make_buffers() {
    cl_int err = CL_SUCCESS;
    tracked_.resize(buffers_);
    for (std::size_t b = 0; b < buffers_; ++b) {
      bufs_.emplace_back(clCreateBuffer(ctx_.get(), CL_MEM_READ_WRITE, kBufferBytes, nullptr, &err));
      ASSERT_EQ(err, CL_SUCCESS);
      model_.emplace_back(kElements);
      for (auto& v : model_.back()) v = static_cast<std::uint32_t>(rng_());
      auto data = std::make_shared<std::vector<std::uint32_t>>(model_.back());
      std::vector<cl_event> waits;
      if (b < 3) waits.push_back(gate_.get());
      cl_event ev = nullptr;
      ASSERT_EQ(clEnqueueWriteBuffer(any_queue(), bufs_[b].get(), CL_FALSE, 0, kBufferBytes, data->data(),
                                     static_cast<cl_uint>(waits.size()), waits.data(), &ev),
                CL_SUCCESS)
          << "buffer " << b;
      keep_.push_back(data);
      wrote({b}, ev);
      maybe_flush();
    }
  }

  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  cl_command_queue any_queue() { return queues_[pick(queues_.size())].get(); }
  // A buffer; while the gate is closed, not one of the three behind it.
  std::size_t any_buffer(bool gated) { return gated ? 3 + pick(buffers_ - 3) : pick(buffers_); }
  // Three different buffers.
  std::vector<std::size_t> three(bool gated) {
    std::vector<std::size_t> v;
    while (v.size() < 3) {
      const std::size_t b = any_buffer(gated);
      if (std::find(v.begin(), v.end(), b) == v.end()) v.push_back(b);
    }
    return v;
  }
  void maybe_flush() {
    if (!shape_.flush) return;
    for (auto& q : queues_) ASSERT_EQ(clFlush(q.get()), CL_SUCCESS);
  }

  // What a command reading `read` and writing `written` waits for.
  std::vector<cl_event> waits(std::initializer_list<std::size_t> read, std::initializer_list<std::size_t> written) {
    std::vector<cl_event> w;
    auto add = [&](cl_event e) {
      if (e != nullptr && std::find(w.begin(), w.end(), e) == w.end()) w.push_back(e);
    };
    for (std::size_t b : read) add(tracked_[b].writer.get());
    for (std::size_t b : written) {
      add(tracked_[b].writer.get());
      for (const Event& r : tracked_[b].readers) add(r.get());
    }
    return w;
  }
  void wrote(std::initializer_list<std::size_t> written, cl_event ev) {
    for (std::size_t b : written) {
      clRetainEvent(ev);
      tracked_[b].writer = Event(ev);
      tracked_[b].readers.clear();
    }
    clReleaseEvent(ev);
  }
  void read_by(std::initializer_list<std::size_t> read, cl_event ev) {
    for (std::size_t b : read) {
      clRetainEvent(ev);
      tracked_[b].readers.emplace_back(ev);
    }
  }

  void step(int i, bool gated) {
    if (shape_.blocking_middle && i >= shape_.ops / 3 && i < shape_.ops / 3 + 20) {
      ASSERT_NO_FATAL_FAILURE(pick(2) == 0 ? blocking_map(gated) : blocking_read(gated));
      return;
    }
    switch (pick(8)) {
      case 0:
      case 1:
      case 2: ASSERT_NO_FATAL_FAILURE(kernel(gated)); break;
      case 3: ASSERT_NO_FATAL_FAILURE(write(gated)); break;
      case 4: ASSERT_NO_FATAL_FAILURE(read(gated)); break;
      case 5: ASSERT_NO_FATAL_FAILURE(copy(gated)); break;
      case 6: ASSERT_NO_FATAL_FAILURE(fill(gated)); break;
      default: ASSERT_NO_FATAL_FAILURE(migrate(gated)); break;
    }
    maybe_flush();
  }

  void kernel(bool gated) {
    const auto v = three(gated);
    const std::size_t a = v[0], b = v[1], c = v[2];
    cl_mem args[] = {bufs_[a].get(), bufs_[b].get(), bufs_[c].get()};
    for (cl_uint k = 0; k < 3; ++k) ASSERT_EQ(clSetKernelArg(combine_.get(), k, sizeof(cl_mem), &args[k]), CL_SUCCESS);
    auto w = waits({a, b}, {c});
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueNDRangeKernel(any_queue(), combine_.get(), 1, nullptr, &kElements, nullptr,
                                     static_cast<cl_uint>(w.size()), w.data(), &ev),
              CL_SUCCESS);
    read_by({a, b}, ev);
    wrote({c}, ev);
    for (std::size_t k = 0; k < kElements; ++k) model_[c][k] = model_[c][k] * 3u + model_[a][k] + model_[b][k];
  }

  // A random range [first, first + count) of a buffer, in elements.
  std::pair<std::size_t, std::size_t> range() {
    const std::size_t x = pick(kElements), y = pick(kElements);
    return {std::min(x, y), std::max(x, y) - std::min(x, y) + 1};
  }

  void write(bool gated) {
    const std::size_t b = any_buffer(gated);
    auto [first, count] = range();
    auto data = std::make_shared<std::vector<std::uint32_t>>(count);
    for (auto& x : *data) x = static_cast<std::uint32_t>(rng_());
    auto w = waits({}, {b});
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueWriteBuffer(any_queue(), bufs_[b].get(), CL_FALSE, first * 4, count * 4, data->data(),
                                   static_cast<cl_uint>(w.size()), w.data(), &ev),
              CL_SUCCESS);
    wrote({b}, ev);
    std::copy(data->begin(), data->end(), model_[b].begin() + static_cast<std::ptrdiff_t>(first));
    keep_.push_back(std::move(data));
  }

  void read(bool gated) {
    const std::size_t b = any_buffer(gated);
    auto [first, count] = range();
    PendingRead r{Event(), b, first, std::vector<std::uint32_t>(count), {}};
    r.expected.assign(model_[b].begin() + static_cast<std::ptrdiff_t>(first),
                      model_[b].begin() + static_cast<std::ptrdiff_t>(first + count));
    auto w = waits({b}, {});
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueReadBuffer(any_queue(), bufs_[b].get(), CL_FALSE, first * 4, count * 4, r.got.data(),
                                  static_cast<cl_uint>(w.size()), w.data(), &ev),
              CL_SUCCESS);
    read_by({b}, ev);
    r.done = Event(ev);
    reads_.push_back(std::move(r));
  }

  void copy(bool gated) {
    const auto v = three(gated);
    const std::size_t src = v[0], dst = v[1];
    auto [first, count] = range();
    const std::size_t to = pick(kElements - count + 1);
    auto w = waits({src}, {dst});
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueCopyBuffer(any_queue(), bufs_[src].get(), bufs_[dst].get(), first * 4, to * 4, count * 4,
                                  static_cast<cl_uint>(w.size()), w.data(), &ev),
              CL_SUCCESS);
    read_by({src}, ev);
    wrote({dst}, ev);
    std::copy_n(model_[src].begin() + static_cast<std::ptrdiff_t>(first), count,
                model_[dst].begin() + static_cast<std::ptrdiff_t>(to));
  }

  void fill(bool gated) {
    const std::size_t b = any_buffer(gated);
    auto [first, count] = range();
    const std::uint32_t pattern = static_cast<std::uint32_t>(rng_());
    auto w = waits({}, {b});
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueFillBuffer(any_queue(), bufs_[b].get(), &pattern, sizeof pattern, first * 4, count * 4,
                                  static_cast<cl_uint>(w.size()), w.data(), &ev),
              CL_SUCCESS);
    wrote({b}, ev);
    std::fill_n(model_[b].begin() + static_cast<std::ptrdiff_t>(first), count, pattern);
  }

  // To the queue's device or to the host; the content is kept. Ordered as
  // a write (it moves the bytes under the buffer's readers).
  void migrate(bool gated) {
    const std::size_t b = any_buffer(gated);
    const cl_mem_migration_flags flags = pick(3) == 0 ? CL_MIGRATE_MEM_OBJECT_HOST : 0;
    auto w = waits({}, {b});
    cl_event ev = nullptr;
    cl_mem m = bufs_[b].get();
    ASSERT_EQ(clEnqueueMigrateMemObjects(any_queue(), 1, &m, flags, static_cast<cl_uint>(w.size()), w.data(), &ev),
              CL_SUCCESS);
    wrote({b}, ev);
  }

  void blocking_read(bool gated) {
    const std::size_t b = any_buffer(gated);
    auto [first, count] = range();
    std::vector<std::uint32_t> got(count);
    auto w = waits({b}, {});
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueReadBuffer(any_queue(), bufs_[b].get(), CL_TRUE, first * 4, count * 4, got.data(),
                                  static_cast<cl_uint>(w.size()), w.data(), &ev),
              CL_SUCCESS);
    read_by({b}, ev);
    clReleaseEvent(ev);
    ASSERT_TRUE(std::equal(got.begin(), got.end(), model_[b].begin() + static_cast<std::ptrdiff_t>(first)))
        << "blocking read of buffer " << b;
  }

  // A blocking map the host writes, unmapped at once.
  void blocking_map(bool gated) {
    const std::size_t b = any_buffer(gated);
    auto [first, count] = range();
    auto w = waits({}, {b});
    cl_command_queue q = any_queue();
    cl_int err = CL_SUCCESS;
    auto* p = static_cast<std::uint32_t*>(clEnqueueMapBuffer(q, bufs_[b].get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                                             first * 4, count * 4, static_cast<cl_uint>(w.size()),
                                                             w.data(), nullptr, &err));
    ASSERT_EQ(err, CL_SUCCESS);
    ASSERT_TRUE(std::equal(p, p + count, model_[b].begin() + static_cast<std::ptrdiff_t>(first)))
        << "blocking map of buffer " << b;
    for (std::size_t k = 0; k < count; ++k) p[k] = model_[b][first + k] = static_cast<std::uint32_t>(rng_());
    cl_event ev = nullptr;
    ASSERT_EQ(clEnqueueUnmapMemObject(q, bufs_[b].get(), p, 0, nullptr, &ev), CL_SUCCESS);
    wrote({b}, ev);
  }

  void check_reads() {
    for (const PendingRead& r : reads_) {
      cl_int status = CL_QUEUED;
      ASSERT_EQ(clGetEventInfo(r.done.get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr),
                CL_SUCCESS);
      ASSERT_EQ(status, CL_COMPLETE);
      EXPECT_TRUE(r.got == r.expected) << "read of buffer " << r.buffer << " from element " << r.first;
    }
  }

  // Every byte of every buffer, each read on a device chosen at random.
  void check_buffers() {
    std::vector<std::uint32_t> got(kElements);
    for (std::size_t b = 0; b < buffers_; ++b) {
      ASSERT_EQ(clEnqueueReadBuffer(any_queue(), bufs_[b].get(), CL_TRUE, 0, kBufferBytes, got.data(), 0, nullptr,
                                    nullptr),
                CL_SUCCESS);
      EXPECT_TRUE(got == model_[b]) << "buffer " << b << " differs from running the commands in enqueue order";
    }
  }

  Shape shape_;
  std::mt19937_64 rng_;
  std::vector<cl_device_id> devices_;
  Context ctx_;
  std::vector<Queue> queues_;
  Program program_;
  Kernel combine_;
  Event gate_;
  bool gate_open_ = false;
  std::size_t buffers_ = 0;
  std::vector<std::shared_ptr<std::vector<std::uint32_t>>> keep_;  // host data of non-blocking writes
  std::vector<Mem> bufs_;
  std::vector<std::vector<std::uint32_t>> model_;
  std::vector<Tracked> tracked_;
  std::vector<PendingRead> reads_;
};

// The watchdog: longer than POCL_MEMLAYER_ROOM_WAIT_MS's default (60 s), so
// that a room wait that runs out is reported as the enqueue's error.
constexpr int kWatchdogSeconds = 150;

void run_bounded(const Shape& s) {
  bounded("the oversubscribed workload", kWatchdogSeconds, [&] {
    Workload w(s);
    w.run();
  });
}

TEST(Oversubscribed, AsynchronousWorkOnEveryDeviceCompletes) {
  for (std::uint64_t seed : {1, 2}) {
    Shape s;
    s.seed = seed;
    run_bounded(s);
    if (HasFatalFailure()) return;
  }
}

TEST(Oversubscribed, FlushedAfterEachEnqueue) {
  Shape s;
  s.seed = 3;
  s.flush = true;
  run_bounded(s);
}

TEST(Oversubscribed, GateClosedWhileMuchIsEnqueued) {
  Shape s;
  s.seed = 4;
  s.gate_closed_long = true;
  run_bounded(s);
}

TEST(Oversubscribed, BlockingMapsAndReadsInTheMiddle) {
  Shape s;
  s.seed = 5;
  s.blocking_middle = true;
  run_bounded(s);
}

TEST(Oversubscribed, ThreeTimesTheDevice) {
  Shape s;
  s.seed = 6;
  s.working_set = 3.0;
  run_bounded(s);
}

// A buffer the host has mapped, its unmap queued (behind a user event),
// holds the room the next command needs: A, then B and C, each 3/8 of the
// device, where B and C fit together and all three do not. The kernel on B
// and C evicts A once its unmap is enqueued, as any busy buffer (its
// storage goes once the unmap has run, its bytes written back after it);
// the enqueue waits for that. A thread opens the gate once A is evicted.
// Before, a mapped buffer was never evicted: the kernel failed at once with
// CL_MEM_OBJECT_ALLOCATION_FAILURE ("cannot place ... nothing more can be
// evicted"), as bench/stress/pocl-oversubscription.sh's run at 8x did now
// and then.
TEST(Oversubscribed, AMappedBufferWhoseUnmapIsQueuedMakesRoom) {
  auto devices = all_devices();
  ASSERT_FALSE(devices.empty());
  cl_device_id dev = devices[0];
  cl_ulong memory = 0;
  ASSERT_EQ(clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof memory, &memory, nullptr), CL_SUCCESS);
  const std::size_t bytes = memory / 8 * 3, n = bytes / 4;
  cl_int err = CL_SUCCESS;
  Context ctx(clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Queue q(clCreateCommandQueueWithProperties(ctx.get(), dev, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  std::vector<cl_device_id> devs{dev};
  Program program = build_program(ctx.get(), devs, R"CLC(
    kernel void twice_plus_one(global const uint* b, global uint* c) {
      size_t i = get_global_id(0);
      c[i] = b[i] * 2u + 1u;
    }
  )CLC");
  Kernel k(clCreateKernel(program.get(), "twice_plus_one", &err));
  ASSERT_EQ(err, CL_SUCCESS);
  std::vector<std::uint32_t> b_data(n), a_written(n);
  for (std::size_t i = 0; i < n; ++i) {
    b_data[i] = static_cast<std::uint32_t>(i * 7);
    a_written[i] = static_cast<std::uint32_t>(i ^ 0x5a5a5a5au);
  }
  Mem a(clCreateBuffer(ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem b(clCreateBuffer(ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, b_data.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem c(clCreateBuffer(ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Event gate(clCreateUserEvent(ctx.get(), &err));
  ASSERT_EQ(err, CL_SUCCESS);

  // A on the device, mapped and written by the host, its unmap queued.
  auto* p = static_cast<std::uint32_t*>(
      clEnqueueMapBuffer(q.get(), a.get(), CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, 0, bytes, 0, nullptr, nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  std::copy(a_written.begin(), a_written.end(), p);
  cl_event g = gate.get();
  ASSERT_EQ(clEnqueueUnmapMemObject(q.get(), a.get(), p, 1, &g, nullptr), CL_SUCCESS);

  const std::uint64_t evictions = migration_stats().evictions;
  std::atomic<bool> returned{false};
  std::thread opener([&] {
    while (!returned.load() && migration_stats().evictions == evictions) std::this_thread::yield();
    clSetUserEventStatus(gate.get(), CL_COMPLETE);
  });
  cl_mem args[] = {b.get(), c.get()};
  for (cl_uint i = 0; i < 2; ++i) ASSERT_EQ(clSetKernelArg(k.get(), i, sizeof(cl_mem), &args[i]), CL_SUCCESS);
  const cl_int enqueued = bounded("the kernel that needs A's room", kWatchdogSeconds, [&] {
    return clEnqueueNDRangeKernel(q.get(), k.get(), 1, nullptr, &n, nullptr, 0, nullptr, nullptr);
  });
  returned = true;
  opener.join();
  EXPECT_EQ(enqueued, CL_SUCCESS);
  ASSERT_EQ(clFinish(q.get()), CL_SUCCESS);
  std::vector<std::uint32_t> got(n);
  ASSERT_EQ(clEnqueueReadBuffer(q.get(), a.get(), CL_TRUE, 0, bytes, got.data(), 0, nullptr, nullptr), CL_SUCCESS);
  EXPECT_TRUE(got == a_written) << "the host's writes through the mapping were lost";
  if (enqueued != CL_SUCCESS) return;
  ASSERT_EQ(clEnqueueReadBuffer(q.get(), c.get(), CL_TRUE, 0, bytes, got.data(), 0, nullptr, nullptr), CL_SUCCESS);
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != b_data[i] * 2u + 1u) FAIL() << "C[" << i << "] is " << got[i];
}

}  // namespace

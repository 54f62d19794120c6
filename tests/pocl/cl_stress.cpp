// memlayer-cl-stress: a seeded multi-device OpenCL stress program. It runs
// through the ICD loader on whatever devices the platform offers (for
// memlayer: POCL_DEVICES="memlayer memlayer ..."), on buffers and on
// disjoint and overlapping sub-buffers (some over CL_MEM_USE_HOST_PTR
// memory), with kernels (one of
// them using local memory), copies, fills, plain and rect reads and writes
// (blocking and not), maps, explicit migrations, on several queues per
// device, and checks every read against a host model.
//
// Ordering is explicit, as OpenCL requires for commands on different queues:
// each command waits on the last event of every quarter of a parent buffer
// it touches (event wait lists across queues and devices), so the model is
// the commands in enqueue order, while commands on disjoint sub-buffers of
// one parent run concurrently on different devices. Reads are checked when
// they complete.
//
//   memlayer-cl-stress [--ops N] [--seed S] [--buffers B] [--elements E]
//                      [--queues-per-device Q] [--sub-buffers 0|1|2]
//                      [--faults 0|1] [--stats 0|1]
// --sub-buffers: 1 (default) the quarters and the overlapping halves, 2 the
// quarters only, 0 none (whole buffers only).
// --faults 1: the devices inject faults (the memlayer driver's
// transfer_faults parameter), so commands fail. A failed command fails what
// waits for it, and its bytes are undefined; once the program sees a
// quarter's last command failed, it forgets that quarter (its elements are
// unknown until written again) and stops waiting for the failed chain, as an
// application that handles errors would. Every read of known elements is
// still checked, and at least one command must have failed.
// --stats 1: prints the working set (every buffer's bytes), the ops per
// second from the first op to the last one finished, and what memlayer's
// engine moved meanwhile (bytes per byte of working set, evictions) and
// the share of its enqueues its fast path took:
// bench/stress/pocl-oversubscription.sh reads them.
// Exit status: 0 when every check passed, 1 on a mismatch (or, with
// --faults 1, when nothing failed), 2 on an error.
#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cl_check.hpp"

namespace {

using namespace memlayer::cltest;

const char* kSource = R"CLC(
kernel void affine(global uint* dst, global const uint* src, uint mul, uint add) {
  size_t i = get_global_id(0);
  dst[i] = src[i] * mul + add;
}
// Reverses each work-group's slice of src through local memory.
kernel void reverse_groups(global uint* dst, global const uint* src, local uint* scratch, uint x) {
  size_t l = get_local_id(0), n = get_local_size(0), g = get_group_id(0);
  scratch[l] = src[g * n + l];
  barrier(CLK_LOCAL_MEM_FENCE);
  dst[g * n + l] = scratch[n - 1 - l] ^ x;
}
)CLC";

struct Options {
  std::uint64_t ops = 2000;
  std::uint64_t seed = 1;
  unsigned buffers = 4;
  std::size_t elements = 1 << 15;  // uint32 per buffer; a multiple of 4 * 64
  unsigned queues_per_device = 2;
  unsigned sub_buffers = 1;
  bool faults = false;
  bool stats = false;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return false;
    }
    const unsigned long long v = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--ops") o.ops = v;
    else if (a == "--seed") o.seed = v;
    else if (a == "--buffers" && v > 0) o.buffers = static_cast<unsigned>(v);
    else if (a == "--elements" && v >= 256 && v % 256 == 0) o.elements = v;
    else if (a == "--queues-per-device" && v > 0) o.queues_per_device = static_cast<unsigned>(v);
    else if (a == "--sub-buffers" && v <= 2) o.sub_buffers = static_cast<unsigned>(v);
    else if (a == "--faults" && v <= 1) o.faults = v == 1;
    else if (a == "--stats" && v <= 1) o.stats = v == 1;
    else {
      std::fprintf(stderr, "bad option %s %s (see the header of cl_stress.cpp)\n", a.c_str(), argv[i]);
      return false;
    }
  }
  return true;
}

// A range of a parent buffer as a cl_mem: the parent itself, one of its
// four disjoint quarter sub-buffers, or one of three overlapping halves
// (quarters 0-1, 1-2, 2-3).
struct View {
  unsigned parent = 0;
  std::size_t first = 0;  // in elements, within the parent
  std::size_t count = 0;
  cl_mem mem = nullptr;
  unsigned q0 = 0, q1 = 4;  // the quarters [q0, q1) it covers
  [[nodiscard]] bool overlaps(const View& o) const { return parent == o.parent && q0 < o.q1 && o.q0 < q1; }
};

// A read whose expected bytes were fixed at enqueue time (`known`: which
// of them the model knows; with faults, some are undefined).
struct PendingRead {
  Event done;
  std::vector<std::uint32_t> got;
  std::vector<std::uint32_t> expected;
  std::vector<std::uint8_t> known;
  std::string what;
};

// An OpenCL error a failed command explains (with faults on), as opposed to
// a misuse of the API (CL_INVALID_*: -30 to -72), which is always a bug.
bool is_command_failure(cl_int err) { return err < 0 && !(err <= -30 && err >= -72); }

class Stress {
 public:
  explicit Stress(const Options& o) : o_(o), rng_(o.seed) {}

  int run() {
    DeviceSet set = open_device_set(kSource, o_.queues_per_device);
    devices_ = std::move(set.devices);
    ctx_ = std::move(set.ctx);
    queues_ = std::move(set.queues);
    program_ = std::move(set.program);
    cl_int err = CL_SUCCESS;
    affine_ = Kernel(clCreateKernel(program_.get(), "affine", &err));
    check(err, "clCreateKernel(affine)");
    reverse_ = Kernel(clCreateKernel(program_.get(), "reverse_groups", &err));
    check(err, "clCreateKernel(reverse_groups)");
    make_buffers();

    if (o_.stats)  // the buffers' first writes are not the ops timed
      for (auto& q : queues_) CL_CHECK(clFinish(q.get()));
    const auto moved_before = o_.stats ? find_migration_stats() : std::nullopt;
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < o_.ops; ++i) {
      step(i);
      if (reads_.size() > 64) retire(reads_.size() - 32);
    }
    for (auto& q : queues_) CL_CHECK(clFinish(q.get()));
    retire(reads_.size());
    if (o_.stats) print_stats(moved_before, std::chrono::steady_clock::now() - start);
    final_check();

    std::printf("memlayer-cl-stress: %zu devices, %zu queues, %u buffers x %zu KiB, %" PRIu64
                " ops (seed %" PRIu64 "): %" PRIu64 " reads checked, %" PRIu64 " mismatches\n",
                devices_.size(), queues_.size(), o_.buffers, o_.elements * 4 / 1024, o_.ops, o_.seed, checked_,
                mismatches_);
    std::printf("  ops: kernel %" PRIu64 ", local-memory kernel %" PRIu64 ", write %" PRIu64 ", read %" PRIu64
                ", rect %" PRIu64 ", copy %" PRIu64 ", fill %" PRIu64 ", map %" PRIu64 ", migrate %" PRIu64 "\n",
                count_[0], count_[1], count_[2], count_[3], count_[4], count_[5], count_[6], count_[7], count_[8]);
    if (o_.faults) {
      std::printf("  faults: %" PRIu64 " failed chains forgotten, %" PRIu64 " calls failed, %" PRIu64
                  " reads failed; %" PRIu64 " elements checked\n",
                  chains_failed_, calls_failed_, reads_failed_, elements_checked_);
      if (const auto st = find_migration_stats())
        std::printf("  migrations made from another copy %" PRIu64 ", last-copy pauses %" PRIu64 "\n",
                    st->migrations_resourced, st->last_copy_retries);
      if (chains_failed_ + calls_failed_ + reads_failed_ == 0) {
        std::fprintf(stderr, "memlayer-cl-stress: --faults 1, but no command failed: is the fault injection on?\n");
        return 1;
      }
    }
    return mismatches_ == 0 ? 0 : 1;
  }

 private:
  // --stats 1's lines (the header's).
  void print_stats(const std::optional<MigrationStats>& before, std::chrono::steady_clock::duration took) const {
    const double seconds = std::chrono::duration<double>(took).count();
    const double working_set = static_cast<double>(o_.buffers) * static_cast<double>(o_.elements) * 4;
    std::printf("  working set %.0f bytes; %.0f ops/s\n", working_set, static_cast<double>(o_.ops) / seconds);
    const auto after = find_migration_stats();
    if (!before || !after) return;  // PoCL's own engine: no counters
    std::printf("  moved %.2f bytes per byte of working set; %" PRIu64 " evictions\n",
                static_cast<double>(after->moved() - before->moved()) / working_set, after->evictions - before->evictions);
    const std::uint64_t enqueues = after->enqueues - before->enqueues;
    const std::uint64_t fast = after->fast_path_enqueues - before->fast_path_enqueues;
    std::printf("  fast path: %" PRIu64 " of %" PRIu64 " engine enqueues (%.1f%%)\n", fast, enqueues,
                enqueues != 0 ? 100.0 * static_cast<double>(fast) / static_cast<double>(enqueues) : 0.0);
  }

  void make_buffers() {
    cl_int err = CL_SUCCESS;
    const std::size_t bytes = o_.elements * 4;
    for (unsigned b = 0; b < o_.buffers; ++b) {
      std::vector<std::uint32_t> init(o_.elements);
      for (auto& v : init) v = static_cast<std::uint32_t>(rng_());
      // Buffers start three ways: copied from host memory, using host memory
      // (CL_MEM_USE_HOST_PTR: the host array stays the buffer's backing),
      // or empty and then written.
      const int kind = static_cast<int>(b % 3);
      void* host = nullptr;
      cl_mem_flags flags = CL_MEM_READ_WRITE;
      if (kind == 0) {
        flags |= CL_MEM_COPY_HOST_PTR;
        host = init.data();
      } else if (kind == 1) {
        flags |= CL_MEM_USE_HOST_PTR;
        host_backing_.push_back(std::make_unique<std::vector<std::uint32_t>>(init));
        host = host_backing_.back()->data();
      }
      parents_.emplace_back(clCreateBuffer(ctx_.get(), flags, bytes, host, &err));
      check(err, "clCreateBuffer");
      const bool written = kind != 2 || !call_failed(clEnqueueWriteBuffer(queues_[0].get(), parents_.back().get(),
                                                                          CL_TRUE, 0, bytes, init.data(), 0, nullptr,
                                                                          nullptr),
                                                     "clEnqueueWriteBuffer");
      model_.push_back(std::move(init));
      known_.emplace_back(o_.elements, written ? 1 : 0);
      last_.emplace_back();
      views_.push_back(View{b, 0, o_.elements, parents_.back().get(), 0, 4});
      if (o_.sub_buffers == 0) continue;
      for (unsigned q = 0; q < 4; ++q) add_sub_buffer(b, q, q + 1);
      if (o_.sub_buffers == 2) continue;
      for (unsigned q = 0; q < 3; ++q) add_sub_buffer(b, q, q + 2);
    }
  }

  void add_sub_buffer(unsigned parent, unsigned q0, unsigned q1) {
    const std::size_t quarter = o_.elements / 4;
    cl_buffer_region r{q0 * quarter * 4, (q1 - q0) * quarter * 4};
    cl_int err = CL_SUCCESS;
    subs_.emplace_back(clCreateSubBuffer(parents_[parent].get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r,
                                         &err));
    check(err, "clCreateSubBuffer");
    views_.push_back(View{parent, q0 * quarter, (q1 - q0) * quarter, subs_.back().get(), q0, q1});
  }

  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  const View& any_view() { return views_[pick(views_.size())]; }
  cl_command_queue any_queue() { return queues_[pick(queues_.size())].get(); }

  // The wait list for a command on these views: the last events of the
  // quarters they cover (a quarter whose last command failed is forgotten
  // first: forget_failed()).
  std::vector<cl_event> deps(std::initializer_list<const View*> views) {
    std::vector<cl_event> w;
    for (const View* v : views)
      for (unsigned q = v->q0; q < v->q1; ++q) {
        forget_failed(v->parent, q);
        cl_event e = last_[v->parent][q].get();
        if (e != nullptr && std::find(w.begin(), w.end(), e) == w.end()) w.push_back(e);
      }
    return w;
  }
  void became_last(std::initializer_list<const View*> views, cl_event e) {
    for (const View* v : views)
      for (unsigned q = v->q0; q < v->q1; ++q) {
        clRetainEvent(e);
        last_[v->parent][q] = Event(e);
      }
  }
  static const cl_event* list(const std::vector<cl_event>& w) { return w.empty() ? nullptr : w.data(); }

  // With faults: when the last command on a quarter has failed, so has
  // every command on it since its failure reached it (each waited for the
  // one before), and what they were to write is undefined: the quarter's
  // elements become unknown, and later commands no longer wait for the
  // failed chain (they would fail with it).
  void forget_failed(unsigned parent, unsigned q) {
    if (!o_.faults || last_[parent][q].get() == nullptr) return;
    cl_int status = CL_COMPLETE;
    CL_CHECK(clGetEventInfo(last_[parent][q].get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr));
    if (status >= 0) return;
    ++chains_failed_;
    last_[parent][q].reset();
    const std::size_t quarter = o_.elements / 4;
    std::fill_n(known_[parent].begin() + static_cast<std::ptrdiff_t>(q * quarter), quarter, 0);
  }
  // With faults: true when `err` says the command failed (counted), else
  // `err` must be CL_SUCCESS.
  bool call_failed(cl_int err, const char* what) {
    if (err == CL_SUCCESS) return false;
    if (o_.faults && is_command_failure(err)) {
      ++calls_failed_;
      return true;
    }
    check(err, what);
    return false;
  }
  void set_known(const View& v, std::size_t first, std::size_t count, std::uint8_t k) {
    std::fill_n(known_[v.parent].begin() + static_cast<std::ptrdiff_t>(v.first + first), count, k);
  }

  // A sub-range [first, first+count) of view v, in elements, aligned to `unit`.
  std::pair<std::size_t, std::size_t> range(const View& v, std::size_t unit = 1) {
    const std::size_t units = v.count / unit;
    const std::size_t a = pick(units), b = pick(units);
    return {std::min(a, b) * unit, (std::max(a, b) - std::min(a, b) + 1) * unit};
  }

  void step(std::uint64_t i) {
    switch (pick(9)) {
      case 0: kernel_affine(); break;
      case 1: kernel_reverse(); break;
      case 2: write(); break;
      case 3: read(i); break;
      case 4: rect(i); break;
      case 5: copy(); break;
      case 6: fill(); break;
      case 7: map(); break;
      default: migrate(); break;
    }
  }

  void kernel_affine() {
    ++count_[0];
    const View& dst = any_view();
    // Source: a view of another parent of at least dst's size, or dst itself.
    const View* src = &dst;
    for (int tries = 0; tries < 4; ++tries) {
      const View& c = any_view();
      if (!c.overlaps(dst) && c.count >= dst.count) {
        src = &c;
        break;
      }
    }
    const std::uint32_t mul = static_cast<std::uint32_t>(rng_()) | 1u, add = static_cast<std::uint32_t>(rng_());
    CL_CHECK(clSetKernelArg(affine_.get(), 0, sizeof(cl_mem), &dst.mem));
    CL_CHECK(clSetKernelArg(affine_.get(), 1, sizeof(cl_mem), &src->mem));
    CL_CHECK(clSetKernelArg(affine_.get(), 2, sizeof mul, &mul));
    CL_CHECK(clSetKernelArg(affine_.get(), 3, sizeof add, &add));
    auto w = deps({&dst, src});
    cl_event e = nullptr;
    const std::size_t global = dst.count;
    CL_CHECK(clEnqueueNDRangeKernel(any_queue(), affine_.get(), 1, nullptr, &global, nullptr,
                                    static_cast<cl_uint>(w.size()), list(w), &e));
    became_last({&dst, src}, e);
    clReleaseEvent(e);
    std::vector<std::uint32_t> s(model_[src->parent].begin() + static_cast<std::ptrdiff_t>(src->first),
                                 model_[src->parent].begin() + static_cast<std::ptrdiff_t>(src->first + dst.count));
    std::vector<std::uint8_t> ks(known_[src->parent].begin() + static_cast<std::ptrdiff_t>(src->first),
                                 known_[src->parent].begin() + static_cast<std::ptrdiff_t>(src->first + dst.count));
    for (std::size_t k = 0; k < dst.count; ++k) {
      model_[dst.parent][dst.first + k] = s[k] * mul + add;
      known_[dst.parent][dst.first + k] = ks[k];
    }
  }

  void kernel_reverse() {
    ++count_[1];
    const View& dst = any_view();
    const View* src = nullptr;
    for (int tries = 0; tries < 16 && src == nullptr; ++tries) {
      const View& c = any_view();
      if (c.parent != dst.parent && c.count >= dst.count) src = &c;
    }
    if (src == nullptr) return;
    const std::size_t group = std::size_t{64} << pick(3);  // 64, 128, 256
    const std::uint32_t x = static_cast<std::uint32_t>(rng_());
    CL_CHECK(clSetKernelArg(reverse_.get(), 0, sizeof(cl_mem), &dst.mem));
    CL_CHECK(clSetKernelArg(reverse_.get(), 1, sizeof(cl_mem), &src->mem));
    CL_CHECK(clSetKernelArg(reverse_.get(), 2, group * 4, nullptr));
    CL_CHECK(clSetKernelArg(reverse_.get(), 3, sizeof x, &x));
    auto w = deps({&dst, src});
    cl_event e = nullptr;
    const std::size_t global = dst.count;
    CL_CHECK(clEnqueueNDRangeKernel(any_queue(), reverse_.get(), 1, nullptr, &global, &group,
                                    static_cast<cl_uint>(w.size()), list(w), &e));
    became_last({&dst, src}, e);
    clReleaseEvent(e);
    const auto& s = model_[src->parent];
    auto& d = model_[dst.parent];
    const auto& ks = known_[src->parent];
    auto& kd = known_[dst.parent];
    for (std::size_t g = 0; g < dst.count / group; ++g)
      for (std::size_t l = 0; l < group; ++l) {
        d[dst.first + g * group + l] = s[src->first + g * group + (group - 1 - l)] ^ x;
        kd[dst.first + g * group + l] = ks[src->first + g * group + (group - 1 - l)];
      }
  }

  void write() {
    ++count_[2];
    const View& v = any_view();
    auto [first, count] = range(v);
    auto data = std::make_shared<std::vector<std::uint32_t>>(count);
    for (auto& x : *data) x = static_cast<std::uint32_t>(rng_());
    const bool blocking = pick(2) == 0;
    auto w = deps({&v});
    cl_event e = nullptr;
    const cl_int err = clEnqueueWriteBuffer(any_queue(), v.mem, blocking ? CL_TRUE : CL_FALSE, first * 4, count * 4,
                                            data->data(), static_cast<cl_uint>(w.size()), list(w), &e);
    if (call_failed(err, "clEnqueueWriteBuffer")) {  // a blocking write that failed: its range is undefined
      if (e != nullptr) clReleaseEvent(e);
      set_known(v, first, count, 0);
      return;
    }
    became_last({&v}, e);
    if (!blocking) keep_alive_.push_back({Event(e), data});
    else clReleaseEvent(e);
    std::copy(data->begin(), data->end(), model_[v.parent].begin() + static_cast<std::ptrdiff_t>(v.first + first));
    set_known(v, first, count, 1);
  }

  void read(std::uint64_t i) {
    ++count_[3];
    const View& v = any_view();
    auto [first, count] = range(v);
    auto w = deps({&v});  // first: it may forget a failed quarter
    PendingRead r;
    r.got.resize(count);
    r.expected.assign(model_[v.parent].begin() + static_cast<std::ptrdiff_t>(v.first + first),
                      model_[v.parent].begin() + static_cast<std::ptrdiff_t>(v.first + first + count));
    r.known.assign(known_[v.parent].begin() + static_cast<std::ptrdiff_t>(v.first + first),
                   known_[v.parent].begin() + static_cast<std::ptrdiff_t>(v.first + first + count));
    r.what = "op " + std::to_string(i) + ": read of buffer " + std::to_string(v.parent) + " elements [" +
             std::to_string(v.first + first) + ", +" + std::to_string(count) + ")";
    const bool blocking = pick(2) == 0;
    cl_event e = nullptr;
    const cl_int err = clEnqueueReadBuffer(any_queue(), v.mem, blocking ? CL_TRUE : CL_FALSE, first * 4, count * 4,
                                           r.got.data(), static_cast<cl_uint>(w.size()), list(w), &e);
    if (call_failed(err, "clEnqueueReadBuffer")) {  // a blocking read that failed: nothing to check
      if (e != nullptr) clReleaseEvent(e);
      return;
    }
    became_last({&v}, e);
    r.done = Event(e);
    reads_.push_back(std::move(r));
  }

  // A 2D rectangle: rows of the view seen as a matrix of `row` elements;
  // written or read with host pitch != buffer pitch.
  void rect(std::uint64_t i) {
    ++count_[4];
    const View& v = any_view();
    const std::size_t row = 64;  // elements per buffer row
    const std::size_t rows = v.count / row;
    const std::size_t r0 = pick(rows), nrows = 1 + pick(std::min<std::size_t>(rows - r0, 16));
    const std::size_t c0 = pick(row), ncols = 1 + pick(row - c0);
    const std::size_t host_row = ncols + 3;  // elements; padded host rows
    const std::size_t buffer_origin[3] = {c0 * 4, r0, 0};
    const std::size_t host_origin[3] = {4, 0, 0};  // one element in
    const std::size_t region[3] = {ncols * 4, nrows, 1};
    auto w = deps({&v});
    cl_event e = nullptr;
    auto& m = model_[v.parent];
    if (pick(2) == 0) {
      auto data = std::make_shared<std::vector<std::uint32_t>>(host_row * nrows);
      for (auto& x : *data) x = static_cast<std::uint32_t>(rng_());
      CL_CHECK(clEnqueueWriteBufferRect(any_queue(), v.mem, CL_FALSE, buffer_origin, host_origin, region, row * 4, 0,
                                        host_row * 4, 0, data->data(), static_cast<cl_uint>(w.size()), list(w), &e));
      became_last({&v}, e);
      keep_alive_.push_back({Event(e), data});
      for (std::size_t r = 0; r < nrows; ++r)
        for (std::size_t c = 0; c < ncols; ++c) {
          m[v.first + (r0 + r) * row + c0 + c] = (*data)[r * host_row + 1 + c];
          known_[v.parent][v.first + (r0 + r) * row + c0 + c] = 1;
        }
    } else {
      PendingRead rd;
      rd.got.assign(host_row * nrows, 0xdeadbeef);
      rd.expected = rd.got;
      rd.known.assign(rd.got.size(), 1);  // the host rows' padding stays as it was
      for (std::size_t r = 0; r < nrows; ++r)
        for (std::size_t c = 0; c < ncols; ++c) {
          rd.expected[r * host_row + 1 + c] = m[v.first + (r0 + r) * row + c0 + c];
          rd.known[r * host_row + 1 + c] = known_[v.parent][v.first + (r0 + r) * row + c0 + c];
        }
      rd.what = "op " + std::to_string(i) + ": rect read of buffer " + std::to_string(v.parent);
      CL_CHECK(clEnqueueReadBufferRect(any_queue(), v.mem, CL_FALSE, buffer_origin, host_origin, region, row * 4, 0,
                                       host_row * 4, 0, rd.got.data(), static_cast<cl_uint>(w.size()), list(w), &e));
      became_last({&v}, e);
      rd.done = Event(e);
      reads_.push_back(std::move(rd));
    }
  }

  void copy() {
    ++count_[5];
    const View& dst = any_view();
    const View& src = any_view();
    if (dst.overlaps(src)) return;  // overlapping copies are invalid OpenCL
    const std::size_t n = 1 + pick(std::min(dst.count, src.count));
    const std::size_t so = pick(src.count - n + 1), d_o = pick(dst.count - n + 1);
    auto w = deps({&dst, &src});
    cl_event e = nullptr;
    CL_CHECK(clEnqueueCopyBuffer(any_queue(), src.mem, dst.mem, so * 4, d_o * 4, n * 4,
                                 static_cast<cl_uint>(w.size()), list(w), &e));
    became_last({&dst, &src}, e);
    clReleaseEvent(e);
    std::copy_n(model_[src.parent].begin() + static_cast<std::ptrdiff_t>(src.first + so), n,
                model_[dst.parent].begin() + static_cast<std::ptrdiff_t>(dst.first + d_o));
    std::copy_n(known_[src.parent].begin() + static_cast<std::ptrdiff_t>(src.first + so), n,
                known_[dst.parent].begin() + static_cast<std::ptrdiff_t>(dst.first + d_o));
  }

  void fill() {
    ++count_[6];
    const View& v = any_view();
    auto [first, count] = range(v, 2);
    const std::array<std::uint32_t, 2> pattern{static_cast<std::uint32_t>(rng_()), static_cast<std::uint32_t>(rng_())};
    auto w = deps({&v});
    cl_event e = nullptr;
    CL_CHECK(clEnqueueFillBuffer(any_queue(), v.mem, pattern.data(), sizeof pattern, first * 4, count * 4,
                                 static_cast<cl_uint>(w.size()), list(w), &e));
    became_last({&v}, e);
    clReleaseEvent(e);
    for (std::size_t k = 0; k < count; ++k) model_[v.parent][v.first + first + k] = pattern[k % 2];
    set_known(v, first, count, 1);
  }

  void map() {
    ++count_[7];
    const View& v = any_view();
    auto [first, count] = range(v);
    const int kind = static_cast<int>(pick(3));  // read, write, write-invalidate
    const cl_map_flags flags = kind == 0 ? CL_MAP_READ : kind == 1 ? CL_MAP_WRITE : CL_MAP_WRITE_INVALIDATE_REGION;
    auto w = deps({&v});
    cl_int err = CL_SUCCESS;
    cl_command_queue q = any_queue();
    auto* p = static_cast<std::uint32_t*>(clEnqueueMapBuffer(q, v.mem, CL_TRUE, flags, first * 4, count * 4,
                                                             static_cast<cl_uint>(w.size()), list(w), nullptr, &err));
    if (call_failed(err, "clEnqueueMapBuffer")) {
      // A map the host may write is a write of its range (from the map on):
      // failed, it leaves that range undefined where it ran.
      if (kind != 0) set_known(v, first, count, 0);
      return;
    }
    auto& m = model_[v.parent];
    if (kind == 0) {
      ++checked_;
      for (std::size_t k = 0; k < count; ++k) {
        if (!known_[v.parent][v.first + first + k]) continue;
        ++elements_checked_;
        if (p[k] != m[v.first + first + k]) {
          ++mismatches_;
          std::fprintf(stderr, "mismatch: read map of buffer %u [%zu, +%zu) at %zu\n", v.parent, v.first + first,
                       count, k);
          break;
        }
      }
    } else {
      for (std::size_t k = 0; k < count; ++k) {
        p[k] = static_cast<std::uint32_t>(rng_());
        m[v.first + first + k] = p[k];
      }
      set_known(v, first, count, 1);
    }
    cl_event e = nullptr;
    CL_CHECK(clEnqueueUnmapMemObject(q, v.mem, p, 0, nullptr, &e));
    became_last({&v}, e);
    clReleaseEvent(e);
  }

  // clEnqueueMigrateMemObjects to a queue's device or to the host; content
  // is kept (CONTENT_UNDEFINED would drop it, so the model would not hold).
  void migrate() {
    ++count_[8];
    const View& v = any_view();
    auto w = deps({&v});
    cl_event e = nullptr;
    const cl_mem_migration_flags flags = pick(2) == 0 ? 0 : CL_MIGRATE_MEM_OBJECT_HOST;
    CL_CHECK(clEnqueueMigrateMemObjects(any_queue(), 1, &v.mem, flags, static_cast<cl_uint>(w.size()), list(w), &e));
    became_last({&v}, e);
    clReleaseEvent(e);
  }

  void retire(std::size_t n) {
    for (std::size_t k = 0; k < n && !reads_.empty(); ++k) {
      PendingRead& r = reads_.front();
      cl_event e = r.done.get();
      cl_int status = CL_COMPLETE;
      if (call_failed(clWaitForEvents(1, &e), "clWaitForEvents") ||
          (CL_CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr)),
           status < 0)) {
        ++reads_failed_;  // it failed: nothing to check
        reads_.pop_front();
        continue;
      }
      ++checked_;
      check_elements(r.got, r.expected, r.known, r.what.c_str());
      reads_.pop_front();
    }
    while (!keep_alive_.empty()) {  // host data of finished non-blocking writes
      cl_int status = 0;
      CL_CHECK(clGetEventInfo(keep_alive_.front().first.get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                              &status, nullptr));
      if (status != CL_COMPLETE) break;
      keep_alive_.pop_front();
    }
  }

  // The known elements of `got`; the first mismatch is reported.
  void check_elements(const std::vector<std::uint32_t>& got, const std::vector<std::uint32_t>& expected,
                      const std::vector<std::uint8_t>& known, const char* what) {
    for (std::size_t at = 0; at < got.size(); ++at) {
      if (!known[at]) continue;
      ++elements_checked_;
      if (got[at] == expected[at]) continue;
      ++mismatches_;
      std::fprintf(stderr, "mismatch: %s: element %zu is %08x, expected %08x\n", what, at, got[at], expected[at]);
      return;
    }
  }

  // Each whole buffer, read on a device chosen at random, against the model.
  void final_check() {
    for (unsigned b = 0; b < o_.buffers; ++b) {
      for (unsigned q = 0; q < 4; ++q) forget_failed(b, q);
      std::vector<std::uint32_t> got(o_.elements);
      if (call_failed(clEnqueueReadBuffer(any_queue(), parents_[b].get(), CL_TRUE, 0, o_.elements * 4, got.data(), 0,
                                          nullptr, nullptr),
                      "clEnqueueReadBuffer")) {
        std::fprintf(stderr, "memlayer-cl-stress: the final read of buffer %u failed (a fault in the read itself?)\n", b);
        continue;
      }
      ++checked_;
      const std::string what = "final content of buffer " + std::to_string(b);
      check_elements(got, model_[b], known_[b], what.c_str());
    }
  }

  Options o_;
  std::mt19937_64 rng_;
  std::vector<cl_device_id> devices_;
  Context ctx_;
  std::vector<Queue> queues_;
  Program program_;
  Kernel affine_, reverse_;
  // CL_MEM_USE_HOST_PTR arrays: declared before the buffers, so they
  // outlive them.
  std::vector<std::unique_ptr<std::vector<std::uint32_t>>> host_backing_;
  std::vector<Mem> parents_;
  std::vector<Mem> subs_;
  std::vector<View> views_;
  std::vector<std::vector<std::uint32_t>> model_;
  std::vector<std::vector<std::uint8_t>> known_;  // per element: 0 once a failure made it undefined
  std::vector<std::array<Event, 4>> last_;  // per parent, per quarter
  std::deque<PendingRead> reads_;
  std::deque<std::pair<Event, std::shared_ptr<std::vector<std::uint32_t>>>> keep_alive_;
  std::uint64_t checked_ = 0, mismatches_ = 0, elements_checked_ = 0;
  std::uint64_t chains_failed_ = 0, calls_failed_ = 0, reads_failed_ = 0;  // with --faults 1
  std::array<std::uint64_t, 9> count_{};
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  return Stress(o).run();
}

// memlayer-stress: random commands on N sim devices from T host threads,
// every result checked against a reference model.
//
// Each host thread owns its own buffers (and their random, possibly
// overlapping sub-buffers), so the order of the commands on a buffer is that
// thread's program order, and a plain byte-array model replayed in that
// order gives the expected bytes: memlayer must order conflicting accesses in
// enqueue order, whatever the queues, devices and migrations. Threads still
// share devices, queues and events: wait lists pick events from every thread,
// and user events gate commands for a while.
//
// With faults on (failed transfers, failed user events), a command that
// fails leaves undefined what it was to write, and the commands that read
// it and were enqueued before the failure was known fail or read undefined
// bytes too; nothing else may change (doc/runtime.md, failures). The model
// learns of a failure when it finds the command's event failed, then
// forgets the buffers it wrote and every buffer written since from them,
// and drops the pending reads of those enqueued since it: every other read
// is still checked byte for byte.
//
// Devices smaller than the working set (--memory) must never refuse a
// command whose buffers fit one together: the enqueue evicts, or waits for
// room, instead (doc/runtime.md, memory pressure). Each refusal is counted,
// and one that fit fails the run, unless its room wait (--room-wait) ran
// out while user events stood shut: the threads hold their gates shut
// while they enqueue, so all of a device's room can be held behind them.
//
// Exit status: 0 when every check passed; 1 on a mismatch, a failed check
// or a refused command that fit; 2 on bad arguments; 3 when the watchdog saw no progress (a hang).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memlayer/drivers/sim_device.hpp"
#include "memlayer/runtime/context.hpp"
#include "memlayer/runtime/queue.hpp"
#include "memlayer/runtime/rect.hpp"

using namespace memlayer;
using namespace memlayer::runtime;
using migration::Access;

namespace {

struct Options {
  unsigned devices = 4;
  unsigned buffers = 48;
  std::uint64_t commands = 100000;
  unsigned threads = 4;
  std::uint64_t seed = 1;
  std::uint64_t memory = 512 << 10;  // per device: small, so eviction happens
  double faults = 0.0;
  std::uint64_t fault_burst = 1;
  std::uint64_t room_wait_ms = 10000;  // within the watchdog's 30 s
  bool peer = true;
  bool out_of_order = true;
  bool quiet = false;
};

const char* kUsage = R"(usage: memlayer-stress [options]
  --devices N      sim devices (default 4)
  --buffers M      buffers in all (default 48)
  --commands K     commands in all (default 100000)
  --threads T      enqueuing host threads (default 4)
  --seed S         random seed (default 1)
  --memory BYTES   device memory each, suffix K or M (default 512K)
  --faults P       fail each transfer with probability P (default 0)
  --fault-burst N  a failed transfer fails its device's next N-1 too (default 1);
                   from 3 on, retrying the source alone does not get through
  --room-wait MS   how long an enqueue may wait for room on a full device
                   (ContextOptions::room_wait; default 10000)
  --no-peer        no direct device-to-device links (everything via the host)
  --in-order       in-order queues only
  --quiet          no progress bar
Exit: 0 all checks passed, 1 mismatch, failed check or refused command that fit,
2 bad arguments, 3 hang.)";

bool parse_u64(const char* s, std::uint64_t& out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) return false;
  std::uint64_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1024, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1024 * 1024, ++end;
  if (*end != '\0') return false;
  out = v * mult;
  return true;
}

// The reference: bytes in enqueue order, which bytes are known (a
// CONTENT_UNDEFINED migration or a failure forgets them), and which
// locations hold the newest bytes (to count the minimum that had to move).
struct Model {
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> known;
  std::vector<std::uint64_t> valid;  // location bit mask per byte; bit 0: host
  void forget() { std::fill(known.begin(), known.end(), 0); }
};

struct Shared {
  Options opt;
  std::shared_ptr<Context> ctx;
  std::vector<std::shared_ptr<Queue>> queues;  // two per device: in-order, then maybe out-of-order
  std::vector<std::uint32_t> location_of;      // queue -> location bit
  std::atomic<std::uint64_t> done{0};
  std::atomic<std::uint64_t> mismatches{0};
  std::atomic<std::uint64_t> failed_commands{0};
  // Enqueues refused for lack of device memory: those whose buffers did
  // not fit a device together (allowed), and those that did (the promise
  // broken: doc/runtime.md, memory pressure), with the first one's message;
  // and those whose room wait ran out while user events stood shut
  // (allowed: below).
  std::atomic<std::uint64_t> too_big{0};
  std::atomic<std::uint64_t> behind_gates{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::int64_t> shut_gates{0};  // user events made and not set yet, all threads
  std::mutex refused_mutex;
  std::string first_refusal;
  std::atomic<std::uint64_t> min_bytes{0};
  std::atomic<std::uint64_t> checked_reads{0};
  std::atomic<std::uint64_t> checked_bytes{0};
  std::atomic<std::uint64_t> dropped_reads{0};  // reads whose expectation a failure voided
  std::atomic<std::uint64_t> renewed_buffers{0};  // released with commands queued, and made anew
  std::atomic<std::uint64_t> working_set{0};      // bytes of the buffers made at the start
  std::mutex events_mutex;
  std::deque<Event> recent;  // events from every thread, for wait lists
};

struct PendingRead {
  Event event;
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> expected;
  std::vector<std::uint8_t> known;
  std::size_t parent;
  std::uint64_t seq;  // program order among this thread's commands
  bool voided = false;  // a failure before it voided `expected` (kept: the read still writes `out`)
};

class Worker {
 public:
  Worker(Shared& s, unsigned index, unsigned buffers) : s_(s), rng_(s.opt.seed * 7919 + index), index_(index) {
    parents_.resize(buffers);
    lost_seen_.resize(buffers);
    models_.resize(buffers);
    views_.resize(std::size_t{buffers} * 4);
    for (unsigned i = 0; i < buffers; ++i) {
      make_buffer(i, true);
      s_.working_set.fetch_add(parents_[i].size(), std::memory_order_relaxed);
    }
  }

  // (Re)makes parent `p`: a new buffer of a random size, with host content
  // or none, and three random sub-buffers (overlapping ones too), in
  // views_[4p, 4p + 4). The old ones are released with their commands maybe
  // still queued or being evicted: the runtime must keep what those need.
  void make_buffer(std::size_t p, bool with_content) {
    const std::uint64_t size = 128 * (16 + rng_() % 240);  // 2-32 KiB
    std::vector<std::uint8_t> init(size);
    for (auto& b : init) b = static_cast<std::uint8_t>(rng_());
    auto made = with_content ? s_.ctx->create_buffer(mem::kCopyHostPtr, size, init.data())
                             : s_.ctx->create_buffer(mem::kReadWrite, size);
    if (!made) fail("create_buffer: " + made.error().message);
    parents_[p] = made.value();
    lost_seen_[p] = 0;
    models_[p] = Model{init, std::vector<std::uint8_t>(size, with_content ? 1 : 0), std::vector<std::uint64_t>(size, 1)};
    views_[p * 4] = {made.value(), p};
    for (std::size_t k = 1; k < 4; ++k) {
      const std::uint64_t origin = 128 * (rng_() % (size / 128));
      const std::uint64_t len = 1 + rng_() % (size - origin);
      auto sub = s_.ctx->create_sub_buffer(made.value(), 0, origin, len);
      if (!sub) fail("create_sub_buffer: " + sub.error().message);
      views_[p * 4 + k] = {sub.value(), p};
    }
  }

  void run(std::uint64_t commands) {
    for (std::uint64_t i = 0; i < commands; ++i) {
      step();
      s_.done.fetch_add(1, std::memory_order_relaxed);
      if (pending_.size() > 64) check_reads(false);
      if (gates_.size() > 0 && rng_() % 8 == 0) open_gate();
    }
    open_all_gates();
  }

  void finish() {
    for (auto& q : s_.queues) (void)q->finish();
    check_reads(true);
    // A final full read of every buffer.
    for (std::size_t p = 0; p < parents_.size(); ++p) read(views_[p * 4], 0, parents_[p].size(), 0);
    check_reads(true);
  }

  void release() {
    views_.clear();
    parents_.clear();
    pending_.clear();
    keep_.clear();
  }

 private:
  struct View {
    Buffer buffer;
    std::size_t parent;
  };

  [[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "\nmemlayer-stress: thread %u: %s\n", index_, what.c_str());
    std::exit(1);
  }

  std::size_t pick_queue() { return rng_() % s_.queues.size(); }
  std::uint64_t loc_bit(std::size_t queue) const { return std::uint64_t{1} << s_.location_of[queue]; }

  std::vector<Event> wait_list() {
    std::vector<Event> w;
    if (rng_() % 3 != 0) return w;
    {
      std::lock_guard lock(s_.events_mutex);
      for (int k = 0; k < 2 && !s_.recent.empty(); ++k) w.push_back(s_.recent[rng_() % s_.recent.size()]);
    }
    if (!gates_.empty() && rng_() % 2 == 0) w.push_back(gates_.front());
    return w;
  }

  void published(const Event& e) {
    std::lock_guard lock(s_.events_mutex);
    s_.recent.push_back(e);
    if (s_.recent.size() > 32) s_.recent.pop_front();
  }

  void open_all_gates() {
    while (!gates_.empty()) open_gate();
  }

  void open_gate() {
    // With faults on, a few user events fail too, and their failure spreads.
    const bool fail_it = s_.opt.faults > 0 && rng_() % 50 == 0;
    (void)gates_.front().set_user_status(fail_it ? -77 : cl::kComplete);
    gates_.pop_front();
    s_.shut_gates.fetch_sub(1);
  }

  // The model's side of an access at `loc` over [off, off+n) of a parent.
  void touch(Model& m, std::uint64_t off, std::uint64_t n, std::uint64_t loc, bool reads, bool writes) {
    std::uint64_t moved = 0;
    for (std::uint64_t i = off; i < off + n; ++i) {
      if (reads && (m.valid[i] & loc) == 0) ++moved;
      m.valid[i] = writes ? loc : (m.valid[i] | loc);
    }
    s_.min_bytes.fetch_add(moved, std::memory_order_relaxed);
  }

  // Box commands (rows of a RectRegion, pitched apart). A random region that
  // fits in `size` bytes packed, and a random layout of it (pitches, origin)
  // within `size` bytes, tight when nothing looser fits.
  RectRegion random_region(std::uint64_t size) {
    const std::uint64_t w = 1 + rng_() % std::min<std::uint64_t>(size, 64);
    const std::uint64_t rows = 1 + rng_() % std::min<std::uint64_t>(size / w, 16);
    const std::uint64_t slices = rows * w * 2 <= size && rng_() % 2 == 0 ? 2 : 1;
    return {w, rows, slices};
  }
  RectLayout random_layout(const RectRegion& region, std::uint64_t size) {
    const auto [w, rows, slices] = region;
    for (int attempt = 0;; ++attempt) {
      const bool loose = attempt < 3;
      const std::uint64_t row_pitch = w + (loose ? rng_() % 64 : 0);
      const std::uint64_t slice_pitch = rows * row_pitch + (loose ? row_pitch * (rng_() % 2) : 0);
      const std::uint64_t extent = (slices - 1) * slice_pitch + (rows - 1) * row_pitch + w;
      if (extent > size) continue;  // the packed attempt always fits a random_region(size)
      const std::uint64_t x = rng_() % (std::min(row_pitch - w, size - extent) + 1);
      const std::uint64_t y = rng_() % ((size - extent - x) / row_pitch + 1);
      return RectLayout{{x, y, 0}, row_pitch, slice_pitch};
    }
  }
  static RectBox box_of(const RectLayout& layout, const RectRegion& region) {
    return RectBox::make(layout, region, "stress").value();  // valid by construction
  }

  // The model's side of a box written at `loc` into the parent at `base`
  // (the view's offset): the rows take `bytes` (and `known`, or known when
  // null), row after row; the gaps between them keep their bytes, which the
  // runtime brings to `loc` first (the box's bounding range is one write).
  void write_box(Model& m, std::uint64_t base, const RectBox& box, const std::uint8_t* bytes,
                 const std::uint8_t* known, std::uint64_t loc) {
    const std::uint64_t w = box.region()[0];
    std::uint64_t cursor = base + box.first(), i = 0;
    box.for_each_row([&](std::uint64_t row) {
      const std::uint64_t at = base + row;
      if (at > cursor) touch(m, cursor, at - cursor, loc, true, true);
      std::copy(bytes + i, bytes + i + w, m.bytes.begin() + static_cast<long>(at));
      for (std::uint64_t k = 0; k < w; ++k) m.known[at + k] = known != nullptr ? known[i + k] : 1;
      touch(m, at, w, loc, false, true);
      cursor = at + w;
      i += w;
    });
  }

  // Counts an enqueue refused for lack of device memory (Shared::refused):
  // allowed only when the distinct `parents` it uses exceed a device.
  template <typename T>
  void note_refusal(const Result<T>& r, std::vector<std::size_t> parents) {
    if (r || r.error().code != cl::kMemObjectAllocationFailure) return;
    std::sort(parents.begin(), parents.end());
    parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
    std::uint64_t need = 0;
    for (std::size_t p : parents) need += parents_[p].size();
    if (need > s_.opt.memory) {
      s_.too_big.fetch_add(1);
      return;
    }
    // The threads enqueue non-blocking commands behind their own user
    // events and set those only later: when all the room is held by such
    // commands, the wait cannot end until this very thread (or another,
    // itself waiting so) returns. The room wait turns that deadlock, which
    // the application made, into this refusal.
    if (r.error().message.find("ms for room") != std::string::npos && s_.shut_gates.load() > 0) {
      s_.behind_gates.fetch_add(1);
      return;
    }
    if (s_.refused.fetch_add(1) == 0) {
      std::lock_guard lock(s_.refused_mutex);
      s_.first_refusal = r.error().message;
    }
  }

  // A command that may fail: what it reads and writes (parents), for the
  // model to forget once it finds it failed.
  void track(Result<Event> r, const char* what, std::vector<std::size_t> reads, std::vector<std::size_t> writes) {
    if (!r) {
      if (r.error().code == cl::kMemObjectAllocationFailure) {
        // Legal under pressure when one command needs more than a device can
        // hold at once; the model must not have applied it: callers apply
        // only after success.
        return;
      }
      fail(std::string(what) + ": " + r.error().message);
    }
    published(r.value());
    const std::uint64_t seq = ++seq_;
    log_.push_back({seq, std::move(reads), writes});
    tracked_.push_back({r.value(), seq, std::move(writes)});
    if (tracked_.size() > 256) settle_tracked();
  }

  // Commands found failed void what the model says of the buffers they
  // wrote (forget()).
  void settle_tracked() {
    // Content a failure lost without failing one of this thread's commands
    // (an eviction's write-back that failed after its storage went:
    // engine.hpp) is undefined from the enqueue that found it, after the
    // last look: void the model of the buffer and of what was made from it
    // since.
    for (std::size_t p = 0; p < parents_.size(); ++p) {
      const std::uint64_t lost = parents_[p].bytes_lost();
      if (lost == lost_seen_[p]) continue;
      lost_seen_[p] = lost;
      forget(lost_checked_seq_, {p});
    }
    lost_checked_seq_ = seq_;
    std::vector<Tracked> still;
    for (auto& t : tracked_) {
      const int st = t.event.status();
      if (st > cl::kComplete) {
        still.push_back(std::move(t));
      } else if (st < 0) {
        s_.failed_commands.fetch_add(1);
        forget(t.seq, t.writes);
      }
    }
    tracked_ = std::move(still);
    // A failure found later belongs to a command still tracked: the log
    // before the oldest of those is no longer needed.
    std::uint64_t oldest = seq_ + 1;
    for (const Tracked& t : tracked_) oldest = std::min(oldest, t.seq);
    while (!log_.empty() && log_.front().seq < oldest) log_.pop_front();
  }

  // The command numbered `seq` failed: the parents it wrote, and every parent
  // written since from one of those (the model applied those commands as if
  // it had not failed), are forgotten, and the pending reads of them
  // enqueued since it are not checked.
  void forget(std::uint64_t seq, const std::vector<std::size_t>& writes) {
    std::vector<char> tainted(models_.size(), 0);
    for (std::size_t p : writes) tainted[p] = 1;
    for (const Logged& l : log_) {
      if (l.seq <= seq) continue;
      if (std::any_of(l.reads.begin(), l.reads.end(), [&](std::size_t p) { return tainted[p] != 0; }))
        for (std::size_t p : l.writes) tainted[p] = 1;
    }
    for (std::size_t p = 0; p < models_.size(); ++p)
      if (tainted[p]) models_[p].forget();
    for (PendingRead& pr : pending_) {
      if (pr.voided || !tainted[pr.parent] || pr.seq <= seq) continue;
      pr.voided = true;
      s_.dropped_reads.fetch_add(1);
    }
  }

  void read(const View& v, std::uint64_t off, std::uint64_t n, std::size_t q) {
    read_box(v, RectLayout{{off, 0, 0}, 0, 0}, RectRegion{n, 1, 1}, q, false);
  }

  // A read of a box (as_rect: a read_rect command; else one row, a read).
  void read_box(const View& v, const RectLayout& layout, const RectRegion& region, std::size_t q, bool as_rect) {
    Model& m = models_[v.parent];
    const RectBox box = box_of(layout, region);
    PendingRead pr;
    pr.out.resize(region[0] * region[1] * region[2]);
    box.for_each_row([&](std::uint64_t row) {
      const auto at = m.bytes.begin() + static_cast<long>(v.buffer.offset() + row);
      const auto known = m.known.begin() + static_cast<long>(v.buffer.offset() + row);
      pr.expected.insert(pr.expected.end(), at, at + static_cast<long>(region[0]));
      pr.known.insert(pr.known.end(), known, known + static_cast<long>(region[0]));
    });
    pr.parent = v.parent;
    pr.seq = ++seq_;
    const bool blocking = rng_() % 4 == 0;
    if (blocking) open_all_gates();  // never block on a gate this thread still holds shut
    auto w = wait_list();
    auto r = as_rect ? s_.queues[q]->enqueue_read_rect(v.buffer, layout, {}, region, pr.out.data(), blocking, w)
                     : s_.queues[q]->enqueue_read(v.buffer, box.first(), region[0], pr.out.data(), blocking, w);
    note_refusal(r, {v.parent});
    if (!r && blocking && r.error().code != cl::kMemObjectAllocationFailure) return;  // it ran and failed
    if (!r && r.error().code != cl::kMemObjectAllocationFailure) fail("read: " + r.error().message);
    if (!r) return;
    // The runtime brings the box's whole bounding range.
    touch(m, v.buffer.offset() + box.first(), box.end() - box.first(), loc_bit(q), true, false);
    pr.event = r.value();
    published(pr.event);
    pending_.push_back(std::move(pr));
  }

  void check_reads(bool all) {
    settle_tracked();
    std::vector<PendingRead> still;
    for (auto& pr : pending_) {
      if (!all && pr.event.status() > cl::kComplete) {
        still.push_back(std::move(pr));
        continue;
      }
      const int st = pr.event.wait();
      if (st < 0 || pr.voided) continue;
      for (std::size_t i = 0; i < pr.out.size(); ++i) {
        s_.checked_bytes.fetch_add(pr.known[i], std::memory_order_relaxed);
        if (pr.known[i] && pr.out[i] != pr.expected[i]) {
          s_.mismatches.fetch_add(1);
          fail("read mismatch at byte " + std::to_string(i) + ": got " + std::to_string(pr.out[i]) + ", expected " +
               std::to_string(pr.expected[i]));
        }
      }
      s_.checked_reads.fetch_add(1);
    }
    pending_ = std::move(still);
  }

  void step() {
    View& v = views_[rng_() % views_.size()];
    Model& m = models_[v.parent];
    const std::size_t q = pick_queue();
    const std::uint64_t off = rng_() % v.buffer.size();
    const std::uint64_t n = 1 + rng_() % (v.buffer.size() - off);
    const std::uint64_t base = v.buffer.offset() + off;
    const unsigned op = static_cast<unsigned>(rng_() % 100);
    if (op < 5) {  // write a box
      write_rect(v, m, q);
    } else if (op < 20) {  // write
      auto data = std::make_shared<std::vector<std::uint8_t>>(n);
      for (auto& b : *data) b = static_cast<std::uint8_t>(rng_());
      const bool blocking = rng_() % 4 == 0;
      if (blocking) open_all_gates();
      auto r = s_.queues[q]->enqueue_write(v.buffer, off, n, data->data(), blocking, wait_list());
      note_refusal(r, {v.parent});
      if (!r && r.error().code < 0 && blocking && r.error().code != cl::kMemObjectAllocationFailure) {
        m.forget();  // the blocking write itself failed: maybe half-way, where its bytes were the only copy
        return;
      }
      if (r) {
        std::copy(data->begin(), data->end(), m.bytes.begin() + static_cast<long>(base));
        std::fill(m.known.begin() + static_cast<long>(base), m.known.begin() + static_cast<long>(base + n), 1);
        touch(m, base, n, loc_bit(q), false, true);
        keep(r.value(), data);
      }
      track(std::move(r), "write", {}, {v.parent});
    } else if (op < 35) {
      read(v, off, n, q);
    } else if (op < 40) {  // read a box
      const RectRegion region = random_region(v.buffer.size());
      read_box(v, random_layout(region, v.buffer.size()), region, q, true);
    } else if (op < 50) {  // fill
      const std::uint64_t ps = std::uint64_t{1} << (rng_() % 4);
      const std::uint64_t foff = off / ps * ps;
      const std::uint64_t room = (v.buffer.size() - foff) / ps;  // whole patterns that fit
      if (room == 0) return;
      const std::uint64_t fn = ps * (1 + rng_() % room);
      std::uint8_t pattern[8];
      for (auto& b : pattern) b = static_cast<std::uint8_t>(rng_());
      auto r = s_.queues[q]->enqueue_fill(v.buffer, pattern, ps, foff, fn, wait_list());
      note_refusal(r, {v.parent});
      if (r) {
        for (std::uint64_t i = 0; i < fn; ++i) {
          m.bytes[v.buffer.offset() + foff + i] = pattern[i % ps];
          m.known[v.buffer.offset() + foff + i] = 1;
        }
        touch(m, v.buffer.offset() + foff, fn, loc_bit(q), false, true);
      }
      track(std::move(r), "fill", {}, {v.parent});
    } else if (op < 55) {  // copy a box, within one parent or between two
      copy_rect(v, q);
    } else if (op < 60) {  // copy, within one parent or between two
      View& d = views_[rng_() % views_.size()];
      Model& dm = models_[d.parent];
      const std::uint64_t len = 1 + rng_() % std::min(v.buffer.size(), d.buffer.size());
      const std::uint64_t so = rng_() % (v.buffer.size() - len + 1), dof = rng_() % (d.buffer.size() - len + 1);
      const std::uint64_t sa = v.buffer.offset() + so, da = d.buffer.offset() + dof;
      if (v.parent == d.parent && sa < da + len && da < sa + len) return;  // overlapping: not allowed
      auto r = s_.queues[q]->enqueue_copy(v.buffer, d.buffer, so, dof, len, wait_list());
      note_refusal(r, {v.parent, d.parent});
      if (r) {
        touch(m, sa, len, loc_bit(q), true, false);
        for (std::uint64_t i = 0; i < len; ++i) {
          dm.bytes[da + i] = m.bytes[sa + i];
          dm.known[da + i] = m.known[sa + i];
        }
        touch(dm, da, len, loc_bit(q), false, true);
      }
      track(std::move(r), "copy", {v.parent}, {d.parent});
    } else if (op < 80) {  // kernel
      kernel(q);
    } else if (op < 88) {  // map, then unmap at once
      const std::uint32_t kinds[] = {map::kRead, map::kWrite, map::kRead | map::kWrite, map::kWriteInvalidateRegion};
      const std::uint32_t flags = kinds[rng_() % 4];
      open_all_gates();
      auto r = s_.queues[q]->enqueue_map(v.buffer, flags, off, n, true, wait_list());
      note_refusal(r, {v.parent});
      if (!r) {
        // A failed dependency fails the map (and changes nothing).
        if (r.error().code != cl::kExecStatusErrorForEventsInWaitList && r.error().code != cl::kMemObjectAllocationFailure)
          fail("map: " + r.error().message);
        return;
      }
      auto* p = static_cast<std::uint8_t*>(r.value().pointer);
      settle_tracked();  // failures known by now voided what the model says
      const bool check = (flags & map::kRead) != 0;
      for (std::uint64_t i = 0; check && i < n; ++i) {
        if (m.known[base + i] && p[i] != m.bytes[base + i]) fail("map read mismatch at byte " + std::to_string(i));
      }
      touch(m, base, n, 1, !(flags & map::kWriteInvalidateRegion), (flags & ~map::kRead) != 0);
      if (flags & (map::kWrite | map::kWriteInvalidateRegion)) {
        for (std::uint64_t i = 0; i < n; ++i) {
          p[i] = static_cast<std::uint8_t>(rng_());
          m.bytes[base + i] = p[i];
          m.known[base + i] = 1;
        }
      }
      track(s_.queues[q]->enqueue_unmap(v.buffer, r.value().pointer), "unmap", {}, {v.parent});
    } else if (op < 93) {  // migrate
      const bool to_host = rng_() % 3 == 0, undefined = rng_() % 10 == 0;
      std::vector<Buffer> one{v.buffer};
      auto r = s_.queues[q]->enqueue_migrate(one, to_host, undefined, wait_list());
      note_refusal(r, {v.parent});
      if (r && undefined) {
        std::fill(m.known.begin() + static_cast<long>(v.buffer.offset()),
                  m.known.begin() + static_cast<long>(v.buffer.offset() + v.buffer.size()), 0);
      }
      if (r) touch(m, v.buffer.offset(), v.buffer.size(), to_host ? 1 : loc_bit(q), !undefined, undefined);
      track(std::move(r), "migrate", {v.parent}, {v.parent});
    } else if (op < 97 && rng_() % 40 == 0) {  // release a buffer and its sub-buffers, make another
      make_buffer(v.parent, rng_() % 2 == 0);
      s_.renewed_buffers.fetch_add(1, std::memory_order_relaxed);
    } else if (op < 97) {  // marker or barrier with events from every thread
      auto w = wait_list();
      track(rng_() % 2 ? s_.queues[q]->enqueue_marker(w) : s_.queues[q]->enqueue_barrier(w), "marker", {}, {});
    } else {  // a user event that gates later commands for a while
      gates_.push_back(s_.ctx->create_user_event());
      s_.shut_gates.fetch_add(1);
    }
  }

  void write_rect(const View& v, Model& m, std::size_t q) {
    const RectRegion region = random_region(v.buffer.size());
    const RectLayout layout = random_layout(region, v.buffer.size());
    auto data = std::make_shared<std::vector<std::uint8_t>>(region[0] * region[1] * region[2]);
    for (auto& b : *data) b = static_cast<std::uint8_t>(rng_());
    const bool blocking = rng_() % 4 == 0;
    if (blocking) open_all_gates();
    auto r = s_.queues[q]->enqueue_write_rect(v.buffer, layout, {}, region, data->data(), blocking, wait_list());
    note_refusal(r, {v.parent});
    if (!r && blocking && r.error().code != cl::kMemObjectAllocationFailure) {
      m.forget();  // the blocking write itself failed
      return;
    }
    if (r) {
      write_box(m, v.buffer.offset(), box_of(layout, region), data->data(), nullptr, loc_bit(q));
      keep(r.value(), data);
    }
    track(std::move(r), "write_rect", {}, {v.parent});
  }

  void copy_rect(const View& v, std::size_t q) {
    const View& d = views_[rng_() % views_.size()];
    const RectRegion region = random_region(std::min(v.buffer.size(), d.buffer.size()));
    const RectLayout from = random_layout(region, v.buffer.size()), to = random_layout(region, d.buffer.size());
    const RectBox src = box_of(from, region), dst = box_of(to, region);
    if (v.parent == d.parent && overlap(src, v.buffer.offset(), dst, d.buffer.offset())) return;  // not allowed
    auto r = s_.queues[q]->enqueue_copy_rect(v.buffer, d.buffer, from, to, region, wait_list());
    note_refusal(r, {v.parent, d.parent});
    if (r) {
      Model& m = models_[v.parent];
      std::vector<std::uint8_t> bytes, known;
      src.for_each_row([&](std::uint64_t row) {
        const std::uint64_t at = v.buffer.offset() + row;
        bytes.insert(bytes.end(), m.bytes.begin() + static_cast<long>(at),
                     m.bytes.begin() + static_cast<long>(at + region[0]));
        known.insert(known.end(), m.known.begin() + static_cast<long>(at),
                     m.known.begin() + static_cast<long>(at + region[0]));
      });
      touch(m, v.buffer.offset() + src.first(), src.end() - src.first(), loc_bit(q), true, false);
      write_box(models_[d.parent], d.buffer.offset(), dst, bytes.data(), known.data(), loc_bit(q));
    }
    track(std::move(r), "copy_rect", {v.parent}, {d.parent});
  }

  // out[i] = out[i] * 3 + k + first byte of each read argument, over the
  // writable arguments in order; a `write` argument writes even bytes only.
  void kernel(std::size_t q) {
    const int nargs = 1 + static_cast<int>(rng_() % 3);
    std::vector<KernelArg> args;
    std::vector<std::size_t> which;
    for (int a = 0; a < nargs; ++a) {
      const std::size_t vi = (a == 1 && rng_() % 3 == 0) ? which[0] : rng_() % views_.size();  // sometimes twice
      const Access kinds[] = {Access::read, Access::write, Access::read_write};
      args.push_back({views_[vi].buffer, kinds[rng_() % 3]});
      which.push_back(vi);
    }
    const std::uint8_t k = static_cast<std::uint8_t>(rng_());
    std::vector<std::uint64_t> sizes;
    for (const auto& a : args) sizes.push_back(a.buffer.size());
    std::vector<Access> access;
    for (const auto& a : args) access.push_back(a.access);
    auto body = [k, sizes, access](std::vector<std::uint8_t*> p) {
      std::uint8_t add = k;
      for (std::size_t a = 0; a < p.size(); ++a)
        if (access[a] == Access::read) add = static_cast<std::uint8_t>(add + p[a][0]);
      for (std::size_t a = 0; a < p.size(); ++a) {
        if (access[a] == Access::read) continue;
        for (std::uint64_t i = 0; i < sizes[a]; ++i) {
          if (access[a] == Access::write && i % 2 == 1) continue;
          p[a][i] = static_cast<std::uint8_t>((access[a] == Access::write ? 0 : p[a][i] * 3) + add);
        }
      }
    };
    auto r = s_.queues[q]->enqueue_kernel(
        [body](std::span<void* const> ptrs) {
          std::vector<std::uint8_t*> p;
          for (void* x : ptrs) p.push_back(static_cast<std::uint8_t*>(x));
          body(p);
          return Status{};
        },
        args, wait_list());
    std::vector<std::size_t> parents;
    for (std::size_t vi : which) parents.push_back(views_[vi].parent);
    note_refusal(r, parents);
    std::vector<std::size_t> reads, writes;
    for (std::size_t a = 0; a < which.size(); ++a) {
      const std::size_t parent = views_[which[a]].parent;
      if (access[a] != Access::write) reads.push_back(parent);
      if (access[a] != Access::read) writes.push_back(parent);
    }
    if (r) {
      // The same computation on the model's bytes, aliasing included, and
      // the same again on the known-flags: a byte computed from an unknown
      // byte is unknown.
      std::vector<std::uint8_t*> p, kp;
      for (std::size_t vi : which) {
        p.push_back(models_[views_[vi].parent].bytes.data() + views_[vi].buffer.offset());
        kp.push_back(models_[views_[vi].parent].known.data() + views_[vi].buffer.offset());
      }
      bool add_known = true;
      for (std::size_t a = 0; a < which.size(); ++a)
        if (access[a] == Access::read && !kp[a][0]) add_known = false;
      for (std::size_t a = 0; a < which.size(); ++a) {
        if (access[a] == Access::read) continue;
        for (std::uint64_t i = 0; i < sizes[a]; ++i) {
          if (access[a] == Access::write && i % 2 == 1) continue;
          kp[a][i] = static_cast<std::uint8_t>(add_known && (access[a] == Access::write || kp[a][i]));
        }
      }
      body(p);
      for (std::size_t a = 0; a < which.size(); ++a) {
        Model& m = models_[views_[which[a]].parent];
        touch(m, views_[which[a]].buffer.offset(), sizes[a], loc_bit(q), true, access[a] != Access::read);
      }
    }
    if (!r && r.error().code == cl::kMemObjectAllocationFailure) return;
    track(std::move(r), "kernel", std::move(reads), std::move(writes));
  }

  // A non-blocking write reads its source when it runs: keep it until then.
  void keep(const Event& e, std::shared_ptr<std::vector<std::uint8_t>> data) {
    keep_.emplace_back(e, std::move(data));
    if (keep_.size() > 1024)
      std::erase_if(keep_, [](const auto& k) { return k.first.status() <= cl::kComplete; });
  }

  struct Tracked {
    Event event;
    std::uint64_t seq;
    std::vector<std::size_t> writes;
  };
  // The tracked commands in program order, since the oldest unfinished one.
  struct Logged {
    std::uint64_t seq;
    std::vector<std::size_t> reads, writes;
  };

  Shared& s_;
  std::mt19937_64 rng_;
  unsigned index_;
  std::vector<Buffer> parents_;
  std::vector<std::uint64_t> lost_seen_;  // each parent's bytes_lost() at the last look
  std::uint64_t lost_checked_seq_ = 0;    // seq_ at the last look
  std::vector<Model> models_;
  std::vector<View> views_;
  std::vector<PendingRead> pending_;
  std::vector<Tracked> tracked_;
  std::deque<Event> gates_;
  std::vector<std::pair<Event, std::shared_ptr<std::vector<std::uint8_t>>>> keep_;
  std::deque<Logged> log_;
  std::uint64_t seq_ = 0;  // program order of this thread's commands
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::uint64_t& out) {
      if (i + 1 >= argc || !parse_u64(argv[++i], out)) {
        std::fprintf(stderr, "memlayer-stress: %s needs a number\n%s\n", a.c_str(), kUsage);
        std::exit(2);
      }
    };
    std::uint64_t v = 0;
    if (a == "--help" || a == "-h") {
      std::puts(kUsage);
      return 0;
    } else if (a == "--devices") value(v), opt.devices = static_cast<unsigned>(v);
    else if (a == "--buffers") value(v), opt.buffers = static_cast<unsigned>(v);
    else if (a == "--commands") value(opt.commands);
    else if (a == "--threads") value(v), opt.threads = static_cast<unsigned>(v);
    else if (a == "--seed") value(opt.seed);
    else if (a == "--memory") value(opt.memory);
    else if (a == "--faults" && i + 1 < argc) opt.faults = std::atof(argv[++i]);
    else if (a == "--fault-burst") value(opt.fault_burst);
    else if (a == "--room-wait") value(opt.room_wait_ms);
    else if (a == "--no-peer") opt.peer = false;
    else if (a == "--in-order") opt.out_of_order = false;
    else if (a == "--quiet") opt.quiet = true;
    else {
      std::fprintf(stderr, "memlayer-stress: unknown option %s\n%s\n", a.c_str(), kUsage);
      return 2;
    }
  }
  if (opt.devices == 0 || opt.devices > 62 || opt.threads == 0 || opt.buffers < opt.threads || opt.faults < 0 ||
      opt.faults > 1 || opt.fault_burst == 0 || opt.memory < 64 * 1024) {
    std::fprintf(stderr, "memlayer-stress: need 1-62 devices, threads >= 1, buffers >= threads, faults in [0, 1], "
                         "a fault burst >= 1, memory >= 64K\n");
    return 2;
  }

  drivers::SimOptions so;
  so.memory_size = opt.memory;
  so.worker_threads = 2;
  so.transfer_failure_probability = opt.faults;
  so.fault_burst = opt.fault_burst;
  so.fault_seed = opt.seed;
  if (opt.peer) so.peer_link = LinkCost{2e-6, 40e9};
  std::vector<std::unique_ptr<drivers::SimDevice>> sims;
  if (Status s = drivers::SimDevice::create(opt.devices, so, sims); !s.ok()) {
    std::fprintf(stderr, "memlayer-stress: %s\n", s.message.c_str());
    return 1;
  }
  std::vector<const drivers::SimDevice*> sim_view;  // their counters, read at the end
  std::vector<std::unique_ptr<DeviceDriver>> drivers;
  for (auto& d : sims) sim_view.push_back(d.get()), drivers.push_back(std::move(d));
  Shared s;
  s.opt = opt;
  ContextOptions context_options;
  context_options.room_wait = std::chrono::milliseconds(opt.room_wait_ms);
  s.ctx = Context::create(std::move(drivers), context_options).value();
  for (unsigned d = 0; d < opt.devices; ++d) {
    s.queues.push_back(s.ctx->create_queue(d, false).value());
    s.location_of.push_back(d + 1);
    if (opt.out_of_order) {
      s.queues.push_back(s.ctx->create_queue(d, true).value());
      s.location_of.push_back(d + 1);
    }
  }

  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned t = 0; t < opt.threads; ++t)
    workers.push_back(std::make_unique<Worker>(s, t, opt.buffers / opt.threads + (t < opt.buffers % opt.threads)));

  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> finished{false};
  // Watchdog: no command enqueued or completed for 30 s is a hang.
  std::thread watchdog([&] {
    std::uint64_t last = 0;
    auto since = std::chrono::steady_clock::now();
    const bool tty = !opt.quiet && isatty(STDERR_FILENO);
    while (!finished.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const std::uint64_t now = s.done.load();
      if (now != last) last = now, since = std::chrono::steady_clock::now();
      if (std::chrono::steady_clock::now() - since > std::chrono::seconds(30)) {
        std::fprintf(stderr, "\nmemlayer-stress: no progress for 30 s at %" PRIu64 " commands: a hang\n", now);
        std::_Exit(3);
      }
      if (tty) {
        const int width = 40;
        const int filled = static_cast<int>(width * static_cast<double>(now) / static_cast<double>(opt.commands));
        std::fprintf(stderr, "\r[%s%s] %" PRIu64 "/%" PRIu64, std::string(static_cast<std::size_t>(filled), '#').c_str(),
                     std::string(static_cast<std::size_t>(width - filled), '.').c_str(), now, opt.commands);
      }
    }
  });

  std::vector<std::thread> threads;
  for (unsigned t = 0; t < opt.threads; ++t) {
    const std::uint64_t share = opt.commands / opt.threads + (t < opt.commands % opt.threads);
    threads.emplace_back([&, t, share] { workers[t]->run(share); });
  }
  for (auto& th : threads) th.join();
  for (auto& w : workers) w->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& w : workers) w->release();
  for (auto& q : s.queues) (void)q->finish();
  finished = true;
  watchdog.join();

  const ContextStats st = s.ctx->stats();
  std::uint64_t leaked = 0;
  for (const auto& d : st.devices) leaked += d.live_blocks;
  std::printf("%smemlayer-stress: %u sim devices (%s), %u buffers, %" PRIu64 " commands from %u threads, seed %" PRIu64
              "%s\n",
              isatty(STDERR_FILENO) && !opt.quiet ? "\n" : "", opt.devices, opt.peer ? "direct links" : "via host",
              opt.buffers, opt.commands, opt.threads, opt.seed, opt.faults > 0 ? ", faults on" : "");
  std::printf("  %.0f commands/s (%.2f s); %" PRIu64 " reads checked (%" PRIu64 " bytes), %" PRIu64
              " mismatches, %" PRIu64 " failed commands\n",
              static_cast<double>(opt.commands) / seconds, seconds, s.checked_reads.load(), s.checked_bytes.load(),
              s.mismatches.load(), s.failed_commands.load());
  if (opt.faults > 0) {
    std::uint64_t injected = 0;
    for (const auto* sim : sim_view) injected += sim->faults_injected();
    std::printf("  faults: %" PRIu64 " transfers failed on purpose, %" PRIu64 " tried again, %" PRIu64
                " copies re-sourced, %" PRIu64 " bytes lost, %" PRIu64
                " reads not checked (a failure before them voided the model)\n",
                injected, st.transfer_retries, st.copies_resourced, st.bytes_lost, s.dropped_reads.load());
  }
  const double ratio = s.min_bytes ? static_cast<double>(st.bytes_migrated) / static_cast<double>(s.min_bytes) : 0.0;
  std::printf("  migrated %" PRIu64 " bytes = %.2fx the minimum necessary (%" PRIu64 "); copies: %" PRIu64
              " device-to-device, %" PRIu64 " to host, %" PRIu64 " from host\n",
              st.bytes_migrated, ratio, s.min_bytes.load(), st.copies_direct, st.copies_to_host, st.copies_from_host);
  std::printf("  evictions %" PRIu64 ", write-backs %" PRIu64 ", compactions %" PRIu64 "; %" PRIu64
              " buffers released with commands queued and made anew\n",
              st.evictions, st.write_backs, st.compactions, s.renewed_buffers.load());
  std::printf("  fast path: %" PRIu64 " of %" PRIu64 " engine enqueues (%.1f%%)\n", st.fast_path, st.enqueues,
              st.enqueues ? 100.0 * static_cast<double>(st.fast_path) / static_cast<double>(st.enqueues) : 0.0);
  const double ws = static_cast<double>(s.working_set.load());
  std::printf("  working set %" PRIu64 " bytes = %.2fx a device's memory; migrated %.2f bytes per byte of it\n",
              s.working_set.load(), ws / static_cast<double>(opt.memory), static_cast<double>(st.bytes_migrated) / ws);
  for (std::size_t d = 0; d < st.devices.size(); ++d) {
    const auto& r = st.devices[d];
    std::printf("  sim%zu: peak %" PRIu64 " of %" PRIu64 " bytes, %" PRIu64 " failed allocations, %" PRIu64
                " live blocks at exit\n",
                d, r.peak_used_bytes, r.total_bytes, r.failed_requests, r.live_blocks);
  }
  if (leaked != 0) {
    std::fprintf(stderr, "memlayer-stress: %" PRIu64 " device blocks still allocated after every buffer was released\n",
                 leaked);
    return 1;
  }
  std::printf("  refused for device memory: %" PRIu64 " commands too big for a device, %" PRIu64
              " whose room was held behind user events not set yet, %" PRIu64 " that fit\n",
              s.too_big.load(), s.behind_gates.load(), s.refused.load());
  if (s.refused != 0) {
    std::fprintf(stderr, "memlayer-stress: %" PRIu64 " commands whose buffers fit a device were refused; the first: %s\n",
                 s.refused.load(), s.first_refusal.c_str());
    return 1;
  }
  if (s.mismatches != 0 || s.checked_reads == 0) return 1;
  std::printf("stress: 1 passed, 0 failed\n");
  return 0;
}

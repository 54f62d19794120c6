// Address → record index map for free(address): open addressing with linear
// probing, kept at most 3/8 full. Near half full, clusters grow long enough
// that probing and backward-shift deletion cost ~25% more per alloc+free
// pair (measured at 10^3 live blocks); sparser than that only spreads the
// table over more cache lines and TLB entries. Slots are 16 bytes: 43-85
// bytes of index per live block.
//
// Why not std::unordered_map: it allocates a node per entry and rehashes
// everything at once when it grows, a latency spike proportional to the live
// block count. Here growth is incremental: when the table passes 3/8 full a
// table twice the size takes over, and every later operation moves a few
// slots of the old one across, so the old table is empty long before the new
// one fills. A new table comes zero-filled from calloc, which for large tables
// maps fresh zero pages lazily instead of writing them.
//
// Values are record indices (region_core.hpp): 0 is never one (it is the
// sentinel record), so a zero slot reads as empty, and ~0 marks a tombstone.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace memlayer::bufalloc::detail {

class AddressIndex {
 public:
  using Value = std::uint32_t;
  static constexpr Value kEmpty = 0;  ///< find()/erase(): no such key

  AddressIndex() { current_ = Table::make(kInitialLog2); }

  /// Makes room for one insert_reserved(), which then cannot fail: a caller
  /// can take every host allocation before it changes any state of its own.
  /// Throws std::bad_alloc.
  void reserve_one() {
    migrate_some();
    if ((current_.used + 1) * 8 > current_.capacity() * 3) grow();
  }
  /// Precondition: key is not present, and reserve_one() came just before.
  void insert_reserved(std::uint64_t key, Value value) noexcept {
    current_.place(key, value);
    ++size_;
  }
  /// Precondition: key is not present. Throws std::bad_alloc.
  void insert(std::uint64_t key, Value value) {
    reserve_one();
    insert_reserved(key, value);
  }

  [[nodiscard]] Value find(std::uint64_t key) const noexcept {
    if (Value v = current_.find(key)) return v;
    return old_.slots ? old_.find(key) : kEmpty;
  }

  /// Removes key and returns its value, or kEmpty if absent.
  Value erase(std::uint64_t key) noexcept {
    migrate_some();
    Value v = current_.erase_shift(key);
    if (v == kEmpty && old_.slots) v = old_.erase_tombstone(key);
    if (v != kEmpty) --size_;
    return v;
  }

  void clear() {
    old_ = Table{};
    current_ = Table::make(kInitialLog2);
    size_ = 0;
  }

  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

  /// Calls f(key, value) for every entry (for the invariant checker).
  template <class F>
  void for_each(F&& f) const {
    current_.for_each(f);
    if (old_.slots) old_.for_each(f);
  }

  /// Slots in both tables (the checker's cost).
  [[nodiscard]] std::uint64_t capacity() const noexcept {
    return current_.capacity() + (old_.slots ? old_.capacity() : 0);
  }

 private:
  static constexpr unsigned kInitialLog2 = 6;
  static constexpr std::uint64_t kMigrateStep = 8;

  struct Slot {
    std::uint64_t key;
    Value value;  // kEmpty: empty; tombstone(): moved or erased (old table only)
  };
  static Value tombstone() noexcept { return ~Value{0}; }

  struct FreeDeleter {
    void operator()(Slot* p) const noexcept { std::free(p); }
  };

  struct Table {
    std::unique_ptr<Slot[], FreeDeleter> slots;
    unsigned log2 = 0;
    std::uint64_t used = 0;  // occupied slots, tombstones included

    static Table make(unsigned log2) {
      Table t;
      t.log2 = log2;
      auto* raw = static_cast<Slot*>(std::calloc(std::uint64_t{1} << log2, sizeof(Slot)));
      if (raw == nullptr) throw std::bad_alloc();
      t.slots.reset(raw);
      return t;
    }
    [[nodiscard]] std::uint64_t capacity() const noexcept { return slots ? std::uint64_t{1} << log2 : 0; }
    [[nodiscard]] std::uint64_t mask() const noexcept { return capacity() - 1; }
    [[nodiscard]] std::uint64_t home(std::uint64_t key) const noexcept {
      // A full mixer (MurmurHash3's finaliser steps): block addresses share
      // their low alignment bits and often form arithmetic progressions,
      // which a bare multiplicative hash clustered badly (measured 3x slower).
      key ^= key >> 33;
      key *= 0xff51afd7ed558ccdull;
      key ^= key >> 33;
      return key >> (64 - log2);
    }
    void place(std::uint64_t key, Value value) noexcept {
      std::uint64_t i = home(key);
      while (slots[i].value != kEmpty) i = (i + 1) & mask();
      slots[i] = Slot{key, value};
      ++used;
    }
    [[nodiscard]] Value find(std::uint64_t key) const noexcept {
      for (std::uint64_t i = home(key);; i = (i + 1) & mask()) {
        const Slot& s = slots[i];
        if (s.value == kEmpty) return kEmpty;
        if (s.key == key && s.value != tombstone()) return s.value;
      }
    }
    // Backward-shift deletion: keeps probe chains intact without tombstones.
    Value erase_shift(std::uint64_t key) noexcept {
      std::uint64_t i = home(key);
      for (;; i = (i + 1) & mask()) {
        if (slots[i].value == kEmpty) return kEmpty;
        if (slots[i].key == key) break;
      }
      Value found = slots[i].value;
      std::uint64_t hole = i;
      for (std::uint64_t j = (i + 1) & mask(); slots[j].value != kEmpty; j = (j + 1) & mask()) {
        std::uint64_t h = home(slots[j].key);
        // Move j into the hole unless its home lies cyclically in (hole, j].
        bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (!stays) {
          slots[hole] = slots[j];
          hole = j;
        }
      }
      slots[hole] = Slot{0, kEmpty};
      --used;
      return found;
    }
    // The old table only shrinks, and its migration cursor must not see
    // entries shift behind it, so erasing there leaves a tombstone.
    Value erase_tombstone(std::uint64_t key) noexcept {
      for (std::uint64_t i = home(key);; i = (i + 1) & mask()) {
        Slot& s = slots[i];
        if (s.value == kEmpty) return kEmpty;
        if (s.key == key && s.value != tombstone()) {
          Value found = s.value;
          s.value = tombstone();
          return found;
        }
      }
    }
    template <class F>
    void for_each(F& f) const {
      for (std::uint64_t i = 0; i < capacity(); ++i)
        if (slots[i].value != kEmpty && slots[i].value != tombstone()) f(slots[i].key, slots[i].value);
    }
  };

  void grow() {
    // The step size means the previous migration has long finished: it
    // started with the old table at most 3/8 full and moves kMigrateStep
    // slots per operation, far faster than inserts fill the new table. The
    // loop only guards that argument.
    while (old_.slots) migrate_some();
    old_ = std::move(current_);
    current_ = Table::make(old_.log2 + 1);
    cursor_ = 0;
  }

  void migrate_some() noexcept {
    if (!old_.slots) return;
    std::uint64_t end = cursor_ + kMigrateStep;
    const std::uint64_t cap = old_.capacity();
    if (end > cap) end = cap;
    for (; cursor_ < end; ++cursor_) {
      Slot& s = old_.slots[cursor_];
      if (s.value != kEmpty && s.value != tombstone()) {
        current_.place(s.key, s.value);
        s.value = tombstone();
      }
    }
    if (cursor_ == cap) old_ = Table{};
  }

  Table current_;
  Table old_;
  std::uint64_t cursor_ = 0;
  std::uint64_t size_ = 0;
};

}  // namespace memlayer::bufalloc::detail

// DiskIndex: the disk tier's in-memory index. For every stored id: where its
// newest record lives (segment slot, offset, length); for every id: when it
// is read next. A max-heap over the stored ids ranks them for eviction the
// way Belady's OPT does:
//   1. never read again (next use kNeverRead),
//   2. next use not known (kUnknownNextUse: never told, e.g. after a restart),
//   3. then the furthest next use first.
//
// Ids are dense dataset indices, so the index is a flat array by id, not a
// hash table: 20 bytes per id up to the largest id seen, plus 4 bytes per
// stored id in the heap. That is 24 bytes per item when the tier holds the
// whole dataset (CacheLib's flash index: 12 bytes, without a ranking).
// Tables grow by 1.25x (at most 25% slack) unless Reserve() sized them.
// The next use is kept in 48 bits: positions beyond 2^48 - 3 (2.8e14 reads)
// tie.
//
// Thread safety: not thread-safe. The disk tier guards it with its mutex.
#ifndef OPT4STORE_TIERS_DISK_INDEX_H_
#define OPT4STORE_TIERS_DISK_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "opt4store/plan.h"

namespace opt4store {

class DiskIndex {
 public:
  // A record's place. slot 0 means "not stored"; the disk tier maps slots
  // 1..kMaxSlots to segment files.
  struct Location {
    uint16_t slot = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
  };
  static constexpr uint32_t kMaxSlots = UINT16_MAX;

  static constexpr uint64_t kNeverRead = UINT64_MAX;
  static constexpr uint64_t kUnknownNextUse = UINT64_MAX - 1;

  DiskIndex() = default;
  DiskIndex(const DiskIndex&) = delete;
  DiskIndex& operator=(const DiskIndex&) = delete;

  // Sizes the tables for ids below n (the dataset's size), so that they
  // never grow: exactly 24 bytes per id once all are stored, whether or not
  // they held entries before. Tables that hold ids past n stay as they are.
  void Reserve(size_t n);

  size_t size() const { return heap_.size(); }
  // One past the largest id that has an entry.
  size_t id_limit() const { return entries_.size(); }

  bool Contains(ItemId id) const { return id < entries_.size() && entries_[id].slot != 0; }
  // Returns false when id is not stored.
  bool Lookup(ItemId id, Location* loc) const;

  // Stores or moves id. Returns true, with *old, when id was stored before.
  // REQUIRES: loc.slot != 0.
  bool Put(ItemId id, const Location& loc, Location* old);
  // Returns true, with *old, when id was stored.
  bool Erase(ItemId id, Location* old);

  // Records id's next use (kNeverRead, kUnknownNextUse or a position), for a
  // stored id or one that may be stored later.
  void SetNextUse(ItemId id, uint64_t next_use);
  uint64_t NextUse(ItemId id) const;

  // The id to evict first. REQUIRES: size() > 0.
  ItemId Victim() const { return heap_[0]; }

  // Calls fn(id, const Location&) for each stored id in [begin, end).
  template <typename Fn>
  void ForEach(size_t begin, size_t end, Fn&& fn) const {
    if (end > entries_.size()) end = entries_.size();
    for (size_t id = begin; id < end; ++id) {
      const Entry& e = entries_[id];
      if (e.slot != 0) fn(static_cast<ItemId>(id), Location{e.slot, e.offset, e.length});
    }
  }

  // Heap bytes held by the index (capacity, not size).
  size_t MemoryBytes() const;
  static constexpr size_t kEntryBytes = 20;

 private:
  static constexpr uint32_t kNotInHeap = UINT32_MAX;
  static constexpr uint64_t kKeyBits = 48;
  static constexpr uint64_t kNeverKey = (uint64_t{1} << kKeyBits) - 1;
  static constexpr uint64_t kUnknownKey = kNeverKey - 1;

  // Packed to 20 bytes; the fields are separate so that each has its own
  // memory location.
  struct Entry {
    uint32_t offset = 0;
    uint32_t length = 0;
    uint32_t heap_pos = kNotInHeap;
    uint32_t key_lo = static_cast<uint32_t>(kUnknownKey);
    uint16_t key_hi = static_cast<uint16_t>(kUnknownKey >> 32);
    uint16_t slot = 0;

    uint64_t key() const { return (uint64_t{key_hi} << 32) | key_lo; }
    void set_key(uint64_t k) {
      key_lo = static_cast<uint32_t>(k);
      key_hi = static_cast<uint16_t>(k >> 32);
    }
  };
  static_assert(sizeof(Entry) == kEntryBytes, "DiskIndex::Entry must stay 20 bytes");

  static uint64_t KeyOf(uint64_t next_use);
  Entry& Grow(ItemId id);
  uint64_t KeyAt(size_t heap_index) const { return entries_[heap_[heap_index]].key(); }
  void Place(size_t heap_index, ItemId id) {
    heap_[heap_index] = id;
    entries_[id].heap_pos = static_cast<uint32_t>(heap_index);
  }
  void SiftUp(size_t i);
  void SiftDown(size_t i);
  void HeapRemove(ItemId id);

  std::vector<Entry> entries_;  // by id
  std::vector<ItemId> heap_;    // max-heap of stored ids by Entry::key()
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_DISK_INDEX_H_

#include "tiers/disk_index.h"

#include <algorithm>

namespace opt4store {

uint64_t DiskIndex::KeyOf(uint64_t next_use) {
  if (next_use == kNeverRead) return kNeverKey;
  if (next_use == kUnknownNextUse) return kUnknownKey;
  return next_use < kUnknownKey ? next_use : kUnknownKey - 1;
}

void DiskIndex::Reserve(size_t n) {
  // Exactly n: tables that grew before n was known (a store's disk tier
  // recovers before it has read the dataset's size: DiskTier::Reconfigure)
  // give their slack back, one copy each.
  if (n >= entries_.size()) {
    entries_.resize(n);
    entries_.shrink_to_fit();
  }
  if (n >= heap_.size()) {
    if (heap_.capacity() > n) heap_.shrink_to_fit();
    heap_.reserve(n);
  }
}

DiskIndex::Entry& DiskIndex::Grow(ItemId id) {
  if (id >= entries_.size()) {
    // 1.25x rather than the vector's 2x: this table is most of the memory.
    const size_t need = static_cast<size_t>(id) + 1;
    if (need > entries_.capacity()) {
      entries_.reserve(std::max(need, entries_.capacity() + entries_.capacity() / 4));
    }
    entries_.resize(need);
  }
  return entries_[id];
}

bool DiskIndex::Lookup(ItemId id, Location* loc) const {
  if (!Contains(id)) return false;
  const Entry& e = entries_[id];
  *loc = Location{e.slot, e.offset, e.length};
  return true;
}

bool DiskIndex::Put(ItemId id, const Location& loc, Location* old) {
  Entry& e = Grow(id);
  const bool existed = e.slot != 0;
  if (existed && old != nullptr) *old = Location{e.slot, e.offset, e.length};
  e.slot = loc.slot;
  e.offset = loc.offset;
  e.length = loc.length;
  if (!existed) {
    if (heap_.size() == heap_.capacity()) {
      heap_.reserve(heap_.capacity() + heap_.capacity() / 4 + 16);
    }
    heap_.push_back(id);
    Place(heap_.size() - 1, id);
    SiftUp(heap_.size() - 1);
  }
  return existed;
}

bool DiskIndex::Erase(ItemId id, Location* old) {
  if (!Contains(id)) return false;
  Entry& e = entries_[id];
  if (old != nullptr) *old = Location{e.slot, e.offset, e.length};
  HeapRemove(id);
  e.slot = 0;
  e.offset = 0;
  e.length = 0;
  return true;
}

void DiskIndex::SetNextUse(ItemId id, uint64_t next_use) {
  Entry& e = Grow(id);
  const uint64_t before = e.key();
  e.set_key(KeyOf(next_use));
  if (e.heap_pos == kNotInHeap) return;
  if (e.key() > before) {
    SiftUp(e.heap_pos);
  } else {
    SiftDown(e.heap_pos);
  }
}

uint64_t DiskIndex::NextUse(ItemId id) const {
  if (id >= entries_.size()) return kUnknownNextUse;
  const uint64_t k = entries_[id].key();
  if (k == kNeverKey) return kNeverRead;
  if (k == kUnknownKey) return kUnknownNextUse;
  return k;
}

size_t DiskIndex::MemoryBytes() const {
  return entries_.capacity() * sizeof(Entry) + heap_.capacity() * sizeof(ItemId);
}

void DiskIndex::SiftUp(size_t i) {
  const ItemId id = heap_[i];
  const uint64_t key = entries_[id].key();
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (KeyAt(parent) >= key) break;
    Place(i, heap_[parent]);
    i = parent;
  }
  Place(i, id);
}

void DiskIndex::SiftDown(size_t i) {
  const ItemId id = heap_[i];
  const uint64_t key = entries_[id].key();
  const size_t n = heap_.size();
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && KeyAt(child + 1) > KeyAt(child)) ++child;
    if (KeyAt(child) <= key) break;
    Place(i, heap_[child]);
    i = child;
  }
  Place(i, id);
}

void DiskIndex::HeapRemove(ItemId id) {
  const size_t i = entries_[id].heap_pos;
  entries_[id].heap_pos = kNotInHeap;
  const ItemId last = heap_.back();
  heap_.pop_back();
  if (i == heap_.size()) return;  // id was the last element
  Place(i, last);
  SiftUp(i);
  SiftDown(entries_[last].heap_pos);
}

}  // namespace opt4store

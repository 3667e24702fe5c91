// IndexedMaxHeap: a binary max-heap of (key, id) whose entries can be found
// by id, so that a key can be changed or an entry removed in O(log n)
// without the stale entries a lazy-deletion heap accumulates.
//
// Several heaps may share one position table, as long as each id is in at
// most one of them at a time (opt-size keeps one heap per size class).
//
// Thread safety: not thread-safe.
#ifndef OPT4STORE_ENGINE_INDEXED_HEAP_H_
#define OPT4STORE_ENGINE_INDEXED_HEAP_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "opt4store/huge_page_allocator.h"
#include "opt4store/plan.h"

namespace opt4store {

constexpr uint32_t kNotInHeap = UINT32_MAX;

// Key needs operator<. positions[id] is the id's index in its heap.
template <typename Key>
class IndexedMaxHeap {
 public:
  explicit IndexedMaxHeap(HugeVector<uint32_t>* positions) : positions_(positions) {}

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Key& top_key() const { return heap_[0].key; }
  ItemId top_id() const { return heap_[0].id; }
  const Key& key_of(ItemId id) const { return heap_[(*positions_)[id]].key; }

  // REQUIRES: id is in no heap sharing the position table.
  void Push(ItemId id, const Key& key) {
    heap_.push_back({key, id});
    (*positions_)[id] = static_cast<uint32_t>(heap_.size() - 1);
    SiftUp(heap_.size() - 1);
  }

  // REQUIRES: id is in this heap.
  void Update(ItemId id, const Key& key) {
    size_t i = (*positions_)[id];
    const bool up = heap_[i].key < key;
    heap_[i].key = key;
    if (up) {
      SiftUp(i);
    } else {
      SiftDown(i);
    }
  }

  // REQUIRES: id is in this heap.
  void Remove(ItemId id) {
    size_t i = (*positions_)[id];
    (*positions_)[id] = kNotInHeap;
    if (i + 1 == heap_.size()) {
      heap_.pop_back();
      return;
    }
    heap_[i] = heap_.back();
    heap_.pop_back();
    (*positions_)[heap_[i].id] = static_cast<uint32_t>(i);
    if (i > 0 && heap_[(i - 1) / 2].key < heap_[i].key) {
      SiftUp(i);
    } else {
      SiftDown(i);
    }
  }

 private:
  struct Entry {
    Key key;
    ItemId id;
  };

  void Place(size_t i, Entry e) {
    (*positions_)[e.id] = static_cast<uint32_t>(i);
    heap_[i] = std::move(e);
  }

  void SiftUp(size_t i) {
    Entry e = heap_[i];
    while (i > 0) {
      size_t parent = (i - 1) / 2;
      if (!(heap_[parent].key < e.key)) break;
      Place(i, heap_[parent]);
      i = parent;
    }
    Place(i, e);
  }

  void SiftDown(size_t i) {
    Entry e = heap_[i];
    const size_t n = heap_.size();
    for (;;) {
      size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && heap_[child].key < heap_[child + 1].key) ++child;
      if (!(e.key < heap_[child].key)) break;
      Place(i, heap_[child]);
      i = child;
    }
    Place(i, e);
  }

  std::vector<Entry> heap_;
  HugeVector<uint32_t>* positions_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_INDEXED_HEAP_H_

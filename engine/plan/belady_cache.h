// BeladyCache: Belady's MIN with bypass for items of one size, keyed by
// next-use positions: the cluster simulator's building block, which runs
// hundreds of these side by side (one per host), so each is a small heap and
// not the engine's per-id OptPolicy.
//
// Residency lives in a caller-owned BitSet of positions: bit P is set while
// an item is resident and its next read is at P. Two resident items never
// share a next use, and caches whose reads are at disjoint positions
// (home-opt's hosts) can share one BitSet.
//
// The rules are those of tests/reference/reference_belady.h, except that an
// item whose next use is kNever leaves at its last read instead of waiting
// at the top of the heap: the hits are the same (it cannot hit again), and
// its host's room is free at once.
//
// Thread safety: not thread-safe.
#ifndef OPT4STORE_ENGINE_BELADY_CACHE_H_
#define OPT4STORE_ENGINE_BELADY_CACHE_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/plan/bit_set.h"
#include "opt4store/next_use.h"
#include "opt4store/plan.h"

namespace opt4store {

class BeladyCache {
 public:
  struct Outcome {
    bool hit = false;
    bool released = false;  // a hit whose item is never read again: it left
    bool admitted = false;  // a miss whose item is now resident
    bool evicted = false;   // ...in place of `victim`
    ItemId victim = 0;
  };

  // REQUIRES: *resident outlives this cache and spans every position used.
  BeladyCache(uint64_t capacity, BitSet* resident) : capacity_(capacity), resident_(resident) {}

  // The read at position t of `id`, whose next read is at `next` (kNever if
  // none). REQUIRES: t grows from call to call; next > t.
  Outcome Read(uint64_t t, ItemId id, uint64_t next) {
    Outcome o;
    if (resident_->Test(t)) {
      o.hit = true;
      resident_->Clear(t);  // the entry keyed t is now stale
      if (next == kNever) {
        o.released = true;
        --size_;
      } else {
        Push(next, id);
      }
      return o;
    }
    if (next == kNever || capacity_ == 0) return o;
    if (size_ < capacity_) {
      ++size_;
      Push(next, id);
      o.admitted = true;
      return o;
    }
    if (!heaped_) {
      // The first time it is full: until now pushes only appended.
      heaped_ = true;
      DropStale();
    }
    // Full, so a live entry exists; stale ones are popped on the way.
    while (!resident_->Test(heap_.front().first)) PopTop();
    const std::pair<uint64_t, ItemId> top = heap_.front();
    if (top.first <= next) return o;  // needed no sooner than every resident
    PopTop();
    resident_->Clear(top.first);
    o.evicted = true;
    o.victim = top.second;
    o.admitted = true;
    Push(next, id);
    return o;
  }

  uint64_t size() const { return size_; }

 private:
  void Push(uint64_t key, ItemId id) {
    resident_->Set(key);
    heap_.emplace_back(key, id);
    if (heaped_) std::push_heap(heap_.begin(), heap_.end());
    // A hit leaves a stale entry behind; drop them before they outnumber
    // the live ones, so the heap stays O(capacity).
    if (heap_.size() > 2 * size_ + 1024) DropStale();
  }
  void DropStale() {
    heap_.erase(std::remove_if(heap_.begin(), heap_.end(),
                               [this](const std::pair<uint64_t, ItemId>& e) {
                                 return !resident_->Test(e.first);
                               }),
                heap_.end());
    if (heaped_) std::make_heap(heap_.begin(), heap_.end());
  }
  void PopTop() {
    std::pop_heap(heap_.begin(), heap_.end());
    heap_.pop_back();
  }

  const uint64_t capacity_;
  BitSet* const resident_;
  uint64_t size_ = 0;
  // A max-heap by next use once heaped_; before the cache first fills no
  // victim is ever asked for, so entries are only appended (a cache that
  // never fills, such as a union of budgets above N, never pays for order).
  bool heaped_ = false;
  std::vector<std::pair<uint64_t, ItemId>> heap_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_BELADY_CACHE_H_

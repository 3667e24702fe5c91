// Policies whose priority needs a heap: opt-size and lfu.
#include <cmath>
#include <limits>
#include <utility>

#include "engine/plan/cost_table.h"
#include "opt4store/huge_page_allocator.h"
#include "engine/plan/indexed_heap.h"
#include "engine/plan/policy_impl.h"

namespace opt4store {

namespace {

// opt-size: evict the item with the largest byte-time until its next read,
// size x (next - now).
//
// Byte-time ranks change as time passes (a product of size and a shrinking
// distance), so no fixed heap key orders them. Items are grouped into size
// classes of powers of two; inside a class, whose sizes differ by less than
// 2x, the furthest next read is taken as the largest byte-time (exact when
// sizes are equal), and the class tops are compared by their byte-time now.
// With one size, this is exactly opt.
//
// Invariants: each resident id is in heaps_[class_of_[id]] keyed by its next
// read (kNever and kFar sort above any position); far_count_ counts resident
// items keyed kFar; used_ sums resident costs.
class OptSizePolicy final : public Policy {
 public:
  explicit OptSizePolicy(const PolicyOptions& options)
      : Policy(PolicyKind::kOptSize, options.capacity),
        costs_(options.num_ids),
        positions_(options.num_ids, kNotInHeap),
        class_of_(options.num_ids, 0),
        window_(std::max<uint64_t>(options.window, 1)) {
    heaps_.reserve(kClasses);
    for (int c = 0; c < kClasses; ++c) heaps_.emplace_back(&positions_);
  }

  bool Contains(ItemId id) const override { return positions_[id] != kNotInHeap; }

  void OnHit(const Access& access) override {
    now_ = access.pos;
    auto& heap = heaps_[class_of_[access.id]];
    if (heap.key_of(access.id) == kFar) --far_count_;
    if (access.next == kFar) ++far_count_;
    heap.Update(access.id, access.next);
  }

  bool OnMiss(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) override {
    now_ = access.pos;
    if (cost > capacity_ || access.next == kNever) return false;
    const double incoming = ByteTime(cost, access.next);
    victims_.clear();
    uint64_t freed = 0;
    bool admit = true;
    bool ambiguous = false;
    while (used_ - freed + cost > capacity_) {
      int best = -1;
      double best_score = -1;
      for (int c = 0; c < kClasses; ++c) {
        if (heaps_[c].empty()) continue;
        const double score = ByteTime(costs_.Get(heaps_[c].top_id()), heaps_[c].top_key());
        if (score > best_score) {
          best_score = score;
          best = c;
        }
      }
      if (best < 0) {
        admit = false;
        break;
      }
      const ItemId id = heaps_[best].top_id();
      const uint64_t key = heaps_[best].top_key();
      if (key == kFar && far_count_ > 1) ambiguous = true;
      Remove(id);
      victims_.push_back({id, key});
      freed += costs_.Get(id);
      if (!ByteTimeLater(key, best_score, access.next, incoming, &ambiguous)) {
        admit = false;
        break;
      }
    }
    if (ambiguous) ++counters_.ambiguous;
    if (!admit) {
      for (auto it = victims_.rbegin(); it != victims_.rend(); ++it) Insert(it->id, it->key);
      return false;
    }
    for (const auto& v : victims_) {
      used_ -= costs_.Get(v.id);
      evicted->push_back(v.id);
    }
    counters_.evictions += victims_.size();
    costs_.Set(access.id, cost);
    class_of_[access.id] = static_cast<uint8_t>(ClassOf(cost));
    used_ += cost;
    Insert(access.id, access.next);
    return true;
  }

  void Prefetch(const Access& access) const override {
    __builtin_prefetch(&positions_[access.id]);
    __builtin_prefetch(&class_of_[access.id]);
  }

  void OnReveal(const Reveal& reveal) override {
    if (!Contains(reveal.id)) return;
    auto& heap = heaps_[class_of_[reveal.id]];
    if (heap.key_of(reveal.id) != kFar) return;
    --far_count_;
    heap.Update(reveal.id, reveal.next);
  }

  bool Erase(ItemId id) override {
    if (!Contains(id)) return false;
    Remove(id);
    used_ -= costs_.Get(id);
    return true;
  }

 private:
  static constexpr int kClasses = 64;

  static int ClassOf(uint64_t cost) { return cost == 0 ? 0 : 63 - __builtin_clzll(cost); }

  // Size x distance to the next read; kFar counts as the window's length,
  // a lower bound; kNever as infinity.
  double ByteTime(uint64_t size, uint64_t next) const {
    if (next == kNever) return std::numeric_limits<double>::infinity();
    const uint64_t distance = next == kFar ? window_ : next - now_;
    return static_cast<double>(size) * static_cast<double>(distance);
  }

  // Whether a victim should leave before the incoming item: a strictly
  // larger byte-time. Far against far compares size x window, which decides
  // by size; the true distances are unknown, so the decision is ambiguous.
  static bool ByteTimeLater(uint64_t victim_next, double victim_score, uint64_t incoming_next,
                            double incoming_score, bool* ambiguous) {
    if (victim_next == kFar && incoming_next == kFar) *ambiguous = true;
    return victim_score > incoming_score;
  }

  void Insert(ItemId id, uint64_t next) {
    if (next == kFar) ++far_count_;
    heaps_[class_of_[id]].Push(id, next);
  }

  void Remove(ItemId id) {
    auto& heap = heaps_[class_of_[id]];
    if (heap.key_of(id) == kFar) --far_count_;
    heap.Remove(id);
  }

  CostTable costs_;
  HugeVector<uint32_t> positions_;
  HugeVector<uint8_t> class_of_;
  std::vector<IndexedMaxHeap<uint64_t>> heaps_;
  struct Victim {
    ItemId id;
    uint64_t key;
  };
  std::vector<Victim> victims_;
  const uint64_t window_;
  uint64_t far_count_ = 0;
  uint64_t now_ = 0;
};

// lfu: fewest reads since admission first, ties to the least recently read.
// The heap is a max-heap, so keys are complemented: the largest key is the
// smallest (count, last read).
class LfuPolicy final : public Policy {
 public:
  explicit LfuPolicy(const PolicyOptions& options)
      : Policy(PolicyKind::kLfu, options.capacity),
        costs_(options.num_ids),
        positions_(options.num_ids, kNotInHeap),
        counts_(options.num_ids, 0),
        heap_(&positions_) {}

  bool Contains(ItemId id) const override { return positions_[id] != kNotInHeap; }

  void Prefetch(const Access& access) const override {
    __builtin_prefetch(&positions_[access.id]);
    __builtin_prefetch(&counts_[access.id], 1);
  }

  void OnHit(const Access& access) override {
    heap_.Update(access.id, Key(++counts_[access.id], access.pos));
  }

  bool OnMiss(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) override {
    if (cost > capacity_) return false;
    while (used_ + cost > capacity_) {
      const ItemId victim = heap_.top_id();
      heap_.Remove(victim);
      used_ -= costs_.Get(victim);
      evicted->push_back(victim);
      ++counters_.evictions;
    }
    costs_.Set(access.id, cost);
    used_ += cost;
    counts_[access.id] = 1;
    heap_.Push(access.id, Key(1, access.pos));
    return true;
  }

  bool Erase(ItemId id) override {
    if (!Contains(id)) return false;
    heap_.Remove(id);
    used_ -= costs_.Get(id);
    return true;
  }

 private:
  using HeapKey = std::pair<uint64_t, uint64_t>;
  static HeapKey Key(uint64_t count, uint64_t last_read) {
    return {~count, ~last_read};
  }

  CostTable costs_;
  HugeVector<uint32_t> positions_;
  HugeVector<uint32_t> counts_;
  IndexedMaxHeap<HeapKey> heap_;
};

}  // namespace

std::unique_ptr<Policy> NewOptSizePolicy(const PolicyOptions& options) {
  return std::make_unique<OptSizePolicy>(options);
}

std::unique_ptr<Policy> NewLfuPolicy(const PolicyOptions& options) {
  return std::make_unique<LfuPolicy>(options);
}

}  // namespace opt4store

// Policies that need no priority structure: lru, fifo, random, static, none.
#include "engine/plan/cost_table.h"
#include "opt4store/huge_page_allocator.h"
#include "engine/plan/policy_impl.h"

namespace opt4store {

namespace {

// lru and fifo: an intrusive doubly-linked list over ids, most recent at the
// head, victims from the tail. lru moves an item to the head on a hit; fifo
// does not. Slot num_ids is the sentinel.
class ListPolicy final : public Policy {
 public:
  ListPolicy(PolicyKind kind, const PolicyOptions& options)
      : Policy(kind, options.capacity),
        costs_(options.num_ids),
        sentinel_(static_cast<ItemId>(options.num_ids)),
        prev_(options.num_ids + 1, kAbsent),
        next_(options.num_ids + 1, kAbsent) {
    prev_[sentinel_] = next_[sentinel_] = sentinel_;
  }

  bool Contains(ItemId id) const override { return next_[id] != kAbsent; }

  void Prefetch(const Access& access) const override {
    __builtin_prefetch(&prev_[access.id], 1);
    __builtin_prefetch(&next_[access.id], 1);
  }

  void OnHit(const Access& access) override {
    if (kind_ == PolicyKind::kLru) {
      Unlink(access.id);
      PushFront(access.id);
    }
  }

  bool OnMiss(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) override {
    if (cost > capacity_) return false;
    while (used_ + cost > capacity_) {
      const ItemId victim = prev_[sentinel_];
      Unlink(victim);
      used_ -= costs_.Get(victim);
      evicted->push_back(victim);
      ++counters_.evictions;
    }
    costs_.Set(access.id, cost);
    used_ += cost;
    PushFront(access.id);
    return true;
  }

  bool Erase(ItemId id) override {
    if (!Contains(id)) return false;
    Unlink(id);
    used_ -= costs_.Get(id);
    return true;
  }

 private:
  static constexpr ItemId kAbsent = UINT32_MAX;

  void Unlink(ItemId id) {
    next_[prev_[id]] = next_[id];
    prev_[next_[id]] = prev_[id];
    prev_[id] = next_[id] = kAbsent;
  }

  void PushFront(ItemId id) {
    const ItemId first = next_[sentinel_];
    next_[id] = first;
    prev_[id] = sentinel_;
    prev_[first] = id;
    next_[sentinel_] = id;
  }

  CostTable costs_;
  const ItemId sentinel_;
  HugeVector<ItemId> prev_;
  HugeVector<ItemId> next_;
};

// random: residents in a dense array, so a uniform victim is one draw.
class RandomPolicy final : public Policy {
 public:
  explicit RandomPolicy(const PolicyOptions& options)
      : Policy(PolicyKind::kRandom, options.capacity),
        costs_(options.num_ids),
        index_(options.num_ids, kAbsent),
        rng_(EpochSeed(options.seed, 0)) {}

  bool Contains(ItemId id) const override { return index_[id] != kAbsent; }
  void Prefetch(const Access& access) const override { __builtin_prefetch(&index_[access.id]); }

  void OnHit(const Access&) override {}

  bool OnMiss(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) override {
    if (cost > capacity_) return false;
    while (used_ + cost > capacity_) {
      const ItemId victim = residents_[rng_.Below(residents_.size())];
      Remove(victim);
      used_ -= costs_.Get(victim);
      evicted->push_back(victim);
      ++counters_.evictions;
    }
    costs_.Set(access.id, cost);
    used_ += cost;
    index_[access.id] = static_cast<uint32_t>(residents_.size());
    residents_.push_back(access.id);
    return true;
  }

  bool Erase(ItemId id) override {
    if (!Contains(id)) return false;
    Remove(id);
    used_ -= costs_.Get(id);
    return true;
  }

 private:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  void Remove(ItemId id) {
    const uint32_t i = index_[id];
    const ItemId moved = residents_.back();
    residents_[i] = moved;
    index_[moved] = i;
    residents_.pop_back();
    index_[id] = kAbsent;
  }

  CostTable costs_;
  HugeVector<uint32_t> index_;
  std::vector<ItemId> residents_;
  SplitMix64 rng_;
};

// static: admit while it fits, never evict.
class StaticPolicy final : public Policy {
 public:
  explicit StaticPolicy(const PolicyOptions& options)
      : Policy(PolicyKind::kStatic, options.capacity),
        costs_(options.num_ids),
        resident_(options.num_ids, 0) {}

  bool Contains(ItemId id) const override { return resident_[id] != 0; }
  void Prefetch(const Access& access) const override { __builtin_prefetch(&resident_[access.id]); }
  void OnHit(const Access&) override {}

  bool OnMiss(const Access& access, uint64_t cost, std::vector<ItemId>*) override {
    if (used_ + cost > capacity_) return false;
    costs_.Set(access.id, cost);
    used_ += cost;
    resident_[access.id] = 1;
    return true;
  }

  bool Erase(ItemId id) override {
    if (!Contains(id)) return false;
    resident_[id] = 0;
    used_ -= costs_.Get(id);
    return true;
  }

 private:
  CostTable costs_;
  HugeVector<uint8_t> resident_;
};

class NonePolicy final : public Policy {
 public:
  explicit NonePolicy(const PolicyOptions& options) : Policy(PolicyKind::kNone, options.capacity) {}
  bool Contains(ItemId) const override { return false; }
  void OnHit(const Access&) override {}
  bool OnMiss(const Access&, uint64_t, std::vector<ItemId>*) override { return false; }
  bool Erase(ItemId) override { return false; }
};

}  // namespace

std::unique_ptr<Policy> NewLruPolicy(const PolicyOptions& options) {
  return std::make_unique<ListPolicy>(PolicyKind::kLru, options);
}
std::unique_ptr<Policy> NewFifoPolicy(const PolicyOptions& options) {
  return std::make_unique<ListPolicy>(PolicyKind::kFifo, options);
}
std::unique_ptr<Policy> NewRandomPolicy(const PolicyOptions& options) {
  return std::make_unique<RandomPolicy>(options);
}
std::unique_ptr<Policy> NewStaticPolicy(const PolicyOptions& options) {
  return std::make_unique<StaticPolicy>(options);
}
std::unique_ptr<Policy> NewNonePolicy(const PolicyOptions& options) {
  return std::make_unique<NonePolicy>(options);
}

}  // namespace opt4store

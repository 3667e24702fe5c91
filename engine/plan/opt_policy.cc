// opt: Belady's MIN with bypass.
//
// Resident items fall in three groups by their next read:
//   exact  a position in (now_, now_ + window): one bit in bitmap_ at slot
//          position & mask_. Two resident items never share a next-read
//          position, so the slots do not collide;
//   far    beyond the window (kFar): far_, with far_index_ per id;
//   never  not read again (kNever): never_ (or only counted, untracked).
// Victims, in order: never, then far (the most recently added first; the
// true order is unknown, which counters_.ambiguous records), then the exact
// position furthest away.
//
// With track_ids, state_[id] also records each resident item's group and key,
// and slot_id_ the id behind each exact bit, so that Contains(), Erase() and
// the evicted list work by id. Without it (the simulator, item capacities),
// a read at position t hits iff bit t is set, and no per-id table is touched
// on the common path.
//
// Invariant between calls: used_ is the sum of resident costs, <= capacity_.
#include <algorithm>

#include "engine/plan/cost_table.h"
#include "engine/plan/policy_impl.h"
#include "engine/plan/window_bitmap.h"

namespace opt4store {

namespace {

constexpr uint64_t kAbsent = UINT64_MAX;
constexpr uint64_t kFarState = UINT64_MAX - 1;
constexpr uint64_t kNeverTag = uint64_t{1} << 63;  // | index into never_
constexpr uint32_t kNotFar = UINT32_MAX;
constexpr ItemId kUnknownId = UINT32_MAX;

uint64_t RoundUpPow2(uint64_t n) {
  uint64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

class OptPolicy final : public Policy {
 public:
  explicit OptPolicy(const PolicyOptions& options)
      : Policy(PolicyKind::kOpt, options.capacity),
        track_ids_(options.track_ids),
        costs_(track_ids_ ? options.num_ids : 0),
        ring_(RoundUpPow2(std::max<uint64_t>(options.window, 1))),
        mask_(ring_ - 1),
        bitmap_(ring_),
        num_ids_(options.num_ids) {
    if (track_ids_) {
      state_.assign(options.num_ids, kAbsent);
      slot_id_.resize(ring_);
    }
  }

  bool Contains(ItemId id) const override { return state_[id] != kAbsent; }

  bool Step(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) override {
    if (track_ids_) return Policy::Step(access, cost, evicted);
    now_ = access.pos;
    const uint64_t slot = access.pos & mask_;
    if (bitmap_.Test(slot)) {
      ++counters_.hits;
      bitmap_.Clear(slot);
      Link(kUnknownId, access.id, access.next);
      return true;
    }
    ++counters_.misses;
    if (OnMiss(access, cost, evicted)) {
      ++counters_.admissions;
    } else {
      ++counters_.bypasses;
    }
    return false;
  }

  void StepBatch(const Access* accesses, size_t n, const uint64_t* costs,
                 const StepReveal* reveals, size_t num_reveals, uint8_t* hits) override {
    if (track_ids_ || costs != nullptr || hits != nullptr) {
      Policy::StepBatch(accesses, n, costs, reveals, num_reveals, hits);
      return;
    }
    // Untracked, unit costs: the hit test is a bit test at the read's own
    // position, and nothing is looked up by id.
    constexpr size_t kAhead = 16;
    size_t next_reveal = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n && accesses[i + kAhead].next < kFar) {
        bitmap_.Prefetch(accesses[i + kAhead].next & mask_);
      }
      const Access& access = accesses[i];
      now_ = access.pos;
      const uint64_t slot = access.pos & mask_;
      if (bitmap_.Test(slot)) {
        ++counters_.hits;
        bitmap_.Clear(slot);
        Link(kUnknownId, access.id, access.next);
      } else {
        ++counters_.misses;
        if (OnMiss(access, 1, nullptr)) {
          ++counters_.admissions;
        } else {
          ++counters_.bypasses;
        }
      }
      while (next_reveal < num_reveals && reveals[next_reveal].step == i) {
        const StepReveal& r = reveals[next_reveal++];
        OnReveal(Reveal{true, r.id, r.next});
      }
    }
  }

  void OnHit(const Access& access) override {
    now_ = access.pos;
    Unlink(access.id);
    Link(access.id, access.id, access.next);
  }

  bool OnMiss(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) override {
    now_ = access.pos;
    if (cost > capacity_ || access.next == kNever) return false;
    victims_.clear();
    uint64_t freed = 0;
    bool admit = true;
    bool ambiguous = false;
    // The common bypass, decided by a peek: nothing is popped and put back.
    if (used_ + cost > capacity_ && never_count_ == 0 && never_.empty() && far_.empty()) {
      const uint64_t furthest = PeekFurthestExact();
      if (furthest != kNone && furthest <= access.next) return false;
    }
    while (used_ - freed + cost > capacity_) {
      Victim v;
      if (!PopFurthest(&v, &ambiguous)) {
        admit = false;  // cannot happen while cost <= capacity; be safe
        break;
      }
      victims_.push_back(v);
      freed += Cost(v.id);
      if (!ReadLater(v.key, access.next, &ambiguous)) {
        admit = false;
        break;
      }
    }
    if (ambiguous) ++counters_.ambiguous;
    if (!admit) {
      // Put back every victim popped for nothing (the peer implementation's
      // bug was to lose them here).
      for (auto it = victims_.rbegin(); it != victims_.rend(); ++it) {
        Link(it->id, it->far_id, it->key);
      }
      return false;
    }
    for (const Victim& v : victims_) {
      used_ -= Cost(v.id);
      if (track_ids_) evicted->push_back(v.id);
    }
    counters_.evictions += victims_.size();
    if (track_ids_) costs_.Set(access.id, cost);
    used_ += cost;
    Link(access.id, access.id, access.next);
    return true;
  }

  void Prefetch(const Access& access) const override {
    if (track_ids_) __builtin_prefetch(&state_[access.id], 1);
    if (access.next < kFar) {
      bitmap_.Prefetch(access.next & mask_);
      if (track_ids_) __builtin_prefetch(&slot_id_[access.next & mask_], 1);
    }
  }

  void OnReveal(const Reveal& reveal) override {
    if (far_index_.empty() || far_index_[reveal.id] == kNotFar) return;
    RemoveFar(reveal.id);
    if (track_ids_) state_[reveal.id] = kAbsent;
    Link(reveal.id, reveal.id, reveal.next);
  }

  bool Erase(ItemId id) override {
    if (state_[id] == kAbsent) return false;
    Unlink(id);
    used_ -= Cost(id);
    return true;
  }

 private:
  struct Victim {
    ItemId id;      // kUnknownId when untracked, except far items
    ItemId far_id;  // the id, for far items (always known)
    uint64_t key;   // exact position, kFar or kNever
  };

  uint64_t Cost(ItemId id) const { return track_ids_ ? costs_.Get(id) : 1; }

  // Makes an item resident with next read `next`. `id` may be kUnknownId
  // when untracked; `far_id` is the real id, needed to index a far item.
  void Link(ItemId id, ItemId far_id, uint64_t next) {
    if (next == kNever) {
      if (track_ids_) {
        state_[id] = kNeverTag | never_.size();
        never_.push_back(id);
      } else {
        ++never_count_;
      }
    } else if (next == kFar) {
      // Allocated on first use: with a window over the whole plan no item
      // is ever far.
      if (far_index_.empty()) far_index_.assign(num_ids_, kNotFar);
      far_index_[far_id] = static_cast<uint32_t>(far_.size());
      far_.push_back(far_id);
      if (track_ids_) state_[id] = kFarState;
    } else {
      const uint64_t slot = next & mask_;
      bitmap_.Set(slot);
      max_key_ = std::max(max_key_, next);
      if (track_ids_) {
        slot_id_[slot] = id;
        state_[id] = next;
      }
    }
  }

  // REQUIRES: track_ids_ and id resident.
  void Unlink(ItemId id) {
    const uint64_t s = state_[id];
    if (s == kFarState) {
      RemoveFar(id);
    } else if (s & kNeverTag) {
      const uint64_t index = s & ~kNeverTag;
      const ItemId moved = never_.back();
      never_[index] = moved;
      state_[moved] = kNeverTag | index;
      never_.pop_back();
    } else {
      bitmap_.Clear(s & mask_);
    }
    state_[id] = kAbsent;
  }

  void RemoveFar(ItemId id) {
    const uint32_t index = far_index_[id];
    const ItemId moved = far_.back();
    far_[index] = moved;
    far_index_[moved] = index;
    far_.pop_back();
    far_index_[id] = kNotFar;
  }

  static constexpr uint64_t kNone = WindowBitmap::kNone;

  // The slot of the exact key read furthest from now_, or kNone.
  uint64_t FurthestSlot() const {
    // Slots [0, now_slot) hold the later, wrapped-around positions. No key
    // has wrapped while every key set so far lies below the ring's current
    // base + ring_ (always so when the whole plan fits in the ring), and
    // then that search is skipped.
    const uint64_t now_slot = now_ & mask_;
    const bool may_wrap = max_key_ >= now_ - now_slot + ring_;
    uint64_t slot = now_slot > 0 && may_wrap ? bitmap_.FindPrev(now_slot - 1) : kNone;
    if (slot == kNone) slot = bitmap_.FindPrev(mask_);
    return slot;
  }
  uint64_t SlotPosition(uint64_t slot) const {
    const uint64_t now_slot = now_ & mask_;
    return slot < now_slot ? now_ - now_slot + ring_ + slot : now_ - now_slot + slot;
  }
  uint64_t PeekFurthestExact() const {
    const uint64_t slot = FurthestSlot();
    return slot == kNone ? kNone : SlotPosition(slot);
  }

  bool PopFurthest(Victim* v, bool* ambiguous) {
    if (track_ids_ ? !never_.empty() : never_count_ > 0) {
      if (track_ids_) {
        *v = {never_.back(), never_.back(), kNever};
        Unlink(v->id);
      } else {
        *v = {kUnknownId, kUnknownId, kNever};
        --never_count_;
      }
      return true;
    }
    if (!far_.empty()) {
      if (far_.size() > 1) *ambiguous = true;
      const ItemId id = far_.back();
      *v = {track_ids_ ? id : kUnknownId, id, kFar};
      RemoveFar(id);
      if (track_ids_) state_[id] = kAbsent;
      return true;
    }
    const uint64_t slot = FurthestSlot();
    if (slot == kNone) return false;
    const uint64_t position = SlotPosition(slot);
    bitmap_.Clear(slot);
    if (track_ids_) {
      const ItemId id = slot_id_[slot];
      state_[id] = kAbsent;
      *v = {id, id, position};
    } else {
      *v = {kUnknownId, kUnknownId, position};
    }
    return true;
  }

  const bool track_ids_;
  CostTable costs_;
  const uint64_t ring_;
  const uint64_t mask_;
  WindowBitmap bitmap_;
  const uint64_t num_ids_;
  HugeVector<uint32_t> far_index_;  // allocated when the first far item comes
  std::vector<ItemId> far_;
  HugeVector<uint64_t> state_;    // track_ids_ only
  HugeVector<ItemId> slot_id_;    // track_ids_ only
  std::vector<ItemId> never_;     // track_ids_ only
  uint64_t never_count_ = 0;      // untracked only
  std::vector<Victim> victims_;
  uint64_t max_key_ = 0;  // the largest exact key ever set: bounds the wrap
  uint64_t now_ = 0;
};

}  // namespace

std::unique_ptr<Policy> NewOptPolicy(const PolicyOptions& options) {
  return std::make_unique<OptPolicy>(options);
}

}  // namespace opt4store

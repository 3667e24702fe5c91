// A fake set of tiers for Residency on its own (residency.h): plain
// containers play the RAM tier, the disk tier's presence bits and next-use
// ranks, and the readers' consumed and in-progress marks, and record what
// the residency asks of them; ReadInOrder steps a residency as the store's
// owner does for one reader.
#ifndef OPT4STORE_TESTS_RESIDENCY_FAKE_TIERS_H_
#define OPT4STORE_TESTS_RESIDENCY_FAKE_TIERS_H_

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "engine/store/residency.h"

namespace opt4store_test {

using opt4store::ItemId;
using opt4store::ResidencyTiers;

class FakeTiers : public ResidencyTiers {
 public:
  // all_on_disk: the disk tier holds every id (an earlier run's), as at a restart.
  explicit FakeTiers(uint64_t num_ids, bool all_on_disk = false)
      : on_disk(num_ids, all_on_disk), next_use(num_ids, 0) {}

  bool InRam(ItemId id) const override { return ram.count(id) != 0; }
  bool OnDisk(ItemId id) const override { return on_disk[id]; }
  bool Consumed(uint64_t position, ItemId* id) const override {
    auto it = consumed.find(position);
    if (it == consumed.end()) return false;
    *id = it->second;
    return true;
  }
  void RamUsage(uint64_t* items, uint64_t* bytes) const override {
    *items = ram.size();
    *bytes = ram.size() * item_bytes;
  }
  bool BeingRead(uint64_t position) const override {
    return being_read.count(position) != 0;
  }
  void Evict(ItemId id) override {
    REQUIRE(ram.erase(id) == 1);
    ++evictions;
  }
  void ExpectPut(ItemId id, uint64_t position) override { expected[id] = position; }
  void SetNextUse(ItemId id, uint64_t position) override { next_use[id] = position; }
  void Skipped(uint64_t position, ItemId planned) override {
    skipped.push_back({position, planned});
  }
  void Drifted(uint64_t position, ItemId planned, ItemId got) override {
    drifted.push_back({position, planned, got});
  }

  struct Drift {
    uint64_t position;
    ItemId planned, got;
  };
  std::set<ItemId> ram;
  std::vector<bool> on_disk;
  std::vector<uint64_t> next_use;
  std::map<uint64_t, ItemId> consumed;
  std::set<uint64_t> being_read;  // positions
  std::map<ItemId, uint64_t> expected;
  std::vector<Drift> drifted;
  std::vector<std::pair<uint64_t, ItemId>> skipped;
  uint64_t item_bytes = 100;
  uint64_t evictions = 0;
};

// The store's owner with one reader, position by position: plan ahead of
// the reader (SyncPlanning), read RAM, mark the position consumed, and on a
// miss Put the value (into RAM if wanted). Returns the RAM hits.
inline uint64_t ReadInOrder(opt4store::Residency* r, FakeTiers* tiers,
                            const std::vector<ItemId>& ids, uint64_t depth,
                            uint64_t capacity_items, bool note_sizes) {
  uint64_t hits = 0;
  for (uint64_t p = 0; p < ids.size(); ++p) {
    r->AdvanceFrontier(p, 0);
    r->PlanAhead(std::max(p + 1, r->frontier() + depth), 0, p);
    const ItemId id = ids[p];
    const bool hit = tiers->InRam(id);
    tiers->consumed[p] = id;
    if (hit) {
      ++hits;
      continue;
    }
    if (note_sizes) r->NoteSize(id, tiers->item_bytes);
    if (p >= r->planned()) r->PlanAhead(p + 1, p + 1, p);
    if (r->Wanted(p, id, tiers->item_bytes)) tiers->ram.insert(id);
    INFO("position " << p);
    REQUIRE(tiers->ram.size() <= capacity_items);
  }
  return hits;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_RESIDENCY_FAKE_TIERS_H_

// DiskIndex: locations by id, and the eviction ranking (never read again,
// then unknown, then furthest next use) checked against brute force.
#include "tiers/disk_index.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>

namespace opt4store {
namespace {

using Loc = DiskIndex::Location;

// The rank key the index must order by: never > unknown > any position.
uint64_t Rank(uint64_t next_use) {
  if (next_use == DiskIndex::kNeverRead) return UINT64_MAX;
  if (next_use == DiskIndex::kUnknownNextUse) return UINT64_MAX - 1;
  return next_use;
}

}  // namespace

TEST_CASE("disk index: put, lookup, move and erase", "[disk_index]") {
  DiskIndex index;
  CHECK_FALSE(index.Contains(5));
  Loc old;
  CHECK_FALSE(index.Put(5, Loc{3, 100, 2000}, &old));
  Loc got;
  REQUIRE(index.Lookup(5, &got));
  CHECK(got.slot == 3);
  CHECK(got.offset == 100);
  CHECK(got.length == 2000);
  CHECK(index.Put(5, Loc{4, 0, 10}, &old));  // moved: the old place comes back
  CHECK(old.slot == 3);
  CHECK(old.offset == 100);
  CHECK(index.size() == 1);
  CHECK(index.Erase(5, &old));
  CHECK(old.slot == 4);
  CHECK_FALSE(index.Erase(5, &old));
  CHECK(index.size() == 0);
  CHECK(index.id_limit() == 6);
}

TEST_CASE("disk index: the victim is never-read, then unknown, then furthest", "[disk_index]") {
  DiskIndex index;
  for (ItemId id = 0; id < 10; ++id) {
    index.SetNextUse(id, 100 + id * 10);
    index.Put(id, Loc{1, id, 1}, nullptr);
  }
  index.Put(10, Loc{1, 10, 1}, nullptr);  // never told: unknown
  CHECK(index.Victim() == 10);
  index.SetNextUse(3, DiskIndex::kNeverRead);
  CHECK(index.Victim() == 3);
  index.Erase(3, nullptr);
  CHECK(index.Victim() == 10);
  index.Erase(10, nullptr);
  CHECK(index.Victim() == 9);
  index.SetNextUse(9, 1);  // read soon now
  CHECK(index.Victim() == 8);
  // Positions past 48 bits tie at the top of the known ones.
  index.SetNextUse(0, uint64_t{1} << 60);
  CHECK(index.Victim() == 0);
  CHECK(index.NextUse(9) == 1);
  CHECK(index.NextUse(77) == DiskIndex::kUnknownNextUse);
}

TEST_CASE("disk index: random operations match brute force", "[disk_index]") {
  DiskIndex index;
  std::map<ItemId, uint64_t> stored;  // id -> next use
  std::map<ItemId, uint64_t> told;    // every id's last SetNextUse
  std::mt19937_64 rng(11);
  for (int step = 0; step < 20000; ++step) {
    const ItemId id = static_cast<ItemId>(rng() % 500);
    switch (rng() % 4) {
      case 0:
      case 1: {
        index.Put(id, Loc{1, id, 1}, nullptr);
        stored[id] = told.count(id) ? told[id] : DiskIndex::kUnknownNextUse;
        break;
      }
      case 2: {
        const uint64_t r = rng() % 10;
        const uint64_t next = r == 0   ? DiskIndex::kNeverRead
                              : r == 1 ? DiskIndex::kUnknownNextUse
                                       : rng() % 1000;
        index.SetNextUse(id, next);
        told[id] = next;
        if (stored.count(id)) stored[id] = next;
        break;
      }
      default:
        CHECK(index.Erase(id, nullptr) == (stored.erase(id) == 1));
        break;
    }
    REQUIRE(index.size() == stored.size());
    if (!stored.empty()) {
      uint64_t best = 0;
      for (const auto& [i, next] : stored) best = std::max(best, Rank(next));
      const ItemId v = index.Victim();
      REQUIRE(stored.count(v) == 1);
      REQUIRE(Rank(stored[v]) == best);  // ties may go either way
    }
  }
}

TEST_CASE("disk index: 24 bytes per item when sized for the dataset", "[disk_index]") {
  DiskIndex index;
  index.Reserve(1000);
  for (ItemId id = 0; id < 1000; ++id) index.Put(id, Loc{1, id, 1}, nullptr);
  CHECK(index.MemoryBytes() == 1000 * 24);
  // Grown on demand: at most 25% slack on each table.
  DiskIndex grown;
  for (ItemId id = 0; id < 100000; ++id) grown.Put(id, Loc{1, id, 1}, nullptr);
  CHECK(grown.MemoryBytes() <= 100000 * 24 * 5 / 4 + 1024);
  // Sized afterwards (a store's tier recovers before it knows the dataset's
  // size): the slack goes, and every entry stays.
  for (const ItemId n : {100000u, 100050u}) {
    grown.Reserve(n);
    CHECK(grown.MemoryBytes() == n * 24);
  }
  CHECK(grown.size() == 100000);
  Loc loc;
  REQUIRE(grown.Lookup(99999, &loc));
  CHECK(loc.offset == 99999);
  grown.Reserve(10);  // below the ids it holds: nothing changes
  CHECK(grown.MemoryBytes() == 100050 * 24);
}

}  // namespace opt4store

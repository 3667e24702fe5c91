// Residency on its own, without threads, files or shared memory: a fake set
// of tiers (plain containers) plays the RAM tier, the disk tier's presence
// bits and the readers' consumed marks, and the tests step it as the store
// does. One reader in plan order hits exactly what Belady's OPT hits; a
// prefetch brings the next reads' items and lets them go once read; drift
// and positions nobody reads are counted and passed; the disk tier learns
// each id's next read after the frontier.
#include "engine/store/residency.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "residency_fake_tiers.h"
#include "store_test_util.h"
#include "tests/reference/reference_belady.h"
#include "tiers/disk_index.h"

namespace opt4store {
namespace {

using opt4store_test::FakeTiers;
using opt4store_test::ReadInOrder;
using opt4store_test::PlanIds;
using opt4store_test::ShufflePlan;

// The ids a plan reads, position by position.
std::vector<ItemId> IdsOf(const PlanSpec& plan) {
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(plan, &ids).ok());
  return ids;
}

// n ids, RAM for ram_items, prefetch 4 deep, a planner ring of ring_slots.
ResidencyOptions SmallRing(uint64_t n, uint64_t ram_items, uint64_t ring_slots) {
  ResidencyOptions o;
  o.num_ids = n;
  o.ram_items = ram_items;
  o.prefetch_depth = 4;
  o.ring_slots = ring_slots;
  return o;
}

PlanSpec ReplacementPlan(uint64_t n, uint64_t epochs, uint64_t seed) {
  PlanSpec p = ShufflePlan(n, epochs, seed);
  p.kind = SamplerKind::kReplacement;
  return p;
}

TEST_CASE("Residency: one reader in order hits exactly what Belady's OPT hits", "[residency]") {
  struct Case {
    const char* name;
    PlanSpec plan;
    uint64_t capacity;
  };
  const Case cases[] = {
      {"shuffle 300 x 3, 60", ShufflePlan(300, 3, 5), 60},
      {"replacement 400 x 4, 40", ReplacementPlan(400, 4, 9), 40},
      {"replacement 200 x 5, 150", ReplacementPlan(200, 5, 2), 150},
  };
  for (const Case& c : cases) {
    for (uint64_t depth : {uint64_t{1}, uint64_t{16}, uint64_t{512}}) {
      std::vector<ItemId> ids;
      REQUIRE(PlanIds(c.plan, &ids).ok());
      const uint64_t want = reference::Belady(ids, c.capacity, c.plan.dataset_size).hits;
      INFO(c.name << ", prefetch depth " << depth << ", Belady hits " << want);

      // A capacity in items.
      FakeTiers items_tiers(c.plan.dataset_size);
      ResidencyOptions o;
      o.num_ids = c.plan.dataset_size;
      o.ram_items = c.capacity;
      o.prefetch_depth = depth;
      o.ring_slots = 4096;
      Residency items(o, &items_tiers);
      REQUIRE(items.SetPlan(c.plan, 0).ok());
      CHECK(ReadInOrder(&items, &items_tiers, ids, depth, c.capacity, false) == want);
      CHECK(items.policy_hits() == want);
      CHECK(items.drift() == 0);

      // The same capacity in bytes, every item 100 bytes, sizes learnt at
      // their Put (the planner waits at an unseen item's read for it).
      FakeTiers bytes_tiers(c.plan.dataset_size);
      o.ram_items = 0;
      o.ram = c.capacity * bytes_tiers.item_bytes;
      Residency bytes(o, &bytes_tiers);
      REQUIRE(bytes.SetPlan(c.plan, 0).ok());
      CHECK(ReadInOrder(&bytes, &bytes_tiers, ids, depth, c.capacity, true) == want);
    }
  }
}

// A restart: 64 items, all on disk from an earlier run, one epoch planned
// (each item read once, so the policy never hits), RAM for 8 items, staging
// for 10 (1000 bytes: staging is bytes, and each item 100), the planner 20
// positions ahead.
struct RestartRun {
  static ResidencyOptions Options(uint64_t n) {
    ResidencyOptions o;
    o.num_ids = n;
    o.ram_items = 8;
    o.prefetch_depth = 20;
    o.staging = 1000;
    o.ring_slots = 256;
    o.disk = true;
    return o;
  }
  RestartRun() {
    for (ItemId id = 0; id < n; ++id) r.NoteSize(id, 100);
    REQUIRE(r.SetPlan(plan, 0).ok());
  }

  static constexpr uint64_t n = 64;
  const PlanSpec plan = ShufflePlan(n, 1, 3);
  const std::vector<ItemId> ids = IdsOf(plan);
  FakeTiers tiers{n, /*all_on_disk=*/true};
  const ResidencyOptions o = Options(n);
  Residency r{o, &tiers};
};

TEST_CASE_METHOD(RestartRun,
                 "Residency: a restart prefetches the next reads from disk and lets them go "
                 "once read",
                 "[residency]") {
  // Every id is read once and never again: the disk tier learns it.
  for (uint64_t id = 0; id < n; ++id) CHECK(tiers.next_use[id] < n);

  r.PlanAhead(o.prefetch_depth, 0, 0);
  std::vector<ItemId> batch;
  r.CollectPrefetch(&batch);
  // The next planned reads, in order, as many as staging holds.
  REQUIRE(batch == std::vector<ItemId>(ids.begin(), ids.begin() + 10));
  for (ItemId id : batch) {
    CHECK(r.Keep(id));
    tiers.ram.insert(id);  // the prefetch read lands
  }
  r.CollectPrefetch(&batch);
  CHECK(batch.empty());  // staging is full until reads are consumed

  // The reader consumes the first four positions: their items leave RAM
  // (read once, never again) and four more are prefetched.
  for (uint64_t p = 0; p < 4; ++p) tiers.consumed[p] = ids[p];
  r.AdvanceFrontier(4, 0);
  CHECK(r.frontier() == 4);
  for (uint64_t p = 0; p < 4; ++p) CHECK(tiers.ram.count(ids[p]) == 0);
  CHECK(tiers.evictions == 4);
  r.CollectPrefetch(&batch);
  CHECK(batch == std::vector<ItemId>(ids.begin() + 10, ids.begin() + 14));
}

TEST_CASE_METHOD(RestartRun,
                 "Residency: no prefetch for a position whose reader is reading it from disk now",
                 "[residency]") {
  r.PlanAhead(o.prefetch_depth, 0, 0);
  // The reader's first batch, positions 0 to 5, is on its way from disk:
  // the prefetcher starts behind it, and its staging goes to what follows.
  for (uint64_t p = 0; p < 6; ++p) tiers.being_read.insert(p);
  std::vector<ItemId> batch;
  r.CollectPrefetch(&batch);
  CHECK(batch == std::vector<ItemId>(ids.begin() + 6, ids.begin() + 16));
}

TEST_CASE_METHOD(RestartRun,
                 "Residency: reads consumed ahead of a lagging reader let their staged items go",
                 "[residency]") {
  r.PlanAhead(o.prefetch_depth, 0, 0);
  std::vector<ItemId> batch;
  r.CollectPrefetch(&batch);
  REQUIRE(batch.size() == 10);
  for (ItemId id : batch) tiers.ram.insert(id);

  // Workers read positions 1-5; the reader of position 0 lags, so the
  // frontier stays at 0. The items read go at once, and staging refills.
  for (uint64_t p = 1; p < 6; ++p) tiers.consumed[p] = ids[p];
  r.AdvanceFrontier(6, 0);
  CHECK(r.frontier() == 0);
  CHECK(tiers.ram.count(ids[0]) == 1);  // still to be read
  for (uint64_t p = 1; p < 6; ++p) CHECK(tiers.ram.count(ids[p]) == 0);
  r.CollectPrefetch(&batch);
  CHECK(batch == std::vector<ItemId>(ids.begin() + 10, ids.begin() + 15));
  for (ItemId id : batch) tiers.ram.insert(id);

  // A fetched item goes once its read is consumed, not when the frontier
  // passes; then the lagging read and the frontier move on, counting each
  // staged item once.
  tiers.ram.insert(ids[40]);
  r.HoldFetched(ids[40], 40);
  CHECK(r.Keep(ids[40]));
  tiers.consumed[40] = ids[40];
  r.AdvanceFrontier(41, 0);
  CHECK(tiers.ram.count(ids[40]) == 0);
  tiers.consumed[0] = ids[0];
  r.AdvanceFrontier(41, 0);
  CHECK(r.frontier() == 6);
  CHECK(tiers.evictions == 7);
  r.CollectPrefetch(&batch);
  CHECK(batch == std::vector<ItemId>(ids.begin() + 15, ids.begin() + 16));
}

TEST_CASE("Residency: the disk tier ranks each id by its next read after the frontier",
          "[residency]") {
  // Three shuffled epochs of 50, the planner a ring of 64 ahead of the
  // reader: most ids have a read pending in [frontier, planned). Until
  // 2026-11-29 the disk tier was told the read after the last one stepped,
  // a whole epoch later than the one pending, and evicted by that. (No
  // policy hits here: RAM serves those, so they do not rank; see below.)
  const uint64_t n = 50;
  const PlanSpec plan = ShufflePlan(n, 3, 7);
  const std::vector<ItemId> ids = IdsOf(plan);
  FakeTiers tiers(n);
  ResidencyOptions o = SmallRing(n, 10, 64);
  o.policy = PolicyKind::kNone;
  o.disk = true;
  Residency r(o, &tiers);
  REQUIRE(r.SetPlan(plan, 0).ok());
  for (uint64_t p = 0; p <= ids.size(); ++p) {
    r.PlanAhead(p + o.ring_slots, 0, p);
    for (ItemId id = 0; id < n; ++id) {
      const auto next = std::find(ids.begin() + static_cast<std::ptrdiff_t>(p), ids.end(), id);
      const uint64_t expected = next == ids.end() ? DiskIndex::kNeverRead
                                                  : static_cast<uint64_t>(next - ids.begin());
      INFO("frontier " << p << ", planned " << r.planned() << ", id " << id);
      REQUIRE(tiers.next_use[id] == expected);
    }
    if (p == ids.size()) break;
    tiers.consumed[p] = ids[p];
    r.AdvanceFrontier(p + 1, 0);
    REQUIRE(r.frontier() == p + 1);
  }
}

TEST_CASE("Residency: a read the policy serves from RAM does not rank its item on disk",
          "[residency]") {
  // OPT with room for one over 0,1,0,1: item 0 is held from position 0 to
  // its hit at 2, item 1 is missed at 1 and 3. Once position 0 is read,
  // the disk tier need not keep item 0 for position 2.
  FakeTiers tiers(2);
  ResidencyOptions o;
  o.num_ids = 2;
  o.ram_items = 1;
  o.prefetch_depth = 1;
  o.ring_slots = 8;
  o.disk = true;
  Residency r(o, &tiers);
  PlanSpec plan;
  plan.kind = SamplerKind::kExplicit;
  plan.dataset_size = 2;
  plan.ids = std::make_shared<const std::vector<ItemId>>(std::vector<ItemId>{0, 1, 0, 1});
  REQUIRE(r.SetPlan(plan, 0).ok());
  r.PlanAhead(4, 0, 0);
  CHECK(tiers.next_use[0] == 0);
  CHECK(tiers.next_use[1] == 1);
  tiers.consumed[0] = 0;
  r.AdvanceFrontier(1, 0);
  CHECK(tiers.next_use[0] == DiskIndex::kNeverRead);
  CHECK(tiers.next_use[1] == 1);
  tiers.consumed[1] = 1;
  r.AdvanceFrontier(2, 0);
  CHECK(tiers.next_use[1] == 3);
}

TEST_CASE("Residency: at the plan's end, room for a fetch comes from items never read again",
          "[residency]") {
  const PlanSpec plan = ShufflePlan(30, 2, 4);
  const std::vector<ItemId> ids = IdsOf(plan);
  FakeTiers tiers(30);
  ResidencyOptions o = SmallRing(30, 30, 64);  // RAM holds everything: epoch 2 hits
  o.disk = true;
  Residency r(o, &tiers);
  REQUIRE(r.SetPlan(plan, 0).ok());
  // Epoch 1 and half of epoch 2: nothing is evicted before the plan's end.
  CHECK(ReadInOrder(&r, &tiers, std::vector<ItemId>(ids.begin(), ids.begin() + 45), 4, 30,
                    false) == 15);
  for (ItemId id = 0; id < 30; ++id) tiers.on_disk[id] = true;
  r.AdvanceFrontier(45, 0);
  REQUIRE(tiers.ram.size() == 30);
  CHECK_FALSE(r.EvictUnneeded(1));  // not planned to the end yet
  r.PlanAhead(60, 0, 45);
  // Planned to the end: the 15 read for the last time may go (on disk), not
  // the 15 still to be read. Room is asked in bytes, with an item capacity
  // too: 300 bytes are 3 items of 100.
  for (ItemId id = 0; id < 30; ++id) r.NoteSize(id, 100);
  CHECK(r.EvictUnneeded(300));
  CHECK(tiers.evictions == 3);
  CHECK(r.EvictUnneeded(100 * 100));
  CHECK(tiers.evictions == 15);
  for (uint64_t p = 45; p < 60; ++p) CHECK(tiers.ram.count(ids[p]) == 1);
  CHECK_FALSE(r.EvictUnneeded(1));
}

TEST_CASE("Residency: drift and unread positions are counted and passed", "[residency]") {
  const uint64_t n = 50;
  const PlanSpec plan = ShufflePlan(n, 2, 1);
  const std::vector<ItemId> ids = IdsOf(plan);
  FakeTiers tiers(n);
  // A ring of 16: readers 8 positions past an unread one leave it behind.
  ResidencyOptions o = SmallRing(n, 10, 16);
  Residency r(o, &tiers);
  REQUIRE(r.SetPlan(plan, 0).ok());
  r.PlanAhead(8, 0, 0);

  SECTION("a read of another id than the plan's") {
    const ItemId other = ids[0] == 0 ? 1 : 0;
    tiers.consumed[0] = other;
    tiers.consumed[1] = ids[1];
    r.AdvanceFrontier(2, 0);
    CHECK(r.frontier() == 2);
    CHECK(r.drift() == 1);
    REQUIRE(tiers.drifted.size() == 1);
    CHECK(tiers.drifted[0].position == 0);
    CHECK(tiers.drifted[0].planned == ids[0]);
    CHECK(tiers.drifted[0].got == other);
  }
  SECTION("a position nobody reads (drop_last) stops the frontier until readers are far past") {
    for (uint64_t p = 1; p < 8; ++p) tiers.consumed[p] = ids[p];
    r.AdvanceFrontier(8, 0);
    CHECK(r.frontier() == 0);  // waits for position 0
    CHECK(r.abandoned() == 0);
    for (uint64_t p = 8; p < 12; ++p) tiers.consumed[p] = ids[p];
    r.PlanAhead(16, 0, 12);
    r.AdvanceFrontier(12, 0);  // 12 > 0 + 16 / 2: position 0 is left behind
    CHECK(r.abandoned() == 1);
    CHECK(r.frontier() == 12);
  }
}

TEST_CASE("Residency: an epoch's unread positions are skipped once readers have left it",
          "[residency]") {
  const uint64_t n = 8;
  const PlanSpec plan = ShufflePlan(n, 3, 4);
  const std::vector<ItemId> ids = IdsOf(plan);
  FakeTiers tiers(n);
  // A ring far longer than the epoch: the lag rule never applies here.
  ResidencyOptions o = SmallRing(n, 4, 64);
  o.epoch_grace_ms = 100;
  Residency r(o, &tiers);
  REQUIRE(r.SetPlan(plan, 0).ok());
  r.PlanAhead(12, 12, 0);

  SECTION("drop_last's tail: passed after the grace, its loaders' waiters answered") {
    for (uint64_t p = 0; p < 6; ++p) tiers.consumed[p] = ids[p];  // 6 and 7 never read
    r.AdvanceFrontier(6, 1000);
    CHECK(r.frontier() == 6);
    tiers.consumed[8] = ids[8];  // the next epoch begins
    r.AdvanceFrontier(9, 1000);
    CHECK(r.frontier() == 6);  // readers of the old epoch may be a little late
    r.AdvanceFrontier(9, 1099);
    CHECK(r.frontier() == 6);
    tiers.consumed[6] = ids[6];  // one was: it counts as read
    r.AdvanceFrontier(9, 1099);
    CHECK(r.frontier() == 7);
    r.AdvanceFrontier(9, 1100);
    CHECK(r.frontier() == 9);
    CHECK(r.abandoned() == 1);
    REQUIRE(tiers.skipped.size() == 1);
    CHECK(tiers.skipped[0].first == 7);
    CHECK(tiers.skipped[0].second == ids[7]);
  }
  SECTION("the sampler's new epoch: the tail before it is passed at once") {
    for (uint64_t p = 0; p < 6; ++p) tiers.consumed[p] = ids[p];
    r.AdvanceFrontier(6, 1000, 0);
    CHECK(r.frontier() == 6);
    r.AdvanceFrontier(6, 1000, 8);  // BeginEpoch(8): nothing was read there yet
    CHECK(r.frontier() == 8);
    CHECK(r.abandoned() == 2);
    CHECK(tiers.skipped.size() == 2);
  }
  SECTION("an unread position inside the epoch readers are in waits for its reader") {
    for (uint64_t p = 0; p < 8; ++p) {
      if (p != 5) tiers.consumed[p] = ids[p];
    }
    r.AdvanceFrontier(8, 0);
    r.AdvanceFrontier(8, 1000000);
    CHECK(r.frontier() == 5);
    CHECK(r.abandoned() == 0);
    CHECK(tiers.skipped.empty());
  }
}

// A plan that reads the ids [0, n) in a shuffled order, `epochs` times over
// (another order each time), of a dataset of dataset_size ids.
PlanSpec SubsetPlan(uint64_t n, uint64_t epochs, uint64_t dataset_size, uint32_t seed) {
  std::vector<ItemId> ids;
  std::mt19937 rng(seed);
  for (uint64_t e = 0; e < epochs; ++e) {
    std::vector<ItemId> epoch(n);
    for (uint64_t i = 0; i < n; ++i) epoch[i] = static_cast<ItemId>(i);
    std::shuffle(epoch.begin(), epoch.end(), rng);
    ids.insert(ids.end(), epoch.begin(), epoch.end());
  }
  PlanSpec spec;
  spec.kind = SamplerKind::kExplicit;
  spec.dataset_size = dataset_size;
  spec.ids = std::make_shared<const std::vector<ItemId>>(std::move(ids));
  return spec;
}

TEST_CASE("Residency: a new plan keeps what RAM holds as OPT would have", "[residency]") {
  const uint64_t n = 300, capacity = 60;
  ResidencyOptions o;
  o.num_ids = n;
  o.ram_items = capacity;
  o.ring_slots = 1024;
  FakeTiers tiers(n);
  Residency r(o, &tiers);
  const PlanSpec next = SubsetPlan(150, 2, n, 11);  // never reads the ids 150-299
  std::vector<ItemId> next_ids;
  REQUIRE(PlanIds(next, &next_ids).ok());
  auto first_read = [&](ItemId id) {
    return std::find(next_ids.begin(), next_ids.end(), id) - next_ids.begin();
  };

  SECTION("a rollback mid-run: the next plan hits what OPT hits from RAM's contents") {
    const PlanSpec plan = ShufflePlan(n, 3, 5);
    std::vector<ItemId> ids;
    REQUIRE(PlanIds(plan, &ids).ok());
    REQUIRE(r.SetPlan(plan, 0).ok());
    ReadInOrder(&r, &tiers, std::vector<ItemId>(ids.begin(), ids.begin() + 450), 16, capacity,
                false);
    const std::vector<ItemId> in_ram(tiers.ram.begin(), tiers.ram.end());
    REQUIRE(in_ram.size() > capacity / 2);  // items whose next read the policy
    REQUIRE(in_ram.size() <= capacity);     // misses may have left already
    const uint64_t evictions = tiers.evictions;
    REQUIRE(r.SetPlan(next, 0, in_ram).ok());
    uint64_t kept = 0;
    for (ItemId id : in_ram) {
      INFO("id " << id);
      CHECK(tiers.ram.count(id) == (id < 150 ? 1u : 0u));  // the others are never read again
      kept += id < 150;
    }
    CHECK(tiers.evictions == evictions + (in_ram.size() - kept));
    // OPT from RAM's contents is OPT over them read once before the plan
    // (distinct ids: that prefix hits nothing).
    std::vector<uint32_t> prefixed(in_ram.begin(), in_ram.end());
    prefixed.insert(prefixed.end(), next_ids.begin(), next_ids.end());
    const uint64_t want = reference::Belady(prefixed, capacity, n).hits;
    tiers.consumed.clear();
    CHECK(ReadInOrder(&r, &tiers, next_ids, 16, capacity, false) == want);
    CHECK(want >= kept);  // each kept item hits at its first read
  }
  SECTION("more in RAM than the budget: the ones read soonest stay") {
    std::vector<ItemId> in_ram;
    for (ItemId id = 0; id < 100; ++id) in_ram.push_back(id);
    tiers.ram.insert(in_ram.begin(), in_ram.end());
    REQUIRE(r.SetPlan(next, 0, in_ram).ok());
    std::vector<ItemId> soonest = in_ram;
    std::sort(soonest.begin(), soonest.end(),
              [&](ItemId a, ItemId b) { return first_read(a) < first_read(b); });
    soonest.resize(capacity);
    CHECK(tiers.ram == std::set<ItemId>(soonest.begin(), soonest.end()));
    for (ItemId id : soonest) CHECK(r.Keep(id));
  }
  SECTION("a budget in bytes: the ones read soonest that fit stay") {
    ResidencyOptions by_bytes = o;
    by_bytes.ram_items = 0;
    by_bytes.ram = 5000;  // the ids 0-99 take 10 + id bytes each: 5950 in all
    Residency rb(by_bytes, &tiers);
    std::vector<ItemId> in_ram;
    for (ItemId id = 0; id < 100; ++id) {
      in_ram.push_back(id);
      rb.NoteSize(id, 10 + id);
    }
    tiers.ram.insert(in_ram.begin(), in_ram.end());
    REQUIRE(rb.SetPlan(next, 0, in_ram).ok());
    // OPT's bypass rule: by first read, each id that still fits stays; the
    // first that does not would displace only ids read sooner, so it goes.
    std::vector<ItemId> by_read = in_ram;
    std::sort(by_read.begin(), by_read.end(),
              [&](ItemId a, ItemId b) { return first_read(a) < first_read(b); });
    std::set<ItemId> want;
    uint64_t used = 0;
    for (ItemId id : by_read) {
      if (used + 10 + id > by_bytes.ram) continue;
      used += 10 + id;
      want.insert(id);
    }
    CHECK(tiers.ram == want);
    CHECK(used <= by_bytes.ram);
    CHECK(want.size() < in_ram.size());
  }
  SECTION("an empty RAM tier starts empty, as before") {
    REQUIRE(r.SetPlan(next, 0, {}).ok());
    CHECK(tiers.ram.empty());
    CHECK(tiers.evictions == 0);
  }
}

TEST_CASE("Residency: without a plan the RAM tier fills once and keeps everything", "[residency]") {
  FakeTiers tiers(20);
  ResidencyOptions o;
  o.num_ids = 20;
  o.ram = 350;  // three and a half items of 100 bytes
  Residency r(o, &tiers);
  CHECK_FALSE(r.has_plan());
  for (ItemId id = 0; id < 6; ++id) {
    if (r.Wanted(kNoPosition, id, tiers.item_bytes)) tiers.ram.insert(id);
  }
  CHECK(tiers.ram == std::set<ItemId>{0, 1, 2});
  for (ItemId id = 0; id < 3; ++id) CHECK(r.Keep(id));
}

TEST_CASE("Residency: sizes count in the RAM tier's whole units", "[residency]") {
  FakeTiers tiers(20);
  tiers.item_bytes = 128;  // the fake's RamUsage: 128 arena bytes an item
  ResidencyOptions o;
  o.num_ids = 20;
  o.ram = 620;  // four items of 128; five if each counted its 100 bytes
  o.size_unit = 64;
  Residency r(o, &tiers);
  r.NoteSize(1, 264);
  CHECK(r.CostOf(1) == 320);
  r.NoteSize(2, 0);
  CHECK(r.CostOf(2) == 64);
  r.NoteSize(3, 320);
  CHECK(r.CostOf(3) == 320);
  for (ItemId id = 0; id < 6; ++id) {
    if (r.Wanted(kNoPosition, id, 100)) tiers.ram.insert(id);
  }
  CHECK(tiers.ram == std::set<ItemId>{0, 1, 2, 3});
}

TEST_CASE("Residency: a first read expects its reader's Put only of an item the disk lacks",
          "[residency]") {
  // RAM for every id, so the policy admits each at its first read. The
  // disk tier holds ids 0-9 (an earlier run's): their readers read them
  // there and Put nothing, so no later reader may wait for such a Put.
  const PlanSpec plan = ShufflePlan(20, 2, 6);
  FakeTiers tiers(20);
  for (ItemId id = 0; id < 10; ++id) tiers.on_disk[id] = true;
  ResidencyOptions o = SmallRing(20, 20, 64);
  o.disk = true;
  Residency r(o, &tiers);
  REQUIRE(r.SetPlan(plan, 0).ok());
  r.PlanAhead(40, 0, 0);
  REQUIRE(r.planned() == 40);
  for (ItemId id = 0; id < 20; ++id) {
    INFO("id " << id);
    CHECK(tiers.expected.count(id) == (id < 10 ? 0u : 1u));
  }
}

}  // namespace
}  // namespace opt4store

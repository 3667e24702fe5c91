// The store's planner (Residency) with a look-ahead window shorter than the
// plan: it must make the choices the simulator's OPT makes at the same
// window (policy.cc's StepBatch), which with every next read inside the
// window are Belady's. A read that comes into the window is told to the
// policy after the step at which it comes in, never before: the step would
// undo a reveal of its own id, and a ring of window slots (a power-of-two
// window) would read the revealed key, now + window, as now.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/store/residency.h"
#include "opt4store/simulator.h"
#include "residency_fake_tiers.h"
#include "tests/reference/reference_belady.h"

namespace opt4store {
namespace {

using opt4store_test::FakeTiers;
using opt4store_test::ReadInOrder;

PlanSpec Explicit(const std::vector<ItemId>& ids, uint64_t n) {
  PlanSpec spec;
  spec.kind = SamplerKind::kExplicit;
  spec.dataset_size = n;
  spec.ids = std::make_shared<std::vector<ItemId>>(ids);
  return spec;
}

uint64_t PlannerHits(const std::vector<ItemId>& ids, uint64_t n, uint64_t capacity,
                     uint64_t window, uint64_t depth) {
  ResidencyOptions o;
  o.num_ids = n;
  o.ram_items = capacity;
  o.prefetch_depth = depth;
  o.ring_slots = 4096;
  o.plan_window = window;
  FakeTiers tiers(n);
  Residency r(o, &tiers);
  REQUIRE(r.SetPlan(Explicit(ids, n), 0).ok());
  return ReadInOrder(&r, &tiers, ids, depth, capacity, false);
}

uint64_t SimulatedHits(const std::vector<ItemId>& ids, uint64_t n, uint64_t capacity,
                       uint64_t window) {
  SimulationOptions o;
  o.plan = Explicit(ids, n);
  o.window = window;
  o.policies = {PolicyKind::kOpt};
  o.capacities = {capacity};
  SimulationResult result;
  REQUIRE(Simulate(o, &result).ok());
  return result.points[0].policies[0].counters.hits;
}

TEST_CASE("Residency: a read revealed at its own step keeps its next use (Belady's hits)",
          "[residency][window]") {
  // Id 2 is read at 1 and 2 with a window of 2: its read at 4 comes into
  // the window at the step of position 2.
  const std::vector<ItemId> ids = {0, 2, 2, 0, 2, 1, 2};
  const uint64_t belady = reference::Belady(ids, 1, 3).hits;
  REQUIRE(belady == 3);
  CHECK(SimulatedHits(ids, 3, 1, 2) == belady);
  CHECK(PlannerHits(ids, 3, 1, 2, 4) == belady);
}

TEST_CASE("Residency: with a short window the planner hits what the simulator's OPT hits",
          "[residency][window]") {
  std::mt19937 rng(17);
  int compared = 0;
  for (int plan = 0; plan < 150; ++plan) {
    const uint64_t n = 3 + rng() % 5;
    std::vector<ItemId> ids(12 + rng() % 20);
    for (ItemId& id : ids) id = static_cast<ItemId>(rng() % n);
    for (uint64_t window : {uint64_t{2}, uint64_t{3}, uint64_t{4}, uint64_t{6}, uint64_t{8}}) {
      for (uint64_t capacity : {uint64_t{1}, uint64_t{2}, uint64_t{3}}) {
        const uint64_t want = SimulatedHits(ids, n, capacity, window);
        for (uint64_t depth : {uint64_t{1}, uint64_t{4}}) {
          INFO("plan " << plan << ", window " << window << ", capacity " << capacity
                       << ", depth " << depth << ", simulated hits " << want);
          CHECK(PlannerHits(ids, n, capacity, window, depth) == want);
          ++compared;
        }
      }
    }
  }
  CHECK(compared == 150 * 5 * 3 * 2);
}

}  // namespace
}  // namespace opt4store

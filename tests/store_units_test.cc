// A byte budget counts each item in the RAM tier's whole units
// (opt4store/ram_units.h): with items of a few dozen bytes, the store's hits
// are those of the simulator that counts the same way
// (SimulationOptions::ram_units, `opt4store simulate --sizes`), not those of
// one that counts raw bytes.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "opt4store/item_sizes.h"
#include "opt4store/ram_units.h"
#include "opt4store/simulator.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"

namespace opt4store {
namespace {

using opt4store_test::OpenStore;
using opt4store_test::PlanIds;
using opt4store_test::ReadRange;
using opt4store_test::ReadTally;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::ShufflePlan;
using opt4store_test::ValueShape;

uint64_t SimulatedOptHits(const PlanSpec& plan, uint64_t capacity, std::vector<uint64_t> sizes,
                          bool ram_units) {
  SimulationOptions s;
  s.plan = plan;
  s.policies = {PolicyKind::kOpt};
  s.capacities = {capacity};
  s.sizes = ItemSizes::FromVector(std::move(sizes));
  s.ram_units = ram_units;
  SimulationResult r;
  REQUIRE(Simulate(s, &r).ok());
  return r.points.at(0).policies.at(0).counters.hits;
}

TEST_CASE("Store: small items in a byte budget hit as the simulator in RAM units says",
          "[store][bytes]") {
  const uint64_t n = 600;
  const ValueShape shape{40, 0};  // with its meta, 70-79 bytes: two 64-byte units
  const PlanSpec plan = ShufflePlan(n, 3, 21);
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(plan, &ids).ok());
  std::vector<uint64_t> sizes;
  for (ItemId id = 0; id < n; ++id) {
    sizes.push_back(SampleMeta(id).size() + SamplePayload(id, shape).size());
    REQUIRE(InRamUnits(sizes.back(), 64) == 128);
  }

  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = plan;
  o.ram = 32 * 1024;
  o.disk = 0;
  auto store = OpenStore(o, scratch.path());
  const ReadTally t = ReadRange(store.get(), ids, 0, ids.size(), shape);
  const StoreStats st = store->Stats();
  const uint64_t in_units = SimulatedOptHits(plan, st.ram_capacity, sizes, true);
  const uint64_t in_bytes = SimulatedOptHits(plan, st.ram_capacity, sizes, false);
  INFO("policy capacity " << st.ram_capacity << " B: reader " << t.ToString()
                          << "; simulated OPT hits " << in_units << " in units, " << in_bytes
                          << " in bytes");
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(t.ram == in_units);
  CHECK(t.misses == ids.size() - in_units);
  CHECK(in_bytes > in_units + in_units / 4);  // counting bytes would promise far more
  CHECK(st.ram_insert_failures == 0);
  REQUIRE(store->Close().ok());
}

}  // namespace
}  // namespace opt4store

// An open that fails part way (here at its plan, once the shared memory
// and the residency exist) leaves the store as the last run closed it: the
// saved cursor and the last run's counters are not overwritten by the
// failed open's empty ones.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::OpenStore;
using opt4store_test::ReadRange;
using opt4store_test::ReadTally;
using opt4store_test::ScratchStore;
using opt4store_test::ValueShape;

constexpr uint64_t kN = 200;
constexpr uint64_t kEpochs = 3;

TEST_CASE("Store: an open that fails at its plan keeps the saved cursor and last run",
          "[store][persist]") {
  ScratchStore scratch;
  opt4store_test::TempDir plans;
  // A file plan (the store keeps a copy of it: plan.u32), ids in a
  // different order each epoch.
  std::vector<ItemId> plan;
  std::string bytes;
  for (uint64_t e = 0; e < kEpochs; ++e) {
    for (uint64_t i = 0; i < kN; ++i) {
      plan.push_back(static_cast<ItemId>((i * 7 + e * 13) % kN));
      bytes += opt4store_test::LE(plan.back(), 4);
    }
  }
  opt4store_test::WriteBytes(plans.File("plan.u32"), bytes);
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = kN;
  o.ram = 1 << 20;
  o.disk = 32 << 20;
  PlanSpec spec;
  spec.kind = SamplerKind::kFile;
  spec.path = plans.File("plan.u32");
  spec.epoch_length = kN;
  o.plan = spec;
  const ValueShape shape{1024, 4096};
  {
    auto store = OpenStore(o, scratch.path());
    const ReadTally t = ReadRange(store.get(), plan, 0, 150, shape);
    INFO(t.ToString());
    REQUIRE(t.errors == 0);
    REQUIRE(t.misses == 150);
    REQUIRE(store->Flush().ok());
    REQUIRE(store->ResumePosition() == 150);
    REQUIRE(store->Close().ok());
  }
  // The store's copy of the plan goes missing: the next open (no plan
  // given: the saved one) fails where it opens the plan's stream.
  const std::string copy = scratch.path() + "/plan.u32";
  REQUIRE(std::filesystem::exists(copy));
  const std::string hidden = scratch.path() + "/plan.u32.away";
  std::filesystem::rename(copy, hidden);
  StoreOptions again;
  again.shm_prefix = scratch.prefix();
  std::unique_ptr<Store> failed;
  const Status s = Store::Open(again, scratch.path(), &failed);
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  CHECK(failed == nullptr);
  std::filesystem::rename(hidden, copy);
  {
    // Read-only, as `opt4store stats` opens it: the last run's counters.
    StoreOptions admin;
    admin.shm_prefix = scratch.prefix();
    admin.disk_only = true;
    auto store = OpenStore(admin, scratch.path());
    const StoreStats st = store->Stats();
    CHECK(st.last_run);
    CHECK(st.source_loads == 150);
    REQUIRE(store->Close().ok());
  }
  auto store = OpenStore(again, scratch.path());
  CHECK(store->ResumePosition() == 150);
  REQUIRE(store->Close().ok());
}

}  // namespace
}  // namespace opt4store

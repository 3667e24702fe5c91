// The disk tier's bypass (DiskTierOptions::bypass), Belady's OPT for a tier
// every miss is offered to: once the items held fill the budget less the
// compaction reserve and the dead space allowed, a Put evicts the item read
// furthest in the future, one for one, or is left out when it is read no
// sooner than that item; an id never told a next use is stored as
// before. Without it (the tier's default), every Put is stored, and under
// a budget smaller than the working set the tier churned out items read
// soon for items read later.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "tiers/disk_index.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::TempDir;

// 1 MiB: 128 KiB held back for compaction, 128 KiB of dead space allowed,
// so three of these 200 KiB items fit and a fourth does not.
DiskTierOptions BypassOptions() {
  DiskTierOptions o;
  o.budget_bytes = 1 << 20;
  o.compression = DiskTierOptions::Compression::kNone;
  o.bypass = true;
  return o;
}

const std::string kPayload(200 << 10, 'x');

bool PutStored(DiskTier* tier, ItemId id, std::vector<ItemId>* evicted) {
  bool stored = false;
  const Status s = tier->Put(id, "", kPayload, evicted, &stored);
  INFO("id " << id << ": " << s.ToString());
  REQUIRE(s.ok());
  return stored;
}

TEST_CASE("DiskTier: with bypass, a Put read later than everything held is left out",
          "[disk]") {
  TempDir dir;
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(BypassOptions(), dir.path(), &tier).ok());
  std::vector<ItemId> evicted;
  for (ItemId id = 0; id < 3; ++id) {
    tier->SetNextUse(id, 10 * (id + 1));
    CHECK(PutStored(tier.get(), id, &evicted));
  }
  REQUIRE(evicted.empty());

  tier->SetNextUse(3, 40);  // after all three
  CHECK_FALSE(PutStored(tier.get(), 3, &evicted));
  CHECK(evicted.empty());
  CHECK_FALSE(tier->Contains(3));
  DiskTierStats st = tier->GetStats();
  CHECK(st.bypasses == 1);
  CHECK(st.items == 3);

  tier->SetNextUse(4, 5);  // before all three: the furthest, 2, leaves
  CHECK(PutStored(tier.get(), 4, &evicted));
  CHECK(evicted == std::vector<ItemId>{2});
  CHECK(tier->Contains(4));

  tier->SetNextUse(5, DiskIndex::kNeverRead);  // never read: never stored
  CHECK_FALSE(PutStored(tier.get(), 5, &evicted));

  // A new version of a stored id is never left out, however late its read.
  tier->SetNextUse(0, 1000);
  CHECK(PutStored(tier.get(), 0, &evicted));
  CHECK(tier->Contains(0));
  std::string payload;
  REQUIRE(tier->Get(0, nullptr, &payload).ok());
  CHECK(payload == kPayload);
  st = tier->GetStats();
  CHECK(st.bypasses == 2);

  // An id never told a next use (no plan covers it) is stored, evicting.
  evicted.clear();
  CHECK(PutStored(tier.get(), 7, &evicted));
  CHECK(evicted.size() == 1);
  CHECK(tier->Contains(7));
  CHECK(tier->GetStats().bypasses == 2);
  CHECK(tier->GetStats().file_bytes <= (1u << 20));
  REQUIRE(tier->Close().ok());
}

TEST_CASE("DiskTier: without bypass, every Put is stored and evicts", "[disk]") {
  TempDir dir;
  DiskTierOptions o = BypassOptions();
  o.bypass = false;
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(o, dir.path(), &tier).ok());
  std::vector<ItemId> evicted;
  for (ItemId id = 0; id < 5; ++id) {  // the fifth needs room
    tier->SetNextUse(id, 10 * (id + 1));
    bool stored = false;
    REQUIRE(tier->Put(id, "", kPayload, &evicted, &stored).ok());
    CHECK(stored);
  }
  CHECK(tier->Contains(4));
  CHECK_FALSE(evicted.empty());
  CHECK(tier->GetStats().bypasses == 0);
  REQUIRE(tier->Close().ok());
}

}  // namespace
}  // namespace opt4store

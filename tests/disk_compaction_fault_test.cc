// A compaction that fails part way (the disk full after some copies): the
// copies it made but never indexed must not come back. They were left past
// the active segment's watermark, and the next open re-indexed every valid
// record there whose id had no entry: an id deleted (evicted) after the
// failure was served again.
#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "disk_test_util.h"
#include "engine/base/fault_injection_env.h"
#include "test_util.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::NoiseBytes;
using opt4store_test::TempDir;

constexpr size_t kValue = 10000;

std::string Value(ItemId id, uint32_t version) { return NoiseBytes(kValue, id * 16 + version); }

TEST_CASE("disk tier: copies of a compaction that failed part way are not indexed at a reopen",
          "[disk][compaction][faults]") {
  TempDir dir;
  FaultInjectionEnv env;
  DiskTierOptions o;
  o.budget_bytes = 64 << 20;
  o.segment_bytes = 64 << 10;
  o.compression = DiskTierOptions::Compression::kNone;
  o.env = &env;
  {
    std::unique_ptr<DiskTier> tier;
    REQUIRE(DiskTier::Open(o, dir.path(), &tier).ok());
    // Segment 1: ids 0-5; ids 0-3 again elsewhere, so segment 1 is sparse.
    for (ItemId id = 0; id < 6; ++id) REQUIRE(tier->Put(id, "v0", Value(id, 0)).ok());
    for (ItemId id = 0; id < 4; ++id) REQUIRE(tier->Put(id, "v1", Value(id, 1)).ok());
    env.Inject(Fault::NoSpaceAfter(kValue + 100).OnFile(".seg"));  // room for one copy
    const Status compacted = tier->Compact();
    INFO(compacted.ToString());
    REQUIRE(compacted.IsNoSpace());
    env.Clear();
    REQUIRE(tier->Delete(4).ok());  // as an eviction does
    REQUIRE(tier->Flush().ok());
    REQUIRE(tier->Close().ok());
  }
  o.env = nullptr;
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(o, dir.path(), &tier).ok());
  std::string meta, payload;
  const Status gone = tier->Get(4, &meta, &payload);
  INFO("Get(4): " << gone.ToString() << " " << meta);
  CHECK(gone.IsNotFound());  // before: served again, from the unindexed copy
  CHECK(tier->GetStats().recovered_records == 0);
  for (ItemId id : {0, 1, 2, 3, 5}) {
    REQUIRE(tier->Get(id, &meta, &payload).ok());
    CHECK(meta == (id < 4 ? "v1" : "v0"));
    CHECK(payload == Value(id, id < 4 ? 1 : 0));
  }
  VerifyReport report;
  CHECK(tier->Verify(&report).ok());
}

}  // namespace
}  // namespace opt4store

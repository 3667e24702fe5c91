// A segment file already gone when the disk tier deletes it (a Clear that
// failed part way, or a hand): what was wanted has happened. Compaction used
// to stop there with NotFound, and the segment, left with no live bytes,
// was picked again at every later compaction, which failed the same way.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "test_util.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::SegmentFiles;
using opt4store_test::TempDir;
using opt4store_test::TestMeta;
using opt4store_test::TestPayload;

constexpr ItemId kItems = 120;

void PutAll(DiskTier* tier, uint32_t version) {
  for (ItemId id = 0; id < kItems; ++id) {
    const Status s = tier->Put(id, TestMeta(id, version), TestPayload(id, version));
    INFO("id " << id << ": " << s.ToString());
    REQUIRE(s.ok());
  }
}

TEST_CASE("disk tier: compaction goes on past a segment file that is already gone",
          "[disk][compaction]") {
  TempDir dir;
  DiskTierOptions o;
  o.budget_bytes = 64 << 20;
  o.segment_bytes = 256 << 10;
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(o, dir.path(), &tier).ok());
  PutAll(tier.get(), 0);
  const std::vector<std::string> first = SegmentFiles(dir.path());
  REQUIRE(first.size() >= 3);
  PutAll(tier.get(), 1);  // version 0's segments hold nothing live now
  REQUIRE(unlink(first.front().c_str()) == 0);
  const Status s = tier->Compact();
  INFO(s.ToString());
  CHECK(s.ok());
  CHECK(tier->GetStats().compactions > 0);
  for (ItemId id = 0; id < kItems; ++id) {
    std::string meta, payload;
    REQUIRE(tier->Get(id, &meta, &payload).ok());
    CHECK(meta == TestMeta(id, 1));
    CHECK(payload == TestPayload(id, 1));
  }
  REQUIRE(tier->Close().ok());
}

}  // namespace
}  // namespace opt4store

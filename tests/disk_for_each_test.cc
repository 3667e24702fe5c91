// DiskTier::ForEachItem: every stored item once, with its size and the
// place a reader process reads it at. After a reopen the first call is
// served from what the open's recovery read, so the cases below reopen and
// then write, overwrite or delete before it: the answer must still be the
// index's, never the open's.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <tuple>

#include "disk_test_util.h"
#include "test_util.h"
#include "tiers/disk_tier.h"
#include "tiers/segment_reader.h"

namespace opt4store {
namespace {

using opt4store_test::TempDir;
using opt4store_test::TestMeta;
using opt4store_test::TestPayload;

struct Listed {
  uint64_t bytes = 0;
  DiskRecordPlace place;
};

std::map<ItemId, Listed> ListItems(DiskTier* tier) {
  std::map<ItemId, Listed> items;
  const Status s = tier->ForEachItem([&](ItemId id, uint64_t bytes, const DiskRecordPlace& p) {
    REQUIRE(items.count(id) == 0);
    items[id] = Listed{bytes, p};
  });
  INFO(s.ToString());
  REQUIRE(s.ok());
  return items;
}

// `items` is exactly {id: version}: each listed size is the value's, each
// place the one Locate gives, and ReadRecordAt there returns the value.
void ExpectListed(DiskTier* tier, const std::map<ItemId, Listed>& items,
                  const std::map<ItemId, uint32_t>& versions) {
  REQUIRE(items.size() == versions.size());
  for (const auto& [id, version] : versions) {
    INFO("id " << id << " version " << version);
    const auto found = items.find(id);
    REQUIRE(found != items.end());
    const std::string meta = TestMeta(id, version), payload = TestPayload(id, version);
    REQUIRE(found->second.bytes == meta.size() + payload.size());
    DiskRecordPlace located;
    REQUIRE(tier->Locate(id, &located).ok());
    const DiskRecordPlace& p = found->second.place;
    REQUIRE(std::tie(p.segment, p.offset, p.length, p.crc) ==
            std::tie(located.segment, located.offset, located.length, located.crc));
    std::string buffer, scratch;
    std::string_view m, v;
    const Status s = ReadRecordAt(tier->segments_dir(), id, p, &buffer, &m, &v, &scratch);
    INFO(s.ToString());
    REQUIRE(s.ok());
    REQUIRE(m == meta);
    REQUIRE(v == payload);
  }
}

std::unique_ptr<DiskTier> Open(const std::string& dir) {
  DiskTierOptions o;
  o.budget_bytes = 256 << 20;
  o.segment_bytes = 1 << 20;  // a few segments, so places differ in segment too
  std::unique_ptr<DiskTier> tier;
  const Status s = DiskTier::Open(o, dir, &tier);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return tier;
}

void Put(DiskTier* tier, ItemId id, uint32_t version, std::map<ItemId, uint32_t>* versions) {
  REQUIRE(tier->Put(id, TestMeta(id, version), TestPayload(id, version)).ok());
  (*versions)[id] = version;
}

}  // namespace

TEST_CASE("disk tier: ForEachItem after a reopen lists the index as it is now",
          "[disk][persistence]") {
  TempDir dir;
  std::map<ItemId, uint32_t> versions;
  {
    auto tier = Open(dir.path());
    for (ItemId id = 0; id < 200; ++id) Put(tier.get(), id, 0, &versions);
    for (ItemId id = 0; id < 200; id += 7) Put(tier.get(), id, 1, &versions);  // moved
    for (ItemId id = 3; id < 200; id += 11) {
      REQUIRE(tier->Delete(id).ok());
      versions.erase(id);
    }
    REQUIRE(tier->Close().ok());
  }
  auto tier = Open(dir.path());
  SECTION("nothing written since the open") {}
  SECTION("a new item") { Put(tier.get(), 500, 0, &versions); }
  SECTION("an item overwritten: as many items, one in a new place") {
    Put(tier.get(), 10, 2, &versions);
  }
  SECTION("one deleted and another added: as many items, one id different") {
    REQUIRE(tier->Delete(20).ok());
    versions.erase(20);
    Put(tier.get(), 501, 0, &versions);
  }
  SECTION("compacted: records moved") { REQUIRE(tier->Compact().ok()); }
  ExpectListed(tier.get(), ListItems(tier.get()), versions);
  // A second call scans RocksDB; it agrees.
  ExpectListed(tier.get(), ListItems(tier.get()), versions);
}

}  // namespace opt4store

// The store under a disk budget smaller than its data: the disk tier runs
// OPT with bypass over the reads RAM will not serve, so an item RAM holds
// for its next read may be on no disk; the owner's close offers those to
// the disk tier, ranked as a restart will read them (its RAM starts empty).
// Until 2026-11-29 nothing did, and a restart loaded them again.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "opt4store/read_sink.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"

namespace opt4store {
namespace {

using opt4store_test::BypassOptions;
using opt4store_test::IsSample;
using opt4store_test::kBypassIds;
using opt4store_test::kBypassValueBytes;
using opt4store_test::OpenStore;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::ValueShape;

TEST_CASE("Store: the close keeps on disk what only RAM held, for a restart", "[store][persist]") {
  // BypassOptions: item 3, read at 3 and 4, is kept by RAM for 4 and left
  // out by the disk tier. Closed after position 3, the store must find it
  // at 4 on disk.
  ScratchStore scratch;
  const ValueShape big{kBypassValueBytes, 0};
  const std::vector<ItemId>& ids = kBypassIds;
  const StoreOptions o = BypassOptions(scratch.prefix());
  {
    auto store = OpenStore(o, scratch.path());
    StringSink sink;
    for (uint64_t p = 0; p < 4; ++p) {
      REQUIRE(store->Get(p, ids[p], &sink).IsNotFound());
      REQUIRE(store->Put(p, ids[p], SampleMeta(ids[p]), SamplePayload(ids[p], big)).ok());
    }
    REQUIRE(store->Flush().ok());
    const StoreStats st = store->Stats();
    CHECK(st.disk_bypasses == 1);  // item 3
    CHECK(st.disk_evictions == 1);  // item 1, for item 2
    REQUIRE(store->Close().ok());
  }
  auto store = OpenStore(o, scratch.path());
  REQUIRE(store->ResumePosition() == 4);
  StringSink value;
  GetSource source = GetSource::kMiss;
  const Status s = store->Get(4, 3, &value, &source);
  INFO(s.ToString());
  REQUIRE(s.ok());  // from disk, or from RAM the prefetcher filled from disk
  CHECK(source != GetSource::kMiss);
  CHECK(IsSample(3, big, value.meta, value.payload));
  CHECK(store->Stats().source_loads == 0);
  REQUIRE(store->Close().ok());
}

}  // namespace
}  // namespace opt4store

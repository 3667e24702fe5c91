// Store, in one process: exact bytes back for every size, where each value
// came from, the Belady equality (a store with a capacity in items, no disk
// tier and one reader misses exactly what an offline Belady misses, whatever
// the prefetch depth), drift, persistence and resume across reopen, disk ->
// RAM prefetch, a full disk, a /dev/shm that is too small, a corrupt segment
// record, argument checks and the Stats() identities.
// Longer than 600 lines because: the one-process Store cases share the
// helpers above; the batch cases are already in store_batch_test.cc, and a
// test binary links the whole store (about 15 s each on the 2-core CI machine).
#include "opt4store/store.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "disk_test_util.h"
#include "tests/reference/reference_belady.h"
#include "store_open_util.h"
#include "store_test_util.h"
#include "test_util.h"
#include "engine/base/fault_injection_env.h"

namespace opt4store {
namespace {

using opt4store_test::BruteForceBeladyHits;
using opt4store_test::FileExists;
using opt4store_test::FlipByte;
using opt4store_test::IsSample;
using opt4store_test::LogCollector;
using opt4store_test::MentionsAny;
using opt4store_test::NamesNumber;
using opt4store_test::OpenStore;
using opt4store_test::PlanIds;
using opt4store_test::ReadRange;
using opt4store_test::ReadSegmentRecords;
using opt4store_test::ReadTally;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::SegmentFiles;
using opt4store_test::ShufflePlan;
using opt4store_test::SizesInText;
using opt4store_test::ValueShape;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

StoreOptions BaseOptions(const ScratchStore& scratch) {
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  return o;
}

void CheckStatsAddUp(const StoreStats& s) {
  INFO("accesses " << s.accesses << ", hits_ram " << s.hits_ram << ", hits_disk " << s.hits_disk
                   << ", source_loads " << s.source_loads);
  CHECK(s.accesses == s.hits_ram + s.hits_disk + s.source_loads);
}

// Waits (up to `seconds`) until pred(Stats()) holds; returns the last Stats().
template <typename Pred>
StoreStats WaitForStats(Store* store, double seconds, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  StoreStats s = store->Stats();
  while (!pred(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = store->Stats();
  }
  return s;
}

bool DirIsEmptyOrMissing(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return true;
  return std::filesystem::is_empty(path, ec);
}

// ------------------------------------------------------------ exact bytes

struct Sizes {
  uint64_t meta;
  uint64_t payload;
};

// Values of odd sizes: empty, one byte, around a page, 64 KiB, 1 MiB, the
// largest meta allowed.
const std::vector<Sizes>& OddSizes() {
  static const std::vector<Sizes> sizes = {{0, 0},        {0, 1},
                                           {1, 0},        {5, 7},
                                           {100, 4095},   {16, 4096},
                                           {16, 4097},    {64, 65536},
                                           {3, 1 * kMiB}, {kMaxMetaBytes, 100},
                                           {200, 12345},  {kMaxMetaBytes, 0}};
  return sizes;
}

std::string OddMeta(ItemId id, uint64_t n) { return opt4store_test::NoiseBytes(n, 1000 + id); }
std::string OddPayload(ItemId id, uint64_t n) { return opt4store_test::NoiseBytes(n, 2000 + id); }

// Reads every OddSizes() item and checks its bytes and where it came from.
void ReadAllOdd(Store* store, GetSource expected) {
  const auto& sizes = OddSizes();
  for (ItemId id = 0; id < sizes.size(); ++id) {
    INFO("id " << id << ": meta " << sizes[id].meta << " B, payload " << sizes[id].payload
               << " B");
    StringSink sink;
    GetSource source = GetSource::kMiss;
    const Status s = store->Get(kNoPosition, id, &sink, &source);
    INFO(s.ToString());
    REQUIRE(s.ok());
    CHECK(source == expected);
    CHECK(sink.meta == OddMeta(id, sizes[id].meta));
    CHECK(sink.payload == OddPayload(id, sizes[id].payload));
  }
}

TEST_CASE(
    "Store: Put then Get returns exactly the bytes from RAM and then from disk after a reopen",
    "[store]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.dataset_size = 64;
  o.ram = 8 * kMiB;
  o.disk = 32 * kMiB;
  const auto& sizes = OddSizes();
  {
    auto store = OpenStore(o, scratch.path());
    CHECK(store->IsOwner());
    CHECK(store->dataset_size() == 64);
    for (ItemId id = 0; id < sizes.size(); ++id) {
      INFO("id " << id << ": meta " << sizes[id].meta << " B, payload " << sizes[id].payload
                 << " B");
      REQUIRE(
          store
              ->Put(kNoPosition, id, OddMeta(id, sizes[id].meta), OddPayload(id, sizes[id].payload))
              .ok());
    }
    ReadAllOdd(store.get(), GetSource::kRam);
    // Never Put: a miss.
    StringSink sink;
    GetSource source = GetSource::kRam;
    CHECK(store->Get(kNoPosition, 40, &sink, &source).IsNotFound());
    CHECK(source == GetSource::kMiss);
    // Without a source pointer too.
    CHECK(store->Get(kNoPosition, 41, &sink).IsNotFound());
    const StoreStats st = store->Stats();
    CheckStatsAddUp(st);
    CHECK(st.accesses == sizes.size() + 2);
    CHECK(st.hits_ram == sizes.size());
    CHECK(st.source_loads == 2);
    CHECK(st.puts == sizes.size());
    REQUIRE(store->Close().ok());
  }
  // Reopen: the RAM tier starts empty and there is no plan (no prefetch), so
  // the first read of each item is an on-demand disk read.
  {
    auto store = OpenStore(o, scratch.path());
    ReadAllOdd(store.get(), GetSource::kDisk);
    StringSink sink;
    GetSource source = GetSource::kRam;
    CHECK(store->Get(kNoPosition, 40, &sink, &source).IsNotFound());
    CHECK(source == GetSource::kMiss);
    const StoreStats st = store->Stats();
    CheckStatsAddUp(st);
    CHECK(st.hits_disk == sizes.size());
    CHECK(st.disk_items == sizes.size());
    REQUIRE(store->Close().ok());
  }
}

TEST_CASE("Store: GetBatch answers each read like Get", "[store]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.dataset_size = 32;
  o.ram = 4 * kMiB;
  const ValueShape shape{100, 20000};
  auto store = OpenStore(o, scratch.path());
  for (ItemId id = 0; id < 32; id += 2) {
    REQUIRE(store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok());
  }
  // Even ids are there, odd ids are not, 32 is out of range.
  std::vector<ItemId> ids = {0, 1, 2, 3, 30, 31, 32, 4, 4};
  std::vector<uint64_t> positions(ids.size(), kNoPosition);
  std::vector<StringSink> sinks(ids.size());
  std::vector<ReadSink*> sink_ptrs;
  for (auto& s : sinks) sink_ptrs.push_back(&s);
  std::vector<Status> statuses(ids.size());
  std::vector<GetSource> sources(ids.size(), GetSource::kDisk);
  store->GetBatch(positions.data(), ids.data(), ids.size(), sink_ptrs.data(), statuses.data(),
                  sources.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    INFO("read " << i << " of id " << ids[i] << ": " << statuses[i].ToString());
    if (ids[i] >= 32) {
      CHECK(statuses[i].IsOutOfRange());
    } else if (ids[i] % 2 == 1) {
      CHECK(statuses[i].IsNotFound());
      CHECK(sources[i] == GetSource::kMiss);
    } else {
      REQUIRE(statuses[i].ok());
      CHECK(sources[i] == GetSource::kRam);
      CHECK(IsSample(ids[i], shape, sinks[i].meta, sinks[i].payload));
    }
  }
  // Without sources.
  std::vector<Status> again(2);
  std::vector<StringSink> two(2);
  ReadSink* two_ptrs[2] = {&two[0], &two[1]};
  store->GetBatch(positions.data(), ids.data(), 2, two_ptrs, again.data());
  CHECK(again[0].ok());
  CHECK(IsSample(0, shape, two[0].meta, two[0].payload));
  CHECK(again[1].IsNotFound());
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: a value is immutable per id: a second Put does not replace it", "[store]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.dataset_size = 8;
  o.ram = 1 * kMiB;
  o.disk = 8 * kMiB;
  auto store = OpenStore(o, scratch.path());
  REQUIRE(store->Put(kNoPosition, 3, "first", "payload one").ok());
  REQUIRE(store->Put(kNoPosition, 3, "second", "payload two, longer").ok());
  StringSink sink;
  REQUIRE(store->Get(kNoPosition, 3, &sink).ok());
  CHECK(sink.meta == "first");
  CHECK(sink.payload == "payload one");
  REQUIRE(store->Close().ok());
  store = OpenStore(o, scratch.path());
  StringSink after;
  REQUIRE(store->Get(kNoPosition, 3, &after).ok());
  CHECK(after.meta == "first");
  CHECK(after.payload == "payload one");
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: out-of-range ids and oversized meta are refused", "[store]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.dataset_size = 10;
  o.ram = 2 * kMiB;
  auto store = OpenStore(o, scratch.path());
  StringSink sink;
  GetSource source;
  CHECK(store->Get(kNoPosition, 10, &sink, &source).IsOutOfRange());
  CHECK(store->Get(kNoPosition, 0xFFFFFFFFu, &sink).IsOutOfRange());
  CHECK(store->Put(kNoPosition, 10, "m", "p").IsOutOfRange());
  CHECK(store->Put(3, 12, "m", "p").IsOutOfRange());
  const std::string big_meta(kMaxMetaBytes + 1, 'm');
  const Status s = store->Put(kNoPosition, 4, big_meta, "p");
  INFO(s.ToString());
  CHECK(s.IsInvalidArgument());
  // Nothing of the refused Put was kept.
  CHECK(store->Get(kNoPosition, 4, &sink).IsNotFound());
  // The limit itself is fine.
  const std::string max_meta(kMaxMetaBytes, 'M');
  REQUIRE(store->Put(kNoPosition, 4, max_meta, "p").ok());
  REQUIRE(store->Get(kNoPosition, 4, &sink).ok());
  CHECK(sink.meta == max_meta);
  CHECK(sink.payload == "p");
  // A store without a plan needs a dataset size.
  ScratchStore other;
  StoreOptions no_size = BaseOptions(other);
  no_size.ram = 1 * kMiB;
  std::unique_ptr<Store> none;
  CHECK(Store::Open(no_size, other.path(), &none).IsInvalidArgument());
  CHECK(none == nullptr);
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: settings no store runs with are refused before anything is made", "[store]") {
  for (int which = 0; which < 9; ++which) {
    ScratchStore scratch;
    StoreOptions o = BaseOptions(scratch);
    o.dataset_size = 10;
    const char* named[] = {"ram=0",
                           "ram_items=0",
                           "disk=1024 bytes",
                           "not both",
                           "fetch_timeout_ms=-1",
                           "fetch_timeout_ms=9223372036854775807",
                           "shm_prefix \"\"",
                           "shm_prefix \"a/b\"",
                           "1 to 200 characters"};
    if (which == 0) o.ram = 0;
    if (which == 1) o.ram_items = 0;
    if (which == 2) o.disk = 1024;
    if (which == 3) o.ram = kMiB, o.ram_items = 4;
    // -1 or the largest int64 for "no limit" overflowed to a timeout of
    // nothing: every worker's Put under sync=every failed at once.
    if (which == 4) o.fetch_timeout_ms = -1;
    if (which == 5) o.fetch_timeout_ms = INT64_MAX;
    // These were refused by the RAM tier, with advice to lower ram=.
    if (which == 6) o.shm_prefix = "";
    if (which == 7) o.shm_prefix = "a/b";
    if (which == 8) o.shm_prefix = std::string(201, 'p');
    std::unique_ptr<Store> store;
    const Status s = Store::Open(o, scratch.path(), &store);
    INFO(s.ToString());
    CHECK(s.IsInvalidArgument());
    CHECK(s.message().find(named[which]) != std::string::npos);
    CHECK(CheckGivenOptions(o).IsInvalidArgument());
    CHECK_FALSE(std::filesystem::exists(scratch.path()));
  }
}

TEST_CASE("Store: Close releases everything and later calls fail with IOError", "[store]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.plan = ShufflePlan(50, 2, 1);
  o.ram_items = 20;
  auto store = OpenStore(o, scratch.path());
  CHECK_FALSE(scratch.ShmObjects().empty());
  REQUIRE(store->Put(kNoPosition, 1, "m", "p").ok());
  REQUIRE(store->Close().ok());
  INFO("left in /dev/shm: " << scratch.ShmObjects().size());
  CHECK(scratch.ShmObjects().empty());
  CHECK(store->Close().ok());
  StringSink sink;
  CHECK(store->Get(kNoPosition, 1, &sink).IsIOError());
  CHECK(store->Put(kNoPosition, 2, "m", "p").IsIOError());
  // The owner's admin calls too: SetPlan crashed (SIGSEGV in the RAM
  // tier), and Verify, Inspect and Compact answered OK.
  CHECK(store->SetPlan(ShufflePlan(50, 2, 2)).IsIOError());
  CHECK(store->AppendPlan({1, 2}).IsIOError());
  CHECK(store->Compact().IsIOError());
  StoreVerifyReport report;
  CHECK(store->Verify(&report).IsIOError());
  StoreInfo info;
  CHECK(store->Inspect(&info).IsIOError());
  // disk 0 (the default for a new store): nothing was written under path.
  CHECK(DirIsEmptyOrMissing(scratch.path()));
}

TEST_CASE("Store: Stats after Close are the counters at close, as an admin open shows them",
          "[store]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.plan = ShufflePlan(20, 1, 1);
  o.ram_items = 20;
  o.disk = 8 * kMiB;
  auto store = OpenStore(o, scratch.path());
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(*o.plan, &ids).ok());
  for (uint64_t p = 0; p < ids.size(); ++p) {
    StringSink sink;
    if (store->Get(p, ids[p], &sink).IsNotFound()) {
      REQUIRE(store->Put(p, ids[p], "m", "value " + std::to_string(ids[p])).ok());
    }
  }
  REQUIRE(store->Close().ok());
  // Was all zeros, last_run and disk_items included.
  const StoreStats closed = store->Stats();
  CHECK(closed.last_run);
  CHECK_FALSE(closed.live);
  CHECK(closed.accesses == 20);
  CHECK(closed.source_loads == 20);
  CHECK(closed.puts == 20);
  CHECK(closed.ram_items == 0);
  StoreOptions admin;
  admin.disk_only = true;
  admin.create_if_missing = false;
  std::unique_ptr<Store> reopened;
  REQUIRE(Store::Open(admin, scratch.path(), &reopened).ok());
  const StoreStats shown = reopened->Stats();
  CHECK(shown.last_run);
  CHECK(shown.accesses == closed.accesses);
  CHECK(shown.puts == closed.puts);
  CHECK(shown.disk_items == closed.disk_items);
  CHECK(closed.disk_items == 20);
}

TEST_CASE("Store: a refused open of a new store leaves the path as it was", "[store]") {
  ScratchStore scratch;
  // Without a dataset size: refused after the disk tier had made its LOCK,
  // RESERVE, index/ and segments/ under folders it created; the next open
  // then said Corruption ("an index but no manifest", run repair).
  const std::string nested = scratch.path() + "/a/b/store";
  StoreOptions no_size = BaseOptions(scratch);
  no_size.ram = kMiB;
  no_size.disk = 4 * kMiB;
  std::unique_ptr<Store> store;
  Status s = Store::Open(no_size, nested, &store);
  INFO(s.ToString());
  CHECK(s.IsInvalidArgument());
  CHECK_FALSE(std::filesystem::exists(scratch.path() + "/a"));
  // A folder that held a file of the user's keeps it, and only it.
  std::filesystem::create_directories(scratch.path() + "/mine");
  opt4store_test::WriteBytes(scratch.path() + "/mine/notes.txt", "kept");
  s = Store::Open(no_size, scratch.path() + "/mine", &store);
  CHECK(s.IsInvalidArgument());
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(scratch.path() + "/mine")) {
    left.push_back(e.path().filename().string());
  }
  CHECK(left == std::vector<std::string>{"notes.txt"});
  // Nothing there: an open that may not create says NotFound, disk tier
  // or not (without one it made a RAM-only store, as if asked to).
  StoreOptions existing = BaseOptions(scratch);
  existing.create_if_missing = false;
  CHECK(Store::Open(existing, nested, &store).IsNotFound());
  existing.ram_items = 4;
  existing.dataset_size = 10;
  CHECK(Store::Open(existing, nested, &store).IsNotFound());
  // The same open with a size makes the store.
  no_size.dataset_size = 10;
  REQUIRE(Store::Open(no_size, nested, &store).ok());
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: SetPlan refuses a plan of another dataset size, as Open does", "[store]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.plan = ShufflePlan(100, 1, 1);
  o.ram_items = 10;
  auto store = OpenStore(o, scratch.path());
  // 99 was taken (and saved), while Open refused the same plan.
  const Status s = store->SetPlan(ShufflePlan(99, 1, 1));
  INFO(s.ToString());
  CHECK(s.IsInvalidArgument());
  CHECK(s.message().find("dataset size 99 contradicts the store's 100") != std::string::npos);
  CHECK(store->SetPlan(ShufflePlan(100, 1, 2)).ok());
}

// ------------------------------------------------------------ Belady equality

// One reader reads the whole plan in order (Get; on NotFound, Put) on a store
// with a capacity of `capacity` items, uniform sizes and no disk tier: its
// misses must be exactly the reads minus an offline Belady's hits.
void CheckMissesEqualBelady(const PlanSpec& plan, uint64_t capacity,
                            std::optional<uint64_t> prefetch_depth) {
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(plan, &ids).ok());
  REQUIRE(!ids.empty());
  const uint64_t ref_hits = BruteForceBeladyHits(ids, capacity);
  // The brute force agrees with the bench's textbook heap version.
  REQUIRE(reference::Belady(ids, capacity, plan.dataset_size).hits == ref_hits);
  const uint64_t ref_misses = ids.size() - ref_hits;

  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.ram_items = capacity;
  o.disk = 0;
  o.plan = plan;
  o.prefetch_depth = prefetch_depth;
  const ValueShape shape{1024, 0};  // uniform sizes
  auto store = OpenStore(o, scratch.path());
  const ReadTally t = ReadRange(store.get(), ids, 0, ids.size(), shape);

  INFO(plan.Describe() << ", capacity " << capacity << " items, prefetch depth "
                       << (prefetch_depth ? std::to_string(*prefetch_depth) : "default")
                       << ": reader " << t.ToString() << "; Belady misses " << ref_misses << " of "
                       << ids.size());
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(t.disk == 0);
  CHECK(t.misses == ref_misses);
  const StoreStats st = WaitForStats(
      store.get(), 3.0, [&](const StoreStats& s) { return s.planned_positions >= ids.size(); });
  INFO("stats: accesses " << st.accesses << ", hits_ram " << st.hits_ram << ", source_loads " << st.source_loads
                          << ", planned " << st.planned_positions << ", policy_hits "
                          << st.policy_hits << ", drift " << st.drift << ", ram_items "
                          << st.ram_items << " of " << st.ram_capacity);
  CheckStatsAddUp(st);
  CHECK(st.accesses == ids.size());
  CHECK(st.source_loads == t.misses);
  CHECK(st.hits_ram == t.ram);
  CHECK(st.hits_disk == 0);
  CHECK(st.drift == 0);
  CHECK(st.expect_waits == 0);  // one reader: nobody else is loading anything
  CHECK(st.puts == t.misses);
  CHECK(st.ram_capacity_in_items);
  CHECK(st.ram_capacity == capacity);
  CHECK(st.ram_items <= capacity);
  CHECK(st.total_positions == ids.size());
  CHECK(st.planned_positions == ids.size());
  CHECK(st.policy_hits == ref_hits);
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: one reader's misses equal the reads minus Belady's hits (shuffle)",
          "[store][belady]") {
  const uint64_t capacity = GENERATE(50, 150, 400);
  const PlanSpec plan = ShufflePlan(500, 4, 42);
  for (std::optional<uint64_t> depth :
       {std::optional<uint64_t>(1), std::optional<uint64_t>(), std::optional<uint64_t>(4096)}) {
    CheckMissesEqualBelady(plan, capacity, depth);
  }
}

TEST_CASE("Store: one reader's misses equal the reads minus Belady's hits (replacement)",
          "[store][belady]") {
  const uint64_t capacity = GENERATE(50, 150, 400);
  PlanSpec plan;
  plan.kind = SamplerKind::kReplacement;
  plan.dataset_size = 500;
  plan.epochs = 4;
  plan.seed = 9;
  for (std::optional<uint64_t> depth :
       {std::optional<uint64_t>(1), std::optional<uint64_t>(), std::optional<uint64_t>(4096)}) {
    CheckMissesEqualBelady(plan, capacity, depth);
  }
}

TEST_CASE("Store: one reader's misses equal the reads minus Belady's hits (explicit plan)",
          "[store][belady]") {
  // A skewed order with a change of phase: a hot set of low ids, then a
  // sweep, then a hot set of high ids. 3000 reads over 500 ids.
  std::mt19937_64 rng(77);
  auto ids = std::make_shared<std::vector<ItemId>>();
  for (int i = 0; i < 1200; ++i) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    ids->push_back(static_cast<ItemId>(500 * u * u * u));
  }
  for (ItemId i = 0; i < 500; i += 1) ids->push_back(i);
  for (int i = 0; i < 1300; ++i) ids->push_back(static_cast<ItemId>(300 + rng() % 200));
  PlanSpec plan;
  plan.kind = SamplerKind::kExplicit;
  plan.dataset_size = 500;
  plan.ids = ids;
  const uint64_t capacity = GENERATE(20, 150);
  for (std::optional<uint64_t> depth :
       {std::optional<uint64_t>(1), std::optional<uint64_t>(4096)}) {
    CheckMissesEqualBelady(plan, capacity, depth);
  }
}

// With a byte budget that holds the whole dataset, the optimum misses each id
// once (its first read) and never again, whatever the sizes.
TEST_CASE("Store: a byte budget that holds every item: only first reads miss", "[store][bytes]") {
  const uint64_t n = 200;
  const ValueShape shape{4 * kKiB, 8 * kKiB};  // about 1.6 MB in all
  const PlanSpec plan = ShufflePlan(n, 3, 13);
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(plan, &ids).ok());
  uint64_t bytes = 0;
  for (ItemId id = 0; id < n; ++id)
    bytes += SampleMeta(id).size() + SamplePayload(id, shape).size();
  for (std::optional<uint64_t> depth : {std::optional<uint64_t>(1), std::optional<uint64_t>()}) {
    ScratchStore scratch;
    StoreOptions o = BaseOptions(scratch);
    o.plan = plan;
    o.ram = 4 * kMiB;
    o.prefetch_depth = depth;
    REQUIRE(bytes < *o.ram / 2);
    auto store = OpenStore(o, scratch.path());
    const ReadTally t = ReadRange(store.get(), ids, 0, ids.size(), shape);
    const StoreStats st = store->Stats();
    INFO("prefetch depth " << (depth ? std::to_string(*depth) : "default") << ", " << bytes
                           << " B of data in a " << *o.ram << " B budget: " << t.ToString()
                           << "; RAM holds " << st.ram_items << " items, " << st.ram_bytes_used
                           << " B; policy hits " << st.policy_hits);
    CHECK(t.wrong == 0);
    CHECK(t.errors == 0);
    CHECK(t.misses == n);
    CHECK(t.ram == ids.size() - n);
    CHECK(st.ram_items == n);
    REQUIRE(store->Close().ok());
  }
}

// ------------------------------------------------------------ drift

TEST_CASE("Store: a read the plan did not predict gets the right value and counts as drift",
          "[store][drift]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  const uint64_t n = 100;
  o.plan = ShufflePlan(n, 2, 5);
  o.ram_items = 60;
  LogCollector log;
  o.info_log = log.Sink();
  const ValueShape shape{500, 1000};
  std::vector<ItemId> plan;
  REQUIRE(PlanIds(*o.plan, &plan).ok());
  auto store = OpenStore(o, scratch.path());
  ReadTally t;
  uint64_t drifted = 0;
  for (uint64_t p = 0; p < plan.size(); ++p) {
    ItemId id = plan[p];
    if (p % 10 == 3) {
      id = static_cast<ItemId>((id + 1) % n);  // not what the plan says
      ++drifted;
    }
    opt4store_test::ReadOne(store.get(), p, id, shape, &t);
  }
  // Admin reads (no position) are not drift.
  for (ItemId id = 0; id < 10; ++id)
    opt4store_test::ReadOne(store.get(), kNoPosition, id, shape, &t);
  INFO(t.ToString());
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  const StoreStats st = store->Stats();
  CHECK(st.drift == drifted);
  CHECK(st.accesses == plan.size() + 10);
  // A drifted read at position p loads another id than the plan's: nobody
  // will Put the plan's id for p, so no later read may wait for it (the
  // owner is the only reader here: it would wait for itself).
  INFO("expect_waits " << st.expect_waits << ", expect_timeouts " << st.expect_timeouts);
  CHECK(st.expect_timeouts == 0);
  CheckStatsAddUp(st);
  // One warning for the kind, not one per drifted read.
  uint64_t drift_warnings = 0;
  for (const std::string& line : log.lines()) drift_warnings += MentionsAny(line, {"drift"});
  INFO("log: " << log.Joined());
  CHECK(drift_warnings == 1);
  REQUIRE(store->Close().ok());
}

// ------------------------------------------------------------ persistence

TEST_CASE(
    "Store: a reopen serves what was loaded and resumes at the frontier (and checks the "
    "dataset size and the lock)",
    "[store][persist]") {
  ScratchStore scratch;
  const uint64_t n = 200;
  const ValueShape shape{1024, 15 * kKiB};  // about 1.6 MB in all
  StoreOptions o = BaseOptions(scratch);
  o.plan = ShufflePlan(n, 3, 5);
  o.ram = 1 * kMiB;  // less than the data: the rest must come from disk
  o.disk = 32 * kMiB;
  std::vector<ItemId> plan;
  REQUIRE(PlanIds(*o.plan, &plan).ok());
  REQUIRE(plan.size() == 3 * n);

  SECTION("load, flush, close, reopen") {
    {
      auto store = OpenStore(o, scratch.path());
      CHECK(store->ResumePosition() == 0);
      const ReadTally first = ReadRange(store.get(), plan, 0, 150, shape);
      INFO(first.ToString());
      CHECK(first.misses == 150);  // epoch 0: every id is new
      CHECK(first.errors == 0);
      REQUIRE(store->Flush().ok());
      CHECK(store->ResumePosition() == 150);
      const ReadTally rest = ReadRange(store.get(), plan, 150, n, shape);
      CHECK(rest.errors == 0);
      CHECK(rest.misses == n - 150);
      const StoreStats st = store->Stats();
      CHECK(st.position == n);
      CheckStatsAddUp(st);
      REQUIRE(store->Close().ok());
      CHECK(FileExists(scratch.path()));
    }
    {
      // Same options: every value of epoch 1 is served, from disk or RAM.
      auto store = OpenStore(o, scratch.path());
      CHECK(store->ResumePosition() == n);
      StoreVerifyReport report;
      const Status v = store->Verify(&report);
      INFO(v.ToString());
      CHECK(v.ok());
      CHECK(report.records_checked == n);
      CHECK(report.bad.empty());
      const ReadTally t = ReadRange(store.get(), plan, n, 2 * n, shape);
      INFO(t.ToString());
      CHECK(t.misses == 0);
      CHECK(t.wrong == 0);
      CHECK(t.errors == 0);
      CHECK(t.ram + t.disk == n);
      const StoreStats st = store->Stats();
      CHECK(st.disk_items == n);
      CHECK(st.source_loads == 0);
      CHECK(st.position == 2 * n);
      CheckStatsAddUp(st);
      REQUIRE(store->Close().ok());
    }
    {
      // No plan given: the saved one is reused, and so is its cursor.
      StoreOptions again = BaseOptions(scratch);
      auto store = OpenStore(again, scratch.path());
      CHECK(store->ResumePosition() == 2 * n);
      CHECK(store->dataset_size() == n);
      const StoreStats st = store->Stats();
      CHECK(st.total_positions == 3 * n);
      StoreInfo info;
      REQUIRE(store->Inspect(&info).ok());
      CHECK(info.settings.dataset_size == n);
      CHECK(info.cursor_position == 2 * n);
      CHECK(info.plan == o.plan->Describe());
      REQUIRE(store->Close().ok());
    }
    {
      // Another plan: the saved cursor belongs to the old one.
      StoreOptions other = o;
      other.plan = ShufflePlan(n, 3, 6);
      auto store = OpenStore(other, scratch.path());
      CHECK(store->ResumePosition() == 0);
      REQUIRE(store->Close().ok());
    }
  }

  SECTION("a different dataset size is refused, naming both values") {
    {
      auto store = OpenStore(o, scratch.path());
      const ReadTally first = ReadRange(store.get(), plan, 0, 150, shape);
      CHECK(first.errors == 0);
      REQUIRE(store->Close().ok());
    }
    StoreOptions bigger = BaseOptions(scratch);
    bigger.dataset_size = 300;
    std::unique_ptr<Store> store;
    const Status s = Store::Open(bigger, scratch.path(), &store);
    INFO(s.ToString());
    CHECK(s.IsInvalidArgument());
    CHECK(store == nullptr);
    CHECK(NamesNumber(s.message(), 200, {scratch.path()}));
    CHECK(NamesNumber(s.message(), 300, {scratch.path()}));
    // The refused open changed nothing: the store still opens as it was,
    // its values and its saved cursor.
    auto ok = OpenStore(o, scratch.path());
    CHECK(ok->ResumePosition() == 150);
    StringSink sink;
    CHECK(ok->Get(kNoPosition, plan[0], &sink).ok());
    REQUIRE(ok->Close().ok());
  }

  SECTION("a second Open while the first is open is Busy") {
    auto first = OpenStore(o, scratch.path());
    REQUIRE(first->Put(kNoPosition, 7, SampleMeta(7), SamplePayload(7, shape)).ok());
    std::unique_ptr<Store> second;
    const Status s = Store::Open(o, scratch.path(), &second);
    INFO(s.ToString());
    CHECK(s.IsBusy());
    CHECK(second == nullptr);
    CHECK(NamesNumber(s.message(), static_cast<uint64_t>(getpid()), {scratch.path()}));
    // The first is unharmed.
    StringSink sink;
    REQUIRE(first->Get(kNoPosition, 7, &sink).ok());
    CHECK(IsSample(7, shape, sink.meta, sink.payload));
    REQUIRE(first->Close().ok());
    // Once closed, the path opens again.
    auto third = OpenStore(o, scratch.path());
    REQUIRE(third->Close().ok());
  }
}

// ------------------------------------------------------------ prefetch

TEST_CASE("Store: after a reopen, the planner prefetches disk items into RAM ahead of the reader",
          "[store][prefetch]") {
  ScratchStore scratch;
  const uint64_t n = 300;
  const ValueShape shape{4 * kKiB, 8 * kKiB};  // about 2.4 MB in all
  StoreOptions o = BaseOptions(scratch);
  o.plan = ShufflePlan(n, 3, 21);
  o.ram = 4 * kMiB;  // holds everything
  o.disk = 32 * kMiB;
  std::vector<ItemId> plan;
  REQUIRE(PlanIds(*o.plan, &plan).ok());
  {
    auto store = OpenStore(o, scratch.path());
    const ReadTally t = ReadRange(store.get(), plan, 0, n, shape);
    REQUIRE(t.misses == n);
    REQUIRE(t.errors == 0);
    REQUIRE(store->Close().ok());
  }
  auto store = OpenStore(o, scratch.path());
  REQUIRE(store->ResumePosition() == n);
  // Give the planner time (no timing is asserted). Staging (ram/8, some 65
  // of these items) caps what it brings in before the first read, so the
  // wait ends once the count has stood still for 300 ms.
  uint64_t last_count = 0;
  auto last_change = std::chrono::steady_clock::now();
  const StoreStats before = WaitForStats(store.get(), 10.0, [&](const StoreStats& s) {
    const auto now = std::chrono::steady_clock::now();
    if (s.prefetched != last_count) {
      last_count = s.prefetched;
      last_change = now;
    }
    return s.prefetched > 0 && now - last_change > std::chrono::milliseconds(300);
  });
  INFO("prefetched before the first read: " << before.prefetched);
  ReadTally t;
  for (uint64_t p = n; p < 2 * n; ++p) {
    opt4store_test::ReadOne(store.get(), p, plan[p], shape, &t);
    if (p % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO(t.ToString());
  CHECK(t.misses == 0);
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(t.ram >= n * 8 / 10);
  const StoreStats st = store->Stats();
  INFO("prefetched " << st.prefetched << " (" << st.prefetch_bytes << " B), hits_ram "
                     << st.hits_ram << ", hits_disk " << st.hits_disk);
  CHECK(st.prefetched > 0);
  CHECK(st.prefetch_bytes > 0);
  CHECK(st.hits_ram == t.ram);
  CheckStatsAddUp(st);
  REQUIRE(store->Close().ok());
}

// ------------------------------------------------------------ full disk

TEST_CASE("Store: a full disk does not stop the store (Puts succeed and RAM serves) and warns once",
          "[store][faults]") {
  ScratchStore scratch;
  FaultInjectionEnv env;
  const int rule = env.Inject(Fault::NoSpaceAfter(256 * kKiB).OnFile(".seg"));
  LogCollector log;
  const uint64_t n = 100;
  const ValueShape shape{8 * kKiB, 8 * kKiB};  // about 1.2 MB: the disk fills after ~20
  StoreOptions o = BaseOptions(scratch);
  o.plan = ShufflePlan(n, 2, 3);
  o.ram_items = n;  // everything fits
  o.disk = 32 * kMiB;
  o.env = &env;
  o.info_log = log.Sink();
  std::vector<ItemId> plan;
  REQUIRE(PlanIds(*o.plan, &plan).ok());
  auto store = OpenStore(o, scratch.path());
  const ReadTally load = ReadRange(store.get(), plan, 0, n, shape);
  INFO("epoch 0: " << load.ToString());
  CHECK(load.misses == n);
  CHECK(load.errors == 0);  // every Put returned OK
  const Status flushed = store->Flush();
  INFO("Flush: " << flushed.ToString());
  const ReadTally t = ReadRange(store.get(), plan, n, 2 * n, shape);
  INFO("epoch 1: " << t.ToString());
  CHECK(t.misses == 0);
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(t.ram == n);
  const StoreStats st = store->Stats();
  INFO("disk_put_errors " << st.disk_put_errors << ", disk_items " << st.disk_items
                          << "; log: " << log.Joined());
  CHECK(env.fired(rule) > 0);
  CHECK(st.disk_put_errors > 0);
  CHECK(st.disk_items < n);
  uint64_t space_warnings = 0;
  for (const std::string& line : log.lines()) {
    if (MentionsAny(line, {"space", "full"})) ++space_warnings;
  }
  CHECK(space_warnings == 1);
  CheckStatsAddUp(st);
  const Status closed = store->Close();
  INFO("Close: " << closed.ToString());
  store.reset();
}

// ------------------------------------------------------------ /dev/shm

TEST_CASE("Store: a /dev/shm too small for the RAM tier is NoSpace naming the sizes",
          "[store][faults]") {
  ScratchStore scratch;
  StoreOptions o = BaseOptions(scratch);
  o.dataset_size = 1000;
  o.ram = 32 * kMiB;
  o.staging = 8 * kMiB;
  const uint64_t free_bytes = 1 * kMiB;
  o.shm_free_space_for_testing = [free_bytes](const std::string&, uint64_t* free) {
    *free = free_bytes;
    return Status::OK();
  };
  std::unique_ptr<Store> store;
  const Status s = Store::Open(o, scratch.path(), &store);
  INFO(s.ToString());
  REQUIRE(s.IsNoSpace());
  CHECK(store == nullptr);
  const std::vector<double> sizes = SizesInText(s.message());
  // The size needed: at least ram= (staging is part of it).
  const bool names_need = std::any_of(sizes.begin(), sizes.end(), [](double v) {
    return v >= 0.99 * static_cast<double>(32 * kMiB);
  });
  // The space free, as the probe reported it.
  const bool names_free = std::any_of(sizes.begin(), sizes.end(), [&](double v) {
    return v >= 0.99 * static_cast<double>(free_bytes) &&
           v <= 1.01 * static_cast<double>(free_bytes);
  });
  CHECK(names_need);
  CHECK(names_free);
  // Nothing is left behind in /dev/shm.
  CHECK(scratch.ShmObjects().empty());
  // With room, the same options open.
  o.shm_free_space_for_testing = nullptr;
  auto ok = OpenStore(o, scratch.path());
  REQUIRE(ok->Close().ok());
}

// ------------------------------------------------------------ corruption

TEST_CASE("Store: a damaged disk record is a miss (never wrong bytes) and Verify reports it",
          "[store][corruption]") {
  ScratchStore scratch;
  const uint64_t n = 50;
  const ValueShape shape{2 * kKiB, 6 * kKiB};
  StoreOptions o = BaseOptions(scratch);
  o.dataset_size = n;
  o.ram = 4 * kMiB;
  o.disk = 16 * kMiB;
  o.compression = StoreOptions::Compression::kNone;
  {
    auto store = OpenStore(o, scratch.path());
    for (ItemId id = 0; id < n; ++id) {
      REQUIRE(store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok());
    }
    REQUIRE(store->Close().ok());
  }
  const ItemId damaged = 17;
  bool flipped = false;
  for (const std::string& seg : SegmentFiles(scratch.path())) {
    for (const auto& r : ReadSegmentRecords(seg)) {
      if (r.id != damaged) continue;
      const uint64_t at =
          r.offset + kRecordHeaderSize + r.header.meta_len + r.header.stored_len / 2;
      FlipByte(seg, at);
      flipped = true;
    }
  }
  REQUIRE(flipped);

  auto store = OpenStore(o, scratch.path());
  StoreVerifyReport report;
  const Status v = store->Verify(&report);
  INFO("Verify: " << v.ToString());
  CHECK(v.IsCorruption());
  CHECK(report.records_checked >= n);
  bool reported = false;
  for (const auto& bad : report.bad) {
    INFO("bad record: id " << bad.id << " at " << bad.where << ": " << bad.status.ToString());
    CHECK(bad.id == damaged);
    CHECK(bad.status.IsCorruption());
    reported |= bad.id == damaged;
  }
  CHECK(reported);

  StringSink sink;
  GetSource source = GetSource::kRam;
  const Status g = store->Get(kNoPosition, damaged, &sink, &source);
  INFO("Get of the damaged id: " << g.ToString());
  CHECK(g.IsNotFound());
  CHECK(source == GetSource::kMiss);
  // Every other id reads back exactly.
  for (ItemId id = 0; id < n; ++id) {
    if (id == damaged) continue;
    StringSink s;
    GetSource src = GetSource::kMiss;
    INFO("id " << id);
    REQUIRE(store->Get(kNoPosition, id, &s, &src).ok());
    CHECK(src != GetSource::kMiss);
    CHECK(IsSample(id, shape, s.meta, s.payload));
  }
  const StoreStats st = store->Stats();
  CHECK(st.source_loads >= 1);
  CHECK(st.disk_corrupt_records >= 1);
  CheckStatsAddUp(st);
  // The caller loads it again; now it is right.
  REQUIRE(
      store->Put(kNoPosition, damaged, SampleMeta(damaged), SamplePayload(damaged, shape)).ok());
  StringSink fixed;
  REQUIRE(store->Get(kNoPosition, damaged, &fixed).ok());
  CHECK(IsSample(damaged, shape, fixed.meta, fixed.payload));
  REQUIRE(store->Close().ok());
}

}  // namespace
}  // namespace opt4store

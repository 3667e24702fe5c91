// DiskTier: reads return exactly what was put; the store persists, admits
// one owner, catches corruption, survives injected faults, keeps its budget
// with Belady's eviction order, and compacts without losing live values.
// Longer than 600 lines because: the disk tier's cases share one fault-
// injecting fixture (disk_test_util.h) and a test binary links the whole
// store (about 15 s on the 2-core CI machine each); the tier's parts are
// split (disk_tier_impl.h), its tests follow one file per binary.
#include "tiers/disk_tier.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "disk_test_util.h"
#include "fork_child.h"
#include "test_util.h"
#include "tiers/disk_index.h"
#include "engine/base/fault_injection_env.h"

namespace opt4store {
namespace {

using opt4store_test::FlipByte;
using opt4store_test::ReadSegmentRecords;
using opt4store_test::SegmentFiles;
using opt4store_test::TempDir;
using opt4store_test::TestMeta;
using opt4store_test::TestPayload;

DiskTierOptions SmallOptions(Env* env = nullptr) {
  DiskTierOptions o;
  o.budget_bytes = 256 << 20;
  o.segment_bytes = 1 << 20;
  o.env = env;
  return o;
}

std::unique_ptr<DiskTier> OpenOrDie(const DiskTierOptions& o, const std::string& dir) {
  std::unique_ptr<DiskTier> tier;
  const Status s = DiskTier::Open(o, dir, &tier);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return tier;
}

void PutRange(DiskTier* tier, ItemId begin, ItemId end, uint32_t version = 0,
              size_t max_bytes = 40000) {
  for (ItemId id = begin; id < end; ++id) {
    const Status s = tier->Put(id, TestMeta(id, version), TestPayload(id, version, max_bytes));
    INFO("id " << id << ": " << s.ToString());
    REQUIRE(s.ok());
  }
}

// Get(id) is OK and returns exactly version `version` of id.
void ExpectValue(DiskTier* tier, ItemId id, uint32_t version = 0, size_t max_bytes = 40000) {
  std::string meta, payload;
  const Status s = tier->Get(id, &meta, &payload);
  INFO("id " << id << ": " << s.ToString());
  REQUIRE(s.ok());
  REQUIRE(meta == TestMeta(id, version));
  REQUIRE(payload == TestPayload(id, version, max_bytes));
}

}  // namespace

TEST_CASE("disk tier: Get and MultiGet return exactly the bytes put", "[disk]") {
  TempDir dir;
  auto tier = OpenOrDie(SmallOptions(), dir.path());
  constexpr ItemId kItems = 400;
  PutRange(tier.get(), 0, kItems);
  tier->Put(kItems, "", "").PermitUncheckedError();  // empty meta and payload
  for (ItemId id = 0; id < kItems; ++id) ExpectValue(tier.get(), id);
  std::string m = "x", p = "y";
  REQUIRE(tier->Get(kItems, &m, &p).ok());
  CHECK(m.empty());
  CHECK(p.empty());

  // A shuffled batch with misses mixed in; more ids than the queue depth.
  std::vector<ItemId> ids;
  for (ItemId id = 0; id < kItems + 50; ++id) ids.push_back(id + 1 == kItems + 50 ? 5 : id);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));
  std::vector<std::string> metas(ids.size()), payloads(ids.size());
  std::vector<Status> st(ids.size());
  tier->MultiGet(ids.data(), ids.size(), metas.data(), payloads.data(), st.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    INFO("id " << ids[i]);
    if (ids[i] <= kItems) {
      REQUIRE(st[i].ok());
      if (ids[i] < kItems) {
        CHECK(metas[i] == TestMeta(ids[i]));
        CHECK(payloads[i] == TestPayload(ids[i]));
      }
    } else {
      CHECK(st[i].IsNotFound());
    }
  }
  // Payloads only.
  tier->MultiGet(ids.data(), 10, nullptr, payloads.data(), st.data());
  for (size_t i = 0; i < 10; ++i) {
    if (ids[i] < kItems) CHECK(payloads[i] == TestPayload(ids[i]));
  }
  // Views: each id exactly once, the same bytes.
  std::vector<int> calls(ids.size(), 0);
  tier->MultiGet(ids.data(), ids.size(),
                 [&](size_t i, const Status& s, std::string_view meta, std::string_view payload) {
                   ++calls[i];
                   if (ids[i] > kItems) {
                     CHECK(s.IsNotFound());
                     CHECK(payload.empty());
                   } else if (ids[i] < kItems) {
                     REQUIRE(s.ok());
                     CHECK(meta == TestMeta(ids[i]));
                     CHECK(payload == TestPayload(ids[i]));
                   }
                 });
  CHECK(std::all_of(calls.begin(), calls.end(), [](int c) { return c == 1; }));

  CHECK(tier->Contains(3));
  CHECK_FALSE(tier->Contains(kItems + 1));
  const DiskTierStats st1 = tier->GetStats();
  CHECK(st1.items == kItems + 1);
  CHECK(st1.puts == kItems + 1);
  CHECK(st1.compressed_records > 0);  // the patterned payloads
  CHECK(st1.compressed_records < kItems / 2);  // and not the noisy ones
  CHECK(st1.file_bytes == st1.live_bytes);
  CHECK(st1.segments > 1);  // 1 MiB segments rolled over
  CHECK(st1.io_uring);
  CHECK(st1.direct_io);
  CHECK(st1.index_bytes_per_item <= 32);
}

TEST_CASE("disk tier: overwrite and delete", "[disk]") {
  TempDir dir;
  auto tier = OpenOrDie(SmallOptions(), dir.path());
  PutRange(tier.get(), 0, 20);
  PutRange(tier.get(), 0, 10, /*version=*/1);
  REQUIRE(tier->Delete(15).ok());
  CHECK(tier->Delete(15).IsNotFound());
  CHECK(tier->Delete(99).IsNotFound());
  for (ItemId id = 0; id < 10; ++id) ExpectValue(tier.get(), id, 1);
  for (ItemId id = 10; id < 20; ++id) {
    if (id != 15) ExpectValue(tier.get(), id, 0);
  }
  std::string p;
  CHECK(tier->Get(15, nullptr, &p).IsNotFound());
  CHECK(tier->GetStats().items == 19);
  CHECK(tier->GetStats().live_bytes < tier->GetStats().file_bytes);

  // The same after a restart.
  tier.reset();
  tier = OpenOrDie(SmallOptions(), dir.path());
  for (ItemId id = 0; id < 10; ++id) ExpectValue(tier.get(), id, 1);
  CHECK_FALSE(tier->Contains(15));
  CHECK(tier->GetStats().items == 19);
}

TEST_CASE("disk tier: a closed and reopened store has everything", "[disk][persistence]") {
  for (auto sync : {DiskTierOptions::SyncMode::kNone, DiskTierOptions::SyncMode::kOnFlush,
                    DiskTierOptions::SyncMode::kEveryPut}) {
    // kEveryPut pays two fdatasyncs per put (~15 ms here): fewer items.
    const ItemId kItems = sync == DiskTierOptions::SyncMode::kEveryPut ? 40 : 300;
    TempDir store;
    DiskTierOptions o = SmallOptions();
    o.sync = sync;
    {
      auto tier = OpenOrDie(o, store.path());
      PutRange(tier.get(), 0, kItems);
      REQUIRE(tier->PutMeta("plan", "shuffle seed=7").ok());
      REQUIRE(tier->PutMeta("cursor", "1234").ok());
      REQUIRE(tier->Close().ok());
      std::string p;
      CHECK(tier->Get(1, nullptr, &p).IsIOError());  // closed
    }
    {
      auto tier = OpenOrDie(o, store.path());
      const DiskTierStats st = tier->GetStats();
      CHECK(st.items == kItems);
      CHECK(st.recovered_records == 0);  // all indexed; nothing from tails
      CHECK(st.dropped_on_open == 0);
      CHECK(st.truncated_bytes == 0);
      for (ItemId id = 0; id < kItems; ++id) ExpectValue(tier.get(), id);
      std::string v;
      REQUIRE(tier->GetMeta("plan", &v).ok());
      CHECK(v == "shuffle seed=7");
      REQUIRE(tier->GetMeta("cursor", &v).ok());
      CHECK(v == "1234");
      CHECK(tier->GetMeta("nope", &v).IsNotFound());
      // It keeps going: new puts after the reopen, then another reopen.
      PutRange(tier.get(), kItems, kItems + 10);
    }
    auto tier = OpenOrDie(o, store.path());
    for (ItemId id = 0; id < kItems + 10; ++id) ExpectValue(tier.get(), id);
    VerifyReport report;
    CHECK(tier->Verify(&report).ok());
    CHECK(report.records_checked == kItems + 10);
  }
}

// The index is opened with avoid_flush_during_recovery (a full disk): an
// open keeps the WALs it replayed. Close writes the memtable out, so that
// the WALs go and the next open replays nothing.
TEST_CASE("disk tier: reopening many times leaves no WALs to replay", "[disk][persistence]") {
  TempDir store;
  const auto files = [&](const std::string& suffix) {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(store.path() + "/index")) {
      const std::string name = entry.path().filename().string();
      n += name.size() > suffix.size() && name.compare(name.size() - suffix.size(),
                                                       suffix.size(), suffix) == 0;
    }
    return n;
  };
  const ItemId kRounds = 30, kPerRound = 20;
  for (ItemId round = 0; round < kRounds; ++round) {
    auto tier = OpenOrDie(SmallOptions(), store.path());
    PutRange(tier.get(), round * kPerRound, (round + 1) * kPerRound);
    REQUIRE(tier->Close().ok());
    CHECK(files(".log") <= 2);  // the live WAL, empty, and perhaps one being deleted
  }
  CHECK(files(".sst") <= 8);  // L0 tables, compacted in the background
  auto tier = OpenOrDie(SmallOptions(), store.path());
  CHECK(tier->GetStats().items == kRounds * kPerRound);
  for (ItemId id = 0; id < kRounds * kPerRound; ++id) ExpectValue(tier.get(), id);
}

// RocksDB writes the options it ran with into index/OPTIONS-*; they show
// that no stats-dump timer runs and that the LOG keeps warnings only.
TEST_CASE("disk tier: the index runs no stats dump and logs warnings only", "[disk]") {
  TempDir store;
  {
    auto tier = OpenOrDie(SmallOptions(), store.path());
    PutRange(tier.get(), 0, 10);
    REQUIRE(tier->Close().ok());
  }
  std::string options_text;
  for (const auto& entry : std::filesystem::directory_iterator(store.path() + "/index")) {
    if (entry.path().filename().string().rfind("OPTIONS-", 0) == 0) {
      options_text = opt4store_test::ReadBytes(entry.path().string());
    }
  }
  REQUIRE(!options_text.empty());
  CHECK(options_text.find("stats_dump_period_sec=0\n") != std::string::npos);
  CHECK(options_text.find("stats_persist_period_sec=0\n") != std::string::npos);
  CHECK(options_text.find("info_log_level=WARN_LEVEL\n") != std::string::npos);
  // The LOG is IndexInfoLog's (disk_recovery.cc): nothing rotated by RocksDB.
  for (const auto& entry : std::filesystem::directory_iterator(store.path() + "/index")) {
    CHECK(entry.path().filename().string().rfind("LOG.old", 0) != 0);
  }
}

TEST_CASE("disk tier: a second opener gets Busy naming the LOCK file and the pid", "[disk]") {
  TempDir dir;
  // Another process, forked before this one opens the tier (fork_child.h),
  // opens it when told and reports the status.
  opt4store_test::WaitingChild child =
      opt4store_test::ForkWaitingChild([&](int fd, const std::string&) {
        std::unique_ptr<DiskTier> t;
        const Status cs = DiskTier::Open(SmallOptions(), dir.path(), &t);
        const std::string msg = cs.ToString();
        const ssize_t w = write(fd, msg.data(), msg.size());
        return cs.IsBusy() && w > 0 ? 0 : 1;
      });
  auto tier = OpenOrDie(SmallOptions(), dir.path());
  std::unique_ptr<DiskTier> second;
  Status s = DiskTier::Open(SmallOptions(), dir.path(), &second);
  REQUIRE(s.IsBusy());
  CHECK(s.message().find(dir.File("LOCK")) != std::string::npos);
  CHECK(opt4store_test::NamesNumber(s.message(), static_cast<uint64_t>(getpid()), {dir.path()}));
  CHECK(second == nullptr);

  // Another process: Busy as well, naming this process as the holder.
  REQUIRE(opt4store_test::Go(&child));
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(child.fd, buf, sizeof buf)) > 0;) msg.append(buf, n);
  close(child.fd);
  const int wstatus = opt4store_test::Reap(child.pid);
  INFO(msg);
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  CHECK(opt4store_test::NamesNumber(msg, static_cast<uint64_t>(getpid()), {dir.path()}));

  // Released on close.
  REQUIRE(tier->Close().ok());
  tier = OpenOrDie(SmallOptions(), dir.path());
}

TEST_CASE("disk tier: flipped bytes are caught by the CRC", "[disk][corruption]") {
  TempDir dir;
  DiskTierOptions o = SmallOptions();
  o.segment_bytes = 64 << 20;  // one segment
  {
    auto tier = OpenOrDie(o, dir.path());
    PutRange(tier.get(), 0, 60, 0, 20000);
  }
  const std::vector<std::string> segs = SegmentFiles(dir.path());
  REQUIRE(segs.size() == 1);
  const auto records = ReadSegmentRecords(segs[0]);
  REQUIRE(records.size() == 60);
  // Damage three records: the payload of one, the meta of another, the id
  // field of a third (caught by the header CRC).
  std::set<ItemId> damaged;
  for (size_t i : {7, 21, 44}) {
    const auto& r = records[i];
    uint64_t at = r.offset + kRecordHeaderSize;  // meta
    if (i == 21) at += r.header.meta_len + r.header.stored_len / 2;  // payload
    if (i == 44) at = r.offset + 24;                                 // id
    FlipByte(segs[0], at);
    damaged.insert(r.id);
  }

  auto tier = OpenOrDie(o, dir.path());
  VerifyReport report;
  const Status vs = tier->Verify(&report);
  CHECK(vs.IsCorruption());
  CHECK(report.records_checked == 60);
  std::set<ItemId> reported;
  for (const auto& bad : report.bad) {
    CHECK(bad.status.IsCorruption());
    reported.insert(bad.id);
  }
  CHECK(reported == damaged);
  CHECK(tier->GetStats().corrupt_records == 0);  // Verify changes nothing

  for (ItemId id = 0; id < 60; ++id) {
    std::string m, p;
    const Status s = tier->Get(id, &m, &p);
    if (damaged.count(id)) {
      INFO(s.ToString());
      CHECK(s.IsCorruption());
      CHECK_FALSE(tier->Contains(id));  // dropped
      CHECK(tier->Get(id, &m, &p).IsNotFound());
    } else {
      REQUIRE(s.ok());
      CHECK(p == TestPayload(id, 0, 20000));
    }
  }
  CHECK(tier->GetStats().corrupt_records == 3);
  CHECK(tier->Verify(&report).ok());

  // The drops persist; re-putting a damaged id works.
  tier.reset();
  tier = OpenOrDie(o, dir.path());
  for (ItemId id : damaged) CHECK_FALSE(tier->Contains(id));
  PutRange(tier.get(), 7, 8, 3, 20000);
  ExpectValue(tier.get(), 7, 3, 20000);
}

TEST_CASE("disk tier: MultiGet reports corruption per record", "[disk][corruption]") {
  TempDir dir;
  DiskTierOptions o = SmallOptions();
  {
    auto tier = OpenOrDie(o, dir.path());
    PutRange(tier.get(), 0, 40, 0, 8000);
  }
  const std::vector<std::string> segs = SegmentFiles(dir.path());
  const auto records = ReadSegmentRecords(segs[0]);
  const auto& r = records[3];
  FlipByte(segs[0], r.offset + r.header.record_size() - 1);  // the last payload byte
  auto tier = OpenOrDie(o, dir.path());
  std::vector<ItemId> ids(40);
  for (ItemId i = 0; i < 40; ++i) ids[i] = i;
  std::vector<std::string> p(40);
  std::vector<Status> st(40);
  tier->MultiGet(ids.data(), ids.size(), nullptr, p.data(), st.data());
  for (ItemId i = 0; i < 40; ++i) {
    if (i == r.id) {
      CHECK(st[i].IsCorruption());
    } else {
      REQUIRE(st[i].ok());
      CHECK(p[i] == TestPayload(i, 0, 8000));
    }
  }
}

TEST_CASE("disk tier: injected short reads are completed", "[disk][fault]") {
  for (bool ring : {true, false}) {
    TempDir dir;
    FaultInjectionEnv env;
    DiskTierOptions o = SmallOptions(&env);
    o.use_io_uring = ring;
    auto tier = OpenOrDie(o, dir.path());
    PutRange(tier.get(), 0, 100);
    // Every other batched read returns at most 3000 bytes (not aligned).
    const int rule = env.Inject(Fault::ShortRead(3000).OnFile(".seg"));
    std::vector<ItemId> ids(100);
    for (ItemId i = 0; i < 100; ++i) ids[i] = 99 - i;
    std::vector<std::string> m(100), p(100);
    std::vector<Status> st(100);
    tier->MultiGet(ids.data(), ids.size(), m.data(), p.data(), st.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      INFO("ring " << ring << " id " << ids[i] << " " << st[i].ToString());
      REQUIRE(st[i].ok());
      CHECK(m[i] == TestMeta(ids[i]));
      CHECK(p[i] == TestPayload(ids[i]));
    }
    CHECK(env.fired(rule) > 100);
    for (ItemId id = 0; id < 100; id += 7) ExpectValue(tier.get(), id);
    CHECK(tier->GetStats().corrupt_records == 0);
  }
}

TEST_CASE("disk tier: EIO on a read surfaces as IOError and harms nothing", "[disk][fault]") {
  for (bool ring : {true, false}) {
    TempDir dir;
    FaultInjectionEnv env;
    DiskTierOptions o = SmallOptions(&env);
    o.use_io_uring = ring;
    auto tier = OpenOrDie(o, dir.path());
    PutRange(tier.get(), 0, 50);
    env.Inject(Fault::ReadError(EIO).OnFile(".seg").Times(1));
    std::string m, p;
    const Status s = tier->Get(10, &m, &p);
    INFO(s.ToString());
    CHECK(s.IsIOError());
    CHECK(tier->Contains(10));  // an I/O error is not corruption: kept
    ExpectValue(tier.get(), 10);

    // In a batch: exactly the failed read reports it.
    env.Inject(Fault::ReadError(EIO).OnFile(".seg").Skip(5).Times(1));
    std::vector<ItemId> ids(50);
    for (ItemId i = 0; i < 50; ++i) ids[i] = i;
    std::vector<std::string> ps(50);
    std::vector<Status> st(50);
    tier->MultiGet(ids.data(), ids.size(), nullptr, ps.data(), st.data());
    int errors = 0;
    for (ItemId i = 0; i < 50; ++i) {
      if (st[i].ok()) {
        CHECK(ps[i] == TestPayload(i));
      } else {
        CHECK(st[i].IsIOError());
        ++errors;
      }
    }
    CHECK(errors == 1);
    CHECK(tier->GetStats().read_errors == 2);
    CHECK(tier->GetStats().items == 50);
  }
}

TEST_CASE("disk tier: ENOSPC mid-put returns NoSpace and keeps what was stored", "[disk][fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  DiskTierOptions o = SmallOptions(&env);
  o.compression = DiskTierOptions::Compression::kNone;
  auto tier = OpenOrDie(o, dir.path());
  PutRange(tier.get(), 0, 30, 0, 20000);
  const uint64_t before = tier->GetStats().file_bytes;
  const std::vector<std::string> segs = SegmentFiles(dir.path());
  uint64_t seg_size_before = 0;
  REQUIRE(env.GetFileSize(segs.back(), &seg_size_before).ok());

  // The disk fills up 100 bytes into the next record.
  env.Inject(Fault::NoSpaceAfter(100).OnFile(".seg"));
  const std::string big = opt4store_test::NoiseBytes(50000, 1);
  Status s = tier->Put(1000, "meta", big);
  INFO(s.ToString());
  REQUIRE(s.IsNoSpace());
  CHECK_FALSE(tier->Contains(1000));
  uint64_t seg_size_after = 0;
  REQUIRE(env.GetFileSize(segs.back(), &seg_size_after).ok());
  CHECK(seg_size_after == seg_size_before);  // cut back to the last good record
  CHECK(tier->GetStats().file_bytes == before);
  CHECK(tier->Put(1001, "m", "tiny").IsNoSpace());  // still full
  for (ItemId id = 0; id < 30; ++id) ExpectValue(tier.get(), id, 0, 20000);

  // Space comes back: writes work again, and a restart finds a clean store.
  env.Clear();
  REQUIRE(tier->Put(1000, "meta", big).ok());
  tier.reset();
  tier = OpenOrDie(o, dir.path());
  CHECK(tier->GetStats().truncated_bytes == 0);
  for (ItemId id = 0; id < 30; ++id) ExpectValue(tier.get(), id, 0, 20000);
  std::string p;
  REQUIRE(tier->Get(1000, nullptr, &p).ok());
  CHECK(p == big);
  VerifyReport report;
  CHECK(tier->Verify(&report).ok());
}

TEST_CASE("disk tier: a failed sync in kEveryPut mode fails the put only", "[disk][fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  DiskTierOptions o = SmallOptions(&env);
  o.sync = DiskTierOptions::SyncMode::kEveryPut;
  auto tier = OpenOrDie(o, dir.path());
  PutRange(tier.get(), 0, 5);
  env.Inject(Fault::SyncError(EIO).Times(1));
  CHECK(tier->Put(5, "m", "p").IsIOError());
  CHECK_FALSE(tier->Contains(5));
  PutRange(tier.get(), 5, 10);
  for (ItemId id = 0; id < 10; ++id) ExpectValue(tier.get(), id);
}

// The store opens its tier with a provisional budget, reads its manifest,
// then reconfigures the tier with the manifest's settings.
TEST_CASE("disk tier: Reconfigure takes the budget, compression and sync of a reopen",
          "[disk][budget]") {
  TempDir dir;
  FaultInjectionEnv env;
  DiskTierOptions o;
  o.budget_bytes = uint64_t{1} << 40;  // the store's provisional budget
  o.compression = DiskTierOptions::Compression::kNone;
  o.env = &env;
  auto tier = OpenOrDie(o, dir.path());
  env.Inject(Fault::SyncError(EIO).Times(1));
  REQUIRE(tier->Put(1000, "m", "p").ok());  // kOnFlush: no sync per put
  DiskTierOptions real = o;
  real.budget_bytes = 512 << 10;
  real.compression = DiskTierOptions::Compression::kAuto;
  real.sync = DiskTierOptions::SyncMode::kEveryPut;
  real.segment_bytes = 1;  // not taken: Reconfigure reads the four settings only
  CHECK(tier->Reconfigure(DiskTierOptions()).IsInvalidArgument());  // budget 0
  REQUIRE(tier->Reconfigure(real).ok());
  CHECK(tier->Put(1001, "m", "p").IsIOError());  // kEveryPut syncs, and meets the fault
  const DiskTierStats st = tier->GetStats();
  CHECK(st.budget_bytes == 512 << 10);
  CHECK(st.segment_bytes == 64 << 10);  // budget / 8, as an open with it
  // Compressible puts are compressed now.
  const std::string payload(10000, 'x');
  uint64_t evicted_total = 0;
  for (ItemId id = 0; id < 200; ++id) {
    std::vector<ItemId> evicted;
    REQUIRE(tier->Put(id, "", payload, &evicted).ok());
    evicted_total += evicted.size();
    REQUIRE(tier->GetStats().file_bytes <= real.budget_bytes);
  }
  CHECK(evicted_total == 0);  // 200 compressed records fit
  CHECK(tier->GetStats().compressed_records == 200);
  // Noise does not compress: 60 records of 10 KB cross the new budget.
  for (ItemId id = 200; id < 260; ++id) {
    std::vector<ItemId> evicted;
    REQUIRE(tier->Put(id, "", opt4store_test::NoiseBytes(10000, id), &evicted).ok());
    evicted_total += evicted.size();
    REQUIRE(tier->GetStats().file_bytes <= real.budget_bytes);
  }
  CHECK(evicted_total > 0);
  REQUIRE(tier->Close().ok());
  CHECK(tier->Reconfigure(real).IsIOError());  // closed
}

TEST_CASE("disk tier: over budget, never-read-again goes first, then the furthest", "[disk][budget]") {
  TempDir dir;
  DiskTierOptions o;
  o.budget_bytes = 512 << 10;  // segments of budget / 8 = 64 KiB
  o.compression = DiskTierOptions::Compression::kNone;
  o.max_dead_fraction = 0;  // reclaim every evicted byte at once: minimal evictions
  auto tier = OpenOrDie(o, dir.path());
  REQUIRE(tier->GetStats().segment_bytes == 64 << 10);
  // Records of exactly 10040 bytes: 45 fit beside the 64 KiB reserve
  // (45 * 10040 + 65536 <= 512 KiB < 46 * 10040 + 65536).
  const std::string payload(10000, 'x');
  constexpr ItemId kFit = 45;
  auto next_use = [](ItemId id) -> uint64_t { return 1000 + (id * 37) % kFit; };
  for (ItemId id = 0; id < kFit; ++id) {
    if (id == 5 || id == 17) {
      tier->SetNextUse(id, DiskIndex::kNeverRead);
    } else if (id != 30) {  // 30: never told, "unknown"
      tier->SetNextUse(id, next_use(id));
    }
    std::vector<ItemId> evicted;
    REQUIRE(tier->Put(id, "", payload, &evicted).ok());
    REQUIRE(evicted.empty());  // while space allows, items stay
  }
  ItemId furthest = 0;
  for (ItemId id = 0; id < kFit; ++id) {
    if (id != 5 && id != 17 && id != 30 && next_use(id) > next_use(furthest)) furthest = id;
  }
  // Four more, read soon: each needs one eviction.
  std::vector<ItemId> evicted;
  for (ItemId id = 100; id < 104; ++id) {
    tier->SetNextUse(id, id);  // set before the put: remembered
    REQUIRE(tier->Put(id, "", payload, &evicted).ok());
    const DiskTierStats st = tier->GetStats();
    CHECK(st.file_bytes <= o.budget_bytes);
  }
  REQUIRE(evicted.size() == 4);
  CHECK(std::set<ItemId>(evicted.begin(), evicted.begin() + 2) == std::set<ItemId>{5, 17});
  CHECK(evicted[2] == 30);
  CHECK(evicted[3] == furthest);
  for (ItemId id = 0; id < kFit; ++id) {
    const bool gone = std::count(evicted.begin(), evicted.end(), id) > 0;
    CHECK(tier->Contains(id) == !gone);
  }
  for (ItemId id = 100; id < 104; ++id) CHECK(tier->Contains(id));
  const DiskTierStats st = tier->GetStats();
  CHECK(st.evictions == 4);
  CHECK(st.compactions >= 1);  // the evicted bytes were reclaimed, not just marked
  CHECK(st.items == kFit);

  // Survivors moved by compaction read back intact, also after a restart.
  std::string p;
  for (ItemId id = 0; id < kFit; ++id) {
    if (tier->Contains(id)) {
      REQUIRE(tier->Get(id, nullptr, &p).ok());
      REQUIRE(p == payload);
    }
  }
  tier.reset();
  tier = OpenOrDie(o, dir.path());
  CHECK(tier->GetStats().items == kFit);
  for (ItemId id : evicted) CHECK_FALSE(tier->Contains(id));
}

TEST_CASE("disk tier: a long run over budget stays within it", "[disk][budget]") {
  TempDir dir;
  DiskTierOptions o;
  o.budget_bytes = 4 << 20;
  o.segment_bytes = 256 << 10;
  // Hundreds of small compactions: syncing each would make this test slow,
  // not better (the crash test covers kOnFlush compaction).
  o.sync = DiskTierOptions::SyncMode::kNone;
  auto tier = OpenOrDie(o, dir.path());
  std::mt19937 rng(3);
  for (ItemId id = 0; id < 1500; ++id) {
    tier->SetNextUse(id, rng() % 3 == 0 ? DiskIndex::kNeverRead : rng() % 100000);
    if (id > 10 && rng() % 4 == 0) tier->SetNextUse(rng() % id, rng() % 100000);
    REQUIRE(tier->Put(id, TestMeta(id), TestPayload(id, 0, 20000)).ok());
    REQUIRE(tier->GetStats().file_bytes <= o.budget_bytes);
  }
  const DiskTierStats st = tier->GetStats();
  CHECK(st.evictions > 0);
  CHECK(st.live_bytes <= o.budget_bytes);
  CHECK(st.live_bytes > o.budget_bytes / 2);  // room is used, not thrown away
  // Dead space is reclaimed in bulk (max_dead_fraction), not one evicted
  // record at a time: about 1.9 here.
  CHECK(st.write_amplification > 1.0);
  CHECK(st.write_amplification < 3.0);
  for (ItemId id = 0; id < 1500; ++id) {
    if (!tier->Contains(id)) continue;
    std::string m, p;
    REQUIRE(tier->Get(id, &m, &p).ok());
    REQUIRE(p == TestPayload(id, 0, 20000));
  }
  // A record that cannot fit at all.
  const uint64_t items = tier->GetStats().items;
  CHECK(tier->Put(9999, "", opt4store_test::NoiseBytes(4 << 20, 1)).IsNoSpace());
  CHECK(tier->GetStats().items == items);  // refused before evicting anything
}

TEST_CASE("disk tier: Compact frees dead segments of a tier reopened over a smaller budget",
          "[disk][compaction]") {
  TempDir dir;
  DiskTierOptions o = SmallOptions();
  o.budget_bytes = 8 << 20;
  o.segment_bytes = 256 << 10;
  o.compression = DiskTierOptions::Compression::kNone;
  constexpr ItemId kItems = 300, kKept = 10;
  {
    auto tier = OpenOrDie(o, dir.path());
    PutRange(tier.get(), 0, kItems, 0, 20000);
    for (ItemId id = kKept; id < kItems; ++id) REQUIRE(tier->Delete(id).ok());
    REQUIRE(tier->Close().ok());
  }
  o.budget_bytes = 2 << 20;
  auto tier = OpenOrDie(o, dir.path());
  const DiskTierStats before = tier->GetStats();
  REQUIRE(before.file_bytes > o.budget_bytes);  // over the new budget, mostly dead
  REQUIRE(tier->Compact().ok());  // before: nothing fit, so not even empty segments went
  const DiskTierStats after = tier->GetStats();
  CHECK(after.compactions > 0);
  CHECK(after.file_bytes <= o.budget_bytes);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(SegmentFiles(dir.path()).size() == after.segments);
  for (ItemId id = 0; id < kKept; ++id) ExpectValue(tier.get(), id, 0, 20000);
  VerifyReport report;
  CHECK(tier->Verify(&report).ok());
}

TEST_CASE("disk tier: Compact reclaims dead space and keeps every live value", "[disk][compaction]") {
  TempDir dir;
  DiskTierOptions o = SmallOptions();
  o.segment_bytes = 256 << 10;
  auto tier = OpenOrDie(o, dir.path());
  constexpr ItemId kItems = 300;
  PutRange(tier.get(), 0, kItems);
  const DiskTierStats fresh = tier->GetStats();
  // Write amplification of a plain fill is exactly 1: records count as
  // stored, so the patterned payloads' compression does not push it below.
  CHECK(fresh.compressed_records > 0);
  CHECK(fresh.physical_bytes_written < fresh.user_bytes_put);
  CHECK(fresh.write_amplification == Approx(1.0));

  // Kill 2 of every 3 items: deleted, or overwritten by a new version.
  for (ItemId id = 0; id < kItems; ++id) {
    if (id % 3 == 1) REQUIRE(tier->Delete(id).ok());
  }
  PutRange(tier.get(), 0, kItems, 1);  // version 1 of everything ...
  for (ItemId id = 0; id < kItems; ++id) {
    if (id % 3 == 1) REQUIRE(tier->Delete(id).ok());  // ... except the deleted
  }
  const DiskTierStats before = tier->GetStats();
  REQUIRE(tier->Compact().ok());
  const DiskTierStats after = tier->GetStats();
  CHECK(after.compactions > 0);
  CHECK(after.file_bytes < before.file_bytes * 6 / 10);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.physical_bytes_written == before.physical_bytes_written +
                                            after.compaction_bytes_moved);
  CHECK(after.write_amplification > before.write_amplification);
  CHECK(SegmentFiles(dir.path()).size() == after.segments);
  auto check_all = [&](DiskTier* t) {
    for (ItemId id = 0; id < kItems; ++id) {
      if (id % 3 == 1) {
        CHECK_FALSE(t->Contains(id));
      } else {
        ExpectValue(t, id, 1);
      }
    }
  };
  check_all(tier.get());
  tier.reset();
  tier = OpenOrDie(o, dir.path());
  check_all(tier.get());
  CHECK(tier->GetStats().file_bytes == after.file_bytes);
  VerifyReport report;
  CHECK(tier->Verify(&report).ok());
}

TEST_CASE("disk tier: the pread and buffered fallbacks give the same values", "[disk]") {
  TempDir dir;
  {
    auto tier = OpenOrDie(SmallOptions(), dir.path());
    PutRange(tier.get(), 0, 120);
  }
  for (int mode = 0; mode < 3; ++mode) {
    DiskTierOptions o = SmallOptions();
    o.use_io_uring = mode != 1;
    o.direct_io = mode != 2;
    auto tier = OpenOrDie(o, dir.path());
    const DiskTierStats st = tier->GetStats();
    CHECK(st.io_uring == o.use_io_uring);
    CHECK(st.direct_io == o.direct_io);
    std::vector<ItemId> ids(120);
    for (ItemId i = 0; i < 120; ++i) ids[i] = (i * 53) % 120;
    std::vector<std::string> m(120), p(120);
    std::vector<Status> s(120);
    tier->MultiGet(ids.data(), ids.size(), m.data(), p.data(), s.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      INFO("mode " << mode << " id " << ids[i]);
      REQUIRE(s[i].ok());
      CHECK(m[i] == TestMeta(ids[i]));
      CHECK(p[i] == TestPayload(ids[i]));
    }
  }
}

TEST_CASE("disk tier: recovery re-indexes lost entries and cuts torn tails", "[disk][recovery]") {
  SECTION("a lost index: Open refuses it, Repair brings every record back, newest wins") {
    TempDir dir;
    {
      auto tier = OpenOrDie(SmallOptions(), dir.path());
      PutRange(tier.get(), 0, 50);
      PutRange(tier.get(), 10, 20, 1);  // newer versions, later in the log
    }
    auto lose_and_repair = [&](uint64_t records, uint64_t older) {
      std::filesystem::remove_all(dir.File("index"));
      std::unique_ptr<DiskTier> refused;
      const Status s = DiskTier::Open(SmallOptions(), dir.path(), &refused);
      CHECK(s.IsCorruption());
      CHECK(s.message().find("opt4store repair") != std::string::npos);
      DiskRepairReport report;
      REQUIRE(DiskTier::Repair(SmallOptions(), dir.path(), &report).ok());
      CHECK(report.records == records);
      CHECK(report.older_versions == older);
    };
    // 60 records found in log order: the 10 newer versions replace.
    lose_and_repair(50, 10);
    auto tier = OpenOrDie(SmallOptions(), dir.path());
    CHECK(tier->GetStats().items == 50);
    for (ItemId id = 0; id < 50; ++id) ExpectValue(tier.get(), id, id >= 10 && id < 20 ? 1 : 0);
    // And the sequence continues above the recovered ones.
    PutRange(tier.get(), 10, 11, 2);
    tier.reset();
    lose_and_repair(50, 11);
    tier = OpenOrDie(SmallOptions(), dir.path());
    ExpectValue(tier.get(), 10, 2);
  }
  SECTION("index writes lost after a point: the tails past the watermarks come back") {
    TempDir dir, backup;
    {
      auto tier = OpenOrDie(SmallOptions(), dir.path());
      PutRange(tier.get(), 0, 30);
      REQUIRE(tier->Delete(13).ok());
    }
    std::filesystem::copy(dir.File("index"), backup.File("index"),
                          std::filesystem::copy_options::recursive);
    {
      auto tier = OpenOrDie(SmallOptions(), dir.path());
      PutRange(tier.get(), 30, 90);    // same segment, then new ones
      PutRange(tier.get(), 0, 10, 1);  // newer versions of indexed ids
    }
    // The index as it was before: as if those 70 index batches were lost.
    std::filesystem::remove_all(dir.File("index"));
    std::filesystem::copy(backup.File("index"), dir.File("index"),
                          std::filesystem::copy_options::recursive);
    auto tier = OpenOrDie(SmallOptions(), dir.path());
    const DiskTierStats st = tier->GetStats();
    CHECK(st.recovered_records == 70);
    CHECK(st.items == 89);
    for (ItemId id = 0; id < 90; ++id) {
      if (id == 13) {
        CHECK_FALSE(tier->Contains(13));  // deleted below the watermark: stays gone
      } else {
        ExpectValue(tier.get(), id, id < 10 ? 1 : 0);
      }
    }
  }
  SECTION("garbage after the last record is truncated") {
    TempDir dir;
    {
      auto tier = OpenOrDie(SmallOptions(), dir.path());
      PutRange(tier.get(), 0, 10);
    }
    const std::string seg = SegmentFiles(dir.path()).back();
    const uint64_t size = std::filesystem::file_size(seg);
    std::string bytes = opt4store_test::ReadBytes(seg);
    // Half a record: a valid-looking header, then nothing.
    const auto records = ReadSegmentRecords(seg);
    bytes += bytes.substr(records[0].offset, kRecordHeaderSize + 7);
    opt4store_test::WriteBytes(seg, bytes);
    auto tier = OpenOrDie(SmallOptions(), dir.path());
    CHECK(tier->GetStats().truncated_bytes == kRecordHeaderSize + 7);
    CHECK(std::filesystem::file_size(seg) == size);
    for (ItemId id = 0; id < 10; ++id) ExpectValue(tier.get(), id);
  }
  SECTION("an entry past the end of its segment is dropped") {
    TempDir dir;
    {
      auto tier = OpenOrDie(SmallOptions(), dir.path());
      PutRange(tier.get(), 0, 10, 0, 5000);
    }
    const std::string seg = SegmentFiles(dir.path()).back();
    const auto records = ReadSegmentRecords(seg);
    std::filesystem::resize_file(seg, records.back().offset + 100);  // lost the last one
    auto tier = OpenOrDie(SmallOptions(), dir.path());
    CHECK(tier->GetStats().dropped_on_open == 1);
    CHECK_FALSE(tier->Contains(records.back().id));
    for (ItemId id = 0; id < 10; ++id) {
      if (id != records.back().id) ExpectValue(tier.get(), id, 0, 5000);
    }
    // New writes go on cleanly after the damaged end.
    PutRange(tier.get(), 20, 25, 0, 5000);
    tier.reset();
    tier = OpenOrDie(SmallOptions(), dir.path());
    for (ItemId id = 20; id < 25; ++id) ExpectValue(tier.get(), id, 0, 5000);
    // The dropped record is not forgotten: Verify lists it as lost.
    VerifyReport report;
    CHECK(tier->Verify(&report).IsCorruption());
    CHECK(report.lost == 1);
    REQUIRE(report.bad.size() == 1);
    CHECK(report.bad[0].id == records.back().id);
  }
}

TEST_CASE("disk tier: one writer and two readers at once", "[disk][threads]") {
  TempDir dir;
  DiskTierOptions o;
  o.budget_bytes = 8 << 20;
  o.segment_bytes = 512 << 10;
  o.sync = DiskTierOptions::SyncMode::kNone;  // speed; syncing is tested elsewhere
  auto tier = OpenOrDie(o, dir.path());
  std::atomic<ItemId> written{0};
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::atomic<uint64_t> hits{0};
  auto reader = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<ItemId> ids(16);
    std::vector<std::string> m(16), p(16);
    std::vector<Status> s(16);
    while (!done) {
      const ItemId limit = written.load() + 1;
      for (auto& id : ids) id = rng() % limit;
      tier->MultiGet(ids.data(), ids.size(), m.data(), p.data(), s.data());
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!s[i].ok()) continue;  // evicted or not written yet: a miss
        ++hits;
        // The newest version is id / 7 % 2 at most; either is fine.
        if (m[i] != TestMeta(ids[i], 0) && m[i] != TestMeta(ids[i], 1)) ++wrong;
        const uint32_t v = m[i] == TestMeta(ids[i], 1) ? 1 : 0;
        if (p[i] != TestPayload(ids[i], v, 20000)) ++wrong;
      }
    }
  };
  std::thread r1(reader, 1), r2(reader, 2);
  for (ItemId id = 0; id < 1200; ++id) {
    tier->SetNextUse(id, (id * 7919) % 5000);
    REQUIRE(tier->Put(id, TestMeta(id), TestPayload(id, 0, 20000)).ok());
    if (id % 7 == 0 && id > 0) {
      const ItemId again = id / 2;
      REQUIRE(tier->Put(again, TestMeta(again, 1), TestPayload(again, 1, 20000)).ok());
    }
    if (id % 200 == 0) REQUIRE(tier->Compact().ok());
    written = id;
  }
  done = true;
  r1.join();
  r2.join();
  CHECK(wrong == 0);
  CHECK(hits > 0);
  CHECK(tier->GetStats().evictions > 0);
}

TEST_CASE("disk tier: the index costs 24 bytes per item when sized for the dataset", "[disk]") {
  TempDir dir;
  DiskTierOptions o = SmallOptions();
  o.expected_ids = 2000;
  auto tier = OpenOrDie(o, dir.path());
  for (ItemId id = 0; id < 2000; ++id) REQUIRE(tier->Put(id, "", "x").ok());
  CHECK(tier->GetStats().index_bytes_per_item == 24.0);
}

TEST_CASE("disk tier: bad arguments", "[disk]") {
  TempDir dir;
  std::unique_ptr<DiskTier> tier;
  DiskTierOptions o;
  CHECK(DiskTier::Open(o, dir.path(), &tier).IsInvalidArgument());  // no budget
  o.budget_bytes = 1 << 20;
  o.queue_depth = 0;
  CHECK(DiskTier::Open(o, dir.path(), &tier).IsInvalidArgument());
  o.queue_depth = 8;
  tier = OpenOrDie(o, dir.path());
  CHECK(tier->Put(1, std::string(kMaxMetaBytes + 1, 'm'), "p").IsInvalidArgument());
  CHECK(tier->Put(kMaxItemId + 1, "m", "p").IsInvalidArgument());
  tier->SetNextUse(UINT32_MAX, 5);  // ignored, no 80 GB index
  CHECK(tier->GetStats().index_bytes < 1024);
  REQUIRE(tier->Put(1, std::string(kMaxMetaBytes, 'm'), "p").ok());
  std::string m;
  REQUIRE(tier->Get(1, &m, nullptr).ok());
  CHECK(m.size() == kMaxMetaBytes);
}

}  // namespace opt4store

// A damaged index and lost segments, done for real: index/CURRENT or the
// whole index deleted, a segment file deleted or cut short, bytes inside a
// segment overwritten. What must hold:
//   - an open never puts a new, empty index over records: it fails with
//     Corruption naming `opt4store repair`, and changes nothing on disk;
//   - Repair (and `opt4store repair`) rebuilds the index from the
//     segments: every record that a segment still holds reads back, the
//     newest version of each id;
//   - records an open drops (their segment deleted or cut short) are
//     listed by Verify (and `opt4store verify`, non-zero exit) until they
//     are stored again or repaired.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <rocksdb/db.h>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "fork_child.h"
#include "opt4store/store.h"
#include "test_util.h"
#include "tiers/disk_format.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::FlipByte;
using opt4store_test::ReadBytes;
using opt4store_test::ReadSegmentRecords;
using opt4store_test::SegmentFiles;
using opt4store_test::TempDir;
using opt4store_test::TestMeta;
using opt4store_test::TestPayload;

constexpr ItemId kItems = 60;

// Small segments, so that 60 items of up to 8 KB fill several.
DiskTierOptions RepairOptions() {
  DiskTierOptions o;
  o.budget_bytes = 8 << 20;
  o.segment_bytes = 64 << 10;
  o.direct_io = false;
  return o;
}

std::string Payload(ItemId id, uint32_t version = 0) { return TestPayload(id, version, 8000); }

// A store in dir with ids [0, kItems), id 3 stored twice (version 1 wins),
// and one metadata key.
void Fill(const std::string& dir) {
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(RepairOptions(), dir, &tier).ok());
  for (ItemId id = 0; id < kItems; ++id) REQUIRE(tier->Put(id, TestMeta(id), Payload(id)).ok());
  REQUIRE(tier->Put(3, TestMeta(3, 1), Payload(3, 1)).ok());
  REQUIRE(tier->PutMeta("manifest", "kept").ok());
  REQUIRE(tier->Close().ok());
  REQUIRE(SegmentFiles(dir).size() >= 3);
}

uint32_t VersionOf(ItemId id) { return id == 3 ? 1 : 0; }

// Every file under dir but LOCK (which an open rewrites with its pid),
// with its bytes.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == "LOCK") continue;
    files[e.path().lexically_relative(dir).string()] = ReadBytes(e.path().string());
  }
  return files;
}

// Opens dir and checks that every id not in `missing` reads back right.
void CheckAllRead(const std::string& dir, const std::set<ItemId>& missing = {}) {
  std::unique_ptr<DiskTier> tier;
  const Status s = DiskTier::Open(RepairOptions(), dir, &tier);
  INFO(s.ToString());
  REQUIRE(s.ok());
  uint64_t right = 0;
  for (ItemId id = 0; id < kItems; ++id) {
    std::string meta, payload;
    const Status g = tier->Get(id, &meta, &payload);
    if (missing.count(id)) {
      CHECK(g.IsNotFound());
      continue;
    }
    INFO("id " << id << ": " << g.ToString());
    CHECK(g.ok());
    if (meta == TestMeta(id, VersionOf(id)) && payload == Payload(id, VersionOf(id))) ++right;
  }
  CHECK(right == kItems - missing.size());
  VerifyReport report;
  CHECK(tier->Verify(&report).ok());
  CHECK(report.bad.empty());
}

TEST_CASE("repair: a deleted index/CURRENT fails the open, names repair, and changes nothing",
          "[repair][fault]") {
  TempDir dir;
  Fill(dir.path());
  REQUIRE(std::filesystem::remove(dir.File("index/CURRENT")));
  const auto before = Snapshot(dir.path());

  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<DiskTier> tier;
    const Status s = DiskTier::Open(RepairOptions(), dir.path(), &tier);
    INFO("attempt " << attempt << ": " << s.ToString());
    REQUIRE(s.IsCorruption());
    CHECK(s.message().find("opt4store repair " + dir.path()) != std::string::npos);
    CHECK_FALSE(opt4store_test::FileExists(dir.File("index/CURRENT")));
    CHECK(Snapshot(dir.path()) == before);
  }
}

TEST_CASE("repair: Repair rebuilds the index of a deleted CURRENT from the segments",
          "[repair][fault]") {
  TempDir dir;
  Fill(dir.path());
  REQUIRE(std::filesystem::remove(dir.File("index/CURRENT")));
  DiskRepairReport report;
  const Status s = DiskTier::Repair(RepairOptions(), dir.path(), &report);
  INFO(s.ToString() << "; salvage: " << report.index_salvage);
  REQUIRE(s.ok());
  CHECK(report.records == kItems);
  CHECK(report.older_versions == 1);  // id 3's version 0
  CHECK(report.lost.empty());
  CHECK(report.metadata_keys == 1);
  CheckAllRead(dir.path());
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
  std::string value;
  CHECK(tier->GetMeta("manifest", &value).ok());
  CHECK(value == "kept");
}

// Found by bench/fault_campaign.py: the open said "IO error: No such file"
// and named no remedy.
TEST_CASE("repair: a deleted MANIFEST fails the open as damage, names repair, and Repair "
          "rebuilds the index",
          "[repair][fault]") {
  TempDir dir;
  Fill(dir.path());
  std::vector<std::string> manifests;
  for (const auto& e : std::filesystem::directory_iterator(dir.File("index"))) {
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0) manifests.push_back(e.path());
  }
  REQUIRE(!manifests.empty());
  for (const std::string& m : manifests) REQUIRE(std::filesystem::remove(m));
  auto without_logs = [](std::map<std::string, std::string> files) {
    // RocksDB's own info LOG is written by any open, failed or not.
    for (auto it = files.begin(); it != files.end();) {
      it = it->first.find("index/LOG") == 0 ? files.erase(it) : std::next(it);
    }
    return files;
  };
  const auto before = without_logs(Snapshot(dir.path()));
  {
    std::unique_ptr<DiskTier> tier;
    const Status s = DiskTier::Open(RepairOptions(), dir.path(), &tier);
    INFO(s.ToString());
    REQUIRE(s.IsCorruption());
    CHECK(s.message().find("opt4store repair " + dir.path()) != std::string::npos);
  }
  CHECK(without_logs(Snapshot(dir.path())) == before);
  DiskRepairReport report;
  const Status repaired = DiskTier::Repair(RepairOptions(), dir.path(), &report);
  INFO(repaired.ToString() << "; salvage: " << report.index_salvage);
  REQUIRE(repaired.ok());
  CHECK(report.records == kItems);
  CheckAllRead(dir.path());
}

TEST_CASE("repair: a deleted index directory is rebuilt; the newest version of each id wins",
          "[repair][fault]") {
  TempDir dir;
  Fill(dir.path());
  std::filesystem::remove_all(dir.File("index"));
  {
    std::unique_ptr<DiskTier> tier;
    const Status s = DiskTier::Open(RepairOptions(), dir.path(), &tier);
    INFO(s.ToString());
    REQUIRE(s.IsCorruption());
    CHECK(s.message().find("opt4store repair") != std::string::npos);
    CHECK_FALSE(opt4store_test::FileExists(dir.File("index")));
  }
  DiskRepairReport report;
  REQUIRE(DiskTier::Repair(RepairOptions(), dir.path(), &report).ok());
  CHECK(report.records == kItems);
  CHECK(report.metadata_keys == 0);  // gone with the index
  CheckAllRead(dir.path());
}

TEST_CASE("repair: an empty index over records (what a failed open used to leave) is refused",
          "[repair][fault]") {
  TempDir dir;
  Fill(dir.path());
  std::filesystem::remove_all(dir.File("index"));
  {
    rocksdb::Options ro;
    ro.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    REQUIRE(rocksdb::DB::Open(ro, dir.File("index"), &db).ok());
    delete db;
  }
  std::unique_ptr<DiskTier> tier;
  const Status s = DiskTier::Open(RepairOptions(), dir.path(), &tier);
  INFO(s.ToString());
  REQUIRE(s.IsCorruption());
  CHECK(s.message().find("opt4store repair") != std::string::npos);
  DiskRepairReport report;
  REQUIRE(DiskTier::Repair(RepairOptions(), dir.path(), &report).ok());
  CHECK(report.records == kItems);
  CheckAllRead(dir.path());
}

TEST_CASE("repair: damaged bytes inside a segment are skipped, the records after them come back",
          "[repair][fault]") {
  TempDir dir;
  Fill(dir.path());
  const std::string seg = SegmentFiles(dir.path())[1];
  const auto records = ReadSegmentRecords(seg);
  REQUIRE(records.size() >= 3);
  // The header of the second record: its length can no longer be trusted.
  const ItemId damaged = records[1].id;
  REQUIRE(damaged != 3);
  FlipByte(seg, records[1].offset + 30);
  REQUIRE(std::filesystem::remove(dir.File("index/CURRENT")));

  DiskRepairReport report;
  REQUIRE(DiskTier::Repair(RepairOptions(), dir.path(), &report).ok());
  CHECK(report.records == kItems - 1);
  CHECK(report.damaged_bytes >= records[1].header.record_size());
  CHECK(report.lost == std::vector<ItemId>{damaged});  // the salvaged index knew it
  CheckAllRead(dir.path(), {damaged});
}

// The ids whose only record is in segment file `path`.
std::set<ItemId> IdsIn(const std::string& path) {
  std::set<ItemId> ids;
  for (const auto& r : ReadSegmentRecords(path)) {
    if (r.id != 3) ids.insert(r.id);
  }
  return ids;
}

std::set<ItemId> BadIds(const VerifyReport& report) {
  std::set<ItemId> ids;
  for (const auto& b : report.bad) ids.insert(b.id);
  return ids;
}

TEST_CASE("verify: records of a deleted segment file are listed as lost, across reopens",
          "[verify][fault]") {
  TempDir dir;
  Fill(dir.path());
  const std::string seg = SegmentFiles(dir.path())[1];
  const std::set<ItemId> gone = IdsIn(seg);
  REQUIRE(gone.size() >= 2);
  REQUIRE(std::filesystem::remove(seg));

  for (int open = 0; open < 2; ++open) {
    std::unique_ptr<DiskTier> tier;
    REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
    VerifyReport report;
    const Status s = tier->Verify(&report);
    INFO("open " << open << ": " << s.ToString());
    CHECK(s.IsCorruption());
    CHECK(report.lost == gone.size());
    CHECK(BadIds(report) == gone);
    for (const auto& b : report.bad) {
      CHECK(b.status.message().find(std::filesystem::path(seg).filename().string()) !=
            std::string::npos);
    }
  }

  // Stored again: accounted for. Repair reports the rest as gone for good.
  const ItemId again = *gone.begin();
  {
    std::unique_ptr<DiskTier> tier;
    REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
    REQUIRE(tier->Put(again, TestMeta(again), Payload(again)).ok());
    VerifyReport report;
    CHECK(tier->Verify(&report).IsCorruption());
    CHECK(report.lost == gone.size() - 1);
    CHECK(BadIds(report).count(again) == 0);
  }
  DiskRepairReport repaired;
  REQUIRE(DiskTier::Repair(RepairOptions(), dir.path(), &repaired).ok());
  std::set<ItemId> still_gone = gone;
  still_gone.erase(again);
  CHECK(std::set<ItemId>(repaired.lost.begin(), repaired.lost.end()) == still_gone);
  CheckAllRead(dir.path(), still_gone);
}

TEST_CASE("verify: a cleared tier lists no record lost before the clear, across reopens",
          "[verify][fault]") {
  TempDir dir;
  Fill(dir.path());
  const std::string seg = SegmentFiles(dir.path())[1];
  REQUIRE(IdsIn(seg).size() >= 2);
  REQUIRE(std::filesystem::remove(seg));
  {
    std::unique_ptr<DiskTier> tier;
    REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
    VerifyReport report;
    REQUIRE(tier->Verify(&report).IsCorruption());
    REQUIRE(tier->Clear().ok());
    CHECK(tier->Verify(&report).ok());  // before: "N were lost at an open", on no records
    CHECK(report.lost == 0);
    REQUIRE(tier->Close().ok());
  }
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
  VerifyReport report;
  const Status s = tier->Verify(&report);
  INFO(s.ToString());
  CHECK(s.ok());
  CHECK(report.lost == 0);
}

TEST_CASE("verify: records past the end of a segment cut short are listed as lost",
          "[verify][fault]") {
  TempDir dir;
  Fill(dir.path());
  const std::string seg = SegmentFiles(dir.path())[0];
  const auto records = ReadSegmentRecords(seg);
  REQUIRE(records.size() >= 3);
  // Cut in the middle of the second record: it and every later one are gone.
  std::set<ItemId> gone;
  for (size_t i = 1; i < records.size(); ++i) {
    if (records[i].id != 3) gone.insert(records[i].id);
  }
  std::filesystem::resize_file(seg, records[1].offset + 20);

  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
  VerifyReport report;
  CHECK(tier->Verify(&report).IsCorruption());
  CHECK(report.lost == gone.size());
  CHECK(BadIds(report) == gone);
}

TEST_CASE("repair: records put after an open found the last segment cut short are kept",
          "[repair][fault]") {
  TempDir dir;
  Fill(dir.path());
  const std::string seg = SegmentFiles(dir.path()).back();  // the open appends here
  const auto records = ReadSegmentRecords(seg);
  const ItemId cut = records.back().id;
  REQUIRE(cut == 3);  // Fill's last Put: version 1 of id 3, whose version 0 is whole
  // Its last record cut in half: a whole header, stating a length past the end.
  const uint64_t cut_at = records.back().offset + records.back().header.record_size() / 2;
  std::filesystem::resize_file(seg, cut_at);
  // Put again, small: in the cut segment's room, past the cut record's stated end.
  const std::vector<ItemId> again = {10, 11, 12};
  auto Small = [](ItemId id) { return opt4store_test::NoiseBytes(400, id); };
  // Before the repair the cut version is lost; the repair finds version 0.
  auto check = [&](DiskTier* tier, bool repaired) {
    for (ItemId id = 0; id < kItems; ++id) {
      std::string meta, payload;
      const Status g = tier->Get(id, &meta, &payload);
      INFO("id " << id << ": " << g.ToString());
      CHECK(g.IsNotFound() == (id == cut && !repaired));
      if (!g.ok()) continue;
      const bool put_again = std::find(again.begin(), again.end(), id) != again.end();
      const uint32_t version = put_again ? 2 : id == cut ? 0 : VersionOf(id);
      CHECK(meta == TestMeta(id, version));
      CHECK(payload == (put_again ? Small(id) : Payload(id, version)));
    }
  };
  {
    std::unique_ptr<DiskTier> tier;
    REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
    for (ItemId id : again) REQUIRE(tier->Put(id, TestMeta(id, 2), Small(id)).ok());
    check(tier.get(), false);
    // Appended to the cut segment (before: after the partial record's bytes).
    REQUIRE(SegmentFiles(dir.path()).back() == seg);
    REQUIRE(std::filesystem::file_size(seg) > cut_at);
    REQUIRE(tier->Close().ok());
  }
  // The repair that verify asks for keeps the records put after the cut (before:
  // stepped over as the partial record's stated length, cut off at the next open).
  DiskRepairReport repaired;
  REQUIRE(DiskTier::Repair(RepairOptions(), dir.path(), &repaired).ok());
  CHECK(repaired.lost.empty());
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
  check(tier.get(), true);
  VerifyReport report;
  CHECK(tier->Verify(&report).ok());
}

TEST_CASE("verify: a record newer than the indexed version of its id is listed as orphaned",
          "[verify][fault]") {
  TempDir dir;
  Fill(dir.path());
  // Point id 3's index entry back at its version 0, as if the index update
  // of version 1 were lost below the watermark.
  std::string old_value;
  for (const std::string& seg : SegmentFiles(dir.path())) {
    for (const auto& r : ReadSegmentRecords(seg)) {
      uint32_t number = 0;
      REQUIRE(ParseSegmentName(std::filesystem::path(seg).filename().string(), &number));
      if (r.id == 3 && old_value.empty()) {
        old_value = EncodeIndexValue(MakeIndexValue(r.header, number, static_cast<uint32_t>(r.offset)));
      }
    }
  }
  REQUIRE_FALSE(old_value.empty());
  {
    rocksdb::DB* db = nullptr;
    REQUIRE(rocksdb::DB::Open(rocksdb::Options(), dir.File("index"), &db).ok());
    REQUIRE(db->Put(rocksdb::WriteOptions(), IndexKey(3), old_value).ok());
    delete db;
  }
  {
    std::unique_ptr<DiskTier> tier;
    REQUIRE(DiskTier::Open(RepairOptions(), dir.path(), &tier).ok());
    VerifyReport report;
    const Status s = tier->Verify(&report);
    INFO(s.ToString());
    CHECK(s.IsCorruption());
    CHECK(report.orphaned == 1);
    REQUIRE(report.bad.size() == 1);
    CHECK(report.bad[0].id == 3);
    CHECK(report.bad[0].status.message().find("orphaned") != std::string::npos);
  }
  // Repair indexes the newest version again.
  DiskRepairReport repaired;
  REQUIRE(DiskTier::Repair(RepairOptions(), dir.path(), &repaired).ok());
  CheckAllRead(dir.path());
}

// ------------------------------------------------------------------ the CLI

struct CliResult {
  int status = -1;
  std::string out;
  std::string err;
};

CliResult Cli(const TempDir& dir, const std::vector<std::string>& args) {
  auto quoted = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = quoted(OPT4STORE_CLI);
  for (const std::string& a : args) cmd += " " + quoted(a);
  cmd += " 2>" + quoted(dir.File("cli_stderr.txt"));
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) r.out.append(buf, n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.err = ReadBytes(dir.File("cli_stderr.txt"));
  return r;
}

// A store made through the Store API, as `opt4store create` + import would.
StoreOptions MakeStoreOptions() {
  StoreOptions o;
  o.dataset_size = kItems;
  o.disk = uint64_t{640} << 10;  // segments of 80 KiB: several
  o.disk_only = true;
  o.direct_io = false;
  return o;
}

void MakeStore(const std::string& path) {
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(MakeStoreOptions(), path, &store).ok());
  for (ItemId id = 0; id < kItems; ++id) {
    REQUIRE(store->Put(kNoPosition, id, TestMeta(id), Payload(id)).ok());
  }
  REQUIRE(store->Close().ok());
}

// The same store, written by a process that dies without closing it: its
// index writes are still in RocksDB's WAL (a clean Close flushes them into
// a table).
void MakeStoreAndDie(const std::string& path) {
  std::fflush(stdout);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::unique_ptr<Store> store;
    if (!Store::Open(MakeStoreOptions(), path, &store).ok()) _exit(2);
    for (ItemId id = 0; id < kItems; ++id) {
      if (!store->Put(kNoPosition, id, TestMeta(id), Payload(id)).ok()) _exit(3);
    }
    _exit(0);
  }
  const int status = opt4store_test::Reap(pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

TEST_CASE("CLI: verify fails on a deleted index/CURRENT and names repair; repair brings back every record",
          "[repair][cli][fault]") {
  TempDir dir;
  const std::string store = dir.File("store");
  MakeStore(store);
  const CliResult sample = Cli(dir, {"get", store, "7", "-o", dir.File("before.bin")});
  REQUIRE(sample.status == 0);
  REQUIRE(std::filesystem::remove(store + "/index/CURRENT"));

  const CliResult verify = Cli(dir, {"verify", store});
  INFO(verify.err);
  CHECK(verify.status != 0);
  CHECK(verify.err.find("opt4store repair " + store) != std::string::npos);
  CHECK_FALSE(opt4store_test::FileExists(store + "/index/CURRENT"));

  const CliResult repair = Cli(dir, {"repair", store});
  INFO(repair.out << repair.err);
  REQUIRE(repair.status == 0);
  CHECK(repair.out.find(std::to_string(kItems) + " records indexed") != std::string::npos);
  const CliResult again = Cli(dir, {"verify", store});
  INFO(again.out << again.err);
  CHECK(again.status == 0);
  CHECK(again.out.find(std::to_string(kItems) + " records") != std::string::npos);
  REQUIRE(Cli(dir, {"get", store, "7", "-o", dir.File("after.bin")}).status == 0);
  CHECK(ReadBytes(dir.File("after.bin")) == ReadBytes(dir.File("before.bin")));
}

// Found by bench/fault_campaign.py: the index's first log (which holds the
// manifest, written at create) cut short left "an index but no manifest",
// with no remedy named.
TEST_CASE("CLI: an index that lost the manifest names repair with --dataset-size and --disk",
          "[repair][cli][fault]") {
  TempDir dir;
  const std::string store = dir.File("store");
  MakeStoreAndDie(store);
  std::string first_log;
  for (const auto& e : std::filesystem::directory_iterator(store + "/index")) {
    const std::string name = e.path().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0 &&
        (first_log.empty() || name < first_log)) {
      first_log = name;
    }
  }
  REQUIRE(!first_log.empty());
  const bool half = GENERATE(false, true);
  if (half) {  // the manifest's format key kept, its options lost
    rocksdb::DB* db = nullptr;
    REQUIRE(rocksdb::DB::Open(rocksdb::Options(), store + "/index", &db).ok());
    REQUIRE(db->Delete(rocksdb::WriteOptions(), std::string(1, kUserTag) + "store/options").ok());
    delete db;
  } else {
    std::filesystem::resize_file(first_log, 100);  // the format key stays, the manifest goes
  }

  const CliResult verify = Cli(dir, {"verify", store});
  INFO(verify.err);
  REQUIRE(verify.status != 0);
  REQUIRE(verify.err.find("no manifest") != std::string::npos);
  CHECK(verify.err.find("opt4store repair " + store + " --dataset-size N --disk SIZE") !=
        std::string::npos);
  const CliResult repair = Cli(dir, {"repair", store, "--dataset-size", std::to_string(kItems),
                                     "--disk", "640KiB"});
  INFO(repair.out << repair.err);
  REQUIRE(repair.status == 0);
  const CliResult again = Cli(dir, {"verify", store});
  INFO(again.out << again.err);
  CHECK(again.status == 0);
  CHECK(again.out.find(std::to_string(kItems) + " records") != std::string::npos);
}

TEST_CASE("CLI: verify exits non-zero and names the records a deleted segment took",
          "[verify][cli][fault]") {
  TempDir dir;
  const std::string store = dir.File("store");
  MakeStore(store);
  const auto segments = SegmentFiles(store);
  REQUIRE(segments.size() >= 2);
  const auto gone = ReadSegmentRecords(segments[0]);
  REQUIRE_FALSE(gone.empty());
  REQUIRE(std::filesystem::remove(segments[0]));

  const CliResult verify = Cli(dir, {"verify", store});
  INFO(verify.out << verify.err);
  CHECK(verify.status != 0);
  CHECK(verify.out.find(std::to_string(gone.size()) + " lost") != std::string::npos);
  CHECK(verify.err.find("ids " + std::to_string(gone[0].id)) != std::string::npos);
  CHECK(verify.err.find("opt4store repair") != std::string::npos);
}

}  // namespace
}  // namespace opt4store

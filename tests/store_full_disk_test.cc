// A full disk, for real: each test mounts a small tmpfs in a mount namespace
// of its own (ctest runs each test case in its own process), fills it with a
// file of "the user's other data", and checks what the store promises:
// writes stop with NoSpace, the store keeps serving what it holds (RAM,
// disk) and sends misses to the source, a later open works on a disk that
// is still full (so do the CLI's stats and verify), and once space is back
// the store works fully. Skipped, saying why, where mounting is impossible
// (not root, or no mount namespaces).
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "engine/base/fault_injection_env.h"
#include "fork_child.h"
#include "opt4store/read_sink.h"
#include "opt4store/store.h"
#include "store_cli_test_util.h"
#include "store_test_util.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::Cli;
using opt4store_test::CliResult;
using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::IsSample;
using opt4store_test::Reap;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::ValueShape;
using opt4store_test::WaitingChild;

// A tmpfs of `mib` MiB mounted at `dir` in this process's own mount
// namespace, unmounted on destruction. ok() is false, with why(), where
// that is impossible.
class SmallDisk {
 public:
  SmallDisk(const std::string& dir, uint64_t mib) : dir_(dir) {
    if (unshare(CLONE_NEWNS) != 0) {
      why_ = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
      return;
    }
    // Mounts made here must not leak into the parent namespace.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      why_ = std::string("making / private: ") + std::strerror(errno);
      return;
    }
    mkdir(dir.c_str(), 0755);
    const std::string opts = "size=" + std::to_string(mib) + "m";
    if (mount("opt4store-test", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      why_ = std::string("mount tmpfs: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~SmallDisk() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }

  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }

  // Writes the filler file until the disk is full.
  void Fill() {
    const int fd = open(File("filler").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    REQUIRE(fd >= 0);
    const std::string block(64 << 10, 'f');
    for (size_t chunk = block.size(); chunk > 0;) {
      const ssize_t n = write(fd, block.data(), chunk);
      if (n < 0) {
        REQUIRE(errno == ENOSPC);
        chunk /= 2;  // the last few KiB
      }
    }
    close(fd);
  }
  // Frees the filler file.
  void Free() { REQUIRE(unlink(File("filler").c_str()) == 0); }

 private:
  std::string dir_;
  std::string why_;
  bool mounted_ = false;
};

// True when disk is mounted; else the test is skipped, with a warning that
// says why.
bool Mounted(const SmallDisk& disk) {
  if (!disk.ok()) WARN("skipped: cannot mount a small tmpfs to fill (" << disk.why() << ")");
  return disk.ok();
}

constexpr uint64_t kItems = 600;
const ValueShape kShape{1024, 15 * 1024};  // 16 KiB values: 600 make about 9.6 MiB

StoreOptions FullDiskOptions(const ScratchStore& scratch) {
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = kItems;
  o.ram_items = 50;
  o.disk = 256 << 20;  // far above the disk's size: the disk, not the budget, runs out
  o.sync = SyncMode::kEveryPut;
  return o;
}

// A test's values: ids [0, items) with payloads of `shape`.
struct Values {
  uint64_t items;
  ValueShape shape;
};
const Values kLarge{kItems, kShape};

Status PutSample(Store* store, ItemId id, const Values& v = kLarge) {
  return store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, v.shape));
}

// Puts the ids not in *stored, adding those stored, and returns how many
// were refused; each refusal must be NoSpace. (A full disk is not quite
// monotonic: a refused write's partial bytes are truncated away, RocksDB
// deletes obsolete files after an open.)
uint64_t PutUntilFull(Store* store, std::set<ItemId>* stored, const Values& v = kLarge) {
  uint64_t refused = 0;
  for (ItemId id = 0; id < v.items; ++id) {
    if (stored->count(id)) continue;
    const Status s = PutSample(store, id, v);
    INFO("Put(" << id << "): " << s.ToString());
    if (s.ok()) {
      stored->insert(id);
      continue;
    }
    REQUIRE(s.IsNoSpace());
    ++refused;
  }
  return refused;
}

// Reads every id: each value found must be the right one, and every id in
// `stored` must be found (RAM or disk); the rest may be misses. Returns how
// many were found.
uint64_t CheckServed(Store* store, const std::set<ItemId>& stored, const Values& v = kLarge) {
  uint64_t found = 0;
  for (ItemId id = 0; id < v.items; ++id) {
    StringSink sink;
    GetSource source = GetSource::kMiss;
    const Status s = store->Get(kNoPosition, id, &sink, &source);
    INFO("Get(" << id << "): " << s.ToString());
    REQUIRE((s.ok() || s.IsNotFound()));  // NotFound: a miss, for the source
    if (!s.ok()) {
      CHECK(stored.count(id) == 0);
      continue;
    }
    REQUIRE(IsSample(id, v.shape, sink.meta, sink.payload));
    ++found;
  }
  return found;
}

TEST_CASE("full disk: writes stop with NoSpace, the store keeps serving, reopens while full, "
          "and works fully once space is back",
          "[store][disk][nospace]") {
  ScratchStore scratch;
  SmallDisk disk(scratch.dir() + "/fs", 16);
  if (!Mounted(disk)) return;
  const std::string path = disk.File("store");
  const StoreOptions o = FullDiskOptions(scratch);
  std::set<ItemId> stored;  // the ids whose Put returned OK
  // A worker of the owner in step 2, forked before the owner opens its
  // store (fork_child.h); it joins with the handle it is sent.
  WaitingChild worker = ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> store;
    if (!Store::Attach(handle, &store).ok()) return 4;
    const Status s = PutSample(store.get(), kItems - 1);
    const int code = static_cast<int>(s.code());
    return write(fd, &code, sizeof code) == sizeof code ? 0 : 3;
  });

  // 1. A store with 200 values on disk; then the user's other files fill it.
  {
    std::unique_ptr<Store> store;
    REQUIRE(Store::Open(o, path, &store).ok());
    for (ItemId id = 0; id < 200; ++id) {
      REQUIRE(PutSample(store.get(), id).ok());
      stored.insert(id);
    }
    disk.Fill();

    // 2. Writes stop with NoSpace; what the store holds is still served.
    // A worker's Put (sync="every": it waits for the owner's write) says
    // NoSpace too.
    REQUIRE(Go(&worker, store->handle()));
    int code = -1;
    REQUIRE(read(worker.fd, &code, sizeof code) == sizeof code);
    close(worker.fd);
    REQUIRE(Reap(worker.pid) == 0);
    CHECK(code == static_cast<int>(Status::Code::kNoSpace));
    CHECK(PutUntilFull(store.get(), &stored) > kItems / 2);
    CheckServed(store.get(), stored);
    CHECK(store->Stats().disk_put_errors > 0);
    const Status closed = store->Close();
    INFO("Close: " << closed.ToString());
    CHECK(closed.ok());
  }

  // 3. Later opens work on the disk that is still full, and serve every
  // value stored, from disk; so do the CLI's verify, stats and inspect.
  for (int round = 0; round < 3; ++round) {
    disk.Fill();  // to the last byte: the refused write's bytes were freed again
    std::unique_ptr<Store> store;
    const Status s = Store::Open(o, path, &store);
    INFO("reopen " << round << " on a full disk: " << s.ToString());
    REQUIRE(s.ok());
    CHECK(CheckServed(store.get(), stored) == stored.size());
    // The reserve's slack may take a value or two; then the disk is full.
    CHECK(PutUntilFull(store.get(), &stored) > 0);
    const Status closed = store->Close();
    INFO("Close: " << closed.ToString());
    CHECK(closed.ok());
  }
  const opt4store_test::TempDir cli_dir;  // the CLI's stderr goes here, off the full disk
  for (const char* command : {"verify", "stats", "inspect"}) {
    disk.Fill();
    const CliResult r = Cli(cli_dir, {command, path});
    INFO(command << ": " << r.out << r.err);
    CHECK(r.status == 0);
  }

  // 4. Space comes back while the store is open: it works fully, without
  // a reopen, and everything survives one.
  {
    std::unique_ptr<Store> store;
    REQUIRE(Store::Open(o, path, &store).ok());
    CHECK(PutUntilFull(store.get(), &stored) > 0);
    disk.Free();
    CHECK(PutUntilFull(store.get(), &stored) == 0);
    CHECK(stored.size() == kItems);
    REQUIRE(store->Close().ok());
  }
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, path, &store).ok());
  CHECK(CheckServed(store.get(), stored) == kItems);
  StoreVerifyReport report;
  const Status v = store->Verify(&report);
  INFO("Verify: " << v.ToString());
  CHECK(v.ok());
  CHECK(report.bad.empty());
  REQUIRE(store->Close().ok());
}

// The same under a disk budget the store fills first: on the full disk,
// Puts evict (index deletes), compact (copies, then a segment unlinked) and
// roll over to new segments (index writes before any segment byte), so
// RocksDB's writes and the store's own reuse of its space meet the full
// disk. Whether a write is refused depends on the order of those steps;
// what is checked is that nothing served is wrong and every open works.
TEST_CASE("full disk: a store at its budget (evicting, compacting, rolling over segments) "
          "serves right values, reopens and recovers",
          "[store][disk][nospace]") {
  ScratchStore scratch;
  SmallDisk disk(scratch.dir() + "/fs", 16);
  if (!Mounted(disk)) return;
  const std::string path = disk.File("store");
  StoreOptions o = FullDiskOptions(scratch);
  o.disk = 6 << 20;  // segments of 768 KiB; about 300 values fit
  o.sync = SyncMode::kOnFlush;
  {
    std::unique_ptr<Store> store;
    REQUIRE(Store::Open(o, path, &store).ok());
    for (ItemId id = 0; id < kItems; ++id) REQUIRE(PutSample(store.get(), id).ok());
    REQUIRE(store->Flush().ok());
    disk.Fill();
    // The Puts return (sync="flush"); their disk writes may be refused.
    for (int pass = 0; pass < 2; ++pass) {
      for (ItemId id = 0; id < kItems; ++id) REQUIRE(PutSample(store.get(), id).ok());
      CheckServed(store.get(), {});
    }
    const Status flushed = store->Flush();  // the planner's writes are done
    INFO("Flush on the full disk: " << flushed.ToString());
    CHECK((flushed.ok() || flushed.IsNoSpace()));
    const Status closed = store->Close();
    INFO("Close on the full disk: " << closed.ToString());
    CHECK((closed.ok() || closed.IsNoSpace()));
  }
  uint64_t on_disk = 0;
  {
    disk.Fill();
    std::unique_ptr<Store> store;
    const Status s = Store::Open(o, path, &store);
    INFO("reopen on a full disk: " << s.ToString());
    REQUIRE(s.ok());
    on_disk = CheckServed(store.get(), {});
    CHECK(on_disk > 100);
    disk.Free();
    for (ItemId id = 0; id < kItems; ++id) {
      REQUIRE(PutSample(store.get(), id).ok());
      StringSink sink;
      GetSource source = GetSource::kMiss;
      REQUIRE(store->Get(kNoPosition, id, &sink, &source).ok());  // RAM or disk
    }
    const uint64_t errors = store->Stats().disk_put_errors;
    for (ItemId id = 0; id < kItems; ++id) REQUIRE(PutSample(store.get(), id).ok());
    CHECK(store->Stats().disk_put_errors == errors);  // space is back: no write refused
    REQUIRE(store->Close().ok());
  }
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, path, &store).ok());
  CHECK(CheckServed(store.get(), {}) > 100);
  StoreVerifyReport report;
  const Status v = store->Verify(&report);
  INFO("Verify: " << v.ToString());
  CHECK(v.ok());
  REQUIRE(store->Close().ok());
}

// Small values (64 bytes): many fit in a page a file already has.
constexpr uint64_t kSmallItems = 4000;
const Values kSmall{kSmallItems, ValueShape{16, 48}};

// A store of small values, uncompressed, so that a record's size is known.
StoreOptions SmallValueOptions(const ScratchStore& scratch) {
  StoreOptions o = FullDiskOptions(scratch);
  o.dataset_size = kSmallItems;
  o.compression = Compression::kNone;
  return o;
}

// The first ten small values, before the disk fills: the segment and the
// index's WAL then have a page each.
void PutFirstSmallValues(Store* store, std::set<ItemId>* stored) {
  for (ItemId id = 0; id < 10; ++id) {
    REQUIRE(PutSample(store, id, kSmall).ok());
    stored->insert(id);
  }
}

// Small values on a full disk: a record still fits in a segment's last
// page while the index's WAL needs a new one, so RocksDB itself meets the
// full disk: it then takes no writes until resumed (and syncing its WAL,
// as Close does, aborted the process inside RocksDB before the store
// remembered the failure).
TEST_CASE("full disk: small values, where RocksDB's WAL meets the full disk first",
          "[store][disk][nospace]") {
  ScratchStore scratch;
  SmallDisk disk(scratch.dir() + "/fs", 16);
  if (!Mounted(disk)) return;
  const std::string path = disk.File("store");
  const StoreOptions o = SmallValueOptions(scratch);
  std::set<ItemId> stored;
  {
    std::unique_ptr<Store> store;
    REQUIRE(Store::Open(o, path, &store).ok());
    PutFirstSmallValues(store.get(), &stored);
    disk.Fill();
    CHECK(PutUntilFull(store.get(), &stored, kSmall) > 0);
    // The cursor and counters Close saves may meet the full disk too.
    const Status closed = store->Close();
    INFO("Close on the full disk: " << closed.ToString());
    CHECK((closed.ok() || closed.IsNoSpace()));
  }
  // Reopen on the full disk: every stored value is there, writes are
  // refused. Once space comes back, the same session writes again: the
  // index resumes (DB::Resume) at the next write, without a reopen.
  {
    disk.Fill();
    std::unique_ptr<Store> store;
    const Status s = Store::Open(o, path, &store);
    INFO("reopen on a full disk: " << s.ToString());
    REQUIRE(s.ok());
    CHECK(CheckServed(store.get(), stored, kSmall) == stored.size());
    CHECK(PutUntilFull(store.get(), &stored, kSmall) > 0);
    disk.Free();
    CHECK(PutUntilFull(store.get(), &stored, kSmall) == 0);
    CHECK(CheckServed(store.get(), stored, kSmall) == kSmallItems);
    REQUIRE(store->Close().ok());
  }
  // The next open, with space back, works fully.
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, path, &store).ok());
  CHECK(CheckServed(store.get(), stored, kSmall) == stored.size());
  CHECK(PutUntilFull(store.get(), &stored, kSmall) == 0);
  CHECK(CheckServed(store.get(), stored, kSmall) == kSmallItems);
  StoreVerifyReport report;
  const Status v = store->Verify(&report);
  INFO("Verify: " << v.ToString());
  CHECK(v.ok());
  REQUIRE(store->Close().ok());
}

// RocksDB's log meets the full disk for sure: the segment file is grown
// beforehand (zeros past its end, as a file system that preallocated
// would), so appends still fit and the index's WAL write is the one
// refused. Once space is back, the same session writes again (DB::Resume
// at the next write), and a reopen finds every acknowledged value.
TEST_CASE("full disk: when the index's log is refused, writes resume without a reopen",
          "[store][disk][nospace]") {
  ScratchStore scratch;
  SmallDisk disk(scratch.dir() + "/fs", 16);
  if (!Mounted(disk)) return;
  const std::string path = disk.File("store");
  const StoreOptions o = SmallValueOptions(scratch);
  std::set<ItemId> stored;
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, path, &store).ok());
  PutFirstSmallValues(store.get(), &stored);
  {
    const int fd = open((path + "/segments/000001.seg").c_str(), O_WRONLY | O_APPEND);
    REQUIRE(fd >= 0);
    const std::string zeros(4 << 20, '\0');
    REQUIRE(write(fd, zeros.data(), zeros.size()) == static_cast<ssize_t>(zeros.size()));
    close(fd);
  }
  disk.Fill();
  bool index_refused = false;
  for (ItemId id = 10; id < kSmallItems && !index_refused; ++id) {
    const Status s = PutSample(store.get(), id, kSmall);
    INFO("Put(" << id << "): " << s.ToString());
    if (s.ok()) {
      stored.insert(id);
      continue;
    }
    REQUIRE(s.IsNoSpace());
    index_refused = s.ToString().find("index") != std::string::npos;
  }
  REQUIRE(index_refused);
  disk.Free();
  CHECK(PutUntilFull(store.get(), &stored, kSmall) == 0);
  CHECK(CheckServed(store.get(), stored, kSmall) == kSmallItems);
  REQUIRE(store->Close().ok());
  REQUIRE(Store::Open(o, path, &store).ok());
  CHECK(CheckServed(store.get(), stored, kSmall) == kSmallItems);
  REQUIRE(store->Close().ok());
}

// Every file under dir (but the LOCK, which holds the pid of its last
// holder) with its bytes.
std::map<std::string, std::string> FilesUnder(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == "LOCK") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    files[std::filesystem::relative(e.path(), dir).string()] = bytes.str();
  }
  return files;
}

// `opt4store repair` on a full disk: with the store's reserve, the rebuilt
// index fits and the repair works; without it, the repair fails with
// NoSpace before it writes anything, and works once space is back. (One
// SmallDisk per process: RocksDB's background threads stay in the mount
// namespace they started in.)
void RepairOnFullDisk(bool reserve_kept) {
  ScratchStore scratch;
  SmallDisk disk(scratch.dir() + "/fs", 16);
  if (!Mounted(disk)) return;
  const std::string path = disk.File("store");
  const StoreOptions o = FullDiskOptions(scratch);
  std::set<ItemId> stored;
  {
    std::unique_ptr<Store> store;
    REQUIRE(Store::Open(o, path, &store).ok());
    for (ItemId id = 0; id < 200; ++id) {
      REQUIRE(PutSample(store.get(), id).ok());
      stored.insert(id);
    }
    REQUIRE(store->Close().ok());
  }
  REQUIRE(std::filesystem::remove(path + "/index/CURRENT"));
  if (!reserve_kept) REQUIRE(std::filesystem::remove(path + "/RESERVE"));
  disk.Fill();

  StoreOptions admin;
  admin.shm_prefix = scratch.prefix();
  StoreRepairReport report;
  const auto before = FilesUnder(path);
  const Status repaired = Store::Repair(admin, path, &report);
  INFO("repair on the full disk: " << repaired.ToString());
  if (reserve_kept) {
    REQUIRE(repaired.ok());
    CHECK(report.records == stored.size());
  } else {
    REQUIRE(repaired.IsNoSpace());
    CHECK(repaired.ToString().find("nothing was changed") != std::string::npos);
    CHECK(FilesUnder(path) == before);
    disk.Free();
    const Status again = Store::Repair(admin, path, &report);
    INFO("repair with space back: " << again.ToString());
    REQUIRE(again.ok());
    CHECK(report.records == stored.size());
  }
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, path, &store).ok());
  CHECK(CheckServed(store.get(), stored) == stored.size());
  StoreVerifyReport verified;
  CHECK(store->Verify(&verified).ok());
  REQUIRE(store->Close().ok());
}

TEST_CASE("full disk: repair works within the store's reserve", "[store][disk][nospace]") {
  RepairOnFullDisk(true);
}

TEST_CASE("full disk: repair without room fails with NoSpace, changing nothing, and works "
          "once space is back",
          "[store][disk][nospace]") {
  RepairOnFullDisk(false);
}

// The reserve itself, through a fault-injecting Env: an open on a disk
// with room for only part of it keeps what fits less one 64 KiB chunk (for
// the session's own index writes), and the next open with space makes it
// whole again.
TEST_CASE("full disk: the reserve keeps what fits less a chunk, and is made whole with space",
          "[disk][nospace]") {
  opt4store_test::TempDir dir;
  FaultInjectionEnv env;
  DiskTierOptions o;
  o.env = &env;
  o.budget_bytes = 64 << 20;
  const std::string reserve = dir.File("RESERVE");
  auto open_and_close = [&] {
    std::unique_ptr<DiskTier> tier;
    const Status s = DiskTier::Open(o, dir.path(), &tier);
    INFO("open: " << s.ToString());
    REQUIRE(s.ok());
    REQUIRE(tier->Close().ok());
  };
  open_and_close();
  CHECK(std::filesystem::file_size(reserve) == (1u << 20));
  env.Inject(Fault::NoSpaceAfter(300 << 10).OnFile("RESERVE"));  // 300 KiB fit
  open_and_close();
  CHECK(std::filesystem::file_size(reserve) == (192u << 10));  // 4 chunks written, 1 given back
  env.Clear();
  open_and_close();
  CHECK(std::filesystem::file_size(reserve) == (1u << 20));
}

}  // namespace
}  // namespace opt4store

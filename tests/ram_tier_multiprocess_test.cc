// RamTier across processes: forked readers hammer random ids while the
// owner inserts and evicts; every value a reader gets must be exactly one
// version of the item it asked for. Readers killed with SIGKILL (mid-copy,
// mid-loop, mid-Wait) block nobody. A freshly exec'd process attaches by
// name, reads, and is woken across its separate mapping.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ram_test_values.h"
#include "ram_tier_test_util.h"
#include "fork_child.h"
#include "test_util.h"
#include "tiers/ram_tier.h"

namespace opt4store {
namespace {

using Clock = std::chrono::steady_clock;
using opt4store_test::Child;
using opt4store_test::ForkChild;
using opt4store_test::Reap;
using opt4store_test::FillPayload;
using opt4store_test::IsValidValue;
using opt4store_test::MetaFor;
using opt4store_test::PayloadSizeFor;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
// Values of 1 KiB .. 65 KiB: about 33 KiB on average.
constexpr uint64_t kMinSize = 1 * kKiB;
constexpr uint64_t kSpan = 64 * kKiB;

std::string TestPrefix(const std::string& what) {
  return "o4s-mptest-" + what + "-" + std::to_string(getpid());
}

std::unique_ptr<RamTier> MakeTier(uint64_t capacity, uint64_t items, const std::string& what) {
  return opt4store_test::MakeRamTier(capacity, items, TestPrefix(what));
}

// The owner writes (id, version) straight into the arena: BeginInsert, fill, commit.
Status InsertGenerated(RamTier* t, ItemId id, uint64_t version) {
  const uint64_t size = PayloadSizeFor(id, version, kMinSize, kSpan);
  RamTier::PendingInsert p;
  OPT4STORE_RETURN_IF_ERROR(t->BeginInsert(id, 16, size, &p));
  FillPayload(id, version, p.payload, size);
  const std::string meta = MetaFor(id, version);
  std::memcpy(p.meta, meta.data(), 16);
  return t->CommitInsert(p);
}

// The owner's side of the churn: random ids flip between resident (with a
// new version each time) and absent; a full arena evicts random residents.
class Churner {
 public:
  Churner(RamTier* tier, uint64_t items, uint64_t seed)
      : tier_(tier), version_(items, 0), pos_(items, -1), rng_(seed) {}

  void Step() {
    const ItemId id = static_cast<ItemId>(rng_() % version_.size());
    if (pos_[id] >= 0) {
      Evict(id);
      return;
    }
    const uint64_t v = ++version_[id];
    for (;;) {
      Status s = InsertGenerated(tier_, id, v);
      if (s.ok()) break;
      REQUIRE(s.IsNoSpace());
      REQUIRE_FALSE(resident_.empty());
      Evict(resident_[rng_() % resident_.size()]);
    }
    pos_[id] = static_cast<int64_t>(resident_.size());
    resident_.push_back(id);
    ++inserts_;
  }

  void Evict(ItemId id) {
    REQUIRE(tier_->Evict(id).ok());
    const int64_t i = pos_[id];
    resident_[i] = resident_.back();
    pos_[resident_[i]] = i;
    resident_.pop_back();
    pos_[id] = -1;
  }

  uint64_t inserts() const { return inserts_; }
  const std::vector<ItemId>& resident() const { return resident_; }

 private:
  RamTier* tier_;
  std::vector<uint64_t> version_;
  std::vector<int64_t> pos_;
  std::vector<ItemId> resident_;
  std::mt19937_64 rng_;
  uint64_t inserts_ = 0;
};

struct ReaderReport {
  uint64_t reads = 0, hits = 0, misses = 0, busy = 0;
  uint64_t bad = 0;        // bytes that are not exactly one version of the id
  uint64_t backwards = 0;  // a version older than one this reader already saw
  int64_t first_bad_id = -1;
  char error[200] = {0};
};

void WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(90);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// A sink that reuses one buffer, as a binding would reuse a pinned pool.
class BufferSink : public ReadSink {
 public:
  BufferSink() : meta_(16 * kKiB), payload_(kMinSize + kSpan) {}
  Status Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                 void** payload_dst) override {
    if (meta_size > meta_.size()) meta_.resize(meta_size);
    if (payload_size > payload_.size()) payload_.resize(payload_size);
    meta_size_ = meta_size;
    payload_size_ = payload_size;
    *meta_dst = meta_.data();
    *payload_dst = payload_.data();
    return Status::OK();
  }
  const char* meta() const { return meta_.data(); }
  const char* payload() const { return payload_.data(); }
  uint64_t meta_size() const { return meta_size_; }
  uint64_t payload_size() const { return payload_size_; }

 private:
  std::vector<char> meta_, payload_;
  uint64_t meta_size_ = 0, payload_size_ = 0;
};

// Reads random ids until `deadline` (or forever when seconds < 0) and checks
// every hit. Half the reads go through Read(sink), half through Peek+CopyOut.
ReaderReport ReaderLoop(RamTier* tier, uint64_t items, uint64_t seed, double seconds) {
  ReaderReport r;
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> last(items, 0);
  BufferSink sink;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds < 0 ? 1e9 : seconds));
  std::vector<char> meta(64), payload(kMinSize + kSpan);
  while (Clock::now() < deadline) {
    for (int batch = 0; batch < 64; ++batch) {
      const ItemId id = static_cast<ItemId>(rng() % items);
      ++r.reads;
      Status s;
      const char* m = nullptr;
      const char* p = nullptr;
      uint64_t msize = 0, psize = 0;
      if (rng() & 1) {
        s = tier->Read(id, &sink);
        m = sink.meta();
        p = sink.payload();
        msize = sink.meta_size();
        psize = sink.payload_size();
      } else {
        ItemInfo info;
        s = tier->Peek(id, &info);
        if (s.ok()) {
          if (info.meta_size > meta.size() || info.payload_size > payload.size()) {
            ++r.bad;  // sizes no version of any item has
            continue;
          }
          s = tier->CopyOut(info, meta.data(), payload.data());
          m = meta.data();
          p = payload.data();
          msize = info.meta_size;
          psize = info.payload_size;
        }
      }
      if (s.IsNotFound()) {
        ++r.misses;
        continue;
      }
      if (s.IsBusy()) {
        ++r.busy;
        continue;
      }
      if (!s.ok()) {
        std::snprintf(r.error, sizeof r.error, "%s", s.ToString().c_str());
        ++r.bad;
        continue;
      }
      ++r.hits;
      uint64_t version = 0;
      if (!IsValidValue(id, m, msize, p, psize, kMinSize, kSpan, &version)) {
        if (r.first_bad_id < 0) r.first_bad_id = id;
        ++r.bad;
        continue;
      }
      if (version < last[id]) ++r.backwards;
      last[id] = version;
    }
  }
  return r;
}

TEST_CASE("RamTier: forked readers never get a torn, stale-space or foreign value",
          "[ram][multiprocess]") {
  // wide: ~500 of 2000 items fit, readers mostly miss.
  // hot: ~30 of 48 items fit, readers mostly hit the very blocks the owner
  // is evicting and refilling, so copies race with reuse far more often.
  struct Config {
    const char* name;
    uint64_t items, capacity;
  };
  const Config config = GENERATE(Config{"wide", 2000, 16 * kMiB}, Config{"hot", 48, 1 * kMiB});
  INFO("configuration " << config.name);
  const uint64_t kItems = config.items;
  auto tier = MakeTier(config.capacity, kItems, "readers");
  Churner churn(tier.get(), kItems, 1);
  for (int i = 0; i < 3000; ++i) churn.Step();

  const int kReaders = 3;
  const double kSeconds = 2.0;
  std::vector<Child> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.push_back(ForkChild([&, i](int fd) {
      ReaderReport r = ReaderLoop(tier.get(), kItems, 100 + i, kSeconds);
      WriteAll(fd, &r, sizeof r);
    }));
  }
  const Clock::time_point end =
      Clock::now() + std::chrono::milliseconds(static_cast<int>(kSeconds * 1000) + 200);
  uint64_t steps = 0;
  while (Clock::now() < end) {
    churn.Step();
    ++steps;
  }
  ReaderReport total;
  for (const Child& c : readers) {
    ReaderReport r;
    REQUIRE(ReadAll(c.fd, &r, sizeof r));
    close(c.fd);
    const int status = Reap(c.pid);
    CHECK(WIFEXITED(status));
    INFO("reader: reads " << r.reads << " hits " << r.hits << " misses " << r.misses << " busy "
                          << r.busy << " bad " << r.bad << " first bad id " << r.first_bad_id << " "
                          << r.error);
    CHECK(r.bad == 0);
    CHECK(r.backwards == 0);
    CHECK(r.hits > 100);
    CHECK(r.misses > 0);
    total.reads += r.reads;
    total.hits += r.hits;
    total.misses += r.misses;
    total.busy += r.busy;
  }
  RamTierStats s = tier->Stats();
  WARN(config.name << ": owner steps " << steps << ", readers: " << total.reads << " reads, "
                   << total.hits << " hits, " << total.misses << " misses, " << s.retries
                   << " copies discarded for racing the owner; arena "
                   << 100.0 * s.bytes_used / s.capacity_bytes << "% used, free space in "
                   << s.free_blocks << " blocks, fragmentation " << s.fragmentation);
  CHECK(steps > 1000);
  // Every process's counts reach the owner's Stats(): all reads were counted.
  CHECK(s.hits == total.hits);
  CHECK(s.processes == 1 + kReaders);
  CHECK(s.bytes_copied > 0);
}

TEST_CASE("RamTier: readers killed mid-copy, mid-loop or mid-Wait block nobody",
          "[ram][multiprocess]") {
  const uint64_t kItems = 1000;
  // One more id than the churn uses: the one the killed waiter waits for.
  auto tier = MakeTier(8 * kMiB, kItems + 1, "kill");
  Churner churn(tier.get(), kItems, 2);
  for (int i = 0; i < 2000; ++i) churn.Step();

  // Kills itself inside CopyOut, between the payload and the meta copy.
  Child self_killer = ForkChild([&](int) {
    static int copies = 0;
    tier->SetCopyHookForTesting(
        [](void*, const ItemInfo&) {
          if (++copies == 50) raise(SIGKILL);
        },
        nullptr);
    ReaderLoop(tier.get(), kItems, 7, -1);
  });
  // Killed by the owner at some point of its endless loop.
  Child looper = ForkChild([&](int) { ReaderLoop(tier.get(), kItems, 8, -1); });
  // Killed while blocked in Wait() on an absent item (its waiters bit stays set).
  const ItemId waited = kItems;
  Child waiter = ForkChild([&](int fd) {
    const uint64_t v = tier->Version(waited);
    char ready = 1;
    WriteAll(fd, &ready, 1);
    tier->Wait(waited, v, -1).PermitUncheckedError();
  });
  char ready = 0;
  REQUIRE(ReadAll(waiter.fd, &ready, 1));
  // Survivors read through the whole thing.
  std::vector<Child> survivors;
  for (int i = 0; i < 2; ++i) {
    survivors.push_back(ForkChild([&, i](int fd) {
      ReaderReport r = ReaderLoop(tier.get(), kItems, 20 + i, 1.5);
      WriteAll(fd, &r, sizeof r);
    }));
  }

  const Clock::time_point start = Clock::now();
  while (Clock::now() - start < std::chrono::milliseconds(300)) churn.Step();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the waiter block
  REQUIRE(kill(looper.pid, SIGKILL) == 0);
  REQUIRE(kill(waiter.pid, SIGKILL) == 0);
  const int s1 = Reap(self_killer.pid);
  const int s2 = Reap(looper.pid);
  const int s3 = Reap(waiter.pid);
  CHECK((WIFSIGNALED(s1) && WTERMSIG(s1) == SIGKILL));
  CHECK((WIFSIGNALED(s2) && WTERMSIG(s2) == SIGKILL));
  CHECK((WIFSIGNALED(s3) && WTERMSIG(s3) == SIGKILL));
  for (const Child& c : {self_killer, looper, waiter}) close(c.fd);

  // The owner goes on: the waited-on item, then a full turnover of the arena.
  for (;;) {
    Status s = InsertGenerated(tier.get(), waited, 1);
    if (s.ok()) break;
    REQUIRE(s.IsNoSpace());
    churn.Evict(churn.resident().front());
  }
  const uint64_t before = churn.inserts();
  const Clock::time_point after_kill = Clock::now();
  while (Clock::now() - after_kill < std::chrono::milliseconds(1300)) churn.Step();
  CHECK(churn.inserts() - before > 500);
  for (const Child& c : survivors) {
    ReaderReport r;
    REQUIRE(ReadAll(c.fd, &r, sizeof r));
    close(c.fd);
    CHECK(WIFEXITED(Reap(c.pid)));
    INFO("survivor: reads " << r.reads << " hits " << r.hits << " bad " << r.bad << " " << r.error);
    CHECK(r.bad == 0);
    CHECK(r.backwards == 0);
    CHECK(r.hits > 100);
  }
  // Every item can still be evicted and replaced: nothing is pinned.
  std::vector<ItemId> resident = churn.resident();
  for (ItemId id : resident) churn.Evict(id);
  CHECK(tier->Stats().items_resident == 1);  // the waited-on item
  // The dead readers' counts are still in the totals.
  CHECK(tier->Stats().processes >= 5);
}

// ---- a spawned (exec'd) process attaches by name

constexpr const char* kNameEnv = "OPT4STORE_TEST_RAM_NAME";
constexpr const char* kFdEnv = "OPT4STORE_TEST_RAM_FD";
constexpr const char* kBackFdEnv = "OPT4STORE_TEST_RAM_BACK_FD";
constexpr ItemId kSpawnItems = 64;
constexpr ItemId kAwaited = kSpawnItems - 1;

struct SpawnReport {
  uint64_t hits = 0, bad = 0;
  int32_t wait_ok = 0;
  int32_t attach_ok = 0;
  char error[200] = {0};
};

// Runs only in the exec'd child (hidden tag): attach by name, read every
// item, wait for the owner to insert kAwaited, report through a pipe.
TEST_CASE("RamTier: spawned reader (child side)", "[.spawned_ram_reader]") {
  const char* name = std::getenv(kNameEnv);
  const char* fd_text = std::getenv(kFdEnv);
  const char* back_text = std::getenv(kBackFdEnv);
  if (name == nullptr || fd_text == nullptr || back_text == nullptr) return;
  const int fd = std::atoi(fd_text);
  const int back = std::atoi(back_text);
  SpawnReport r;
  std::unique_ptr<RamTier> tier;
  Status s = RamTier::Attach(name, &tier);
  if (!s.ok()) {
    std::snprintf(r.error, sizeof r.error, "%s", s.ToString().c_str());
    WriteAll(fd, &r, sizeof r);
    return;
  }
  r.attach_ok = 1;
  for (ItemId id = 0; id < kSpawnItems - 1; ++id) {
    StringSink sink;
    uint64_t version = 0;
    if (tier->Read(id, &sink).ok() &&
        IsValidValue(id, sink.meta.data(), sink.meta.size(), sink.payload.data(),
                     sink.payload.size(), kMinSize, kSpan, &version) &&
        version == 1) {
      ++r.hits;
    } else {
      ++r.bad;
    }
  }
  // Ask, then wait: the owner inserts kAwaited once it hears from us.
  const uint64_t v = tier->Version(kAwaited);
  char ask = 1;
  WriteAll(back, &ask, 1);
  s = tier->Wait(kAwaited, v, 10000);
  r.wait_ok = s.ok() && tier->Contains(kAwaited);
  if (!s.ok()) std::snprintf(r.error, sizeof r.error, "wait: %s", s.ToString().c_str());
  WriteAll(fd, &r, sizeof r);
}

TEST_CASE("RamTier: a freshly exec'd process attaches by name and is woken by the owner",
          "[ram][multiprocess]") {
  auto tier = MakeTier(8 * kMiB, kSpawnItems, "spawn");
  for (ItemId id = 0; id < kSpawnItems - 1; ++id) REQUIRE(InsertGenerated(tier.get(), id, 1).ok());
  int report[2], back[2];
  REQUIRE(pipe(report) == 0);
  REQUIRE(pipe(back) == 0);
  std::fflush(stdout);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(report[0]);
    close(back[0]);
    setenv(kNameEnv, tier->name().c_str(), 1);
    setenv(kFdEnv, std::to_string(report[1]).c_str(), 1);
    setenv(kBackFdEnv, std::to_string(back[1]).c_str(), 1);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    // A new program image: nothing of the parent's mapping survives exec.
    execl("/proc/self/exe", "ram_tier_multiprocess_test", "[.spawned_ram_reader]",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(report[1]);
  close(back[1]);
  char ask = 0;
  const bool asked = ReadAll(back[0], &ask, 1);
  CHECK(asked);
  if (asked) REQUIRE(InsertGenerated(tier.get(), kAwaited, 1).ok());
  SpawnReport r;
  const bool got = ReadAll(report[0], &r, sizeof r);
  close(report[0]);
  close(back[0]);
  const int status = Reap(pid);
  REQUIRE(got);
  INFO(r.error);
  CHECK(r.attach_ok == 1);
  CHECK(r.hits == kSpawnItems - 1);
  CHECK(r.bad == 0);
  CHECK(r.wait_ok == 1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(tier->Stats().hits == kSpawnItems - 1);
}

}  // namespace
}  // namespace opt4store

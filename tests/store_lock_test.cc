// The store's LOCK and fork(): a process forked from the owner (a DataLoader
// worker, any fork) must not keep the store locked after the owner dies,
// nor write the owner's files when it closes its copy of the store; and a
// Busy error names a process that is alive and holds the lock.
//
// Every case does the real thing: a real owner process is SIGKILLed while
// a real grandchild it forked sleeps on.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "disk_test_util.h"
#include "fork_child.h"
#include "opt4store/store.h"
#include "store_test_util.h"
#include "test_util.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::Child;
using opt4store_test::ForkChild;
using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::NamesNumber;
using opt4store_test::Reap;
using opt4store_test::ScratchStore;
using opt4store_test::TempDir;
using opt4store_test::WaitingChild;

DiskTierOptions LockOptions() {
  DiskTierOptions o;
  o.budget_bytes = 64 << 20;
  o.direct_io = false;
  return o;
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

// Reads one pid_t from a report pipe; -1 when the writer died first.
pid_t ReadPid(int fd) {
  pid_t pid = -1;
  return read(fd, &pid, sizeof pid) == static_cast<ssize_t>(sizeof pid) ? pid : -1;
}

// In a forked owner: forks a grandchild that sleeps (up to 60 s, so that a
// failed test leaves nothing behind for long) and waits to be killed. The
// grandchild reports its own pid: fork() returns in the parent before the
// child has run its fork handlers, and the test means a child that runs.
// It must fork beside the owner's threads (the test is of what such a child
// inherits), so the grandchild only makes async-signal-safe calls: no
// allocation that a lock held at the fork could hang (fork_child.h).
[[noreturn]] void ForkSleeperAndWait(int report_fd) {
  const pid_t sleeper = fork();
  if (sleeper == 0) {
    const pid_t me = getpid();
    if (write(report_fd, &me, sizeof me) != sizeof me) _exit(3);
    alarm(60);
    for (;;) pause();
  }
  if (sleeper < 0) _exit(3);
  for (;;) pause();
}

// Kills the owner, then checks that the grandchild outlived it.
pid_t KillOwnerKeepSleeper(const Child& owner) {
  const pid_t sleeper = ReadPid(owner.fd);
  REQUIRE(sleeper > 0);
  REQUIRE(kill(owner.pid, SIGKILL) == 0);
  const int status = Reap(owner.pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(Alive(sleeper));
  return sleeper;
}

void KillSleeper(pid_t sleeper) {
  kill(sleeper, SIGKILL);
  // Not our child (its parent died): wait until it is gone.
  for (int i = 0; i < 500 && Alive(sleeper); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST_CASE("LOCK: a child forked by a disk tier's owner does not hold the lock once the owner dies",
          "[lock][fault]") {
  TempDir dir;
  const Child owner = ForkChild([&](int report) {
    std::unique_ptr<DiskTier> tier;
    if (!DiskTier::Open(LockOptions(), dir.path(), &tier).ok()) _exit(2);
    if (!tier->Put(7, "meta", "payload").ok() || !tier->Flush().ok()) _exit(2);
    // Forks late on purpose: the test is of a child forked by a tier's owner.
    ForkSleeperAndWait(report);
  });
  const pid_t sleeper = KillOwnerKeepSleeper(owner);
  close(owner.fd);

  std::unique_ptr<DiskTier> tier;
  const Status s = DiskTier::Open(LockOptions(), dir.path(), &tier);
  const bool sleeper_alive = Alive(sleeper);
  KillSleeper(sleeper);
  INFO(s.ToString() << " (owner pid " << owner.pid << ", its child " << sleeper << ")");
  CHECK(sleeper_alive);  // the open really ran while the orphan lived
  REQUIRE(s.ok());
  std::string payload;
  CHECK(tier->Get(7, nullptr, &payload).ok());
  CHECK(payload == "payload");
}

TEST_CASE("LOCK: a store reopens while a worker forked by its killed owner lives on",
          "[lock][fault][store]") {
  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = 16;
  o.ram_items = 4;
  o.disk = uint64_t{64} << 20;
  o.direct_io = false;
  const Child owner = ForkChild([&](int report) {
    std::unique_ptr<Store> store;
    if (!Store::Open(o, scratch.path(), &store).ok()) _exit(2);
    if (!store->Put(kNoPosition, 3, "meta", "three").ok() || !store->Flush().ok()) _exit(2);
    // What a DataLoader does: fork a worker from the process that owns the
    // store (late on purpose: the test is of such a worker).
    ForkSleeperAndWait(report);
  });
  const pid_t sleeper = KillOwnerKeepSleeper(owner);
  close(owner.fd);

  std::unique_ptr<Store> store;
  const Status s = Store::Open(o, scratch.path(), &store);
  const bool sleeper_alive = Alive(sleeper);
  KillSleeper(sleeper);
  INFO(s.ToString() << " (owner pid " << owner.pid << ", its child " << sleeper << ")");
  CHECK(sleeper_alive);
  REQUIRE(s.ok());
  CHECK(store->Close().ok());
}

// The index's files by name and size.
std::map<std::string, uintmax_t> IndexFiles(const std::string& dir) {
  std::map<std::string, uintmax_t> files;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/index")) {
    files[e.path().filename().string()] = e.is_regular_file() ? e.file_size() : 0;
  }
  return files;
}

// Forks beside the tier's idle RocksDB threads on purpose (fork_child.h):
// the case is a script's own child that exits normally, destroying its
// copy; the idle threads hold no lock.
TEST_CASE("fork: a child that closes its copy of the owner's disk tier writes nothing to it",
          "[lock][fault]") {
  TempDir dir;
  std::unique_ptr<DiskTier> tier;
  REQUIRE(DiskTier::Open(LockOptions(), dir.path(), &tier).ok());
  // In the memtable and the WAL: the owner's Close would flush them.
  REQUIRE(tier->Put(1, "meta", "one").ok());
  const auto before = IndexFiles(dir.path());
  std::fflush(stdout);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(30);  // a wait for the parent's background work would end here
    const bool closed = tier->Close().ok();
    tier.reset();
    _exit(closed ? 0 : 1);
  }
  const int status = Reap(child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(IndexFiles(dir.path()) == before);
  // The owner goes on, closes, and everything is there.
  REQUIRE(tier->Put(2, "meta", "two").ok());
  REQUIRE(tier->Close().ok());
  REQUIRE(DiskTier::Open(LockOptions(), dir.path(), &tier).ok());
  std::string payload;
  REQUIRE(tier->Get(1, nullptr, &payload).ok());
  CHECK(payload == "one");
  REQUIRE(tier->Get(2, nullptr, &payload).ok());
  CHECK(payload == "two");
}

TEST_CASE("LOCK: Busy names the live holder, not a dead pid left in the file", "[lock][fault]") {
  TempDir dir;
  // A pid that is certainly dead: a child that has exited and been reaped.
  const Child gone = ForkChild([](int) {});
  const pid_t dead = gone.pid;
  Reap(dead);
  close(gone.fd);

  // The holder: flocks the LOCK but leaves the dead pid in it, as a process
  // that inherited the descriptor from a dead owner would. Forked before
  // this process opens a tier (fork_child.h); it starts once LOCK exists.
  const std::string lock_path = dir.File("LOCK");
  WaitingChild holder = ForkWaitingChild([&](int report, const std::string&) {
    const int fd = open(lock_path.c_str(), O_RDWR);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) _exit(2);
    const std::string text = std::to_string(dead) + "\n";
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0) _exit(2);
    const pid_t me = getpid();
    if (write(report, &me, sizeof me) != sizeof me) _exit(2);
    alarm(60);
    for (;;) pause();
  });
  {
    std::unique_ptr<DiskTier> tier;
    REQUIRE(DiskTier::Open(LockOptions(), dir.path(), &tier).ok());
  }
  REQUIRE(Go(&holder));
  REQUIRE(ReadPid(holder.fd) == holder.pid);

  std::unique_ptr<DiskTier> tier;
  const Status s = DiskTier::Open(LockOptions(), dir.path(), &tier);
  kill(holder.pid, SIGKILL);
  Reap(holder.pid);
  close(holder.fd);
  INFO(s.ToString());
  REQUIRE(s.IsBusy());
  CHECK(NamesNumber(s.message(), static_cast<uint64_t>(holder.pid), {dir.path()}));
  CHECK_FALSE(NamesNumber(s.message(), static_cast<uint64_t>(dead), {dir.path()}));
}

}  // namespace
}  // namespace opt4store

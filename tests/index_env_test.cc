// IndexEnv: a process forked after its parent ran a disk tier index inherits
// Env::Default()'s thread pools without their threads. Its own index must
// still flush (at Close) and compact: on Env::Default() the first Close
// waited for ever.
//
// These tests fork beside live threads on purpose (fork_child.h says why
// that is avoided elsewhere): the parent's idle RocksDB pool threads are
// the case. An idle pool thread waits on a condition variable and holds no
// lock.
#include "tiers/index_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "disk_test_util.h"
#include "fork_child.h"
#include "test_util.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::TempDir;
using opt4store_test::TestMeta;
using opt4store_test::TestPayload;

DiskTierOptions SmallOptions() {
  DiskTierOptions o;
  o.budget_bytes = 64 << 20;
  o.segment_bytes = 1 << 20;
  return o;
}

// Puts ids [begin, end) into the tier at dir and closes it: the Close
// flushes the index's memtable on a background thread. False on any error.
bool PutAndClose(const std::string& dir, ItemId begin, ItemId end) {
  std::unique_ptr<DiskTier> tier;
  if (!DiskTier::Open(SmallOptions(), dir, &tier).ok()) return false;
  for (ItemId id = begin; id < end; ++id) {
    if (!tier->Put(id, TestMeta(id), TestPayload(id, 0, 2000)).ok()) return false;
  }
  return tier->Close().ok();
}

// Runs fn in a forked child, killed after 60 s; true when it returned true.
template <typename Fn>
bool InForkedChild(Fn fn) {
  // The parent's pool threads, done with their last job, go back to their
  // wait first: idle, as this file assumes. Forked while one still ended a
  // job (freeing its closure), the child would inherit what that thread
  // held then; in one CI run under ASan (2026-11-28), the child's own pool
  // threads never ran the jobs it scheduled.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::fflush(stdout);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    opt4store_test::DieWithParent(parent);
    alarm(60);  // a wait for ever ends the child with SIGALRM
    _exit(fn() ? 0 : 1);
  }
  const int status = opt4store_test::Reap(pid);
  INFO("child status " << status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST_CASE("IndexEnv: a forked child's index flushes at Close and compacts", "[disk][fork]") {
  TempDir dir;
  // The parent's index starts the pools of this process.
  REQUIRE(PutAndClose(dir.File("parent"), 0, 50));
  const std::string child_dir = dir.File("child");
  CHECK(InForkedChild([&] {
    // Ten closes, each a flush: L0 tables past RocksDB's compaction trigger.
    for (ItemId round = 0; round < 10; ++round) {
      if (!PutAndClose(child_dir, round * 30, (round + 1) * 30)) return false;
    }
    std::unique_ptr<DiskTier> tier;
    if (!DiskTier::Open(SmallOptions(), child_dir, &tier).ok()) return false;
    std::string meta, payload;
    for (ItemId id = 0; id < 300; ++id) {
      if (!tier->Get(id, &meta, &payload).ok() || payload != TestPayload(id, 0, 2000)) {
        return false;
      }
    }
    return tier->Close().ok();
  }));
  // And the parent's own pools still work after the fork.
  REQUIRE(PutAndClose(dir.File("parent"), 50, 100));
}

TEST_CASE("IndexEnv: a job scheduled in a forked child runs there", "[disk][fork]") {
  std::atomic<int> ran{0};
  const auto job = [](void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); };
  const auto wait_for = [&](int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (ran.load() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return ran.load() == n;
  };
  IndexEnv()->Schedule(job, &ran, rocksdb::Env::Priority::HIGH);
  REQUIRE(wait_for(1));
  CHECK(InForkedChild([&] {
    IndexEnv()->Schedule(job, &ran, rocksdb::Env::Priority::HIGH);
    IndexEnv()->Schedule(job, &ran, rocksdb::Env::Priority::LOW);
    return wait_for(3);
  }));
}

// Two threads of a process whose pools are not made yet (a fresh process,
// or a child forked from one that used them) open a disk tier each,
// released together. True when both opened and closed.
bool OpenTwoAtOnce(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0) return false;
  std::atomic<bool> go{false};
  std::atomic<int> failed{0};
  auto open = [&](const std::string& path) {
    while (!go.load()) {
    }
    std::unique_ptr<DiskTier> tier;
    if (!DiskTier::Open(SmallOptions(), path, &tier).ok() || !tier->Close().ok()) ++failed;
  };
  std::thread a(open, dir + "/a"), b(open, dir + "/b");
  go = true;
  a.join();
  b.join();
  return failed.load() == 0;
}

TEST_CASE("IndexEnv: two threads that make a process's pools at once both open their tier",
          "[disk][fork]") {
  // The thread that lost the race freed pools whose threads had started:
  // RocksDB's pool asserts that it was joined, and the process aborted (6 of
  // these 10 children before). The first children find no pools; the later
  // ones, their parent's, from another pid.
  TempDir dir;
  constexpr int kChildren = 10;
  int ended_badly = 0;
  for (int k = 0; k < kChildren; ++k) {
    if (k == kChildren / 2) REQUIRE(PutAndClose(dir.File("parent"), 0, 10));
    const std::string child_dir = dir.File("child" + std::to_string(k));
    if (!InForkedChild([&] { return OpenTwoAtOnce(child_dir); })) ++ended_badly;
  }
  CHECK(ended_badly == 0);
}

}  // namespace
}  // namespace opt4store

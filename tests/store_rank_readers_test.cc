// Rank readers (Store::AttachRankReader) and the owner's WaitForRankReaders:
// the close of a store that the local ranks of a host share.
//
// Each test forks its children before the owner opens the store (the
// children wait for the handle; fork_child.h says why).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fork_child.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"

namespace opt4store {
namespace {

using Clock = std::chrono::steady_clock;
using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::OpenStore;
using opt4store_test::PlanIds;
using opt4store_test::ReadRange;
using opt4store_test::ReadTally;
using opt4store_test::Reap;
using opt4store_test::ScratchStore;
using opt4store_test::ShufflePlan;
using opt4store_test::ValueShape;
using opt4store_test::WaitingChild;

constexpr int kExitAttachFailed = 13;
constexpr int kExitReadFailed = 14;
constexpr int kExitCloseFailed = 15;
constexpr int kExitForkFailed = 16;

// Blocks until the child writes its one byte ("attached"); false on EOF.
bool AwaitByte(int fd) {
  char b = 0;
  ssize_t n;
  while ((n = read(fd, &b, 1)) < 0 && errno == EINTR) {
  }
  return n == 1;
}

void SendByte(int fd) {
  const char b = 'a';
  while (write(fd, &b, 1) < 0 && errno == EINTR) {
  }
}

// A child that attaches to the handle it is sent (as a rank reader or a
// plain reader), says so, and then sleeps until it is killed.
WaitingChild ForkIdleReader(bool rank_reader) {
  return ForkWaitingChild([rank_reader](int fd, const std::string& handle) {
    std::unique_ptr<Store> joined;
    const Status a = rank_reader ? Store::AttachRankReader(handle, &joined)
                                 : Store::Attach(handle, &joined);
    if (!a.ok()) return kExitAttachFailed;
    SendByte(fd);
    for (;;) pause();
  });
}

// One epoch of n items, shuffled by seed, that the RAM tier holds whole.
StoreOptions AllInRam(const ScratchStore& scratch, uint64_t n, uint64_t seed) {
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = ShufflePlan(n, 1, seed);
  o.ram_items = n;
  return o;
}

void Kill(pid_t pid) {
  kill(pid, SIGKILL);
  Reap(pid);
}

TEST_CASE("Store: the owner's WaitForRankReaders returns once a slow rank reader closed, and "
          "everything it loaded is on disk",
          "[store][multiprocess]") {
  ScratchStore scratch;
  const uint64_t n = 200;
  const ValueShape shape{1024, 2048};
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = ShufflePlan(n, 1, 7);
  o.ram_items = n / 4;
  o.disk = uint64_t{64} << 20;
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(*o.plan, &ids).ok());
  // It reads the whole epoch, 2 ms of "decode" per miss (every read of
  // epoch 0 misses), so it is still loading when the owner starts to wait.
  WaitingChild child = ForkWaitingChild([&](int, const std::string& handle) {
    std::unique_ptr<Store> joined;
    if (!Store::AttachRankReader(handle, &joined).ok()) return kExitAttachFailed;
    const ReadTally t = ReadRange(joined.get(), ids, 0, n, shape, /*load_us=*/2000);
    if (t.errors > 0 || t.wrong > 0 || t.misses != n) return kExitReadFailed;
    return joined->Close().ok() ? 0 : kExitCloseFailed;
  });
  auto store = OpenStore(o, scratch.path());
  REQUIRE(Go(&child, store->handle()));
  const Status w = store->WaitForRankReaders(1, 60000);
  INFO(w.ToString());
  CHECK(w.ok());
  // The child closed: its every read counted here, and nothing of it runs.
  CHECK(store->Stats().accesses == n);
  const int status = Reap(child.pid);
  close(child.fd);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(store->Close().ok());

  StoreOptions again;
  again.shm_prefix = scratch.prefix();
  auto reopened = OpenStore(again, scratch.path());
  CHECK(reopened->Stats().disk_items == n);
  REQUIRE(reopened->Close().ok());
}

TEST_CASE("Store: WaitForRankReaders gives up on a rank reader that neither reads nor closes, "
          "naming it, and ends as soon as it dies",
          "[store][multiprocess]") {
  ScratchStore scratch;
  const StoreOptions o = AllInRam(scratch, 64, 3);
  WaitingChild rank = ForkIdleReader(/*rank_reader=*/true);
  WaitingChild plain = ForkIdleReader(/*rank_reader=*/false);
  auto store = OpenStore(o, scratch.path());
  REQUIRE(Go(&rank, store->handle()));
  REQUIRE(Go(&plain, store->handle()));
  REQUIRE(AwaitByte(rank.fd));
  REQUIRE(AwaitByte(plain.fd));

  const Status stuck = store->WaitForRankReaders(1, 200);
  INFO(stuck.ToString());
  CHECK(stuck.IsBusy());
  CHECK(stuck.message().find("pid " + std::to_string(rank.pid)) != std::string::npos);
  CHECK(stuck.message().rfind("1 rank reader", 0) == 0);  // not the plain reader
  // One more expected than ever attached: said so.
  const Status missing = store->WaitForRankReaders(2, 100);
  INFO(missing.ToString());
  CHECK(missing.message().rfind("1 of the 2 rank readers expected never attached, and 1 rank "
                                "reader(s) (pid " + std::to_string(rank.pid) + ")", 0) == 0);

  Kill(rank.pid);
  const Clock::time_point start = Clock::now();
  CHECK(store->WaitForRankReaders(1, 60000).ok());
  // Its death, not the timeout, ended the wait.
  CHECK(Clock::now() - start < std::chrono::seconds(20));
  // A plain reader (a DataLoader worker) keeps no owner waiting.
  CHECK(store->WaitForRankReaders(1, 0).ok());
  Kill(plain.pid);
  close(rank.fd);
  close(plain.fd);
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: a forked child of a rank reader that closes leaves its parent's place held",
          "[store][multiprocess]") {
  ScratchStore scratch;
  const StoreOptions o = AllInRam(scratch, 64, 5);
  WaitingChild rank = ForkWaitingChild([](int fd, const std::string& handle) {
    std::unique_ptr<Store> joined;
    if (!Store::AttachRankReader(handle, &joined).ok()) return kExitAttachFailed;
    // As a DataLoader worker forked from a rank does; this process runs no
    // thread of the store yet, so the fork is safe.
    const pid_t worker = fork();
    if (worker < 0) return kExitForkFailed;
    if (worker == 0) _exit(joined->Close().ok() ? 0 : kExitCloseFailed);
    const int status = Reap(worker);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return kExitCloseFailed;
    SendByte(fd);
    for (;;) pause();
  });
  auto store = OpenStore(o, scratch.path());
  REQUIRE(Go(&rank, store->handle()));
  REQUIRE(AwaitByte(rank.fd));
  CHECK(store->WaitForRankReaders(1, 100).IsBusy());
  Kill(rank.pid);
  close(rank.fd);
  CHECK(store->WaitForRankReaders(1, 60000).ok());
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: WaitForRankReaders is the owner's, and a reader gets InvalidArgument",
          "[store][multiprocess]") {
  ScratchStore scratch;
  const StoreOptions o = AllInRam(scratch, 16, 1);
  WaitingChild child = ForkWaitingChild([](int, const std::string& handle) {
    std::unique_ptr<Store> joined;
    if (!Store::AttachRankReader(handle, &joined).ok()) return kExitAttachFailed;
    return joined->WaitForRankReaders(0, 0).IsInvalidArgument() ? 0 : kExitReadFailed;
  });
  auto store = OpenStore(o, scratch.path());
  CHECK(store->WaitForRankReaders(0, 0).ok());  // none expected
  CHECK(store->WaitForRankReaders(1, 50).IsBusy());  // one expected, not attached yet
  REQUIRE(Go(&child, store->handle()));
  const int status = Reap(child.pid);
  close(child.fd);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // It left: its Store's destructor closed it as the child's function returned.
  CHECK(store->WaitForRankReaders(1, 0).ok());
  REQUIRE(store->Close().ok());
  CHECK(store->WaitForRankReaders(0, 0).IsIOError());
}

}  // namespace
}  // namespace opt4store

// Store across processes:
//   - four forked readers (DataLoader workers: batch b goes to worker
//     b % 4) read the plan, Put on a miss and check every value they get;
//     the totals reach the owner's Stats(), and the misses stay within a
//     small margin of one reader's;
//   - a reader that joins through Store::Attach(handle()), as a spawned
//     worker does;
//   - a reader killed with SIGKILL in the middle of its reads blocks neither
//     the other readers nor the owner's Close(), nor, killed between a miss
//     and its Put, a reader that waits for that Put;
//   - a reader whose owner is killed waits for it no more, nor once the
//     owner's Close has taken the last Puts (while its disk tier closes);
//   - kill -9 of the owner while it puts, compacts, or reads with prefetch
//     running: the reopen succeeds, every Get returns exactly the right bytes
//     or NotFound, and Verify is OK.
// Children never use Catch2: they tally, write a report to a pipe and exit
// with a code; the parent asserts.
// Longer than 600 lines because: the fork/kill fixtures (fork_child.h)
// and the cases that need them stay in one binary (a test binary links the
// whole store: about 15 s each on the 2-core CI machine).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/fault_injection_env.h"
#include "fork_child.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using Clock = std::chrono::steady_clock;
using opt4store_test::Child;
using opt4store_test::ForkChild;
using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::IsSample;
using opt4store_test::OpenStore;
using opt4store_test::PlanIds;
using opt4store_test::ReadPositions;
using opt4store_test::ReadRange;
using opt4store_test::ReadTally;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::ShufflePlan;
using opt4store_test::ValueShape;
using opt4store_test::WaitingChild;
using opt4store_test::WorkerPositions;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// Exit codes of reader children.
constexpr int kExitOk = 0;
constexpr int kExitWrongValue = 10;
constexpr int kExitError = 11;
constexpr int kExitIsOwner = 12;
constexpr int kExitAttachFailed = 13;
constexpr int kExitCloseFailed = 14;
constexpr int kExitBadShape = 15;
constexpr int kExitPipe = 16;

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes before `deadline`; false on EOF, error or timeout.
bool ReadAllBefore(int fd, void* data, size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) continue;
    const ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Forked readers start together: each waits at the gate until the parent
// has forked them all, and the parent forks only while the owner's planner
// thread is idle (SettleOwner). A fork while another thread holds a lock
// leaves that lock held forever in the child; glibc's malloc guards against
// it, but this toolchain's ASan allocator does not, and a child of a busy
// owner then hangs in its first allocation. (A real DataLoader forks its
// workers before they read, while the store is idle too.)
class StartGate {
 public:
  StartGate() { REQUIRE(pipe(fds_) == 0); }
  ~StartGate() { CloseAll(); }
  StartGate(const StartGate&) = delete;
  StartGate& operator=(const StartGate&) = delete;

  // In a child: blocks until the parent opens the gate.
  void Wait() {
    close(fds_[1]);
    fds_[1] = -1;
    char go = 0;
    while (read(fds_[0], &go, 1) < 0 && errno == EINTR) {
    }
    close(fds_[0]);
    fds_[0] = -1;
  }
  // In the parent, after the last fork: lets `children` children go.
  void Open(size_t children) {
    const std::string go(children, 'g');
    REQUIRE(WriteAll(fds_[1], go.data(), go.size()));
    CloseAll();
  }

 private:
  void CloseAll() {
    for (int& fd : fds_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  int fds_[2] = {-1, -1};
};

// Returns once the owner's planner has planned what it can and gone idle.
void SettleOwner(Store* store) {
  uint64_t last = UINT64_MAX;
  for (int i = 0; i < 200; ++i) {
    const uint64_t planned = store->Stats().planned_positions;
    if (planned == last) break;
    last = planned;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Waits for pid until `deadline`; past it, kills it. *timed_out says which.
int WaitExit(pid_t pid, Clock::time_point deadline, bool* timed_out) {
  *timed_out = false;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) {
      *timed_out = true;
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string DescribeExit(int status) {
  if (status == -1) return "waitpid failed";
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Reads a reader child's tally from its pipe and reaps it; checks that it
// reported in time, exited cleanly, and never saw a wrong value.
ReadTally CollectReader(const Child& child, Clock::time_point deadline, const std::string& label) {
  ReadTally t;
  const bool got = ReadAllBefore(child.fd, &t, sizeof t, deadline);
  close(child.fd);
  bool timed_out = false;
  const int status = WaitExit(child.pid, deadline, &timed_out);
  INFO(label << ": " << DescribeExit(status) << ", " << t.ToString());
  CHECK_FALSE(timed_out);
  CHECK(got);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == kExitOk);
  CHECK(t.wrong == 0);
  return t;
}

int ExitCodeFor(const ReadTally& t) {
  if (t.wrong > 0) return kExitWrongValue;
  if (t.errors > 0) return kExitError;
  return kExitOk;
}

// Closes `store` in a thread; false when it has not returned within `seconds`
// (the store is then leaked, so that the test can go on and report).
bool CloseWithin(std::unique_ptr<Store>* store, double seconds, Status* status) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto result = std::make_shared<Status>();
  Store* raw = store->get();
  std::thread closer([raw, done, result] {
    *result = raw->Close();
    done->store(true);
  });
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (!done->load() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!done->load()) {
    closer.detach();
    (void)store->release();
    return false;
  }
  closer.join();
  *status = *result;
  return true;
}

// ------------------------------------------------------------ forked readers

TEST_CASE(
    "Store: four forked readers get only right values and their misses stay at the "
    "one-reader count",
    "[store][multiprocess]") {
  const uint64_t n = 400;
  const uint64_t capacity = 120;
  const uint64_t batch = 8;
  const uint64_t workers = 4;
  const PlanSpec plan = ShufflePlan(n, 3, 11);
  const ValueShape shape{2 * kKiB, 0};
  // A miss costs the worker a load from the source, as a decode does. (A
  // worker's Put reaches the RAM tier through the owner's queue; a source
  // that answers in microseconds lets a worker outrun it and lose hits.)
  const uint32_t load_us = 500;
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(plan, &ids).ok());
  const uint64_t total = ids.size();
  const uint64_t belady_misses = total - opt4store_test::BruteForceBeladyHits(ids, capacity);

  auto options = [&](const ScratchStore& scratch) {
    StoreOptions o;
    o.shm_prefix = scratch.prefix();
    o.plan = plan;
    o.ram_items = capacity;
    return o;
  };

  // One reader, in the owner.
  uint64_t one_reader_misses = 0;
  {
    ScratchStore scratch;
    auto store = OpenStore(options(scratch), scratch.path());
    const ReadTally t = ReadRange(store.get(), ids, 0, total, shape, load_us);
    INFO("one reader: " << t.ToString());
    REQUIRE(t.wrong == 0);
    REQUIRE(t.errors == 0);
    one_reader_misses = t.misses;
    REQUIRE(store->Close().ok());
  }

  // Four forked readers; the owner only serves.
  ScratchStore scratch;
  auto store = OpenStore(options(scratch), scratch.path());
  // Forks late on purpose: the test is of the Store a forked worker inherits.
  SettleOwner(store.get());
  StartGate gate;
  std::vector<Child> children;
  for (uint64_t w = 0; w < workers; ++w) {
    children.push_back(ForkChild([&, w](int fd) {
      gate.Wait();
      if (store->IsOwner()) return kExitIsOwner;
      const ReadTally t = ReadPositions(store.get(), ids, WorkerPositions(total, batch, workers, w),
                                        shape, load_us);
      if (!WriteAll(fd, &t, sizeof t)) return kExitPipe;
      // A worker that ends normally runs its Store's destructor: in a forked
      // child, Close() only detaches.
      if (!store->Close().ok()) return kExitCloseFailed;
      return ExitCodeFor(t);
    }));
  }
  gate.Open(children.size());
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(90);
  ReadTally all;
  for (uint64_t w = 0; w < workers; ++w) {
    const ReadTally t = CollectReader(children[w], deadline, "worker " + std::to_string(w));
    INFO("worker " << w << ": " << t.ToString());
    CHECK(t.errors == 0);
    CHECK(t.reads == WorkerPositions(total, batch, workers, w).size());
    all.Add(t);
  }
  REQUIRE(all.reads == total);

  const StoreStats st = store->Stats();
  INFO("stats: accesses " << st.accesses << ", hits_ram " << st.hits_ram << ", source_loads " << st.source_loads
                          << ", puts " << st.puts << ", dropped " << st.puts_dropped << ", drift "
                          << st.drift << ", waits " << st.waits);
  CHECK(st.accesses == total);
  CHECK(st.source_loads == all.misses);
  CHECK(st.hits_ram == all.ram);
  CHECK(st.accesses == st.hits_ram + st.hits_disk + st.source_loads);
  CHECK(st.drift == 0);
  CHECK(st.puts_dropped == 0);
  CHECK(st.puts == all.misses);
  WARN("misses on " << plan.Describe() << ", " << capacity << " items: 1 reader "
                    << one_reader_misses << ", 4 forked readers " << all.misses
                    << ", offline Belady " << belady_misses);
  const uint64_t margin = one_reader_misses / 100 + 8;
  CHECK(all.misses <= one_reader_misses + margin);
  CHECK(all.misses + margin >= one_reader_misses);

  // The workers' Close() left the owner's store working.
  for (ItemId id = 0; id < n; ++id) {
    StringSink sink;
    const Status s = store->Get(kNoPosition, id, &sink);
    INFO("owner Get(" << id << ") after the workers left: " << s.ToString());
    REQUIRE((s.ok() || s.IsNotFound()));
    if (s.ok()) CHECK(IsSample(id, shape, sink.meta, sink.payload));
  }
  REQUIRE(store->Close().ok());
  CHECK(scratch.ShmObjects().empty());
}

// ------------------------------------------------------------ Attach

struct AttachReport {
  ReadTally tally;
  uint64_t accesses_seen = 0;
  char error[200] = {0};
};

TEST_CASE("Store: a reader that joins with Attach(handle()) reads and Puts through the owner",
          "[store][multiprocess]") {
  ScratchStore scratch;
  const uint64_t n = 200;
  const ValueShape shape{1 * kKiB, 3 * kKiB};
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = ShufflePlan(n, 2, 4);
  o.ram_items = n;  // everything fits
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(*o.plan, &ids).ok());
  // Forked before the owner opens its store (fork_child.h); it joins with
  // the handle it is sent.
  WaitingChild child = ForkWaitingChild([&](int fd, const std::string& handle) {
    AttachReport r;
    std::unique_ptr<Store> joined;
    const Status a = Store::Attach(handle, &joined);
    if (!a.ok() || joined == nullptr) {
      std::snprintf(r.error, sizeof r.error, "Attach: %s", a.ToString().c_str());
      WriteAll(fd, &r, sizeof r);
      return kExitAttachFailed;
    }
    if (joined->IsOwner()) return kExitIsOwner;
    if (joined->dataset_size() != n) return kExitBadShape;
    r.tally = ReadRange(joined.get(), ids, 0, n, shape);
    r.accesses_seen = joined->Stats().accesses;
    if (!WriteAll(fd, &r, sizeof r)) return kExitPipe;
    if (!joined->Close().ok()) return kExitCloseFailed;
    return ExitCodeFor(r.tally);
  });
  auto store = OpenStore(o, scratch.path());
  const std::string handle = store->handle();
  REQUIRE_FALSE(handle.empty());
  REQUIRE(Go(&child, handle));
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  AttachReport r;
  const bool got = ReadAllBefore(child.fd, &r, sizeof r, deadline);
  close(child.fd);
  bool timed_out = false;
  const int status = WaitExit(child.pid, deadline, &timed_out);
  INFO("attached reader: " << DescribeExit(status) << ", " << r.tally.ToString() << " " << r.error);
  REQUIRE_FALSE(timed_out);
  REQUIRE(got);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == kExitOk);
  CHECK(r.tally.reads == n);
  CHECK(r.tally.misses == n);  // epoch 0: every id is new
  CHECK(r.tally.wrong == 0);
  CHECK(r.accesses_seen >= n);

  // The attached reader's Puts reach the owner (through the shared queue);
  // once they are in, the owner's epoch 1 is all RAM hits.
  const StoreStats loaded = [&] {
    const Clock::time_point until = Clock::now() + std::chrono::seconds(10);
    StoreStats s = store->Stats();
    while ((s.puts < n || s.ram_items < n) && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = store->Stats();
    }
    return s;
  }();
  INFO("after the reader: puts " << loaded.puts << ", dropped " << loaded.puts_dropped
                                 << ", ram_items " << loaded.ram_items << ", insert failures "
                                 << loaded.ram_insert_failures << ", abandoned "
                                 << loaded.abandoned_positions << ", drift " << loaded.drift
                                 << ", planned " << loaded.planned_positions << ", policy hits "
                                 << loaded.policy_hits << ", frontier " << loaded.position);
  std::string absent;
  for (uint64_t p = n; p < 2 * n; ++p) {
    GetSource where = GetSource::kMiss;
    store->Locate(&ids[p], 1, &where);
    if (where != GetSource::kRam) {
      uint64_t first = 0;
      while (ids[first] != ids[p]) ++first;
      absent += "id " + std::to_string(ids[p]) + " read at " + std::to_string(first) + " and " +
                std::to_string(p) + "; ";
    }
  }
  INFO("not in RAM: " << absent);
  CHECK(loaded.puts == n);
  CHECK(loaded.ram_items == n);
  const ReadTally t = ReadRange(store.get(), ids, n, 2 * n, shape);
  INFO("owner, epoch 1: " << t.ToString());
  CHECK(t.misses == 0);
  CHECK(t.ram == n);
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  const StoreStats st = store->Stats();
  CHECK(st.accesses == 2 * n);
  CHECK(st.accesses == st.hits_ram + st.hits_disk + st.source_loads);
  REQUIRE(store->Close().ok());
}

// ------------------------------------------------------------ a killed reader

TEST_CASE("Store: a reader killed with SIGKILL mid-reads blocks neither the others nor Close()",
          "[store][multiprocess]") {
  ScratchStore scratch;
  const uint64_t n = 300;
  const uint64_t batch = 8;
  const uint64_t workers = 3;
  const uint64_t victim = 1;
  const ValueShape shape{2 * kKiB, 2 * kKiB};
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = ShufflePlan(n, 4, 8);
  o.ram_items = 100;
  // A short look-ahead: the survivors run far past the victim's stuck
  // positions, beyond the planner's depth.
  o.prefetch_depth = 64;
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(*o.plan, &ids).ok());
  const uint64_t total = ids.size();

  // The readers are forked before the owner opens its store (fork_child.h)
  // and join with the handle they are sent.
  std::vector<WaitingChild> children;
  for (uint64_t w = 0; w < workers; ++w) {
    children.push_back(ForkWaitingChild([&, w](int fd, const std::string& handle) {
      std::unique_ptr<Store> store;
      if (!Store::Attach(handle, &store).ok()) return kExitAttachFailed;
      const std::vector<uint64_t> mine = WorkerPositions(total, batch, workers, w);
      ReadTally t;
      for (size_t i = 0; i < mine.size(); ++i) {
        opt4store_test::ReadOne(store.get(), mine[i], ids[mine[i]], shape, &t);
        if (w != victim) continue;
        if (i == 5 * batch) {
          const char ready = 1;
          if (!WriteAll(fd, &ready, 1)) return kExitPipe;
        }
        if (i % batch == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      }
      if (w == victim) {
        for (;;) pause();  // killed here at the latest
      }
      if (!WriteAll(fd, &t, sizeof t)) return kExitPipe;
      return ExitCodeFor(t);
    }));
  }
  auto store = OpenStore(o, scratch.path());
  for (WaitingChild& child : children) REQUIRE(Go(&child, store->handle()));
  // Kill the victim once it is well into its reads.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(90);
  char ready = 0;
  REQUIRE(ReadAllBefore(children[victim].fd, &ready, 1, deadline));
  std::mt19937 rng(31);
  std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 40));
  REQUIRE(kill(children[victim].pid, SIGKILL) == 0);
  {
    bool timed_out = false;
    const int status = WaitExit(children[victim].pid, deadline, &timed_out);
    close(children[victim].fd);
    INFO("victim: " << DescribeExit(status));
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  }
  // The survivors finish, with right values only.
  uint64_t survivor_reads = 0;
  for (uint64_t w = 0; w < workers; ++w) {
    if (w == victim) continue;
    const ReadTally t = CollectReader(children[w], deadline, "survivor " + std::to_string(w));
    INFO("survivor " << w << ": " << t.ToString());
    CHECK(t.reads == WorkerPositions(total, batch, workers, w).size());
    survivor_reads += t.reads;
  }
  // The owner goes on: reads, then closes in bounded time.
  for (ItemId id = 0; id < n; id += 7) {
    StringSink sink;
    const Status s = store->Get(kNoPosition, id, &sink);
    INFO("owner Get(" << id << "): " << s.ToString());
    REQUIRE((s.ok() || s.IsNotFound()));
    if (s.ok()) CHECK(IsSample(id, shape, sink.meta, sink.payload));
  }
  const StoreStats st = store->Stats();
  INFO("accesses " << st.accesses << ", survivors' reads " << survivor_reads
                   << ", abandoned positions " << st.abandoned_positions << ", position "
                   << st.position);
  CHECK(st.accesses >= survivor_reads + 5 * batch);
  Status closed;
  const bool returned = CloseWithin(&store, 30, &closed);
  INFO("Close: " << closed.ToString());
  REQUIRE(returned);
  CHECK(closed.ok());
}

// ------------------------------------------------------------ kill -9 the owner

enum class CrashKind { kPut, kCompact, kRead };

const char* CrashKindName(CrashKind k) {
  switch (k) {
    case CrashKind::kPut:
      return "put";
    case CrashKind::kCompact:
      return "put+compact";
    case CrashKind::kRead:
      return "read with prefetch";
  }
  return "?";
}

// ------------------------------------------------------------ a killed owner

// A reader whose owner is killed (no Close, so no owner_closed flag) goes on
// at once: it sees the owner's process gone, sends no fetch and waits for
// no plan ask or Put any more, and loads what it misses itself. Before, each
// of its waits ran to its 2 s timeout (a DDP rank took about 15 s more for
// 2 epochs of 512 reads after its owner rank was killed; fault campaign).
// The store of the tests of an owner that stops serving: n ids over 3
// shuffled epochs (*ids: the plan), a quarter in RAM, all on disk.
StoreOptions OwnerLossOptions(const ScratchStore& scratch, uint64_t n, std::vector<ItemId>* ids) {
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = ShufflePlan(n, 3, 11);
  o.ram_items = n / 4;
  o.disk = 8 * kMiB;
  REQUIRE(PlanIds(*o.plan, ids).ok());
  return o;
}

// An owner in a forked child (fork it before this process opens anything):
// it opens the store at `path`, sends its handle, then returns then(store,
// fd) as its exit code.
template <typename Then>
Child ForkOwner(const StoreOptions& o, const std::string& path, Then then) {
  return ForkChild([&](int fd) {
    std::unique_ptr<Store> store;
    if (!Store::Open(o, path, &store).ok()) return 2;
    const std::string handle = store->handle();
    const uint32_t size = static_cast<uint32_t>(handle.size());
    if (!WriteAll(fd, &size, sizeof size) || !WriteAll(fd, handle.data(), size)) return 3;
    return then(store.get(), fd);
  });
}

// A reader attached to a ForkOwner child's store, through the handle it sent.
std::unique_ptr<Store> AttachToOwner(const Child& owner) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  uint32_t size = 0;
  REQUIRE(ReadAllBefore(owner.fd, &size, sizeof size, deadline));
  std::string handle(size, '\0');
  REQUIRE(ReadAllBefore(owner.fd, handle.data(), size, deadline));
  std::unique_ptr<Store> reader;
  REQUIRE(Store::Attach(handle, &reader).ok());
  return reader;
}

// The reader reads epoch 0's first half, and waits until the owner has taken
// those Puts and written them to its disk tier, whose places readers read.
ReadTally ReadFirstHalfToDisk(Store* reader, const std::vector<ItemId>& ids, uint64_t n,
                              const ValueShape& shape) {
  ReadTally t = ReadRange(reader, ids, 0, n / 2, shape);
  REQUIRE(reader->WaitForPuts(10000).ok());
  const Clock::time_point written_by = Clock::now() + std::chrono::seconds(10);
  while (reader->Stats().disk_items < n / 2 && Clock::now() < written_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return t;
}

// Epoch 0's second half, read while the owner takes no more Puts (stopped,
// or closing), added to `first_half`: right values, no errors.
void CheckRestOfEpoch0(Store* reader, const std::vector<ItemId>& ids, uint64_t n,
                       const ValueShape& shape, ReadTally first_half) {
  first_half.Add(ReadRange(reader, ids, n / 2, n, shape));
  INFO("epoch 0: " << first_half.ToString());
  CHECK(first_half.wrong == 0);
  CHECK(first_half.errors == 0);
}

// Epochs 1-2 read by a reader whose owner no longer serves (killed, or
// closing): right values, disk hits from the segment files, and no wait run
// to its timeout (one alone takes 2 s).
void CheckReadsWithoutOwner(Store* reader, const std::vector<ItemId>& ids, uint64_t n,
                            const ValueShape& shape) {
  const Clock::time_point t0 = Clock::now();
  const ReadTally after = ReadRange(reader, ids, n, 3 * n, shape);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const StoreStats st = reader->Stats();
  INFO("epochs 1-2 without the owner: " << after.ToString() << " in " << seconds
                                        << " s; expect timeouts " << st.expect_timeouts
                                        << ", fetch timeouts " << st.fetch_timeouts
                                        << ", plan waits " << st.plan_waits);
  CHECK(after.reads == 2 * n);
  CHECK(after.wrong == 0);
  CHECK(after.errors == 0);
  CHECK(after.disk > 0);
  CHECK(st.expect_timeouts == 0);
  CHECK(st.fetch_timeouts == 0);
  CHECK(seconds < 2.0);
}

TEST_CASE("Store: a reader whose owner was killed waits for it no more and its values stay right",
          "[store][multiprocess][crash]") {
  ScratchStore scratch;
  const uint64_t n = 256;
  const ValueShape shape{1 * kKiB, 3 * kKiB};
  std::vector<ItemId> ids;
  StoreOptions o = OwnerLossOptions(scratch, n, &ids);
  Child owner = ForkOwner(o, scratch.path(), [](Store*, int) {
    for (;;) pause();  // until killed
    return 0;
  });
  std::unique_ptr<Store> reader = AttachToOwner(owner);
  close(owner.fd);
  // Epoch 0's second half: Puts the owner, stopped, never takes; epoch 1's
  // reads of those items look for them.
  ReadTally before = ReadFirstHalfToDisk(reader.get(), ids, n, shape);
  REQUIRE(kill(owner.pid, SIGSTOP) == 0);
  CheckRestOfEpoch0(reader.get(), ids, n, shape, before);
  REQUIRE(kill(owner.pid, SIGKILL) == 0);
  opt4store_test::Reap(owner.pid);
  // Each wait stopped on seeing the owner's process gone.
  CheckReadsWithoutOwner(reader.get(), ids, n, shape);
  CHECK(reader->Close().ok());
  scratch.RemoveShmLeftovers();
}

TEST_CASE("Store: readers wait no more once the owner's Close has taken the last Puts",
          "[store][multiprocess]") {
  ScratchStore scratch;
  const uint64_t n = 256;
  const ValueShape shape{1 * kKiB, 3 * kKiB};
  std::vector<ItemId> ids;
  StoreOptions o = OwnerLossOptions(scratch, n, &ids);
  // The owner closes when told to, and stalls 5 s in its disk tier's sync
  // (Close's last step), after telling the reader it is there.
  StartGate close_now;
  FaultInjectionEnv env;
  o.env = &env;
  Child closing = ForkOwner(o, scratch.path(), [&](Store* store, int fd) {
    close_now.Wait();
    env.Inject(Fault::Call(Fault::Op::kSync, [fd] {
      const char in_sync = 's';
      WriteAll(fd, &in_sync, 1);
      std::this_thread::sleep_for(std::chrono::seconds(5));
    }).Times(1));
    return store->Close().ok() ? 0 : 4;
  });
  std::unique_ptr<Store> reader = AttachToOwner(closing);
  ReadTally before = ReadFirstHalfToDisk(reader.get(), ids, n, shape);
  close_now.Open(1);
  char in_sync = 0;
  REQUIRE(ReadAllBefore(closing.fd, &in_sync, 1, Clock::now() + std::chrono::seconds(30)));
  // The owner is in its disk tier's close: epoch 0's second half goes into
  // a queue nobody drains, and epochs 1-2 look for it.
  CheckRestOfEpoch0(reader.get(), ids, n, shape, before);
  CheckReadsWithoutOwner(reader.get(), ids, n, shape);
  close(closing.fd);
  const int status = opt4store_test::Reap(closing.pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(reader->Close().ok());
  scratch.RemoveShmLeftovers();
}

TEST_CASE("Store: a reader killed between its miss and its Put keeps nobody waiting for it",
          "[store][multiprocess][crash]") {
  ScratchStore scratch;
  const uint64_t n = 64;
  const ValueShape shape{1 * kKiB, 3 * kKiB};
  // One epoch that reads every id twice: a read of an id's second lap waits
  // for the Put of the reader of its first.
  auto ids = std::make_shared<std::vector<ItemId>>();
  for (int lap = 0; lap < 2; ++lap) {
    for (ItemId id = 0; id < n; ++id) ids->push_back(id);
  }
  PlanSpec plan;
  plan.kind = SamplerKind::kExplicit;
  plan.dataset_size = n;
  plan.ids = ids;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = plan;
  o.ram_items = n;  // every first read is admitted: its Put is expected
  // The owner's planner (which takes the queued Puts) can be held.
  std::atomic<bool> hold{false}, holding{false};
  o.planner_turn_for_testing = [&] {
    while (hold.load()) {
      holding.store(true);
      usleep(1000);
    }
    holding.store(false);
  };
  // A reader misses positions 1..16, sends the Puts of the first 8 and is
  // killed before it sends the others.
  const uint64_t missed = 16, put = 8;
  WaitingChild doomed = ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> reader;
    if (!Store::Attach(handle, &reader).ok()) return kExitAttachFailed;
    for (uint64_t p = 1; p <= missed; ++p) {
      StringSink sink;
      if (!reader->Get(p, (*ids)[p], &sink).IsNotFound()) return kExitError;
    }
    for (uint64_t p = 1; p <= put; ++p) {
      const ItemId id = (*ids)[p];
      if (!reader->Put(p, id, SampleMeta(id), SamplePayload(id, shape)).ok()) return kExitError;
    }
    const char sent = 's';
    if (!WriteAll(fd, &sent, 1)) return kExitPipe;
    for (;;) pause();  // killed
    return kExitOk;
  });
  auto store = OpenStore(o, scratch.path());
  const Clock::time_point planned_by = Clock::now() + std::chrono::seconds(10);
  while (store->Stats().planned_positions < ids->size() && Clock::now() < planned_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  hold.store(true);  // the 8 Puts stay queued until the release below
  while (!holding.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(Go(&doomed, store->handle()));
  char sent = 0;
  REQUIRE(ReadAllBefore(doomed.fd, &sent, 1, Clock::now() + std::chrono::seconds(30)));
  close(doomed.fd);
  REQUIRE(kill(doomed.pid, SIGKILL) == 0);
  opt4store_test::Reap(doomed.pid);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    hold.store(false);
  });

  // The second lap's reads of those ids, in the owner: the 8 Puts the dead
  // reader sent are found once the owner takes them; the other 8 are loaded.
  const Clock::time_point t0 = Clock::now();
  const ReadTally t = ReadRange(store.get(), *ids, n + 1, n + 1 + missed, shape);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  release.join();
  const StoreStats st = store->Stats();
  INFO(t.ToString() << " in " << seconds << " s; expect waits " << st.expect_waits
                    << ", expect timeouts " << st.expect_timeouts);
  CHECK(t.reads == missed);
  CHECK(t.ram == put);
  CHECK(t.misses == missed - put);
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(st.expect_timeouts == 0);  // no wait ran to its 2 s
  CHECK(seconds < 1.5);
  REQUIRE(store->Close().ok());
}

// Exit codes of the crash child (it is meant to die by SIGKILL).
constexpr int kCrashOpenFailed = 2;
constexpr int kCrashPutFailed = 3;
constexpr int kCrashFlushFailed = 4;
constexpr int kCrashCompactFailed = 5;
constexpr int kCrashWrongValue = 6;
constexpr int kCrashReadError = 7;

TEST_CASE(
    "Store crash: after kill -9 of the owner (putting or compacting or reading) a reopen "
    "returns the right bytes or NotFound and never wrong bytes",
    "[store][crash]") {
  ScratchStore scratch;
  const uint64_t n = 2000;
  const ValueShape shape{1 * kKiB, 7 * kKiB};  // about 9 MB in all: over the disk budget
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = ShufflePlan(n, 10, 3);
  o.ram = 2 * kMiB;
  o.staging = 1 * kMiB;  // inside ram: the policy gets 1 MiB
  o.disk = 4 * kMiB;  // the disk tier must evict and compact
  o.queue_bytes = 8 * kMiB;
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(*o.plan, &ids).ok());

  // Every round's owner is forked here, before this process has opened a
  // store (a reopen leaves RocksDB's threads behind: fork_child.h), and
  // opens the store when its round begins.
  std::mt19937 rng(20240611);
  constexpr int kRounds = 9;
  std::vector<WaitingChild> owners;
  std::vector<int> delays_ms;
  for (int round = 0; round < kRounds; ++round) {
    const CrashKind kind = static_cast<CrashKind>(round % 3);
    delays_ms.push_back(30 + static_cast<int>(rng() % 900));
    const uint64_t child_seed = rng();
    owners.push_back(ForkWaitingChild([&, kind, child_seed](int, const std::string&) {
      std::unique_ptr<Store> store;
      if (!Store::Open(o, scratch.path(), &store).ok()) return kCrashOpenFailed;
      std::mt19937_64 r(child_seed);
      if (kind == CrashKind::kRead) {
        ReadTally t;
        for (uint64_t p = store->ResumePosition(); p < ids.size(); ++p) {
          opt4store_test::ReadOne(store.get(), p, ids[p], shape, &t);
          if (t.wrong > 0) return kCrashWrongValue;
          if (t.errors > 0) return kCrashReadError;
          if (p % 100 == 99 && !store->Flush().ok()) return kCrashFlushFailed;
        }
        for (;;) pause();
      }
      for (uint64_t k = 0;; ++k) {
        const ItemId id = static_cast<ItemId>(r() % n);
        if (!store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok()) {
          return kCrashPutFailed;
        }
        if (k % 64 == 63 && !store->Flush().ok()) return kCrashFlushFailed;
        if (kind == CrashKind::kCompact && k % 16 == 15) {
          const Status c = store->Compact();
          if (!c.ok() && !c.IsNoSpace()) return kCrashCompactFailed;
        }
      }
    }));
    close(owners.back().fd);
  }

  uint64_t most_found = 0;
  for (int round = 0; round < kRounds; ++round) {
    const CrashKind kind = static_cast<CrashKind>(round % 3);
    const int delay_ms = delays_ms[round];
    WaitingChild& child = owners[round];
    REQUIRE(Go(&child));
    INFO("round " << round << " (" << CrashKindName(kind) << "), killed after " << delay_ms
                  << " ms");
    // Sleep, watching for an early death (which would be a failure).
    const Clock::time_point kill_at = Clock::now() + std::chrono::milliseconds(delay_ms);
    int status = 0;
    bool died = false;
    while (!died && Clock::now() < kill_at) {
      died = waitpid(child.pid, &status, WNOHANG) == child.pid;
      if (!died) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!died) {
      REQUIRE(kill(child.pid, SIGKILL) == 0);
      REQUIRE(waitpid(child.pid, &status, 0) == child.pid);
    }
    INFO("child: " << DescribeExit(status));
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);

    // Reopen: it must succeed, and no read may return wrong bytes.
    std::unique_ptr<Store> store;
    const Status s = Store::Open(o, scratch.path(), &store);
    INFO("reopen: " << s.ToString());
    REQUIRE(s.ok());
    uint64_t found = 0;
    for (ItemId id = 0; id < n; ++id) {
      StringSink sink;
      GetSource source = GetSource::kMiss;
      const Status g = store->Get(kNoPosition, id, &sink, &source);
      INFO("Get(" << id << "): " << g.ToString());
      REQUIRE((g.ok() || g.IsNotFound()));
      if (g.ok()) {
        REQUIRE(IsSample(id, shape, sink.meta, sink.payload));
        ++found;
      }
    }
    StoreVerifyReport report;
    const Status v = store->Verify(&report);
    std::string bad;
    for (const auto& b : report.bad) {
      bad += "[id " + std::to_string(b.id) + " at " + b.where + ": " + b.status.ToString() + "] ";
    }
    INFO("Verify: " << v.ToString() << ", " << report.records_checked << " records checked "
                    << bad);
    REQUIRE(v.ok());
    CHECK(report.bad.empty());
    const StoreStats st = store->Stats();
    WARN("crash round " << round << " (" << CrashKindName(kind) << ", " << delay_ms << " ms): "
                        << found << " of " << n << " ids found after reopen, " << st.disk_items
                        << " on disk, " << report.records_checked << " records verified");
    most_found = std::max(most_found, found);
    REQUIRE(store->Close().ok());
    store.reset();
    scratch.RemoveShmLeftovers();  // the killed owner's segments
  }
  // The children got far enough to store something that survived.
  CHECK(most_found > 50);
}

}  // namespace
}  // namespace opt4store

// A reader that waits for another reader's Put of the item it needs must
// get the value, from RAM or from the disk tier, and not load it again. A
// Put the RAM tier cannot take (no room in its arena: fragmentation, a full
// /dev/shm, here an item bigger than the arena) goes to the disk tier only;
// the waiting reader is woken once the disk tier has it. Woken before (as
// the store did until 2026-11-28), it found the item nowhere and loaded it
// from the source a second time. A Put of an item the policy does not keep
// in RAM is waited for in the next epoch too, whether it is still queued
// (a worker's) or being written (the owner's own): until 2026-11-28 no
// expectation covered it, and a reader of the next epoch that came before
// its record loaded it again (a flaky count in CI: 33 source loads for 32
// images). A read that must load the item again (the policy let it go,
// or the last epoch left its loading read unread) is waited for whenever
// the earlier expectation goes. And a read at position 0 is waited for as
// any other, and so is one of an item the disk tier's budget pushed out.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "disk_test_util.h"
#include "fork_child.h"
#include "opt4store/read_sink.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::IsSample;
using opt4store_test::ReadPositions;
using opt4store_test::ReadRange;
using opt4store_test::ReadTally;
using opt4store_test::OpenStore;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::Reap;
using opt4store_test::ValueShape;
using opt4store_test::WaitingChild;

constexpr uint64_t kMiB = 1024 * 1024;
const ValueShape kBig{24 * kMiB, 0};  // more than the arena holds

// Two items, a disk tier, and a RAM tier whose arena kBig does not fit in.
StoreOptions SmallArenaOptions(const ScratchStore& scratch) {
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = 2;
  // A capacity in items: the planner steps a position before its item's
  // size is known (with one in bytes it waits for the Put that brings it).
  // The arena is sized for items of up to 8 MiB, plus staging: 17 MiB.
  o.ram_items = 2;
  o.staging = 1 * kMiB;
  o.disk = 256 * kMiB;
  o.compression = StoreOptions::Compression::kNone;
  return o;
}

// Parks the owner's planner thread between its turns while held: the
// thread that takes the queued Puts (and writes them to the disk tier) and
// writes the owner's own Puts from its pending writes.
class PlannerHold {
 public:
  explicit PlannerHold(StoreOptions* o) {
    o->planner_turn_for_testing = [hold = hold_, parked = parked_] {
      while (hold->load()) {
        parked->store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      parked->store(false);
    };
  }
  void Park() {
    hold_->store(true);
    for (int i = 0; i < 2000 && !parked_->load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(parked_->load());
  }
  void Release() { hold_->store(false); }

 private:
  std::shared_ptr<std::atomic<bool>> hold_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> parked_ = std::make_shared<std::atomic<bool>>(false);
};

// Opens a store whose RAM tier cannot hold item 1 and reads up to the
// point where a reader thread waits for item 1's Put from position 1; then
// put() sends that Put, and the reader must get the value from the disk
// tier, with no second source load.
void ExpectDiskReadAfterPut(const ScratchStore& scratch,
                            const std::function<void(Store*)>& put) {
  auto store = OpenStore(SmallArenaOptions(scratch), scratch.path());
  // Item 1 at positions 1 and 2: the policy keeps the Put of position 1
  // for the read at position 2, whose reader waits for it. (Position 0
  // reads a small item 0 first.)
  PlanSpec plan;
  plan.kind = SamplerKind::kExplicit;
  plan.dataset_size = 2;
  plan.ids = std::make_shared<const std::vector<ItemId>>(std::vector<ItemId>{0, 1, 1});
  REQUIRE(store->SetPlan(plan).ok());
  const ValueShape small{1024, 0};
  StringSink sink;
  REQUIRE(store->Get(0, 0, &sink).IsNotFound());
  REQUIRE(store->Put(0, 0, SampleMeta(0), SamplePayload(0, small)).ok());
  REQUIRE(store->Get(1, 1, &sink).IsNotFound());  // the loader's read: a miss

  Status waited;
  GetSource waited_source = GetSource::kMiss;
  StringSink waited_value;
  std::thread reader([&] { waited = store->Get(2, 1, &waited_value, &waited_source); });
  StoreStats st = store->Stats();
  for (int i = 0; i < 400 && st.expect_waits == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    st = store->Stats();
  }
  const bool reader_waits = st.expect_waits == 1;
  if (reader_waits) put(store.get());
  reader.join();
  REQUIRE(reader_waits);

  INFO(waited.ToString());
  REQUIRE(waited.ok());
  CHECK(waited_source == GetSource::kDisk);
  CHECK(IsSample(1, kBig, waited_value.meta, waited_value.payload));
  st = store->Stats();
  CHECK(st.ram_insert_failures >= 1);  // the Put the arena could not take
  CHECK(st.source_loads == 2);         // positions 0 and 1
  CHECK(st.hits_disk == 1);
  CHECK(st.expect_timeouts == 0);
  REQUIRE(store->Close().ok());
}

}  // namespace

TEST_CASE("Store: a reader waiting for a Put that RAM cannot take reads it from disk",
          "[store][faults]") {
  ScratchStore scratch;
  // The owner's own Put: its planner thread writes it to the disk tier.
  ExpectDiskReadAfterPut(scratch, [](Store* store) {
    REQUIRE(store->Put(1, 1, SampleMeta(1), SamplePayload(1, kBig)).ok());
  });
}

TEST_CASE("Store: a reader waiting for a worker's Put that RAM cannot take reads it from disk",
          "[store][faults][multiprocess]") {
  ScratchStore scratch;
  // A worker's Put, through the queue: the planner thread takes it and
  // writes it to the disk tier at once.
  WaitingChild worker = ForkWaitingChild([](int, const std::string& handle) {
    std::unique_ptr<Store> joined;
    if (!Store::Attach(handle, &joined).ok()) return 1;
    if (!joined->Put(1, 1, SampleMeta(1), SamplePayload(1, kBig)).ok()) return 2;
    return joined->Close().ok() ? 0 : 3;
  });
  int status = -1;
  ExpectDiskReadAfterPut(scratch, [&](Store* store) {
    REQUIRE(Go(&worker, store->handle()));
    status = Reap(worker.pid);
  });
  if (status == -1) {  // never let go: it ends with kExitNoGo
    close(worker.go_fd);
    status = Reap(worker.pid);
  }
  close(worker.fd);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("Store: a read in the next epoch finds a Put still on its way to the disk tier",
          "[store][faults]") {
  ScratchStore scratch;
  StoreOptions o = SmallArenaOptions(scratch);
  PlannerHold planner(&o);  // parked, it leaves the Put in the owner's pending writes
  auto store = OpenStore(o, scratch.path());
  // Two epochs of two: item 1 at positions 1 and 2.
  PlanSpec plan;
  plan.kind = SamplerKind::kExplicit;
  plan.dataset_size = 2;
  plan.epoch_length = 2;
  plan.ids = std::make_shared<const std::vector<ItemId>>(std::vector<ItemId>{0, 1, 1, 0});
  REQUIRE(store->SetPlan(plan).ok());
  const ValueShape small{1024, 0};
  StringSink sink;
  REQUIRE(store->Get(0, 0, &sink).IsNotFound());
  REQUIRE(store->Put(0, 0, SampleMeta(0), SamplePayload(0, small)).ok());
  planner.Park();
  REQUIRE(store->Get(1, 1, &sink).IsNotFound());
  REQUIRE(store->Put(1, 1, SampleMeta(1), SamplePayload(1, kBig)).ok());  // RAM cannot take it

  StringSink next_epoch;
  GetSource source = GetSource::kMiss;
  const Status s = store->Get(2, 1, &next_epoch, &source);
  planner.Release();
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(source == GetSource::kDisk);
  CHECK(IsSample(1, kBig, next_epoch.meta, next_epoch.payload));
  const StoreStats st = store->Stats();
  CHECK(st.source_loads == 2);  // positions 0 and 1
  REQUIRE(store->Close().ok());
}

namespace {

// Eight items, two epochs in the same order, RAM for one item and a disk
// tier: OPT keeps item 0 for position 8 and admits none of the others (each
// is needed later than the one it holds), so items 1-7 reach the next epoch
// through the disk tier only, and no admission expects their Puts.
constexpr uint64_t kItems = 8;
const ValueShape kSmall{1024, 3072};

StoreOptions OneItemRamOptions(const ScratchStore& scratch, std::vector<ItemId>* ids) {
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (ItemId id = 0; id < kItems; ++id) ids->push_back(id);
  }
  PlanSpec plan;
  plan.kind = SamplerKind::kExplicit;
  plan.dataset_size = kItems;
  plan.epoch_length = kItems;
  plan.ids = std::make_shared<const std::vector<ItemId>>(*ids);
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = plan;
  o.ram_items = 1;
  o.disk = 64 * kMiB;
  o.compression = StoreOptions::Compression::kNone;
  return o;
}

void AwaitWholePlan(Store* store, uint64_t positions) {
  StoreStats st = store->Stats();
  for (int i = 0; i < 2000 && st.planned_positions < positions; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    st = store->Stats();
  }
  REQUIRE(st.planned_positions == positions);
}

// A worker in a process of its own (so that it cannot see the owner's
// pending writes): once let go, it reads positions [begin, end) of ids,
// Puts what it misses, and sends its tally.
WaitingChild ForkTallyWorker(const std::vector<ItemId>& ids, uint64_t begin, uint64_t end) {
  return ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> joined;
    if (!Store::Attach(handle, &joined).ok()) return 1;
    const ReadTally t = ReadRange(joined.get(), ids, begin, end, kSmall);
    return write(fd, &t, sizeof t) == static_cast<ssize_t>(sizeof t) ? 0 : 2;
  });
}

// Lets the worker go, and returns its tally once it has ended.
ReadTally RunTallyWorker(WaitingChild* worker, Store* store) {
  REQUIRE(Go(worker, store->handle()));
  ReadTally t;
  const bool received = read(worker->fd, &t, sizeof t) == static_cast<ssize_t>(sizeof t);
  close(worker->fd);
  const int status = Reap(worker->pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(received);
  return t;
}

// Epoch 1, read while the planner is parked and let go 300 ms in: item 0
// from RAM, items 1-7 from the disk tier, none loaded again, no wait run
// to its end.
void CheckNextEpoch(PlannerHold* planner, Store* store,
                    const std::function<ReadTally()>& read_next_epoch) {
  std::thread release([planner] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    planner->Release();
  });
  const ReadTally next = read_next_epoch();
  release.join();
  const StoreStats st = store->Stats();
  INFO(next.ToString() << "; expect timeouts " << st.expect_timeouts);
  CHECK(next.misses == 0);
  CHECK(next.ram == 1);
  CHECK(next.disk == kItems - 1);
  CHECK(next.wrong == 0);
  CHECK(next.errors == 0);
  CHECK(st.source_loads == kItems);
  CHECK(st.expect_timeouts == 0);
}

}  // namespace

TEST_CASE("Store: a read in the next epoch waits for a worker's queued Put bound for disk only",
          "[store][faults][multiprocess]") {
  ScratchStore scratch;
  std::vector<ItemId> ids;
  StoreOptions o = OneItemRamOptions(scratch, &ids);
  PlannerHold planner(&o);  // parked, it leaves the worker's Puts queued
  WaitingChild worker = ForkTallyWorker(ids, 0, kItems);  // epoch 0's
  auto store = OpenStore(o, scratch.path());
  AwaitWholePlan(store.get(), ids.size());
  planner.Park();
  CHECK(RunTallyWorker(&worker, store.get()).misses == kItems);
  // Epoch 1, read by the owner while the Puts are still queued, item 0
  // last (its wait, for an admitted item's Put, would wait for them all):
  // each read waits until the planner has taken them.
  CheckNextEpoch(&planner, store.get(), [&] {
    std::vector<uint64_t> positions;
    for (uint64_t p = kItems + 1; p < 2 * kItems; ++p) positions.push_back(p);
    positions.push_back(kItems);
    return ReadPositions(store.get(), ids, positions, kSmall);
  });
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: a worker's read in the next epoch waits for the owner's Put being written",
          "[store][faults][multiprocess]") {
  ScratchStore scratch;
  std::vector<ItemId> ids;
  StoreOptions o = OneItemRamOptions(scratch, &ids);
  PlannerHold planner(&o);  // parked, it leaves the owner's Puts unwritten
  WaitingChild worker = ForkTallyWorker(ids, kItems, 2 * kItems);  // epoch 1's
  auto store = OpenStore(o, scratch.path());
  AwaitWholePlan(store.get(), ids.size());
  planner.Park();
  // Epoch 0, read by the owner (a main process with no workers, or DDP's
  // rank 0): its Puts of items 1-7 wait in its pending writes.
  CHECK(ReadRange(store.get(), ids, 0, kItems, kSmall).misses == kItems);
  CheckNextEpoch(&planner, store.get(), [&] { return RunTallyWorker(&worker, store.get()); });
  REQUIRE(store->Close().ok());
}

namespace {

const ValueShape kSmall1K{1024, 0};

// An owner store with RAM for one item, over `plan` (ids below 4), planned
// to its end before any read. With `disk` bytes, a disk tier of that budget
// whose Puts are written (and evict) before they return.
std::unique_ptr<Store> OneItemRamStore(const ScratchStore& scratch, std::vector<ItemId> plan,
                                       uint64_t epoch_length, uint64_t disk = 0) {
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = 4;
  o.ram_items = 1;
  o.disk = disk;
  o.sync = StoreOptions::SyncMode::kEveryPut;
  o.compression = StoreOptions::Compression::kNone;
  auto store = OpenStore(o, scratch.path());
  PlanSpec spec;
  spec.kind = SamplerKind::kExplicit;
  spec.dataset_size = 4;
  spec.epoch_length = epoch_length;
  const uint64_t positions = plan.size();
  spec.ids = std::make_shared<const std::vector<ItemId>>(std::move(plan));
  REQUIRE(store->SetPlan(spec).ok());
  AwaitWholePlan(store.get(), positions);
  return store;
}

// A miss at `loads`, whose Put is held back while a reader of `waits` (a
// later read of the same id) must wait for it and get it from RAM.
void CheckLaterReadWaits(Store* store, uint64_t loads, uint64_t waits, ItemId id,
                         ValueShape shape = kSmall1K) {
  StringSink sink;
  REQUIRE(store->Get(loads, id, &sink).IsNotFound());
  const uint64_t waits_before = store->Stats().expect_waits;
  Status waited;
  GetSource source = GetSource::kMiss;
  StringSink value;
  std::thread reader([&] { waited = store->Get(waits, id, &value, &source); });
  StoreStats st = store->Stats();
  for (int i = 0; i < 400 && st.expect_waits == waits_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    st = store->Stats();
  }
  REQUIRE(store->Put(loads, id, SampleMeta(id), SamplePayload(id, shape)).ok());
  reader.join();
  CHECK(st.expect_waits == waits_before + 1);
  INFO(waited.ToString());
  REQUIRE(waited.ok());
  CHECK(source == GetSource::kRam);
  CHECK(IsSample(id, shape, value.meta, value.payload));
  CHECK(store->Stats().expect_timeouts == 0);
}

// Reads `position` as a worker does: on a miss, loads and Puts.
void ReadOrLoad(Store* store, uint64_t position, ItemId id, ValueShape shape = kSmall1K) {
  StringSink sink;
  if (store->Get(position, id, &sink).IsNotFound()) {
    REQUIRE(store->Put(position, id, SampleMeta(id), SamplePayload(id, shape)).ok());
  }
}

}  // namespace

TEST_CASE("Store: a later read that loads an item again is waited for after an earlier Put",
          "[store]") {
  // OPT with room for one: item 0 admitted at 0, evicted at 1 for item 1,
  // admitted again at 3 and kept for 4. The planner steps position 3 while
  // position 0's Put is pending, so 3's expectation waits behind 0's; 0's
  // Put is not kept (the policy let it go at 1) and clears 0's. Until
  // 2026-11-28 nothing expected 3's Put then, and the reader at 4 loaded
  // the item a second time.
  ScratchStore scratch;
  auto store = OneItemRamStore(scratch, {0, 1, 1, 0, 0}, 0);
  ReadOrLoad(store.get(), 0, 0);
  ReadOrLoad(store.get(), 1, 1);
  ReadOrLoad(store.get(), 2, 1);
  CheckLaterReadWaits(store.get(), 3, 4, 0);
  CHECK(store->Stats().source_loads == 3);  // positions 0, 1 and 3
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: a new epoch's reads of an item the last epoch left unread wait for one load",
          "[store]") {
  // drop_last's tail: item 2 at position 2, never read, its load for the
  // policy expected there; epoch 1 reads it at 3 and 5 (draws with
  // replacement). The epoch's start passes position 2 at once and moves
  // the expectation to 3. Until 2026-11-28 the stale one stayed until the
  // planner's next turn, and then none was left: the readers of 3 and 5,
  // two workers at the epoch's start, both loaded the item (seen in a soak:
  // 3 workers, torch's DataLoader, drop_last, beside two CPU hogs).
  ScratchStore scratch;
  auto store = OneItemRamStore(scratch, {0, 1, 2, 2, 0, 2}, 3);
  ReadOrLoad(store.get(), 0, 0);
  ReadOrLoad(store.get(), 1, 1);
  store->BeginEpoch(3);
  CheckLaterReadWaits(store.get(), 3, 5, 2);
  CHECK(store->Stats().source_loads == 3);  // positions 0, 1 and 3
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: a read at position 0 is waited for, whatever the planner admits later",
          "[store]") {
  // Position 0 is a read like any other. Until 2026-11-28 its expectation
  // looked like the prefetcher's (also 0), which a later admission of the
  // same item replaces: the reader at position 2 no longer waited, and
  // loaded the item a second time.
  ScratchStore scratch;
  // OPT with room for one: item 0 admitted at 0 (kept for 2), evicted at 3
  // for item 1, admitted again at 5 while position 0's Put is pending.
  auto store = OneItemRamStore(scratch, {0, 1, 0, 1, 1, 0, 0}, 0);
  CheckLaterReadWaits(store.get(), 0, 2, 0);
  CHECK(store->Stats().source_loads == 1);
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: a later read of an item the disk budget pushed out waits for one load",
          "[store]") {
  // A disk budget of 1 MiB (a quarter held back) holds two of these 300
  // KiB items. Items 0, 1 and 2 are missed at 0, 1 and 2 and written to
  // disk; RAM holds item 3 (read at 3 and 4) instead. Item 2's Put evicts
  // item 1, read next at 7 (the furthest). Until 2026-11-29 nothing
  // expected position 7's load then, and a reader of 8 arriving meanwhile
  // loaded the item a second time.
  ScratchStore scratch;
  const ValueShape big{300 * 1024, 0};
  const std::vector<ItemId> plan{0, 1, 2, 3, 3, 0, 2, 1, 1};
  auto store = OneItemRamStore(scratch, plan, 0, 1024 * 1024);
  for (uint64_t p = 0; p < 7; ++p) ReadOrLoad(store.get(), p, plan[p], big);
  REQUIRE(store->Stats().disk_evictions == 1);
  CHECK(store->Stats().source_loads == 4);  // the first read of each
  CheckLaterReadWaits(store.get(), 7, 8, 1, big);
  CHECK(store->Stats().source_loads == 5);  // and position 7
  REQUIRE(store->Close().ok());
}

}  // namespace opt4store

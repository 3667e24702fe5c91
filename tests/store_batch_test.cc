// What a batch loader needs from the store: a read whose payload goes in
// pieces to several destinations (one copy, from the RAM tier and from the
// disk tier), Locate (where each item is, counting nothing), and a skipped
// position (MarkConsumed) that no reader waits on.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fork_child.h"
#include "opt4store/read_sink.h"
#include "opt4store/store.h"
#include "store_test_util.h"

namespace opt4store {
namespace {

using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::Reap;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::ShufflePlan;
using opt4store_test::ValueShape;
using opt4store_test::WaitingChild;

constexpr uint64_t kMiB = 1024 * 1024;

std::unique_ptr<Store> OpenStore(const ScratchStore& scratch, uint64_t ram_items, uint64_t disk,
                                 uint64_t n) {
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = n;
  o.ram_items = ram_items;
  o.disk = disk;
  std::unique_ptr<Store> store;
  const Status s = Store::Open(o, scratch.path(), &store);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return store;
}

// Two epochs of ids 0..n-1, the second backwards (its first reads are the
// ids epoch 1 read last), RAM for all n, no disk tier.
StoreOptions MirroredEpochs(const ScratchStore& scratch, uint64_t n) {
  auto plan = std::make_shared<std::vector<ItemId>>();
  for (uint64_t p = 0; p < 2 * n; ++p) {
    plan->push_back(static_cast<ItemId>(p < n ? p : 2 * n - 1 - p));
  }
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.ram_items = n;
  o.disk = 0;
  o.plan = PlanSpec{};
  o.plan->kind = SamplerKind::kExplicit;
  o.plan->ids = plan;
  o.plan->epoch_length = n;
  return o;
}

// Three pieces of a payload (a gap dropped, the last cut short by the end)
// into three buffers.
class PieceSink : public ReadSink {
 public:
  explicit PieceSink(uint64_t payload_size)
      : a(100, '\0'), b(300, '\0'), c(payload_size - 450 + 64, '\xee') {
    list = {{0, a.size(), a.data()}, {150, b.size(), b.data()}, {450, c.size(), c.data()}};
  }
  Status Prepare(uint64_t meta_size, uint64_t, void** meta_dst, void** payload_dst) override {
    meta.resize(meta_size);
    *meta_dst = meta.data();
    *payload_dst = nullptr;
    ++prepares;
    return Status::OK();
  }
  const std::vector<Piece>* pieces() const override { return &list; }
  std::string meta, a, b, c;
  std::vector<Piece> list;
  int prepares = 0;
};

void CheckPieces(const PieceSink& sink, ItemId id, const std::string& payload) {
  INFO("id " << id);
  CHECK(sink.meta == SampleMeta(id));
  CHECK(sink.a == payload.substr(0, 100));
  CHECK(sink.b == payload.substr(150, 300));
  const uint64_t tail = payload.size() - 450;
  CHECK(sink.c.substr(0, tail) == payload.substr(450));
  CHECK(sink.c.substr(tail) == std::string(64, '\xee'));  // past the payload: untouched
}

TEST_CASE("a sink's pieces get their bytes from the RAM tier and the disk tier", "[store_batch]") {
  ScratchStore scratch;
  const uint64_t n = 8;
  const ValueShape shape{2000, 0};
  auto store = OpenStore(scratch, 2, 16 * kMiB, n);
  for (ItemId id = 0; id < n; ++id) {
    REQUIRE(store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok());
  }
  REQUIRE(store->Flush().ok());
  std::vector<GetSource> where(n);
  std::vector<ItemId> ids(n);
  for (ItemId id = 0; id < n; ++id) ids[id] = id;
  store->Locate(ids.data(), n, where.data());
  int in_ram = 0, on_disk = 0;
  for (GetSource w : where) {
    in_ram += w == GetSource::kRam;
    on_disk += w == GetSource::kDisk;
  }
  CHECK(in_ram >= 1);   // static without a plan: the first Puts fill RAM
  CHECK(on_disk >= 1);  // the rest only on disk

  std::vector<PieceSink> sinks;
  for (ItemId id = 0; id < n; ++id) sinks.emplace_back(SamplePayload(id, shape).size());
  std::vector<ReadSink*> sink_ptrs;
  for (PieceSink& s : sinks) sink_ptrs.push_back(&s);
  std::vector<uint64_t> positions(n, kNoPosition);
  std::vector<Status> statuses(n);
  std::vector<GetSource> sources(n);
  store->GetBatch(positions.data(), ids.data(), n, sink_ptrs.data(), statuses.data(),
                  sources.data());
  for (ItemId id = 0; id < n; ++id) {
    INFO("id " << id);
    REQUIRE(statuses[id].ok());
    CHECK(sources[id] == where[id]);  // Locate told where the Get found it
    CheckPieces(sinks[id], id, SamplePayload(id, shape));
  }
  const StoreStats st = store->Stats();
  CHECK(st.accesses == n);  // Locate counted nothing
  REQUIRE(store->Close().ok());
}

// A DataLoader worker's Puts travel to the owner on the queue; an epoch's
// start waits for them before it asks Locate what its workers must load.
TEST_CASE("WaitForPuts: Locate then sees every value a forked worker put", "[store_batch]") {
  ScratchStore scratch;
  const uint64_t n = 300;
  const ValueShape shape{4000, 0};
  // The worker is forked before the owner opens its store (fork_child.h)
  // and joins with the handle it is sent.
  WaitingChild worker = ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> store;
    if (!Store::Attach(handle, &store).ok()) return 4;
    for (ItemId id = 0; id < n; ++id) {
      if (!store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok()) return 2;
    }
    const char done = 1;
    return write(fd, &done, 1) == 1 ? 0 : 3;
  });
  auto store = OpenStore(scratch, n, 0, n);
  REQUIRE(store->WaitForPuts(0).ok());  // nothing queued
  REQUIRE(Go(&worker, store->handle()));
  char done = 0;
  REQUIRE(read(worker.fd, &done, 1) == 1);
  REQUIRE(WEXITSTATUS(Reap(worker.pid)) == 0);
  close(worker.fd);
  REQUIRE(store->WaitForPuts(10000).ok());
  std::vector<ItemId> ids(n);
  for (ItemId id = 0; id < n; ++id) ids[id] = id;
  std::vector<GetSource> where(n);
  store->Locate(ids.data(), n, where.data());
  CHECK(std::count(where.begin(), where.end(), GetSource::kMiss) == 0);
  CHECK(store->Stats().puts_dropped == 0);
  REQUIRE(store->Close().ok());
  CHECK(store->WaitForPuts(0).IsIOError());
}

TEST_CASE("Locate: a miss, and ids out of range are misses", "[store_batch]") {
  ScratchStore scratch;
  auto store = OpenStore(scratch, 4, 0, 4);
  REQUIRE(store->Put(kNoPosition, 1, SampleMeta(1), SamplePayload(1, {})).ok());
  const std::vector<ItemId> ids = {0, 1, 4, 1000};
  std::vector<GetSource> where(ids.size());
  store->Locate(ids.data(), ids.size(), where.data());
  CHECK(where == std::vector<GetSource>{GetSource::kMiss, GetSource::kRam, GetSource::kMiss,
                                        GetSource::kMiss});
  REQUIRE(store->Close().ok());
}

TEST_CASE("a skipped position is not waited for", "[store_batch]") {
  // Epoch 1 of a shuffle; its last reads are skipped (drop_last) after the
  // planner expected a Put from them. Epoch 2 reads those ids again: the
  // readers must not wait for a Put that the skipped reads never make.
  ScratchStore scratch;
  const uint64_t n = 40;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.ram_items = n;
  o.disk = 0;
  o.plan = ShufflePlan(n, 2, 3);
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, scratch.path(), &store).ok());
  std::vector<ItemId> plan;
  REQUIRE(opt4store_test::PlanIds(*o.plan, &plan).ok());
  const uint64_t skipped = 5;
  for (uint64_t p = 0; p < n - skipped; ++p) {
    StringSink sink;
    Status s = store->Get(p, plan[p], &sink);
    REQUIRE(s.IsNotFound());
    REQUIRE(store->Put(p, plan[p], SampleMeta(plan[p]), SamplePayload(plan[p], {})).ok());
  }
  for (uint64_t p = n - skipped; p < n; ++p) store->MarkConsumed(p, plan[p]);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t misses = 0;
  for (uint64_t p = n; p < 2 * n; ++p) {
    StringSink sink;
    Status s = store->Get(p, plan[p], &sink);
    if (s.IsNotFound()) {
      ++misses;
      REQUIRE(store->Put(p, plan[p], SampleMeta(plan[p]), SamplePayload(plan[p], {})).ok());
    } else {
      REQUIRE(s.ok());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(misses == skipped);  // only the ids the skipped reads never loaded
  const StoreStats st = store->Stats();
  CHECK(st.expect_timeouts == 0);
  CHECK(seconds < 1.0);  // a wait for a skipped read's Put would take 2 s
  REQUIRE(store->Close().ok());
}

TEST_CASE("a new epoch's reader waits for Puts of the last epoch the owner has not taken",
          "[store_batch]") {
  // A worker reads and Puts all of epoch 1, then reads epoch 2 at once, as
  // a new epoch's workers do while the owner still takes the last epoch's
  // Puts (large ones here, so the queue lags; epoch 2 reads the ids put
  // last first). Each id was read in epoch 1: its Put is on the queue, and
  // a reader that does not wait for it loads the item from the source a
  // second time. Before the fix: misses.
  ScratchStore scratch;
  const uint64_t n = 120;
  const ValueShape big{256 * 1024, 0};
  StoreOptions o = MirroredEpochs(scratch, n);
  const std::shared_ptr<const std::vector<ItemId>> plan = o.plan->ids;
  WaitingChild worker = ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> store;
    if (!Store::Attach(handle, &store).ok()) return 4;
    for (uint64_t p = 0; p < n; ++p) {
      StringSink sink;
      const ItemId id = (*plan)[p];
      if (!store->Get(p, id, &sink).IsNotFound()) return 2;
      if (!store->Put(p, id, SampleMeta(id), SamplePayload(id, big)).ok()) {
        return 3;
      }
    }
    uint64_t misses = 0;
    for (uint64_t p = n; p < 2 * n; ++p) {
      StringSink sink;
      misses += store->Get(p, (*plan)[p], &sink).IsNotFound();
    }
    return write(fd, &misses, sizeof misses) == sizeof misses ? 0 : 5;
  });
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, scratch.path(), &store).ok());
  // The planner steps both epochs first, so it expects each epoch-1 read to
  // Put its id: the owner then lags only in taking the Puts, the case under
  // test (a CI run under load started the worker before the planner ran).
  for (int ms = 0; ms < 10000 && store->Stats().planned_positions < 2 * n; ++ms) usleep(1000);
  REQUIRE(store->Stats().planned_positions >= 2 * n);
  REQUIRE(Go(&worker, store->handle()));
  uint64_t misses = 1;
  REQUIRE(read(worker.fd, &misses, sizeof misses) == sizeof misses);
  REQUIRE(WEXITSTATUS(Reap(worker.pid)) == 0);
  close(worker.fd);
  CHECK(misses == 0);
  CHECK(store->Stats().expect_timeouts == 0);
  REQUIRE(store->Close().ok());
}

TEST_CASE("a reader ahead of a lagging planner has its position planned, not loads twice",
          "[store_batch]") {
  // A worker reads and Puts all of epoch 1 while the owner's planner is
  // held (a planner that lags: under load a CI run's worker began before
  // the planner had run at all), then reads epoch 2, whose ids epoch 1
  // loaded. With nothing planned, no reader is expected to Put them: one
  // that does not ask for its position to be planned loads each again
  // (before the fix: n misses). Epoch 1's first reads must not wait for
  // the held planner: nothing read them before.
  ScratchStore scratch;
  const uint64_t n = 60;
  std::atomic<bool> hold{true};
  StoreOptions o = MirroredEpochs(scratch, n);
  const std::shared_ptr<const std::vector<ItemId>> plan = o.plan->ids;
  o.planner_turn_for_testing = [&hold] {
    for (int ms = 0; ms < 10000 && hold.load(); ++ms) usleep(1000);
  };
  WaitingChild worker = ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> store;
    if (!Store::Attach(handle, &store).ok()) return 4;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t p = 0; p < n; ++p) {
      StringSink sink;
      const ItemId id = (*plan)[p];
      if (!store->Get(p, id, &sink).IsNotFound()) return 2;
      if (!store->Put(p, id, SampleMeta(id), SamplePayload(id, {})).ok()) return 3;
    }
    const double epoch1_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (write(fd, &epoch1_s, sizeof epoch1_s) != sizeof epoch1_s) return 5;
    uint64_t misses = 0;
    for (uint64_t p = n; p < 2 * n; ++p) {
      StringSink sink;
      const ItemId id = (*plan)[p];
      if (store->Get(p, id, &sink).IsNotFound()) {
        ++misses;
        if (!store->Put(p, id, SampleMeta(id), SamplePayload(id, {})).ok()) return 3;
      }
    }
    return write(fd, &misses, sizeof misses) == sizeof misses ? 0 : 5;
  });
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, scratch.path(), &store).ok());
  REQUIRE(Go(&worker, store->handle()));
  double epoch1_s = 99;
  REQUIRE(read(worker.fd, &epoch1_s, sizeof epoch1_s) == sizeof epoch1_s);
  CHECK(store->Stats().planned_positions == 0);  // the planner was held throughout
  usleep(200 * 1000);  // the worker is at epoch 2 now, the planner still held
  hold.store(false);
  uint64_t misses = 1;
  REQUIRE(read(worker.fd, &misses, sizeof misses) == sizeof misses);
  REQUIRE(WEXITSTATUS(Reap(worker.pid)) == 0);
  close(worker.fd);
  CHECK(epoch1_s < 1.0);  // a wait for the held planner would take 2 s a read
  CHECK(misses == 0);
  const StoreStats st = store->Stats();
  CHECK(st.expect_timeouts == 0);
  CHECK(st.source_loads == n);
  REQUIRE(store->Close().ok());
}

TEST_CASE("a batch does not wait for a Put its own earlier read owes", "[store_batch]") {
  // The plan reads id 0 at positions 0 and 2. One GetBatch over positions
  // 0-2 misses both: the planner expects position 0's reader to Put id 0,
  // but that reader is this very call, whose caller Puts after it returns.
  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.ram_items = 4;
  o.disk = 0;
  PlanSpec plan;
  plan.kind = SamplerKind::kExplicit;
  plan.ids = std::make_shared<std::vector<ItemId>>(std::vector<ItemId>{0, 1, 0, 2, 1, 0});
  plan.epoch_length = 6;
  plan.dataset_size = 3;
  o.plan = plan;
  std::unique_ptr<Store> store;
  REQUIRE(Store::Open(o, scratch.path(), &store).ok());
  const std::vector<uint64_t> positions = {0, 1, 2};
  const std::vector<ItemId> ids = {0, 1, 0};
  StringSink sinks[3];
  ReadSink* sink_ptrs[3] = {&sinks[0], &sinks[1], &sinks[2]};
  Status statuses[3];
  const auto t0 = std::chrono::steady_clock::now();
  store->GetBatch(positions.data(), ids.data(), 3, sink_ptrs, statuses, nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Status& s : statuses) CHECK(s.IsNotFound());
  CHECK(seconds < 1.0);  // a wait for its own Put would time out after 2 s
  CHECK(store->Stats().expect_timeouts == 0);
  REQUIRE(store->Close().ok());
}

}  // namespace
}  // namespace opt4store

// Reader processes read disk items from the segment files themselves
// (segment_reader.h, ControlBlock places), instead of asking the owner:
//   - ReadRecordAt returns exactly the bytes put, at the place Locate gives;
//     a place out of date (compacted away, another version, another id, a
//     torn pair of words) is NotFound or Corruption, never another value;
//   - a reader process gets only right values while the owner evicts and
//     compacts under it, and most of its disk hits are its own reads;
//   - a record damaged on disk is caught by its CRC in the reader: a miss,
//     and the owner drops it.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "fork_child.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"
#include "tally_pipe.h"
#include "test_util.h"
#include "tiers/disk_tier.h"
#include "tiers/segment_reader.h"

namespace opt4store {
namespace {

using opt4store_test::Child;
using opt4store_test::FlipByte;
using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::IsSample;
using opt4store_test::OpenStore;
using opt4store_test::ReadSegmentRecords;
using opt4store_test::CollectTally;
using opt4store_test::ReadTally;
using opt4store_test::Reap;
using opt4store_test::SampleMeta;
using opt4store_test::SamplePayload;
using opt4store_test::ScratchStore;
using opt4store_test::SegmentFiles;
using opt4store_test::SendTally;
using opt4store_test::TempDir;
using opt4store_test::TestMeta;
using opt4store_test::TestPayload;
using opt4store_test::ValueShape;
using opt4store_test::WaitingChild;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

std::unique_ptr<DiskTier> OpenTier(const std::string& dir) {
  DiskTierOptions o;
  o.budget_bytes = 64 * kMiB;
  o.segment_bytes = 1 * kMiB;
  std::unique_ptr<DiskTier> tier;
  const Status s = DiskTier::Open(o, dir, &tier);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return tier;
}

Status ReadAt(DiskTier* tier, ItemId id, const DiskRecordPlace& place, std::string* meta,
              std::string* payload) {
  std::string buffer, scratch;
  std::string_view m, p;
  Status s = ReadRecordAt(tier->segments_dir(), id, place, &buffer, &m, &p, &scratch);
  if (s.ok()) {
    meta->assign(m);
    payload->assign(p);
  }
  return s;
}

// A reader's Get of id: tallied, never asserted (children use it).
void ReadId(Store* store, ItemId id, const ValueShape& shape, ReadTally* t) {
  StringSink sink;
  GetSource source = GetSource::kMiss;
  const Status s = store->Get(kNoPosition, id, &sink, &source);
  ++t->reads;
  if (s.IsNotFound()) {
    ++t->misses;
    return;
  }
  if (!s.ok()) {
    opt4store_test::NoteError(t, s.ToString());
    return;
  }
  if (source == GetSource::kDisk) ++t->disk;
  if (source == GetSource::kRam) ++t->ram;
  if (!IsSample(id, shape, sink.meta, sink.payload)) ++t->wrong;
}

}  // namespace

TEST_CASE("segment reader: a record read at its place is exactly the value put", "[disk]") {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  constexpr ItemId kItems = 120;  // one in four compressible: LZ4 records too
  for (ItemId id = 0; id < kItems; ++id) {
    REQUIRE(tier->Put(id, TestMeta(id), TestPayload(id, 0, 30000)).ok());
  }
  for (ItemId id = 0; id < kItems; ++id) {
    DiskRecordPlace place;
    REQUIRE(tier->Locate(id, &place).ok());
    std::string meta, payload;
    const Status s = ReadAt(tier.get(), id, place, &meta, &payload);
    INFO("id " << id << ": " << s.ToString());
    REQUIRE(s.ok());
    CHECK(meta == TestMeta(id));
    CHECK(payload == TestPayload(id, 0, 30000));
  }
  DiskRecordPlace none;
  CHECK(tier->Locate(kItems, &none).IsNotFound());
  std::string meta, payload;
  CHECK(ReadAt(tier.get(), kItems, none, &meta, &payload).IsNotFound());
}

TEST_CASE("segment reader: a place out of date is a miss, never another value", "[disk]") {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  // About 6 MiB in 1 MiB segments: ids 5 and 6 are in a sealed one.
  for (ItemId id = 0; id < 300; ++id) {
    REQUIRE(tier->Put(id, TestMeta(id), TestPayload(id, 0, 40000)).ok());
  }
  DiskRecordPlace p5, p6;
  REQUIRE(tier->Locate(5, &p5).ok());
  REQUIRE(tier->Locate(6, &p6).ok());
  std::string meta, payload;

  // Another id's record at that place.
  CHECK(ReadAt(tier.get(), 6, p5, &meta, &payload).IsCorruption());
  // A torn pair: the place of one record with the length and CRC of another.
  DiskRecordPlace torn = p5;
  torn.crc = p6.crc;
  CHECK(ReadAt(tier.get(), 5, torn, &meta, &payload).IsCorruption());
  torn = p5;
  torn.length = p6.length;
  CHECK_FALSE(ReadAt(tier.get(), 5, torn, &meta, &payload).ok());

  // A new version of id 5: its new place names it; its old place names only
  // the old record (the CRC differs), so a place is never paired with the
  // other version's bytes.
  REQUIRE(tier->Put(5, TestMeta(5, 1), TestPayload(5, 1, 40000)).ok());
  DiskRecordPlace p5new;
  REQUIRE(tier->Locate(5, &p5new).ok());
  CHECK(p5new.crc != p5.crc);
  REQUIRE(ReadAt(tier.get(), 5, p5new, &meta, &payload).ok());
  CHECK(payload == TestPayload(5, 1, 40000));
  DiskRecordPlace mixed = p5new;
  mixed.crc = p5.crc;
  CHECK(ReadAt(tier.get(), 5, mixed, &meta, &payload).IsCorruption());

  // Compaction moves the live records and deletes the old files.
  for (ItemId id = 0; id < 300; ++id) {
    if (id != 6) REQUIRE(tier->Delete(id).ok());
  }
  REQUIRE(tier->Compact().ok());
  const Status old = ReadAt(tier.get(), 6, p6, &meta, &payload);
  INFO("old place of id 6 after compaction: " << old.ToString());
  CHECK(old.IsNotFound());
  DiskRecordPlace moved;
  REQUIRE(tier->Locate(6, &moved).ok());
  CHECK(moved.segment != p6.segment);
  REQUIRE(ReadAt(tier.get(), 6, moved, &meta, &payload).ok());
  CHECK(meta == TestMeta(6));
  CHECK(payload == TestPayload(6, 0, 40000));
}

TEST_CASE("segment reader: a damaged record fails its CRC", "[disk]") {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  for (ItemId id = 0; id < 20; ++id) {
    REQUIRE(tier->Put(id, TestMeta(id), TestPayload(id, 1, 20000)).ok());
  }
  DiskRecordPlace place;
  REQUIRE(tier->Locate(9, &place).ok());
  const auto files = SegmentFiles(dir.path());
  REQUIRE(files.size() == 1);
  FlipByte(files[0], place.offset + place.length - 1);  // the payload's last byte
  std::string meta, payload;
  CHECK(ReadAt(tier.get(), 9, place, &meta, &payload).IsCorruption());
  REQUIRE(tier->Locate(8, &place).ok());
  CHECK(ReadAt(tier.get(), 8, place, &meta, &payload).ok());
}

TEST_CASE(
    "Store: a forked reader reads disk items itself, and only right values, while the owner "
    "evicts and compacts",
    "[store][multiprocess]") {
  const ItemId n = 500;
  const ValueShape shape{12 * kKiB, 8 * kKiB};
  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = n;
  o.ram = 1 * kMiB;   // holds little: most hits are disk hits
  o.disk = 3 * kMiB;  // far less than the 500 items: Puts evict and compact
  // The reader is forked before the owner opens its store (fork_child.h);
  // it joins with the handle it is sent once the first 100 are on disk.
  WaitingChild reader = ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> store;
    if (!Store::Attach(handle, &store).ok()) return 3;
    ReadTally t;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < end) {
      for (ItemId id = 0; id < n; ++id) ReadId(store.get(), id, shape, &t);
    }
    SendTally(fd, t);
    (void)store->Close();
    return t.wrong > 0 ? 1 : t.errors > 0 ? 2 : 0;
  });
  auto store = OpenStore(o, scratch.path());
  for (ItemId id = 0; id < 100; ++id) {
    REQUIRE(store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok());
  }
  REQUIRE(store->Flush().ok());
  REQUIRE(Go(&reader, store->handle()));
  // The owner writes on: each Put past the budget evicts, and dead space
  // is compacted; Compact() moves what is left in sparse segments.
  for (ItemId id = 100; id < n; ++id) {
    REQUIRE(store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok());
    if (id % 50 == 0) {
      REQUIRE(store->Flush().ok());
      REQUIRE(store->Compact().ok());
    }
  }
  REQUIRE(store->Flush().ok());
  const ReadTally t = CollectTally(reader);
  const StoreStats st = store->Stats();
  INFO("reader: " << t.ToString() << "; hits_disk " << st.hits_disk << ", hits_disk_direct "
                  << st.hits_disk_direct << ", fetch_requests " << st.fetch_requests
                  << ", disk_evictions " << st.disk_evictions << ", disk_compactions "
                  << st.disk_compactions);
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(t.disk > 0);
  CHECK(st.disk_evictions > 0);
  CHECK(st.disk_compactions > 0);
  CHECK(st.hits_disk == t.disk);
  // Most disk hits are the reader's own reads; a fetch is only for a place
  // found out of date.
  CHECK(st.hits_disk_direct > 0);
  CHECK(st.hits_disk_direct * 2 > st.hits_disk);
  // Their bytes: every direct read counts its record's; a fetched one counts
  // its own too unless evicted before the count (then 0).
  uint64_t smallest = UINT64_MAX, largest = 0;
  for (ItemId id = 0; id < n; ++id) {
    const uint64_t bytes = SampleMeta(id).size() + SamplePayload(id, shape).size();
    smallest = std::min(smallest, bytes);
    largest = std::max(largest, bytes);
  }
  INFO("hits_disk_bytes " << st.hits_disk_bytes << "; items of " << smallest << " to " << largest
                          << " bytes");
  CHECK(st.hits_disk_bytes >= st.hits_disk_direct * smallest);
  CHECK(st.hits_disk_bytes <= st.hits_disk * largest);
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: a record damaged on disk is a miss for a reader, and the owner drops it",
          "[store][multiprocess]") {
  const ItemId n = 100;  // 1.6 MiB: most of it only on disk
  const ValueShape shape{16 * kKiB, 0};
  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = n;
  o.ram = 1 * kMiB;
  o.disk = 64 * kMiB;
  // Forked before the owner opens its store (fork_child.h); it joins with
  // the handle it is sent once a record is damaged.
  WaitingChild reader = ForkWaitingChild([&](int fd, const std::string& handle) {
    std::unique_ptr<Store> store;
    if (!Store::Attach(handle, &store).ok()) return 3;
    ReadTally t;
    for (ItemId id = 0; id < n; ++id) ReadId(store.get(), id, shape, &t);
    SendTally(fd, t);
    (void)store->Close();
    return 0;
  });
  auto store = OpenStore(o, scratch.path());
  for (ItemId id = 0; id < n; ++id) {
    REQUIRE(store->Put(kNoPosition, id, SampleMeta(id), SamplePayload(id, shape)).ok());
  }
  REQUIRE(store->Flush().ok());
  // Damage the record of an item that only the disk holds.
  std::vector<ItemId> ids(n);
  std::vector<GetSource> where(n);
  for (ItemId id = 0; id < n; ++id) ids[id] = id;
  store->Locate(ids.data(), n, where.data());
  ItemId bad = n;
  for (ItemId id = 0; id < n; ++id) {
    if (where[id] == GetSource::kDisk) bad = id;
  }
  REQUIRE(bad < n);
  bool damaged = false;
  for (const std::string& file : SegmentFiles(scratch.path())) {
    for (const auto& r : ReadSegmentRecords(file)) {
      if (r.id == bad) {
        FlipByte(file, r.offset + r.header.record_size() - 1);
        damaged = true;
      }
    }
  }
  REQUIRE(damaged);
  REQUIRE(Go(&reader, store->handle()));
  const ReadTally t = CollectTally(reader);
  const StoreStats st = store->Stats();
  INFO("reader: " << t.ToString() << "; hits_disk_direct " << st.hits_disk_direct
                  << ", disk_corrupt_records " << st.disk_corrupt_records);
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(t.misses == 1);  // the damaged one only
  CHECK(t.disk + t.ram == n - 1);
  CHECK(st.disk_corrupt_records == 1);
  StringSink sink;
  CHECK(store->Peek(bad, &sink).IsNotFound());
  REQUIRE(store->Close().ok());
}

}  // namespace opt4store

// RamTier in one process: values round-trip byte for byte, the budget is
// accounted, a full arena says NoSpace, freed space coalesces, a copy that
// races an eviction is never returned, /dev/shm too small is a clear error,
// stale segments of dead owners are removed, and Wait() answers.
#include "tiers/ram_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ram_test_values.h"
#include "ram_tier_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::FileExists;
using opt4store_test::IsValidValue;
using opt4store_test::MetaFor;
using opt4store_test::NamesNumber;
using opt4store_test::PayloadFor;
using opt4store_test::PayloadSizeFor;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;

// A prefix no other test process uses, so that parallel ctest runs never
// clean up each other's segments.
std::string TestPrefix(const std::string& what) {
  return "o4s-test-" + what + "-" + std::to_string(getpid());
}

std::string ShmPath(const std::string& name) { return "/dev/shm" + name; }

std::unique_ptr<RamTier> MakeTier(uint64_t capacity, uint64_t items,
                                  const std::string& what = "ram") {
  return opt4store_test::MakeRamTier(capacity, items, TestPrefix(what));
}

Status InsertVersion(RamTier* t, ItemId id, uint64_t version, uint64_t min_size, uint64_t span) {
  const std::string meta = MetaFor(id, version);
  const std::string payload = PayloadFor(id, version, PayloadSizeFor(id, version, min_size, span));
  return t->Insert(id, meta.data(), meta.size(), payload.data(), payload.size());
}

// Reads id and checks that it is exactly (id, version).
void ExpectValue(RamTier* t, ItemId id, uint64_t version, uint64_t min_size, uint64_t span) {
  StringSink sink;
  Status s = t->Read(id, &sink);
  INFO("id " << id << ": " << s.ToString());
  REQUIRE(s.ok());
  uint64_t got = ~0ull;
  REQUIRE(IsValidValue(id, sink.meta.data(), sink.meta.size(), sink.payload.data(),
                       sink.payload.size(), min_size, span, &got));
  CHECK(got == version);
}

TEST_CASE("RamTier: variable-size values read back byte for byte", "[ram]") {
  const uint64_t kItems = 3000, kMin = 0, kSpan = 40 * kKiB;
  auto tier = MakeTier(128 * kMiB, kItems);
  for (ItemId id = 0; id < kItems; ++id)
    REQUIRE(InsertVersion(tier.get(), id, 1, kMin, kSpan).ok());
  for (ItemId id = 0; id < kItems; ++id) ExpectValue(tier.get(), id, 1, kMin, kSpan);

  // Evict the odd ids; they miss, the even ones are untouched.
  for (ItemId id = 1; id < kItems; id += 2) REQUIRE(tier->Evict(id).ok());
  for (ItemId id = 0; id < kItems; ++id) {
    if (id % 2) {
      StringSink sink;
      CHECK(tier->Read(id, &sink).IsNotFound());
      CHECK_FALSE(tier->Contains(id));
    } else {
      ExpectValue(tier.get(), id, 1, kMin, kSpan);
    }
  }
  // Re-insert them as version 2, into the freed space.
  for (ItemId id = 1; id < kItems; id += 2)
    REQUIRE(InsertVersion(tier.get(), id, 2, kMin, kSpan).ok());
  for (ItemId id = 0; id < kItems; ++id) ExpectValue(tier.get(), id, id % 2 ? 2 : 1, kMin, kSpan);
}

TEST_CASE("RamTier: an item with an empty payload or meta round-trips", "[ram]") {
  auto tier = MakeTier(1 * kMiB, 4);
  REQUIRE(tier->Insert(0, nullptr, 0, nullptr, 0).ok());
  REQUIRE(tier->Insert(1, "m", 1, nullptr, 0).ok());
  REQUIRE(tier->Insert(2, nullptr, 0, "payload", 7).ok());
  StringSink a, b, c;
  REQUIRE(tier->Read(0, &a).ok());
  CHECK(a.meta.empty());
  CHECK(a.payload.empty());
  REQUIRE(tier->Read(1, &b).ok());
  CHECK(b.meta == "m");
  CHECK(b.payload.empty());
  REQUIRE(tier->Read(2, &c).ok());
  CHECK(c.meta.empty());
  CHECK(c.payload == "payload");
}

TEST_CASE("RamTier: the budget is accounted in whole units", "[ram]") {
  auto tier = MakeTier(10 * kMiB, 100);
  RamTierStats s0 = tier->Stats();
  CHECK(s0.capacity_bytes == 10 * kMiB);
  CHECK(s0.unit_bytes == 64);
  CHECK(s0.bytes_used == 0);
  CHECK(s0.items_resident == 0);
  CHECK(s0.free_blocks == 1);
  CHECK(s0.largest_free_block == 10 * kMiB);
  CHECK(s0.fragmentation == 0.0);

  uint64_t used = 0, stored = 0;
  for (ItemId id = 0; id < 50; ++id) {
    const uint64_t payload = 1000 + 37 * id, meta = id % 5;
    std::string p(payload, 'p'), m(meta, 'm');
    REQUIRE(tier->Insert(id, m.data(), meta, p.data(), payload).ok());
    used += (payload + meta + 63) / 64 * 64;
    stored += payload + meta;
  }
  RamTierStats s1 = tier->Stats();
  CHECK(s1.items_resident == 50);
  CHECK(s1.bytes_used == used);
  CHECK(s1.bytes_stored == stored);
  CHECK(s1.inserts == 50);
  for (ItemId id = 0; id < 50; id += 2) REQUIRE(tier->Evict(id).ok());
  RamTierStats s2 = tier->Stats();
  CHECK(s2.items_resident == 25);
  CHECK(s2.evictions == 25);
  CHECK(s2.bytes_used < used);
  CHECK(s2.bytes_stored < stored);
  CHECK(s2.free_blocks > 1);  // holes between the odd items
  CHECK(s2.fragmentation > 0.0);
  CHECK(s2.fragmentation < 1.0);
  for (ItemId id = 1; id < 50; id += 2) REQUIRE(tier->Evict(id).ok());
  RamTierStats s3 = tier->Stats();
  CHECK(s3.bytes_used == 0);
  CHECK(s3.bytes_stored == 0);
  CHECK(s3.free_blocks == 1);
  CHECK(s3.fragmentation == 0.0);
}

TEST_CASE("RamTier: metadata costs 16 shared bytes per item", "[ram]") {
  const uint64_t kItems = 1000000;
  auto tier = MakeTier(1 * kMiB, kItems);
  RamTierStats s = tier->Stats();
  CHECK(s.table_bytes_per_item == 16);
  CHECK(s.owner_bytes_per_item == 4);
  // Segment = header page + stats slots + table + arena, nothing else.
  CHECK(s.segment_bytes >= 16 * kItems + 1 * kMiB);
  CHECK(s.segment_bytes <= 16 * kItems + 1 * kMiB + 64 * kKiB);
}

TEST_CASE("RamTier: Insert says NoSpace when no block fits, and works after an eviction", "[ram]") {
  auto tier = MakeTier(1 * kMiB, 100);
  const std::string value(100 * kKiB, 'v');
  ItemId id = 0;
  Status s;
  while ((s = tier->Insert(id, nullptr, 0, value.data(), value.size())).ok()) ++id;
  CHECK(id == 10);  // 10 x 100 KiB fit in 1 MiB, 11 do not
  CHECK(s.IsNoSpace());
  CHECK(opt4store_test::MentionsAny(s.message(), {"full"}));
  CHECK_FALSE(tier->Contains(10));
  CHECK(tier->Stats().items_resident == 10);
  // The failed insert left nothing behind: the id is still insertable.
  REQUIRE(tier->Evict(3).ok());
  REQUIRE(tier->Insert(10, nullptr, 0, value.data(), value.size()).ok());
  CHECK(tier->Contains(10));
}

TEST_CASE("RamTier: evicted neighbours coalesce, so a larger item fits again", "[ram]") {
  auto tier = MakeTier(1 * kMiB, 100);
  const std::string small(64 * kKiB, 's'), large(256 * kKiB, 'L');
  for (ItemId id = 0; id < 16; ++id) {
    REQUIRE(tier->Insert(id, nullptr, 0, small.data(), small.size()).ok());
  }
  // Every other item evicted: 512 KiB free in 64 KiB holes; 256 KiB won't fit.
  for (ItemId id = 0; id < 16; id += 2) REQUIRE(tier->Evict(id).ok());
  RamTierStats frag = tier->Stats();
  CHECK(frag.free_blocks == 8);
  CHECK(frag.largest_free_block == 64 * kKiB);
  CHECK(frag.fragmentation == Approx(1.0 - 64.0 / 512.0));
  CHECK(tier->Insert(100 - 1, nullptr, 0, large.data(), large.size()).IsNoSpace());
  // Evict 5 and 7: holes 4..8 merge into one 320 KiB block.
  REQUIRE(tier->Evict(5).ok());
  REQUIRE(tier->Evict(7).ok());
  REQUIRE(tier->Insert(99, nullptr, 0, large.data(), large.size()).ok());
  StringSink sink;
  REQUIRE(tier->Read(99, &sink).ok());
  CHECK(sink.payload == large);
  for (ItemId id : {1, 3, 9, 11, 13, 15}) {
    StringSink s2;
    REQUIRE(tier->Read(id, &s2).ok());
    CHECK(s2.payload == small);
  }
}

// ---- a copy that races an eviction

struct RaceHook {
  RamTier* owner = nullptr;
  int fired = 0;
  enum Mode { kEvictAndReuse, kReplaceSameId } mode = kEvictAndReuse;
};

// Runs between the payload copy and the meta copy of item 1: the owner
// evicts it and puts other bytes in exactly its space.
void RaceHookFn(void* arg, const ItemInfo& info) {
  auto* h = static_cast<RaceHook*>(arg);
  if (h->fired++ > 0 || info.id != 1) return;
  REQUIRE(h->owner->Evict(1).ok());
  if (h->mode == RaceHook::kEvictAndReuse) {
    REQUIRE(InsertVersion(h->owner, 5, 1, 4 * kKiB, 0).ok());
  } else {
    REQUIRE(InsertVersion(h->owner, 1, 2, 4 * kKiB, 0).ok());
  }
}

TEST_CASE("RamTier: a value whose space is reused during the copy is never returned", "[ram]") {
  // Four 4 KiB + 16-byte-meta items fill the arena exactly, so a new item
  // of the same size must land in the space of the one just evicted.
  const uint64_t item = 4 * kKiB + 16;
  const uint64_t unit_rounded = (item + 63) / 64 * 64;
  auto owner = MakeTier(4 * unit_rounded, 8);
  for (ItemId id = 0; id < 4; ++id) REQUIRE(InsertVersion(owner.get(), id, 1, 4 * kKiB, 0).ok());
  REQUIRE(owner->Stats().free_blocks == 0);

  std::unique_ptr<RamTier> reader;
  REQUIRE(RamTier::Attach(owner->name(), &reader).ok());
  RaceHook hook;
  hook.owner = owner.get();
  reader->SetCopyHookForTesting(&RaceHookFn, &hook);

  SECTION("evicted and the space reused by another item: CopyOut says NotFound") {
    ItemInfo info;
    REQUIRE(reader->Peek(1, &info).ok());
    std::string meta(info.meta_size, '\0'), payload(info.payload_size, '\0');
    Status s = reader->CopyOut(info, &meta[0], &payload[0]);
    CHECK(s.IsNotFound());
    CHECK(hook.fired == 1);
    // The copy really was torn: the meta names item 5, the payload item 1.
    CHECK(meta == MetaFor(5, 1));
    CHECK(payload == PayloadFor(1, 1, 4 * kKiB));
    // And Read() of item 1 misses; item 5 reads back intact.
    StringSink sink;
    CHECK(reader->Read(1, &sink).IsNotFound());
    ExpectValue(reader.get(), 5, 1, 4 * kKiB, 0);
    CHECK(reader->Stats().retries >= 1);
  }
  SECTION("replaced by a new version: Read retries and returns the new version") {
    hook.mode = RaceHook::kReplaceSameId;
    StringSink sink;
    REQUIRE(reader->Read(1, &sink).ok());
    CHECK(hook.fired == 2);  // the second attempt ran the (now idle) hook again
    uint64_t version = 0;
    REQUIRE(IsValidValue(1, sink.meta.data(), sink.meta.size(), sink.payload.data(),
                         sink.payload.size(), 4 * kKiB, 0, &version));
    CHECK(version == 2);
    CHECK(reader->Stats().retries == 1);
  }
  SECTION("replaced, seen through CopyOut directly") {
    hook.mode = RaceHook::kReplaceSameId;
    ItemInfo info;
    REQUIRE(reader->Peek(1, &info).ok());
    std::string meta(info.meta_size, '\0'), payload(info.payload_size, '\0');
    CHECK(reader->CopyOut(info, &meta[0], &payload[0]).IsBusy());
  }
  reader->SetCopyHookForTesting(nullptr, nullptr);
}

// ---- creation errors and segment lifetime

TEST_CASE("RamTier: /dev/shm too small is a NoSpace error naming both sizes", "[ram]") {
  RamTierOptions o;
  o.capacity_bytes = 2 * kGiB;
  o.num_items = 1000;
  o.name_prefix = TestPrefix("small");
  o.free_space_for_testing = [](const std::string&, uint64_t* free_bytes) {
    *free_bytes = 1288490188;  // 1.20 GiB
    return Status::OK();
  };
  std::unique_ptr<RamTier> t;
  Status s = RamTier::Create(o, &t);
  INFO(s.ToString());
  REQUIRE(s.IsNoSpace());
  CHECK(t == nullptr);
  const std::string& m = s.message();
  CHECK(m.find("RAM tier needs 2.00 GiB in /dev/shm, which has 1.20 GiB free") !=
        std::string::npos);
  CHECK(m.find("docker --shm-size") != std::string::npos);
  CHECK(m.find("lower ram=") != std::string::npos);
  CHECK(NamesNumber(m, 1288490188));
}

TEST_CASE("RamTier: a request larger than the real /dev/shm fails cleanly", "[ram]") {
  RamTierOptions o;
  o.capacity_bytes = uint64_t{1} << 50;  // 1 PiB
  o.num_items = 10;
  o.name_prefix = TestPrefix("huge");
  std::unique_ptr<RamTier> t;
  Status s = RamTier::Create(o, &t);
  INFO(s.ToString());
  REQUIRE(s.IsNoSpace());
  CHECK(s.message().find("1.00 PiB") != std::string::npos);
  CHECK(s.message().find("free") != std::string::npos);
  // Nothing is left behind.
  int removed = 0;
  REQUIRE(SharedSegment::RemoveStale("/dev/shm", o.name_prefix, &removed).ok());
  CHECK(removed == 0);
}

TEST_CASE("RamTier: past the largest segment, the message names the real free space", "[ram]") {
  // A /dev/shm of 2^60 bytes; the request is over SharedSegment's 2^56.
  RamTierOptions o;
  o.num_items = 10;
  o.name_prefix = TestPrefix("past");
  o.free_space_for_testing = [](const std::string&, uint64_t* free_bytes) {
    *free_bytes = uint64_t{1} << 60;
    return Status::OK();
  };
  for (uint64_t capacity : {(uint64_t{1} << 57), ~uint64_t{0}}) {
    o.capacity_bytes = capacity;
    std::unique_ptr<RamTier> t;
    Status s = RamTier::Create(o, &t);
    INFO(s.ToString());
    REQUIRE(s.IsNoSpace());
    CHECK(NamesNumber(s.message(), uint64_t{1} << 60));
    CHECK(s.message().find("1.00 EiB free") != std::string::npos);
  }
}

TEST_CASE("RamTier: bad options are InvalidArgument", "[ram]") {
  std::unique_ptr<RamTier> t;
  RamTierOptions o;
  o.num_items = 10;
  CHECK(RamTier::Create(o, &t).IsInvalidArgument());
  o.capacity_bytes = kMiB;
  o.num_items = 0;
  CHECK(RamTier::Create(o, &t).IsInvalidArgument());
  o.num_items = 10;
  o.name_prefix = "a/b";
  CHECK(RamTier::Create(o, &t).IsInvalidArgument());
}

TEST_CASE("RamTier: the owner unlinks its segment; readers keep reading", "[ram]") {
  auto owner = MakeTier(kMiB, 10);
  const std::string name = owner->name();
  CHECK(name.find("." + std::to_string(getpid()) + ".") != std::string::npos);
  REQUIRE(FileExists(ShmPath(name)));
  REQUIRE(owner->Insert(3, "m", 1, "abc", 3).ok());
  std::unique_ptr<RamTier> reader;
  REQUIRE(RamTier::Attach(name, &reader).ok());
  CHECK_FALSE(reader->IsOwner());
  CHECK(reader->Insert(4, nullptr, 0, "x", 1).IsInvalidArgument());
  CHECK(reader->Evict(3).IsInvalidArgument());
  owner.reset();
  CHECK_FALSE(FileExists(ShmPath(name)));
  StringSink sink;
  REQUIRE(reader->Read(3, &sink).ok());
  CHECK(sink.payload == "abc");
  std::unique_ptr<RamTier> late;
  CHECK(RamTier::Attach(name, &late).IsNotFound());
}

TEST_CASE("RamTier: a forked child is a reader and does not unlink", "[ram]") {
  auto owner = MakeTier(kMiB, 10);
  REQUIRE(owner->Insert(1, nullptr, 0, "hello", 5).ok());
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    StringSink sink;
    if (!owner->Read(1, &sink).ok() || sink.payload != "hello") code |= 1;
    if (owner->IsOwner()) code |= 2;
    if (!owner->Insert(2, nullptr, 0, "x", 1).IsInvalidArgument()) code |= 4;
    owner.reset();  // must not unlink the parent's segment
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(FileExists(ShmPath(owner->name())));
  CHECK(owner->IsOwner());
  REQUIRE(owner->Insert(2, nullptr, 0, "y", 1).ok());
  // The child read through its own stats slot; the totals include it.
  RamTierStats s = owner->Stats();
  CHECK(s.hits == 1);
  CHECK(s.processes == 2);
}

TEST_CASE("RamTier: creation removes the segments of dead owners only", "[ram]") {
  const std::string prefix = TestPrefix("stale");
  // A child creates a tier and dies without cleaning up (as after kill -9).
  const std::string stale = opt4store_test::NameFromChild([&](int fd) {
    RamTierOptions o;
    o.capacity_bytes = kMiB;
    o.num_items = 10;
    o.name_prefix = prefix;
    std::unique_ptr<RamTier> t;
    if (!RamTier::Create(o, &t).ok()) return 1;
    if (!opt4store_test::SendName(fd, t->name())) return 2;
    t.release();  // leak: no destructor, no unlink
    return 0;
  });
  REQUIRE(FileExists(ShmPath(stale)));

  // An object that claims a live pid (our parent's) with no valid header:
  // its creator may still be writing it, so it must stay.
  const std::string live = "/" + prefix + "." + std::to_string(getppid()) + ".0";
  int fd = shm_open(live.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  close(fd);

  RamTierOptions o;
  o.capacity_bytes = kMiB;
  o.num_items = 10;
  o.name_prefix = prefix;
  std::unique_ptr<RamTier> first, second;
  REQUIRE(RamTier::Create(o, &first).ok());
  CHECK_FALSE(FileExists(ShmPath(stale)));
  CHECK(FileExists(ShmPath(live)));
  // A second tier of a live owner (us) leaves the first one alone.
  REQUIRE(RamTier::Create(o, &second).ok());
  CHECK(FileExists(ShmPath(first->name())));
  CHECK(first->name() != second->name());
  shm_unlink(live.c_str());
}

// ---- Wait

TEST_CASE("RamTier: Wait returns when the item arrives, is declined, or times out", "[ram]") {
  auto owner = MakeTier(kMiB, 10);
  std::unique_ptr<RamTier> reader;
  REQUIRE(RamTier::Attach(owner->name(), &reader).ok());

  SECTION("arrives") {
    const uint64_t v = reader->Version(4);
    Status got;
    std::thread waiter([&] { got = reader->Wait(4, v, 10000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(owner->Insert(4, nullptr, 0, "data", 4).ok());
    waiter.join();
    CHECK(got.ok());
    CHECK(reader->Stats().waits == 1);
  }
  SECTION("declined") {
    const uint64_t v = reader->Version(4);
    Status got;
    std::thread waiter([&] { got = reader->Wait(4, v, 10000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(owner->AnswerAbsent(4).ok());
    waiter.join();
    CHECK(got.IsNotFound());
  }
  SECTION("answered before the wait began") {
    const uint64_t v = reader->Version(4);
    REQUIRE(owner->Insert(4, nullptr, 0, "data", 4).ok());
    CHECK(reader->Wait(4, v, 10000).ok());
  }
  SECTION("resident already when its version was read: no wait") {
    // A reader that read the version of an item that had just arrived (it
    // missed it a moment before) and asked the owner for it: the owner
    // finds it resident and changes nothing, so a wait for a change would
    // last its whole timeout.
    REQUIRE(owner->Insert(4, nullptr, 0, "data", 4).ok());
    const uint64_t v = reader->Version(4);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(reader->Wait(4, v, 5000).ok());
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  }
  SECTION("filling, then committed") {
    const uint64_t v = reader->Version(4);
    RamTier::PendingInsert p;
    REQUIRE(owner->BeginInsert(4, 0, 4, &p).ok());
    CHECK_FALSE(reader->Contains(4));
    Status got;
    std::thread waiter([&] { got = reader->Wait(4, v, 10000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::memcpy(p.payload, "data", 4);
    REQUIRE(owner->CommitInsert(p).ok());
    waiter.join();
    CHECK(got.ok());
  }
  SECTION("times out") {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(reader->Wait(4, reader->Version(4), 100).IsBusy());
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(100));
  }
  SECTION("the owner closed") {
    const uint64_t v = reader->Version(4);
    owner.reset();
    CHECK(reader->Wait(4, v, 10000).IsIOError());
  }
}

TEST_CASE("RamTier: owner-side misuse is refused", "[ram]") {
  auto owner = MakeTier(kMiB, 10);
  CHECK(owner->Insert(10, nullptr, 0, "x", 1).IsOutOfRange());
  CHECK(owner->Evict(2).IsNotFound());
  REQUIRE(owner->Insert(2, nullptr, 0, "x", 1).ok());
  CHECK(owner->Insert(2, nullptr, 0, "y", 1).IsInvalidArgument());
  CHECK(owner->AnswerAbsent(2).IsInvalidArgument());
  RamTier::PendingInsert p;
  REQUIRE(owner->BeginInsert(3, 0, 100, &p).ok());
  CHECK(owner->Evict(3).IsInvalidArgument());
  CHECK(owner->BeginInsert(3, 0, 100, &p).IsInvalidArgument());
  REQUIRE(owner->AbortInsert(p).ok());
  CHECK_FALSE(owner->Contains(3));
  CHECK(owner->Stats().bytes_used == 64);  // only item 2
  ItemInfo info;
  CHECK(owner->Peek(10, &info).IsOutOfRange());
  CHECK(owner->Peek(3, &info).IsNotFound());
  CHECK(owner->Insert(4, nullptr, RamTier::kMaxMetaSize + 1, nullptr, 0).IsInvalidArgument());
}

TEST_CASE("RamTier: MapAllPages and the prefetch hints change no result", "[ram]") {
  const uint64_t kItems = 200, kMin = 100, kSpan = 3000;
  auto owner = MakeTier(4 * kMiB, kItems + 1);
  for (ItemId id = 0; id < kItems; id += 2)
    REQUIRE(InsertVersion(owner.get(), id, 1, kMin, kSpan).ok());
  std::unique_ptr<RamTier> reader;
  REQUIRE(RamTier::Attach(owner->name(), &reader).ok());
  Status mapped = reader->MapAllPages();
  CHECK((mapped.ok() || mapped.IsNotSupported()));
  for (ItemId id = 0; id < kItems + 5; ++id) {  // resident, absent and out-of-range ids
    reader->PrefetchEntry(id);
    reader->PrefetchData(id);
  }
  for (ItemId id = 0; id < kItems; ++id) {
    if (id % 2 == 0) {
      ExpectValue(reader.get(), id, 1, kMin, kSpan);
    } else {
      StringSink sink;
      CHECK(reader->Read(id, &sink).IsNotFound());
    }
  }
  CHECK(reader->Stats().retries == 0);
}

TEST_CASE("RamTier: hits, misses and bytes are counted", "[ram]") {
  auto tier = MakeTier(kMiB, 10);
  REQUIRE(tier->Insert(1, "mm", 2, "ppp", 3).ok());
  StringSink sink;
  REQUIRE(tier->Read(1, &sink).ok());
  REQUIRE(tier->Read(1, &sink).ok());
  CHECK(tier->Read(2, &sink).IsNotFound());
  RamTierStats s = tier->Stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 1);
  CHECK(s.bytes_copied == 10);
  CHECK(s.retries == 0);
  CHECK(s.processes == 1);
}

}  // namespace
}  // namespace opt4store

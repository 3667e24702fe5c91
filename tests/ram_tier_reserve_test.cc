// The RAM tier reserves /dev/shm as it fills: the first step at creation,
// the next ones as inserts need them, never a page it has not reserved.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tiers/ram_tier.h"

namespace opt4store {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// The bytes tmpfs has allocated to the segment (its pages reserved or written).
uint64_t AllocatedBytes(const RamTier& t) {
  struct stat st;
  REQUIRE(stat(("/dev/shm" + t.name()).c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::unique_ptr<RamTier> MakeTier(uint64_t capacity, uint64_t step, bool reserve = true) {
  RamTierOptions o;
  o.capacity_bytes = capacity;
  o.num_items = 1000;
  o.name_prefix = "o4s-test-reserve-" + std::to_string(getpid());
  o.reserve_memory = reserve;
  o.reserve_step_bytes = step;
  std::unique_ptr<RamTier> t;
  const Status s = RamTier::Create(o, &t);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return t;
}

TEST_CASE("RamTier: reserves its arena step by step as inserts need it", "[ram]") {
  auto t = MakeTier(64 * kMiB, 4 * kMiB);
  CHECK(t->capacity_bytes() == 64 * kMiB);
  CHECK(t->reserved_bytes() == 4 * kMiB);
  // The header and table (16 bytes an id) and the first step, not 64 MiB.
  CHECK(AllocatedBytes(*t) < 5 * kMiB);
  const std::string payload(kMiB - 64, 'x');
  for (ItemId id = 0; id < 20; ++id) {
    const std::string meta = "item " + std::to_string(id);
    REQUIRE(t->Insert(id, meta.data(), meta.size(), payload.data(), payload.size()).ok());
  }
  // 20 items of 1 MiB: 5 steps of 4 MiB, each reserved before its use.
  CHECK(t->reserved_bytes() == 20 * kMiB);
  CHECK(AllocatedBytes(*t) >= 20 * kMiB);
  CHECK(AllocatedBytes(*t) < 21 * kMiB);
  CHECK(t->reserve_error().empty());
  // Everything reads back; the unreserved rest counts as one free block.
  for (ItemId id = 0; id < 20; ++id) CHECK(t->Contains(id));
  const RamTierStats st = t->Stats();
  CHECK(st.largest_free_block == 44 * kMiB);
  CHECK(st.fragmentation == 0);
  // Up to the capacity, and no further.
  for (ItemId id = 20; id < 64; ++id) {
    REQUIRE(t->Insert(id, "", 0, payload.data(), payload.size()).ok());
  }
  CHECK(t->reserved_bytes() == 64 * kMiB);
  CHECK(t->Insert(64, "", 0, payload.data(), payload.size()).IsNoSpace());
  CHECK(t->reserve_error().empty());
}

TEST_CASE("RamTier: a step reserved ahead is what the next insert grows over", "[ram]") {
  auto t = MakeTier(16 * kMiB, 4 * kMiB);
  const std::string payload(kMiB - 64, 'x');
  // More than half of the 4 MiB step free: nothing to reserve ahead.
  REQUIRE(t->Insert(0, "", 0, payload.data(), payload.size()).ok());
  RamTier::ArenaRange range = t->StepToReserveAhead();
  CHECK(range.from == range.to);
  // Three of four MiB used: the next step is due.
  for (ItemId id = 1; id < 3; ++id) {
    REQUIRE(t->Insert(id, "", 0, payload.data(), payload.size()).ok());
  }
  range = t->StepToReserveAhead();
  CHECK(range.from == 4 * kMiB);
  CHECK(range.to == 8 * kMiB);
  t->ReserveAhead(range);
  CHECK(t->steps_reserved_ahead() == 1);
  CHECK(AllocatedBytes(*t) >= 8 * kMiB);  // in /dev/shm now
  CHECK(t->reserved_bytes() == 4 * kMiB);  // the allocator grows at the insert
  const RamTier::ArenaRange again = t->StepToReserveAhead();
  CHECK(again.from == again.to);  // reserved ahead already
  // The inserts that fill the step take it without a reservation of their own.
  for (ItemId id = 3; id < 8; ++id) {
    REQUIRE(t->Insert(id, "", 0, payload.data(), payload.size()).ok());
  }
  CHECK(t->reserved_bytes() == 8 * kMiB);
  CHECK(t->steps_reserved_inline() == 0);
  // Not reserved ahead: the insert that needs the third step reserves it.
  REQUIRE(t->Insert(8, "", 0, payload.data(), payload.size()).ok());
  CHECK(t->steps_reserved_inline() == 1);
  CHECK(t->reserved_bytes() == 12 * kMiB);
  // A range an insert reserved meanwhile, reserved ahead again: no harm.
  t->ReserveAhead({8 * kMiB, 12 * kMiB});
  for (ItemId id = 9; id < 16; ++id) {
    REQUIRE(t->Insert(id, "", 0, payload.data(), payload.size()).ok());
  }
  CHECK(t->reserved_bytes() == 16 * kMiB);
  for (ItemId id = 0; id < 16; ++id) CHECK(t->Contains(id));
  CHECK(t->StepToReserveAhead().from == t->StepToReserveAhead().to);  // all reserved
}

TEST_CASE("RamTier: creation reserves first_step_bytes, not a whole step", "[ram]") {
  auto t = MakeTier(512 * kMiB, 128 * kMiB);
  CHECK(t->reserved_bytes() == 16 * kMiB);  // RamTierOptions::first_step_bytes
  CHECK(AllocatedBytes(*t) < 17 * kMiB);
  // Less than half a step free: the next step is due at once.
  const RamTier::ArenaRange range = t->StepToReserveAhead();
  CHECK(range.from == 16 * kMiB);
  CHECK(range.to == 144 * kMiB);
}

TEST_CASE("RamTier: an arena within one step is reserved whole at creation", "[ram]") {
  auto t = MakeTier(3 * kMiB, 128 * kMiB);
  CHECK(t->reserved_bytes() == 3 * kMiB);
  CHECK(AllocatedBytes(*t) >= 3 * kMiB);
}

TEST_CASE("RamTier: without reserve_memory nothing is reserved and the whole arena is usable",
          "[ram]") {
  auto t = MakeTier(16 * kMiB, 4 * kMiB, /*reserve=*/false);
  CHECK(t->reserved_bytes() == 16 * kMiB);
  CHECK(AllocatedBytes(*t) < kMiB);
  const std::string payload(8 * kMiB, 'y');
  CHECK(t->Insert(1, "", 0, payload.data(), payload.size()).ok());
}

}  // namespace
}  // namespace opt4store

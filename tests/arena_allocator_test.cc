// ArenaAllocator: the RAM tier's owner-side TLSF allocator. Exact fits,
// coalescing, NoSpace only when nothing fits, and a randomized run against
// a brute-force model of the arena.
#include "tiers/arena_allocator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace opt4store {
namespace {

struct Taken {
  uint64_t offset;
  uint64_t units;
  ArenaAllocator::Handle handle;
};

Taken Take(ArenaAllocator* a, uint64_t units) {
  Taken t{0, units, ArenaAllocator::kNoHandle};
  REQUIRE(a->Allocate(units, &t.offset, &t.handle));
  return t;
}

// The random workloads' model: owner[u] is 1 where a live block sits.
void Keep(const Taken& t, std::vector<Taken>* live, std::vector<uint8_t>* owner) {
  for (uint64_t u = t.offset; u < t.offset + t.units; ++u) {
    REQUIRE((*owner)[u] == 0);  // never overlaps a live block
    (*owner)[u] = 1;
  }
  live->push_back(t);
}

void FreeRandom(ArenaAllocator* a, std::mt19937_64* rng, std::vector<Taken>* live,
                std::vector<uint8_t>* owner) {
  const size_t i = (*rng)() % live->size();
  const Taken t = (*live)[i];
  for (uint64_t u = t.offset; u < t.offset + t.units; ++u) (*owner)[u] = 0;
  REQUIRE(a->Free(t.handle));
  (*live)[i] = live->back();
  live->pop_back();
}

TEST_CASE("ArenaAllocator: fills the arena exactly, then refuses", "[arena]") {
  ArenaAllocator a(1000);
  std::vector<Taken> taken;
  for (int i = 0; i < 10; ++i) taken.push_back(Take(&a, 100));
  CHECK(a.used_units() == 1000);
  CHECK(a.free_units() == 0);
  CHECK(a.free_blocks() == 0);
  uint64_t off;
  ArenaAllocator::Handle h;
  CHECK_FALSE(a.Allocate(1, &off, &h));
  // Blocks do not overlap and tile the arena.
  std::sort(taken.begin(), taken.end(),
            [](const Taken& x, const Taken& y) { return x.offset < y.offset; });
  for (size_t i = 0; i < taken.size(); ++i) CHECK(taken[i].offset == 100 * i);
  CHECK(a.CheckInvariants() == "");
}

TEST_CASE("ArenaAllocator: freed neighbours coalesce into one block", "[arena]") {
  ArenaAllocator a(1000);
  std::vector<Taken> t;
  for (int i = 0; i < 10; ++i) t.push_back(Take(&a, 100));
  // Free every other block: 5 holes of 100, none of which fits 200.
  for (int i = 0; i < 10; i += 2) REQUIRE(a.Free(t[i].handle));
  CHECK(a.free_blocks() == 5);
  CHECK(a.LargestFreeBlock() == 100);
  uint64_t off;
  ArenaAllocator::Handle h;
  CHECK_FALSE(a.Allocate(200, &off, &h));
  // Freeing block 1 joins holes 0, 1, 2 into one of 300.
  REQUIRE(a.Free(t[1].handle));
  CHECK(a.free_blocks() == 4);
  CHECK(a.LargestFreeBlock() == 300);
  REQUIRE(a.Allocate(300, &off, &h));
  CHECK(off == 0);
  CHECK(a.CheckInvariants() == "");
  // Free everything: one block of the whole arena again.
  REQUIRE(a.Free(h));
  for (int i = 3; i < 10; i += 2) REQUIRE(a.Free(t[i].handle));
  CHECK(a.free_blocks() == 1);
  CHECK(a.LargestFreeBlock() == 1000);
  CHECK(a.used_units() == 0);
  CHECK(a.CheckInvariants() == "");
}

TEST_CASE("ArenaAllocator: an exact fit inside a rounded-up class is found", "[arena]") {
  // 1000 units live in class [992, 1024); a request of 999 rounds up past it,
  // so only the fallback scan of the request's own class finds the block.
  ArenaAllocator a(2000);
  Taken first = Take(&a, 1000);
  Taken second = Take(&a, 1000);
  REQUIRE(a.Free(first.handle));
  uint64_t off;
  ArenaAllocator::Handle h;
  REQUIRE(a.Allocate(999, &off, &h));
  CHECK(off == 0);
  CHECK(a.CheckInvariants() == "");
  REQUIRE(a.Free(second.handle));
  REQUIRE(a.Free(h));
  CHECK(a.free_blocks() == 1);
}

TEST_CASE("ArenaAllocator: refuses bad frees and zero or oversized requests", "[arena]") {
  ArenaAllocator a(64);
  uint64_t off;
  ArenaAllocator::Handle h;
  CHECK_FALSE(a.Allocate(0, &off, &h));
  CHECK_FALSE(a.Allocate(65, &off, &h));
  REQUIRE(a.Allocate(64, &off, &h));
  REQUIRE(a.Free(h));
  CHECK_FALSE(a.Free(h));  // double free
  CHECK_FALSE(a.Free(12345));
  CHECK(a.CheckInvariants() == "");
}

TEST_CASE("ArenaAllocator: random workload matches a brute-force model", "[arena]") {
  const uint64_t capacity = 1 << 16;
  ArenaAllocator a(capacity);
  std::mt19937_64 rng(7);
  std::vector<Taken> live;
  std::vector<uint8_t> owner(capacity, 0);  // 1 where a live block sits
  uint64_t refused = 0, refused_wrongly = 0;
  for (int step = 0; step < 60000; ++step) {
    const bool alloc = live.empty() || rng() % 100 < 55;
    if (alloc) {
      // Mostly small, sometimes large; variable like decoded samples.
      const uint64_t units = rng() % 10 == 0 ? 1 + rng() % 4000 : 1 + rng() % 300;
      Taken t{0, units, 0};
      if (a.Allocate(units, &t.offset, &t.handle)) {
        REQUIRE(t.offset + units <= capacity);
        Keep(t, &live, &owner);
      } else {
        ++refused;
        // Refused: the model must have no free run of that length.
        uint64_t run = 0, longest = 0;
        for (uint64_t u = 0; u < capacity; ++u) {
          run = owner[u] ? 0 : run + 1;
          longest = std::max(longest, run);
        }
        if (longest >= units) ++refused_wrongly;
      }
    } else {
      FreeRandom(&a, &rng, &live, &owner);
    }
    if (step % 5000 == 0) REQUIRE(a.CheckInvariants() == "");
  }
  CHECK(refused > 0);
  CHECK(refused_wrongly == 0);
  for (const Taken& t : live) REQUIRE(a.Free(t.handle));
  CHECK(a.free_blocks() == 1);
  CHECK(a.LargestFreeBlock() == capacity);
  CHECK(a.CheckInvariants() == "");
}

TEST_CASE("ArenaAllocator: Grow adds free units after a used or a free last block",
          "[arena]") {
  ArenaAllocator a(100);
  const Taken all = Take(&a, 100);  // the last block is used
  a.Grow(150);
  CHECK(a.capacity_units() == 150);
  CHECK(a.free_units() == 50);
  CHECK(a.CheckInvariants() == "");
  const Taken next = Take(&a, 30);
  CHECK(next.offset == 100);
  a.Grow(400);  // the last block (20 units) is free: one block of 270
  CHECK(a.free_blocks() == 1);
  CHECK(a.LargestFreeBlock() == 270);
  CHECK(a.CheckInvariants() == "");
  const Taken big = Take(&a, 270);  // spans the old and the new units
  CHECK(big.offset == 130);
  REQUIRE(a.Free(all.handle));
  REQUIRE(a.Free(big.handle));
  REQUIRE(a.Free(next.handle));
  CHECK(a.free_blocks() == 1);
  CHECK(a.LargestFreeBlock() == 400);
  CHECK(a.CheckInvariants() == "");
}

TEST_CASE("ArenaAllocator: a random workload while the arena grows keeps the invariants",
          "[arena]") {
  const uint64_t final_capacity = 1 << 16;
  ArenaAllocator a(final_capacity / 8);
  std::mt19937_64 rng(11);
  std::vector<Taken> live;
  std::vector<uint8_t> owner(final_capacity, 0);
  for (int step = 0; step < 40000; ++step) {
    if (step % 5000 == 4999 && a.capacity_units() < final_capacity) {
      a.Grow(a.capacity_units() + final_capacity / 8);
      REQUIRE(a.CheckInvariants() == "");
    }
    if (live.empty() || rng() % 100 < 55) {
      const uint64_t units = rng() % 10 == 0 ? 1 + rng() % 2000 : 1 + rng() % 200;
      Taken t{0, units, 0};
      if (!a.Allocate(units, &t.offset, &t.handle)) continue;
      REQUIRE(t.offset + units <= a.capacity_units());
      Keep(t, &live, &owner);
    } else {
      FreeRandom(&a, &rng, &live, &owner);
    }
  }
  CHECK(a.capacity_units() == final_capacity);
  for (const Taken& t : live) REQUIRE(a.Free(t.handle));
  CHECK(a.LargestFreeBlock() == final_capacity);
  CHECK(a.CheckInvariants() == "");
}

TEST_CASE("ArenaAllocator: a steady state of same-size items does not fragment", "[arena]") {
  // The RAM tier's common case: evict one, insert one of a similar size.
  const uint64_t capacity = 100000;
  ArenaAllocator a(capacity);
  std::mt19937_64 rng(11);
  std::vector<Taken> live;
  for (;;) {
    const uint64_t units = 2300 + rng() % 100;  // about 150 KiB in 64-byte units
    Taken t{0, units, 0};
    if (!a.Allocate(units, &t.offset, &t.handle)) break;
    live.push_back(t);
  }
  const size_t full = live.size();
  double used_sum = 0;
  const int steps = 20000;
  for (int step = 0; step < steps; ++step) {
    const uint64_t units = 2300 + rng() % 100;
    Taken t{0, units, 0};
    while (!a.Allocate(units, &t.offset, &t.handle)) {
      const size_t i = rng() % live.size();
      REQUIRE(a.Free(live[i].handle));
      live[i] = live.back();
      live.pop_back();
    }
    live.push_back(t);
    used_sum += static_cast<double>(a.used_units()) / capacity;
  }
  // Random victims leave holes that a slightly larger item cannot use, so
  // some space idles; on average the arena stays mostly full.
  const double mean_used = used_sum / steps;
  INFO("items when first full " << full << ", mean fraction used " << mean_used);
  CHECK(mean_used >= 0.85);
  CHECK(a.CheckInvariants() == "");
}

}  // namespace
}  // namespace opt4store

// Prefetch staging is part of ram= (issue 14): the RAM tier never holds more
// than ram= bytes, prefetched items included; the policy gets ram - staging;
// a staging= that leaves the policy nothing is refused; a saved staging=
// follows a smaller ram= at reopen.
#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "opt4store/store.h"
#include "store_test_util.h"

namespace opt4store {
namespace {

using opt4store_test::PlanIds;
using opt4store_test::ReadOne;
using opt4store_test::ReadTally;
using opt4store_test::ScratchStore;
using opt4store_test::ShufflePlan;
using opt4store_test::ValueShape;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

std::unique_ptr<Store> Open(const StoreOptions& o, const std::string& path) {
  std::unique_ptr<Store> store;
  const Status s = Store::Open(o, path, &store);
  INFO("Store::Open: " << s.ToString());
  REQUIRE(s.ok());
  return store;
}

TEST_CASE("Store: the RAM tier holds at most ram= bytes, prefetched items included",
          "[store][staging]") {
  ScratchStore scratch;
  const uint64_t n = 400;
  const ValueShape shape{16 * kKiB, 0};  // 6.4 MB in all, against 4 MiB of RAM
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.plan = ShufflePlan(n, 3, 11);
  o.ram = 4 * kMiB;
  o.staging = 1 * kMiB;
  o.disk = 64 * kMiB;
  std::vector<ItemId> plan;
  REQUIRE(PlanIds(*o.plan, &plan).ok());
  auto store = Open(o, scratch.path());
  StoreStats st = store->Stats();
  CHECK(st.ram_capacity == 3 * kMiB);  // the policy's part
  CHECK_FALSE(st.ram_capacity_in_items);
  CHECK(st.ram_arena_bytes <= o.ram.value());

  ReadTally t;
  uint64_t peak = 0;
  for (uint64_t p = 0; p < plan.size(); ++p) {
    ReadOne(store.get(), p, plan[p], shape, &t);
    peak = std::max(peak, store->Stats().ram_bytes_used);
  }
  st = store->Stats();
  INFO(t.ToString() << "; peak RAM bytes " << peak << ", prefetched " << st.prefetched);
  CHECK(t.wrong == 0);
  CHECK(t.errors == 0);
  CHECK(t.misses == n);      // each item loaded once: the disk tier holds all
  CHECK(st.prefetched > 0);  // staging is in use
  CHECK(peak <= o.ram.value());
  CHECK(peak > 3 * kMiB);  // more than the policy's part alone: staging was used
  // The tier's own peak (arena units, between samples too).
  CHECK(st.ram_bytes_peak >= peak);
  CHECK(st.ram_bytes_peak <= o.ram.value());
  REQUIRE(store->Close().ok());
}

TEST_CASE("Store: staging= of ram= or more is refused, naming both", "[store][staging]") {
  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = 100;
  o.ram = 1 * kMiB;
  o.staging = 1 * kMiB;
  std::unique_ptr<Store> store;
  const Status s = Store::Open(o, scratch.path(), &store);
  INFO(s.ToString());
  CHECK(s.IsInvalidArgument());
  CHECK(s.message().find("staging=") != std::string::npos);
  CHECK(s.message().find("ram=") != std::string::npos);
  CHECK(store == nullptr);
}

TEST_CASE("Store: staging follows ram= at reopen unless given", "[store][staging]") {
  ScratchStore scratch;
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = 100;
  o.disk = 8 * kMiB;  // settings persist only with a disk tier
  o.ram = 64 * kMiB;
  o.staging = 32 * kMiB;
  {
    auto store = Open(o, scratch.path());
    CHECK(store->Stats().ram_capacity == 32 * kMiB);
    REQUIRE(store->Close().ok());
  }
  StoreOptions again;
  again.shm_prefix = scratch.prefix();
  SECTION("no ram=: the saved ram= and staging= hold") {
    auto store = Open(again, scratch.path());
    CHECK(store->Stats().ram_capacity == 32 * kMiB);
    REQUIRE(store->Close().ok());
  }
  SECTION("a smaller ram=: staging is its default, ram/8") {
    again.ram = 8 * kMiB;
    auto store = Open(again, scratch.path());
    CHECK(store->Stats().ram_capacity == 7 * kMiB);
    CHECK(store->Stats().ram_arena_bytes <= 8 * kMiB);
    REQUIRE(store->Close().ok());
  }
}

}  // namespace
}  // namespace opt4store

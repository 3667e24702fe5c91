// A reader that attached before the owner had a plan (a DataLoader's
// persistent workers, a rank reader, then SetPlan) reads the plan's
// positions as planned ones: it marks them consumed, so the owner's
// frontier, its prefetch and its resume cursor move with it.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fork_child.h"
#include "opt4store/plan.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"
#include "tally_pipe.h"

namespace opt4store {
namespace {

using opt4store_test::CollectTally;
using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::OpenStore;
using opt4store_test::PlanIds;
using opt4store_test::ReadRange;
using opt4store_test::ReadTally;
using opt4store_test::ScratchStore;
using opt4store_test::SendTally;
using opt4store_test::ShufflePlan;
using opt4store_test::ValueShape;

TEST_CASE("Store: a reader attached before SetPlan reads the new plan's positions as planned",
          "[store][multiprocess]") {
  constexpr uint64_t kN = 100;
  const ValueShape shape{1024, 1024};
  const PlanSpec plan = ShufflePlan(kN, 2, 7);
  std::vector<ItemId> ids;
  REQUIRE(PlanIds(plan, &ids).ok());
  int plan_set[2];
  REQUIRE(pipe(plan_set) == 0);
  ScratchStore scratch;
  auto reader = ForkWaitingChild([&](int fd, const std::string& handle) {
    close(plan_set[1]);
    std::unique_ptr<Store> store;
    if (!Store::Attach(handle, &store).ok()) return 3;
    const char attached = 'a';
    if (write(fd, &attached, 1) != 1) return 4;
    char go = 0;
    if (read(plan_set[0], &go, 1) != 1) return 5;
    SendTally(fd, ReadRange(store.get(), ids, 0, kN, shape));  // the first epoch
    (void)store->Close();
    return 0;
  });
  close(plan_set[0]);
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.dataset_size = kN;
  o.ram_items = kN;
  auto store = OpenStore(o, scratch.path());  // no plan yet
  REQUIRE(Go(&reader, store->handle()));
  char attached = 0;
  REQUIRE(read(reader.fd, &attached, 1) == 1);
  REQUIRE(store->SetPlan(plan).ok());
  const char go = 'g';
  REQUIRE(write(plan_set[1], &go, 1) == 1);
  close(plan_set[1]);
  const ReadTally t = CollectTally(reader);
  INFO(t.ToString());
  CHECK(t.errors == 0);
  CHECK(t.wrong == 0);
  CHECK(t.misses == kN);
  REQUIRE(store->WaitForPuts(5000).ok());
  const StoreStats st = store->Stats();
  CHECK(st.total_positions == 2 * kN);
  CHECK(st.position == kN);  // the frontier passed every position it read
  REQUIRE(store->Close().ok());
}

}  // namespace
}  // namespace opt4store

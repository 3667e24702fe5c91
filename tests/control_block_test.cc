// ControlBlock's reading marks and rank-reader slots, on a control block of
// its own (no Store).
#include "engine/store/control_block.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "fork_child.h"
#include "store_test_util.h"

namespace opt4store {
namespace {

using opt4store_test::ForkChild;
using opt4store_test::Reap;
using opt4store_test::ScratchStore;

std::unique_ptr<ControlBlock> MakeBlock(const ScratchStore& scratch, uint64_t dataset_size) {
  std::unique_ptr<ControlBlock> cb;
  const Status s = ControlBlock::Create(scratch.prefix(), dataset_size, 1000, "ram", "queue", "",
                                        &cb);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return cb;
}

TEST_CASE("ControlBlock: a reading mark holds for its position in this plan and lap only",
          "[store]") {
  ScratchStore scratch;
  auto cb = MakeBlock(scratch, 16);
  const uint64_t ring = ControlBlock::kRingSize;
  cb->header()->frontier.store(10);
  CHECK_FALSE(cb->Reading(12));
  cb->MarkReading(12);
  CHECK(cb->Reading(12));
  CHECK_FALSE(cb->Reading(13));
  CHECK_FALSE(cb->Reading(12 + ring));  // the same slot, a lap later
  cb->MarkReading(9);                   // behind the frontier: not marked
  CHECK_FALSE(cb->Reading(9));
  cb->MarkReading(10 + ring);  // a whole ring ahead: not marked (its slot is 10's)
  CHECK_FALSE(cb->Reading(10 + ring));
  CHECK_FALSE(cb->Reading(10));
  cb->header()->plan_generation.fetch_add(1);  // a new plan: old marks mean nothing
  CHECK_FALSE(cb->Reading(12));
}

TEST_CASE("ControlBlock: rank-reader slots: claimed, left by their own process only, and "
          "taken back from a dead one",
          "[store][multiprocess]") {
  ScratchStore scratch;
  auto cb = MakeBlock(scratch, 16);
  const uint64_t me = shm::PackProcess(shm::CurrentProcess());
  CHECK(cb->LiveRankReaders().empty());
  const int slot = cb->JoinRankReaders(me);
  REQUIRE(slot >= 0);
  REQUIRE(cb->LiveRankReaders().size() == 1);
  CHECK(cb->LiveRankReaders()[0].pid == getpid());
  cb->LeaveRankReaders(slot, me + 1);  // another process's identity: no effect
  CHECK(cb->LiveRankReaders().size() == 1);
  cb->LeaveRankReaders(slot, me);
  CHECK(cb->LiveRankReaders().empty());
  CHECK(cb->header()->rank_readers_joined.load() == 1);

  // A process that joined and died without leaving: not live, and its slot
  // is claimed again once every other slot is taken.
  const opt4store_test::Child gone = ForkChild([&](int) {
    return cb->JoinRankReaders(shm::PackProcess(shm::CurrentProcess())) == slot ? 0 : 1;
  });
  const int status = Reap(gone.pid);
  close(gone.fd);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(cb->LiveRankReaders().empty());
  for (int k = 0; k < ControlBlock::kMaxRankReaders; ++k) {
    const int got = cb->JoinRankReaders(me);
    REQUIRE(got >= 0);  // the dead child's slot among them
  }
  CHECK(cb->JoinRankReaders(me) == -1);  // all live now
  CHECK(cb->LiveRankReaders().size() == static_cast<size_t>(ControlBlock::kMaxRankReaders));
  CHECK(cb->header()->rank_readers_joined.load() == 2 + ControlBlock::kMaxRankReaders);
}

}  // namespace
}  // namespace opt4store

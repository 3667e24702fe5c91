// Residency: what the RAM tier should hold, decided from the plan and the
// eviction policy. The Store's owner keeps one; it decides, and the tiers
// act on its decisions through ResidencyTiers.
//
// The owner steps the policy through the plan ahead of the readers'
// frontier (the lowest position not yet consumed by every reader):
//   frontier() <= planned(): positions [frontier, planned) have been stepped
//   through the policy but not yet consumed; a ring of slots holds each
//   one's id and what the policy decided there.
//   The reads of an id in that span form a linked list through the slots.
//   Whether the id belongs in RAM at the frontier follows from its first
//   pending read: a policy hit there means the policy holds it from its
//   previous read until then (admissions happen only at reads), even if the
//   planner, further ahead, has already seen it evicted; a miss there means
//   the policy lets it go before then. With no pending read, the policy's
//   state at planned() decides.
//   Prefetch pins: positions in that span (and fetch requests) for which the
//   item was brought from disk; it stays until they are consumed, within the
//   staging budget.
//   A Put for position p enters RAM only if the policy's residency covers p
//   (Wanted); so with one reader, RAM hits are exactly the policy's hits.
//   An item leaves RAM once Keep() turns false, checked whenever the policy
//   picks it as a victim or one of its reads is released.
//   The disk tier ranks an id by its next read that RAM will not serve
//   (RankOnDisk): its first pending read that is not a policy hit, or with
//   none, its next read after planned(). The planner runs up to a ring
//   ahead, so the read after its last stepped one would rank an id read
//   soon as far (until 2026-11-29 the disk tier evicted by that).
//
// Without a plan the RAM tier fills once and never evicts (static).
//
// Residency touches no tier, file or thread: ResidencyTiers tells it what
// the tiers hold and carries its requests, so tests drive it with plain
// containers (tests/residency_test.cc). Thread safety: none; the Store
// calls it under its mutex.
#ifndef OPT4STORE_ENGINE_STORE_RESIDENCY_H_
#define OPT4STORE_ENGINE_STORE_RESIDENCY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "opt4store/next_use.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/status.h"

namespace opt4store {

// What Residency asks of the tiers, and what it tells them.
// The id a position is marked consumed with when a reader skips it
// (Store::MarkConsumed): no id, since ids stay below kMaxDatasetSize.
constexpr ItemId kSkippedRead = 0xFFFFFFFF;

class ResidencyTiers {
 public:
  virtual ~ResidencyTiers() = default;

  virtual bool InRam(ItemId id) const = 0;
  virtual bool OnDisk(ItemId id) const = 0;
  // Whether every reader is done with `position`; *id gets the id read there.
  virtual bool Consumed(uint64_t position, ItemId* id) const = 0;
  // The RAM tier's contents now (for the fill-once rule without a plan):
  // its items, and the arena bytes they take (whole size_units).
  virtual void RamUsage(uint64_t* items, uint64_t* bytes) const = 0;
  // A reader (of any process) is reading plan position `position` now: a
  // prefetch for it would read its item a second time, for a read already
  // served.
  virtual bool BeingRead(uint64_t position) const = 0;

  // id no longer belongs in RAM. Called only when InRam(id).
  virtual void Evict(ItemId id) = 0;
  // The read at `position` loads id and Puts it (the policy admitted it
  // there, or the disk tier will take it): readers of later positions may
  // wait for that Put.
  virtual void ExpectPut(ItemId id, uint64_t position) = 0;
  // The disk tier's eviction order: id is read next at `position`
  // (DiskIndex::kNeverRead: never again).
  virtual void SetNextUse(ItemId id, uint64_t position) = 0;
  // Position `position` read `got` where the plan has `planned`.
  virtual void Drifted(uint64_t position, ItemId planned, ItemId got) = 0;
  // Position `position`, which the plan has read `planned`, was skipped: no
  // read loads it there.
  virtual void Skipped(uint64_t position, ItemId planned) = 0;
};

struct ResidencyOptions {
  uint64_t num_ids = 0;
  // The capacity: in items when ram_items > 0, else in bytes.
  uint64_t ram_items = 0;
  uint64_t ram = 0;
  PolicyKind policy = PolicyKind::kOpt;
  // How far the planner runs ahead of the frontier, in positions.
  uint64_t prefetch_depth = 512;
  // RAM bytes beyond the capacity for prefetched and promised items (bytes
  // with an item capacity too).
  uint64_t staging = 0;
  // The RAM tier's allocation unit: an item's size counts against a byte
  // capacity rounded up to whole units, as the arena holds it (a 264-byte
  // item takes 320 bytes of 64-byte units), so that what the policy keeps
  // fits. 1: sizes as noted.
  uint64_t size_unit = 1;
  // Look-ahead of the plan for next uses (next_use.h); 0: the default.
  uint64_t plan_window = 0;
  // Slots of the ring over [frontier, planned): a power of two, at least
  // 4 x prefetch_depth. Positions never consumed are skipped once readers
  // are ring_slots / 2 past them.
  uint64_t ring_slots = uint64_t{1} << 16;
  // Positions of an epoch that readers have left (they read in a later
  // epoch) are skipped this long after the first such read: epochs run one
  // after another, so nobody will read them (drop_last's tail, a loop that
  // broke off), but readers that share the store may finish an epoch a
  // little apart.
  int64_t epoch_grace_ms = 100;
  // Whether the disk tier exists: next uses are sent and prefetch runs.
  bool disk = false;
};

class Residency {
 public:
  // REQUIRES: tiers outlives the Residency.
  Residency(const ResidencyOptions& options, ResidencyTiers* tiers);

  // ---- sizes (a byte capacity's policy needs each item's)
  void NoteSize(ItemId id, uint64_t bytes);
  // What id counts against the capacity: 1 with an item capacity, else its
  // size in whole size_units, or the mean of those while it is unknown.
  uint64_t CostOf(ItemId id) const;
  // What id takes of the staging budget while pinned: its size in whole
  // size_units, or the mean, with either kind of capacity (staging is
  // bytes: RAM the arena holds on top of the capacity).
  uint64_t StagedBytesOf(ItemId id) const;

  // ---- the plan
  // Starts over on `plan` at `start`. The policy begins there holding what
  // it keeps of `in_ram` (the ids the RAM tier holds now): as if it had just
  // read each one, soonest next read in the new plan first, so OPT keeps
  // the ones the new plan reads soonest, up to the capacity. The ids it does
  // not keep are evicted (through the tiers). Sends the disk tier its next
  // uses. On error nothing changed.
  Status SetPlan(const PlanSpec& plan, uint64_t start, const std::vector<ItemId>& in_ram = {});
  // Appends the next whole epochs of an open explicit plan (see plan.h):
  // ids consumed as "read again beyond what is known" whose next read they
  // hold are revealed to the policy and the disk tier now.
  Status AppendPlan(std::vector<ItemId> ids);
  bool has_plan() const { return stream_ != nullptr; }
  const PlanSpec& plan() const { return plan_; }
  uint64_t total_positions() const { return total_; }
  uint64_t epoch_length() const;
  uint64_t frontier() const { return frontier_; }
  uint64_t planned() const { return planned_; }
  bool InPlan(uint64_t position) const { return position < total_; }

  // ---- stepping
  // Steps the policy through positions below `limit` (and within the ring).
  // With a byte capacity, an item never seen has no size yet: the planner
  // stops at its read to wait for the Put that brings it, unless the
  // position is below force_through or readers (their highest position,
  // high_water) are already past it by prefetch_depth.
  void PlanAhead(uint64_t limit, uint64_t force_through, uint64_t high_water);
  // Moves the frontier over consumed positions, and over positions nobody
  // will read: below epoch_start (where the sampler began its latest epoch:
  // epochs run one after another), left behind by ring_slots / 2, or in an
  // epoch readers left epoch_grace_ms ago (now_ms: a monotonic clock).
  // Releases their reads; readers waiting for a skipped position's Put are
  // answered.
  void AdvanceFrontier(uint64_t high_water, int64_t now_ms, uint64_t epoch_start = 0);

  // ---- decisions
  // Whether id belongs in RAM now.
  bool Keep(ItemId id) const;
  // Whether a value of `bytes` Put or read for `position` enters RAM.
  bool Wanted(uint64_t position, ItemId id, uint64_t bytes) const;
  // Evicts id (through the tiers) if it is in RAM and Keep() is false.
  void MaybeEvict(ItemId id);
  // id is in neither tier and no Put of it is expected (evicted, its read
  // skipped, or its Put not kept): its first pending read not yet begun
  // will load it, so later readers may wait for that read's Put
  // (ResidencyTiers::ExpectPut, which keeps an earlier read's). Until
  // 2026-11-28 that expectation was lost whenever an earlier read's was
  // pending when the planner stepped the later read.
  void ExpectNextLoad(ItemId id);
  // Tells the disk tier when id is next read from it: at its first pending
  // read that is neither a policy hit (RAM serves those) nor consumed, else
  // at the read after its last pending one, else (none pending) at
  // `none_pending` (0: leaves the rank as it is). Called as reads are
  // stepped and released, and before a Put of id is written (its read,
  // consumed but not yet released, would otherwise rank it as read now).
  void RankOnDisk(ItemId id, uint64_t none_pending);
  // At the owner's close: a restart's RAM starts empty, so every pending
  // read not yet consumed will read the disk tier. Ranks each id with one
  // by the first (policy hits included), and returns the ids RAM holds and
  // the disk tier does not, read soonest first (then those with no such
  // read): what the close offers the disk tier, in that order.
  std::vector<ItemId> RankForRestart();
  // Up to 32 ids the next planned reads need from disk into RAM, within the
  // staging budget; each is pinned until its read is consumed.
  void CollectPrefetch(std::vector<ItemId>* ids);
  // RAM found no room for a fetch or a prefetch. Once the plan is planned to
  // its end, evicts resident items no read is pending for (never read again
  // in the plan: the policy had no reason to let them go) that the disk
  // tier holds, until `bytes` are free (an item of unknown size counts as
  // its cost). Returns whether any was evicted.
  bool EvictUnneeded(uint64_t bytes);
  // id was fetched into RAM for a reader's request at `position`: held, in
  // the staging budget, until that read is consumed or the frontier passes
  // it (prefetch_depth positions on, outside the plan).
  void HoldFetched(ItemId id, uint64_t position);

  // ---- counters
  uint64_t policy_hits() const { return policy_hits_; }
  uint64_t drift() const { return drift_; }
  uint64_t abandoned() const { return abandoned_; }

 private:
  // bytes (at least 1) rounded up to whole size_units, at most UINT32_MAX.
  uint64_t WholeUnits(uint64_t bytes) const;
  // What the policy decided at a planned position.
  enum SlotFlags : uint8_t {
    kHit = 1,          // the policy hit: it holds the item from its last read
    kPrefetchPin = 4,  // brought (or kept) from the disk tier for this read
    kReleased = 8,     // consumed ahead of the frontier and released then
  };
  struct Slot {
    ItemId id = 0;
    uint32_t next = 0;  // slot index + 1 of the next pending read of id; 0: none
    uint8_t flags = 0;
    // id's next read after this one, as the disk tier ranks it; told to it
    // once this read is released with no other pending.
    uint64_t after = 0;
  };

  Slot& SlotAt(uint64_t position) { return slots_[position & (options_.ring_slots - 1)]; }
  const Slot& SlotAt(uint64_t position) const {
    return slots_[position & (options_.ring_slots - 1)];
  }
  // The policy's first state on a new plan: see SetPlan.
  void KeepInRam(const std::vector<ItemId>& in_ram);
  void Release(uint64_t position);
  bool EpochLeft(uint64_t position, uint64_t high_water, int64_t now_ms);
  // Releases reads consumed ahead of the frontier (each the first pending
  // read of its id, read as planned) and lets fetched items go once their
  // reads are consumed or the frontier passed them.
  void ReleaseConsumed();
  // Unlinks the read from its id's pending reads and unpins its staged item.
  void ReleaseRead(Slot* slot);
  // The position of a pending read (slot index + 1), within the ring.
  uint64_t PendingPosition(uint32_t slot_ref) const;
  // A reveal: id's read after its last stepped one is at `next`.
  void NoteReveal(ItemId id, uint64_t next);
  bool HeldAfter(ItemId id, uint32_t next_slot) const;

  const ResidencyOptions options_;
  ResidencyTiers* const tiers_;

  PlanSpec plan_;
  std::unique_ptr<NextUseStream> stream_;
  std::unique_ptr<Policy> policy_;
  uint64_t total_ = 0;
  uint64_t frontier_ = 0;
  uint64_t planned_ = 0;
  uint64_t prefetch_cursor_ = 0;
  ItemId unneeded_cursor_ = 0;  // where EvictUnneeded goes on looking
  std::vector<Slot> slots_;              // ring over [frontier_, planned_)
  std::vector<uint32_t> first_pending_;  // per id: slot index + 1, 0 none
  std::vector<uint32_t> last_pending_;
  std::vector<uint32_t> prefetch_pins_;
  std::vector<uint32_t> sizes_;  // meta + payload, 0 unknown
  uint64_t size_sum_ = 0;
  uint64_t size_count_ = 0;
  uint64_t staged_bytes_ = 0;  // bytes held by prefetch pins and fetched items
  // Fetched items, held until their read is consumed or the frontier passes
  // `until`; counted in staged_bytes_.
  struct Fetched {
    uint64_t position;  // the read that asked for it (~0: none in the plan)
    uint64_t until;
    ItemId id;
  };
  std::vector<Fetched> fetched_;
  std::vector<ItemId> evicted_;  // scratch

  // The latest epoch readers were seen to leave (+1; 0: none), and when.
  uint64_t left_epoch_ = 0;
  int64_t left_at_ms_ = 0;

  uint64_t policy_hits_ = 0;
  uint64_t drift_ = 0;
  uint64_t abandoned_ = 0;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_STORE_RESIDENCY_H_

// Policy: decides which items a cache tier keeps, given each read in plan
// order. The same policies drive the simulator and the store's tiers, so a
// policy compared in `opt4store simulate` is the policy the store runs.
//
// The policies:
//   opt       Belady's MIN with bypass. On a hit the item's priority becomes
//             its next use. On a miss the item is not admitted if it is never
//             read again, or if any item that would have to leave to make
//             room (taken furthest next use first) is read no later than it;
//             otherwise those items leave, one by one, until it fits.
//             With uniform sizes this maximises hits (tests check it against
//             an exhaustive search). With sizes it is "furthest next use
//             first", the usual variable-size generalisation.
//   opt-size  Size-aware OPT: the victim is the item with the largest
//             byte-time until its next read, size x (next - now), so one large
//             item far away goes before several small ones. Byte-time ranks
//             change as time passes, so items are grouped in power-of-two size
//             classes: inside a class the furthest next read leaves first
//             (sizes there differ by less than 2x), and the class tops are
//             compared by their byte-time now. A kFar next read counts as the
//             window's length, kNever as infinite. The item is bypassed unless
//             every victim's byte-time exceeds its own. With one size this is
//             exactly opt; on skewed sizes it trades byte hits for object hits
//             (see bench/README.md).
//   lru       least recently used leaves first; always admits.
//   lfu       fewest reads since admission leaves first, ties to the least
//             recently used; always admits. Counts restart on readmission.
//   fifo      first admitted leaves first; hits do not reorder; always admits.
//   random    a uniformly random resident leaves (seeded); always admits.
//   static    admits while the item fits and never evicts (fill once, as
//             stocaching and CoorDL's MinIO do).
//   none      keeps nothing.
// Every policy bypasses an item larger than the whole capacity.
//
// Capacity is in cost units: items (every cost is 1) or bytes (cost = size).
//
// Thread safety: not thread-safe. A tier serializes calls with its own lock.
#ifndef OPT4STORE_POLICY_H_
#define OPT4STORE_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/next_use.h"
#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

enum class PolicyKind { kOpt, kOptSize, kLru, kLfu, kFifo, kRandom, kStatic, kNone };

const char* PolicyName(PolicyKind kind);
// Accepts the names above.
Status ParsePolicyKind(std::string_view name, PolicyKind* kind);
// "all" or a comma-separated list, e.g. "opt,lru". Keeps the given order,
// drops repeats.
Status ParsePolicyList(std::string_view list, std::vector<PolicyKind>* kinds);
// The order used by "all": opt, opt-size, lru, lfu, fifo, random, static, none.
std::vector<PolicyKind> AllPolicies();

struct PolicyOptions {
  PolicyKind kind = PolicyKind::kOpt;
  // In cost units. 0 keeps nothing.
  uint64_t capacity = 0;
  // Ids are in [0, num_ids). Per-id state is sized by it.
  uint64_t num_ids = 0;
  // The look-ahead window of the NextUseStream that feeds this policy
  // (opt needs it: its priority structure is a bitmap over the window).
  uint64_t window = 0;
  // Seed of the random policy.
  uint64_t seed = 0;
  // false lets a policy skip per-id bookkeeping that only Contains(), Erase()
  // and the evicted list need. The simulator turns it off for opt with item
  // capacities: a read at position t then hits iff some resident item's next
  // use is t, a bit test, and no victim's id is ever looked up.
  // REQUIRES, when false: accesses arrive in plan order from one
  // NextUseStream with every reveal forwarded, only Step() and OnReveal()
  // are called, and every cost is 1.
  bool track_ids = true;
};

// Counters every policy keeps.
struct PolicyCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t admissions = 0;
  uint64_t bypasses = 0;
  uint64_t evictions = 0;
  // Decisions opt made between items whose next use lay beyond the window
  // (kFar), where the true order was unknown. 0 means the result is exact.
  uint64_t ambiguous = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  PolicyKind kind() const { return kind_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  const PolicyCounters& counters() const { return counters_; }

  virtual bool Contains(ItemId id) const = 0;

  // A read of a resident item.
  // REQUIRES: Contains(access.id).
  virtual void OnHit(const Access& access) = 0;

  // A read of an item that is not resident, whose cost is `cost`. Returns
  // true if the policy admits it; then the items it evicted to make room are
  // appended to *evicted, in eviction order. On false nothing changed.
  // REQUIRES: !Contains(access.id).
  virtual bool OnMiss(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) = 0;

  // The stream revealed the exact next read of an id whose next was kFar.
  virtual void OnReveal(const Reveal& reveal) { (void)reveal; }

  // Step() over a block of reads, with the reveals the stream made while
  // producing it (reveals[k].step = the index after which it applies). Costs
  // are all 1 when `costs` is null. When `hits` is not null, hits[i] says
  // whether read i hit. The simulator's inner loop: one virtual call per
  // block, so a policy can keep its loop tight and prefetch ahead.
  // costs[i] and hits[i] belong to accesses[i] (per read, not per id).
  virtual void StepBatch(const Access* accesses, size_t n, const uint64_t* costs,
                         const StepReveal* reveals, size_t num_reveals, uint8_t* hits);

  // A hint that `access` comes a few reads from now: touch its state so that
  // the random loads overlap instead of stalling one after another.
  virtual void Prefetch(const Access& access) const { (void)access; }

  // Drops id if resident (e.g. the tier lost it); returns whether it was.
  virtual bool Erase(ItemId id) = 0;

  // Hit/miss bookkeeping around OnHit/OnMiss; the simulator's inner loop.
  // Returns true on a hit.
  virtual bool Step(const Access& access, uint64_t cost, std::vector<ItemId>* evicted) {
    if (Contains(access.id)) {
      ++counters_.hits;
      OnHit(access);
      return true;
    }
    ++counters_.misses;
    if (OnMiss(access, cost, evicted)) {
      ++counters_.admissions;
    } else {
      ++counters_.bypasses;
    }
    return false;
  }

 protected:
  Policy(PolicyKind kind, uint64_t capacity) : kind_(kind), capacity_(capacity) {}

  const PolicyKind kind_;
  const uint64_t capacity_;
  uint64_t used_ = 0;
  PolicyCounters counters_;
};

Status NewPolicy(const PolicyOptions& options, std::unique_ptr<Policy>* policy);

}  // namespace opt4store

#endif  // OPT4STORE_POLICY_H_

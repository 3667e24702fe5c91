// Simulator: replays a plan through several policies at once, on the very
// same sequence, and counts hits. `opt4store simulate` is a thin shell over
// it, and the store's benchmarks use it as their hit-rate reference.
//
// One pass of the plan feeds every policy, so the next-use computation is
// shared. A curve (several capacities) makes one pass per capacity, except
// for lru, which Mattson's stack algorithm answers for every capacity in a
// single pass when sizes are uniform.
//
// Thread safety: Simulate() is reentrant; it shares nothing between calls.
#ifndef OPT4STORE_SIMULATOR_H_
#define OPT4STORE_SIMULATOR_H_

#include <cstdint>
#include <vector>

#include "opt4store/item_sizes.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/status.h"

namespace opt4store {

struct SimulationOptions {
  PlanSpec plan;
  // Look-ahead of the next-use stream; 0 = default (see next_use.h).
  uint64_t window = 0;
  std::vector<PolicyKind> policies;
  // One or more capacities. They count items while `sizes` is the default
  // ItemSizes(); they count bytes once `sizes` names the dataset's items
  // (Constant(bytes, n), FromFile or FromVector), even if every size is equal.
  std::vector<uint64_t> capacities;
  ItemSizes sizes;
  // With sizes: each item costs its size in whole units of the RAM tier of
  // that capacity (opt4store/ram_units.h), as the store's policy counts it,
  // and not its bytes. bytes_read and bytes_hit stay in bytes.
  bool ram_units = false;
  uint64_t seed = 0;  // for the random policy
};

struct PolicyResult {
  PolicyKind kind = PolicyKind::kOpt;
  PolicyCounters counters;
  uint64_t bytes_read = 0;  // sum of sizes over all reads
  uint64_t bytes_hit = 0;   // sum of sizes over hits
  double seconds = 0;       // wall time of this policy's share of the pass

  double hit_rate(uint64_t accesses) const {
    return accesses ? static_cast<double>(counters.hits) / static_cast<double>(accesses) : 0.0;
  }
  double byte_hit_rate() const {
    return bytes_read ? static_cast<double>(bytes_hit) / static_cast<double>(bytes_read) : 0.0;
  }
};

struct CapacityResult {
  uint64_t capacity = 0;
  std::vector<PolicyResult> policies;  // in SimulationOptions::policies order
};

struct SimulationResult {
  PlanShape shape;
  uint64_t accesses = 0;
  uint64_t distinct_ids = 0;  // ids read at least once
  uint64_t window = 0;        // the window actually used
  bool exact_window = false;  // the window spans the whole plan
  std::vector<CapacityResult> points;  // in SimulationOptions::capacities order
};

// Validates (capacity above what the dataset holds, sizes that do not match
// the dataset, an empty policy list, ...) and runs.
Status Simulate(const SimulationOptions& options, SimulationResult* result);

// LRU hit counts for many capacities (in items) in one pass: hits[i] is the
// number of hits an LRU cache of capacities[i] items gets. Mattson et al.,
// 1970: a read hits in an LRU cache of c items iff fewer than c distinct
// ids were read since the previous read of the same id.
Status LruHitCurve(const PlanSpec& plan, const std::vector<uint64_t>& capacities,
                   std::vector<uint64_t>* hits);

}  // namespace opt4store

#endif  // OPT4STORE_SIMULATOR_H_

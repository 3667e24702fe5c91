// reference_belady.h: a plain, textbook Belady MIN with bypass, for uniform
// item sizes. It is the yardstick that the benchmarks time the engine's
// `opt` policy against, and that tests check the engine's hit counts with.
//
// It is deliberately the straightforward version a competent engineer writes
// in an afternoon: one backward pass for the next-use array, then one
// forward pass over a std::priority_queue max-heap with lazy deletion. It is
// neither slowed down nor tuned. It depends on nothing but the standard
// library, so that it stays independent of the engine it checks.
//
// Semantics (the same as the engine's `opt`, policy.h):
//   - Positions are 0-based indices into `seq`. next[t] is the position of
//     the next read of seq[t] after t, or kNever if there is none.
//   - Hit: the item is resident. Its priority becomes next[t].
//   - Miss, next[t] == kNever: bypass (an item never read again is useless).
//   - Miss, fewer than `capacity_items` residents: admit.
//   - Miss, cache full: let v be the resident whose next use is furthest.
//     If next(v) <= next[t], bypass: the incoming item would be needed no
//     sooner than everything resident (ties: bypass when equal; with exact
//     next uses two different items can only tie at kNever, which was
//     bypassed above). Otherwise evict v and admit.
//   - capacity_items == 0: every miss is a bypass.
// Residents whose next use is kNever sit at the top of the heap and are the
// first to leave. With uniform sizes this maximises hits (Belady 1966,
// Mattson et al. 1970).
//
// Memory: 8 bytes per read (next-use array) + up to 16 bytes per read
// (heap entries awaiting lazy deletion) + 9 bytes per id.
//
// Thread safety: pure functions; reentrant.
#ifndef OPT4STORE_BENCH_REFERENCE_BELADY_H_
#define OPT4STORE_BENCH_REFERENCE_BELADY_H_

#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

namespace opt4store {
namespace reference {

// "Not read again": the largest key, so such residents leave first.
constexpr uint64_t kRefNever = UINT64_MAX;

struct BeladyResult {
  uint64_t hits = 0;
  uint64_t misses = 0;      // == admissions + bypasses
  uint64_t admissions = 0;
  uint64_t bypasses = 0;
  uint64_t evictions = 0;
};

// next[t] = the next position after t holding seq[t], or kRefNever.
// REQUIRES: every id in seq is < num_ids.
inline std::vector<uint64_t> NextUses(const std::vector<uint32_t>& seq, uint64_t num_ids) {
  std::vector<uint64_t> next(seq.size());
  std::vector<uint64_t> last_seen(num_ids, kRefNever);
  for (uint64_t t = seq.size(); t-- > 0;) {
    next[t] = last_seen[seq[t]];
    last_seen[seq[t]] = t;
  }
  return next;
}

// Belady MIN with bypass over a precomputed next-use array (see NextUses).
// REQUIRES: next.size() == seq.size(); every id in seq is < num_ids.
inline BeladyResult BeladyWithNextUses(const std::vector<uint32_t>& seq,
                                       const std::vector<uint64_t>& next,
                                       uint64_t capacity_items, uint64_t num_ids) {
  BeladyResult r;
  // Max-heap of (next use, id). An entry is stale when its id is no longer
  // resident or its key is no longer the id's current next use.
  std::priority_queue<std::pair<uint64_t, uint32_t>> heap;
  std::vector<uint8_t> resident(num_ids, 0);
  std::vector<uint64_t> current_next(num_ids, kRefNever);
  uint64_t size = 0;

  auto is_stale = [&](const std::pair<uint64_t, uint32_t>& e) {
    return !resident[e.second] || current_next[e.second] != e.first;
  };

  for (uint64_t t = 0; t < seq.size(); ++t) {
    const uint32_t id = seq[t];
    const uint64_t nt = next[t];
    if (resident[id]) {
      ++r.hits;
      current_next[id] = nt;
      heap.emplace(nt, id);  // the old entry becomes stale
      continue;
    }
    ++r.misses;
    if (nt == kRefNever || capacity_items == 0) {
      ++r.bypasses;
      continue;
    }
    if (size < capacity_items) {
      ++r.admissions;
      ++size;
      resident[id] = 1;
      current_next[id] = nt;
      heap.emplace(nt, id);
      continue;
    }
    while (is_stale(heap.top())) heap.pop();  // full, so a live entry exists
    const auto top = heap.top();
    if (top.first <= nt) {  // ties: bypass
      ++r.bypasses;
      continue;
    }
    heap.pop();
    resident[top.second] = 0;
    ++r.evictions;
    ++r.admissions;
    resident[id] = 1;
    current_next[id] = nt;
    heap.emplace(nt, id);
  }
  return r;
}

// The whole reference: next-use pass plus the forward pass.
// REQUIRES: every id in seq is < num_ids.
inline BeladyResult Belady(const std::vector<uint32_t>& seq, uint64_t capacity_items,
                           uint64_t num_ids) {
  const std::vector<uint64_t> next = NextUses(seq, num_ids);
  return BeladyWithNextUses(seq, next, capacity_items, num_ids);
}

}  // namespace reference
}  // namespace opt4store

#endif  // OPT4STORE_BENCH_REFERENCE_BELADY_H_

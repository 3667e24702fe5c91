// exhaustive_opt.h: the exact offline optimum (maximum object hits) of a
// cache with bypass, by exhaustive search over every keep/evict decision.
// Exponential in the number of distinct ids: for small cases only (up to
// about 12 ids). The benchmarks and tests use it as ground truth for opt,
// opt-size and the reference Belady.
//
// The decision space: at a read of x,
//   - x resident: a hit, nothing else happens;
//   - x not resident: either bypass (the cache is unchanged), or admit x and
//     keep any subset S' of the residents with size(S') + size(x) <= capacity.
// Evicting at any other moment never gains a hit (the eviction can always be
// deferred to the next admission), so this covers every policy with bypass.
// The search is a dynamic program over (position, resident set), which
// visits every reachable decision sequence's state, so it is exact.
//
// Thread safety: pure function; reentrant.
#ifndef OPT4STORE_BENCH_EXHAUSTIVE_OPT_H_
#define OPT4STORE_BENCH_EXHAUSTIVE_OPT_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace opt4store {
namespace reference {

// Maximum hits over all policies with bypass. sizes[i] is the cost of id i.
// REQUIRES: sizes.size() <= 20 and every id in seq < sizes.size().
inline uint64_t ExhaustiveMaxHits(const std::vector<uint32_t>& seq,
                                  const std::vector<uint64_t>& sizes, uint64_t capacity) {
  const uint32_t n = static_cast<uint32_t>(sizes.size());
  std::vector<uint64_t> mask_bytes(uint64_t{1} << n, 0);
  for (uint32_t m = 1; m < mask_bytes.size(); ++m) {
    uint32_t low = static_cast<uint32_t>(__builtin_ctz(m));
    mask_bytes[m] = mask_bytes[m & (m - 1)] + sizes[low];
  }
  // best[S] = most hits so far with resident set S.
  std::unordered_map<uint32_t, uint64_t> best{{0u, 0}}, next_best;
  auto relax = [&next_best](uint32_t s, uint64_t hits) {
    auto it = next_best.find(s);
    if (it == next_best.end()) {
      next_best.emplace(s, hits);
    } else if (it->second < hits) {
      it->second = hits;
    }
  };
  for (uint32_t x : seq) {
    const uint32_t bit = 1u << x;
    next_best.clear();
    for (const auto& [s, hits] : best) {
      if (s & bit) {
        relax(s, hits + 1);
        continue;
      }
      relax(s, hits);  // bypass
      if (sizes[x] > capacity) continue;
      // Admit x, keeping any subset of s that still fits.
      for (uint32_t sub = s;; sub = (sub - 1) & s) {
        if (mask_bytes[sub] + sizes[x] <= capacity) relax(sub | bit, hits);
        if (sub == 0) break;
      }
    }
    best.swap(next_best);
  }
  uint64_t max_hits = 0;
  for (const auto& entry : best) max_hits = entry.second > max_hits ? entry.second : max_hits;
  return max_hits;
}

}  // namespace reference
}  // namespace opt4store

#endif  // OPT4STORE_BENCH_EXHAUSTIVE_OPT_H_

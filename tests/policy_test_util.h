// Helpers shared by the policy tests (policy_test.cc: names, hand-checked
// traces, the exhaustive optimum, Belady; policy_bytes_test.cc: byte
// capacities, OnReveal, StepBatch).
#ifndef OPT4STORE_TESTS_POLICY_TEST_UTIL_H_
#define OPT4STORE_TESTS_POLICY_TEST_UTIL_H_

#include "opt4store/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/reference/exhaustive_opt.h"
#include "opt4store/next_use.h"
#include "opt4store/plan.h"
#include "tests/reference/reference_belady.h"

namespace opt4store {
namespace policy_test {

inline std::unique_ptr<Policy> MakePolicy(PolicyKind kind, uint64_t capacity, uint64_t num_ids,
                                   uint64_t window, uint64_t seed = 0, bool track_ids = true) {
  PolicyOptions o;
  o.kind = kind;
  o.capacity = capacity;
  o.num_ids = num_ids;
  o.window = window;
  o.seed = seed;
  o.track_ids = track_ids;
  std::unique_ptr<Policy> p;
  Status st = NewPolicy(o, &p);
  INFO(st.ToString());
  REQUIRE(st.ok());
  REQUIRE(p != nullptr);
  REQUIRE(p->kind() == kind);
  REQUIRE(p->capacity() == capacity);
  REQUIRE(p->used() == 0);
  return p;
}

inline std::vector<uint64_t> NextUses(const std::vector<ItemId>& seq) {
  std::vector<uint64_t> next(seq.size(), kNever);
  std::map<ItemId, uint64_t> last;
  for (size_t t = seq.size(); t-- > 0;) {
    auto it = last.find(seq[t]);
    next[t] = it == last.end() ? kNever : it->second;
    last[seq[t]] = t;
  }
  return next;
}

// Accesses with exact next uses, computed from the whole sequence.
inline std::vector<Access> ExactAccesses(const std::vector<ItemId>& seq) {
  const std::vector<uint64_t> next = NextUses(seq);
  std::vector<Access> out(seq.size());
  for (size_t t = 0; t < seq.size(); ++t) out[t] = Access{t, seq[t], next[t]};
  return out;
}

inline std::vector<ItemId> Letters(const std::string& s) {
  std::vector<ItemId> ids;
  for (char c : s) ids.push_back(static_cast<ItemId>(c - 'A'));
  return ids;
}

inline uint64_t MaxId(const std::vector<ItemId>& seq) {
  return seq.empty() ? 0 : *std::max_element(seq.begin(), seq.end());
}

inline PlanSpec Explicit(std::vector<ItemId> ids) {
  PlanSpec s;
  s.kind = SamplerKind::kExplicit;
  s.ids = std::make_shared<const std::vector<ItemId>>(std::move(ids));
  return s;
}

// What a NextUseStream yields for a sequence: every access and the reveal of
// each step.
struct StreamTrace {
  uint64_t window = 0;
  uint64_t num_ids = 0;
  std::vector<Access> accesses;
  std::vector<Reveal> reveals;
};

inline StreamTrace TraceStream(const std::vector<ItemId>& seq, uint64_t window_arg,
                        uint64_t dataset_size = 0) {
  PlanSpec spec = Explicit(seq);
  spec.dataset_size = dataset_size;
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(spec, &source).ok());
  std::unique_ptr<NextUseStream> stream;
  REQUIRE(NextUseStream::Open(std::move(source), window_arg, &stream).ok());
  StreamTrace tr;
  tr.window = stream->window();
  tr.num_ids = stream->shape().dataset_size;
  Access a;
  Reveal r;
  while (stream->Next(&a, &r)) {
    tr.accesses.push_back(a);
    tr.reveals.push_back(r);
  }
  REQUIRE(stream->status().ok());
  REQUIRE(tr.accesses.size() == seq.size());
  return tr;
}

// Feeds a trace through a policy: Step, then OnReveal (in that order: the
// reveal can concern the id just read, whose Step sets its kFar).
inline PolicyCounters Feed(Policy* p, const StreamTrace& tr, bool reveals = true,
                    const std::vector<uint64_t>* costs = nullptr) {
  std::vector<ItemId> evicted;
  for (size_t t = 0; t < tr.accesses.size(); ++t) {
    const Access& a = tr.accesses[t];
    evicted.clear();
    p->Step(a, costs ? (*costs)[a.id] : 1, &evicted);
    if (reveals && tr.reveals[t].valid) p->OnReveal(tr.reveals[t]);
  }
  return p->counters();
}

inline PolicyCounters RunStream(PolicyKind kind, const std::vector<ItemId>& seq, uint64_t capacity,
                         uint64_t window_arg, bool reveals = true, uint64_t seed = 0,
                         bool track_ids = true) {
  const StreamTrace tr = TraceStream(seq, window_arg);
  auto p = MakePolicy(kind, capacity, tr.num_ids, tr.window, seed, track_ids);
  return Feed(p.get(), tr, reveals);
}

// track_ids = false only skips bookkeeping: every decision is the same.
inline void CheckSameCounters(const PolicyCounters& got, const PolicyCounters& want) {
  CHECK(got.hits == want.hits);
  CHECK(got.misses == want.misses);
  CHECK(got.admissions == want.admissions);
  CHECK(got.bypasses == want.bypasses);
  CHECK(got.evictions == want.evictions);
  CHECK(got.ambiguous == want.ambiguous);
}

}  // namespace policy_test
}  // namespace opt4store

#endif  // OPT4STORE_TESTS_POLICY_TEST_UTIL_H_

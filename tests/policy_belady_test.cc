// Policy: the exactness tests, continued (policy_test.cc has a-b,
// policy_bytes_test.cc d).
//   c. opt against a textbook Belady (tests/reference/reference_belady.h) on 200k reads;
//   e. OnReveal: a small window plus reveals against the full window;
//   StepBatch against Step read by read.
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
#include "policy_test_util.h"

namespace opt4store {
namespace {

using namespace policy_test;  // the shared helpers

// ------------------------------------------ c. large sequences vs Belady

struct LargeCase {
  std::string name;
  std::vector<ItemId> seq;
  uint64_t num_ids;
};

std::vector<LargeCase> LargeCases() {
  const uint64_t n = 20000, reads = 200000;
  std::vector<LargeCase> cases;
  std::mt19937_64 rng(1234);
  {
    LargeCase c{"uniform", std::vector<ItemId>(reads), n};
    for (auto& x : c.seq) x = static_cast<ItemId>(rng() % n);
    cases.push_back(std::move(c));
  }
  {
    // Zipf(1.0) over the ids, ranks scattered over the id space.
    std::vector<double> cdf(n);
    double sum = 0;
    for (uint64_t k = 0; k < n; ++k) cdf[k] = (sum += 1.0 / static_cast<double>(k + 1));
    std::vector<ItemId> rank_to_id(n);
    for (uint64_t k = 0; k < n; ++k) rank_to_id[k] = static_cast<ItemId>(k);
    std::shuffle(rank_to_id.begin(), rank_to_id.end(), rng);
    std::uniform_real_distribution<double> u(0.0, sum);
    LargeCase c{"zipf", std::vector<ItemId>(reads), n};
    for (auto& x : c.seq) {
      const uint64_t k = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      x = rank_to_id[std::min<uint64_t>(k, n - 1)];
    }
    cases.push_back(std::move(c));
  }
  {
    PlanSpec spec;
    spec.kind = SamplerKind::kShuffle;
    spec.dataset_size = n;
    spec.epochs = reads / n;
    spec.seed = 5;
    LargeCase c{"shuffled epochs", {}, n};
    std::vector<ItemId> epoch;
    for (uint64_t e = 0; e < spec.epochs; ++e) {
      GenerateEpoch(spec, e, &epoch);
      c.seq.insert(c.seq.end(), epoch.begin(), epoch.end());
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST_CASE("opt equals a textbook Belady on 200k reads over 20k ids", "[policy][belady][opt]") {
  for (const LargeCase& lc : LargeCases()) {
    const StreamTrace tr = TraceStream(lc.seq, 0);
    REQUIRE(tr.window == lc.seq.size());  // whole plan: exact
    for (uint64_t cap : {1ull, 200ull, 2000ull, 6000ull}) {
      INFO(lc.name << " capacity " << cap);
      const reference::BeladyResult want = reference::Belady(lc.seq, cap, lc.num_ids);
      auto p = MakePolicy(PolicyKind::kOpt, cap, tr.num_ids, tr.window);
      const PolicyCounters got = Feed(p.get(), tr);
      CHECK(got.hits == want.hits);
      CHECK(got.misses == want.misses);
      CHECK(got.admissions == want.admissions);
      CHECK(got.bypasses == want.bypasses);
      CHECK(got.evictions == want.evictions);
      CHECK(got.ambiguous == 0);
      CHECK(p->used() <= cap);
      auto untracked = MakePolicy(PolicyKind::kOpt, cap, tr.num_ids, tr.window, 0, false);
      CheckSameCounters(Feed(untracked.get(), tr), got);
      if (lc.name == "shuffled epochs") {
        // The known fact: C hits in each epoch after the first.
        CHECK(got.hits == cap * (lc.seq.size() / lc.num_ids - 1));
      }
    }
  }
}

TEST_CASE("opt-size with uniform costs equals opt on 200k reads", "[policy][belady][opt-size]") {
  const std::vector<LargeCase> cases = LargeCases();
  for (size_t i = 0; i < 2; ++i) {
    const LargeCase& lc = cases[i];
    const StreamTrace tr = TraceStream(lc.seq, 0);
    for (uint64_t cap : {200ull, 2000ull}) {
      INFO(lc.name << " capacity " << cap);
      const reference::BeladyResult want = reference::Belady(lc.seq, cap, lc.num_ids);
      // Items of 4096 bytes each, so the capacity is in bytes.
      const std::vector<uint64_t> costs(lc.num_ids, 4096);
      auto p = MakePolicy(PolicyKind::kOptSize, cap * 4096, tr.num_ids, tr.window);
      const PolicyCounters got = Feed(p.get(), tr, true, &costs);
      CHECK(got.hits == want.hits);
      CHECK(p->used() <= cap * 4096);
    }
  }
}

TEST_CASE("opt counts ambiguous decisions only when the window is short",
          "[policy][ambiguous][opt]") {
  std::mt19937_64 rng(8);
  std::vector<ItemId> seq(20000);
  for (auto& x : seq) x = static_cast<ItemId>(rng() % 2000);
  const reference::BeladyResult exact = reference::Belady(seq, 200, 2000);
  const PolicyCounters full = RunStream(PolicyKind::kOpt, seq, 200, 0);
  CHECK(full.ambiguous == 0);
  CHECK(full.hits == exact.hits);
  const PolicyCounters short_window = RunStream(PolicyKind::kOpt, seq, 200, 64);
  CheckSameCounters(RunStream(PolicyKind::kOpt, seq, 200, 64, true, 0, false), short_window);
  CHECK(short_window.ambiguous > 0);
  CHECK(short_window.hits <= exact.hits);
  CHECK(short_window.hits + short_window.misses == seq.size());
}

// ------------------------------------------------------------ e. OnReveal

TEST_CASE("OnReveal: a hand-checked case where a reveal decides", "[policy][reveal][opt]") {
  // Window 4, capacity 2.  pos: 0 1 2 3 4 5 6 7
  //                        id : R S S X R S Y X     (R=0 S=1 X=2 Y=3)
  //  t=0 R next 4 >= 0+4: kFar; admit (room). The same step brings in
  //      position 4 and reveals {R, 4}.
  //  t=1 S next 2: admit (room).
  //  t=2 S hit, next 5.
  //  t=3 X next 7 >= 3+4: kFar (and revealed {X, 7}). Residents R:4 (known
  //      thanks to the reveal) and S:5 are both sooner: bypass, with no
  //      ambiguity. Without the reveal R is kFar, like X: ambiguous.
  //  t=4 R hit, t=5 S hit (both kNever now), t=6 Y and t=7 X never read
  //      again: bypass.
  //  hits 3, misses 5, admissions 2, bypasses 3, evictions 0; {R S}.
  const std::vector<ItemId> seq = {0, 1, 1, 2, 0, 1, 3, 2};
  const StreamTrace tr = TraceStream(seq, 4);
  REQUIRE(tr.window == 4);
  auto p = MakePolicy(PolicyKind::kOpt, 2, tr.num_ids, tr.window);
  const PolicyCounters c = Feed(p.get(), tr, true);
  CHECK(c.hits == 3);
  CHECK(c.misses == 5);
  CHECK(c.admissions == 2);
  CHECK(c.bypasses == 3);
  CHECK(c.evictions == 0);
  CHECK(c.ambiguous == 0);
  CHECK(p->Contains(0));
  CHECK(p->Contains(1));
  CHECK_FALSE(p->Contains(2));
  CHECK(c.hits == RunStream(PolicyKind::kOpt, seq, 2, 0).hits);
  CheckSameCounters(RunStream(PolicyKind::kOpt, seq, 2, 4, true, 0, false), c);
  // Without reveals the decision at t=3 is between two kFar items.
  const PolicyCounters blind = RunStream(PolicyKind::kOpt, seq, 2, 4, false);
  CHECK(blind.ambiguous > 0);
}

std::vector<ItemId> ShuffledEpochs(uint64_t n, uint64_t epochs, uint64_t seed) {
  PlanSpec spec;
  spec.kind = SamplerKind::kShuffle;
  spec.dataset_size = n;
  spec.epochs = epochs;
  spec.seed = seed;
  std::vector<ItemId> all, epoch;
  for (uint64_t e = 0; e < epochs; ++e) {
    GenerateEpoch(spec, e, &epoch);
    all.insert(all.end(), epoch.begin(), epoch.end());
  }
  return all;
}

TEST_CASE("OnReveal: shuffled epochs with a window of 2 epochs are exact",
          "[policy][reveal][opt]") {
  for (uint64_t n : {50ull, 300ull, 1000ull}) {
    for (uint64_t e : {2ull, 5ull}) {
      const std::vector<ItemId> seq = ShuffledEpochs(n, e, n + e);
      for (uint64_t cap : {n / 10, n / 3, n - 1}) {
        for (uint64_t w : {2 * n, 2 * n + 7, 3 * n}) {
          INFO("n " << n << " epochs " << e << " cap " << cap << " window " << w);
          const PolicyCounters full = RunStream(PolicyKind::kOpt, seq, cap, 0);
          const PolicyCounters win = RunStream(PolicyKind::kOpt, seq, cap, w);
          CHECK(win.hits == full.hits);
          CHECK(win.ambiguous == 0);
          CheckSameCounters(RunStream(PolicyKind::kOpt, seq, cap, w, true, 0, false), win);
          CHECK(full.hits == cap * (e - 1));
        }
      }
    }
  }
}

TEST_CASE("OnReveal: a short window is exact whenever nothing was ambiguous",
          "[policy][reveal][opt]") {
  std::mt19937_64 rng(555);
  int exact_with_far = 0, inexact = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ItemId> seq;
    uint64_t ids;
    if (trial % 2 == 0) {
      ids = 20 + rng() % 200;
      seq = ShuffledEpochs(ids, 2 + rng() % 4, trial);
    } else {
      ids = 5 + rng() % 100;
      seq.resize(100 + rng() % 1500);
      for (auto& x : seq) x = static_cast<ItemId>(rng() % ids);
    }
    const uint64_t cap = 1 + rng() % ids;
    const uint64_t window = 1 + rng() % (2 * ids + 10);
    INFO("trial " << trial << " ids " << ids << " len " << seq.size() << " cap " << cap
                  << " window " << window);
    const reference::BeladyResult exact = reference::Belady(seq, cap, ids);
    const StreamTrace tr = TraceStream(seq, window);
    auto p = MakePolicy(PolicyKind::kOpt, cap, tr.num_ids, tr.window);
    const PolicyCounters c = Feed(p.get(), tr, true);
    REQUIRE(c.hits <= exact.hits);
    REQUIRE(c.hits + c.misses == seq.size());
    auto untracked = MakePolicy(PolicyKind::kOpt, cap, tr.num_ids, tr.window, 0, false);
    CheckSameCounters(Feed(untracked.get(), tr, true), c);
    if (c.ambiguous == 0) {
      REQUIRE(c.hits == exact.hits);
      bool any_far = false;
      for (const Access& a : tr.accesses) any_far = any_far || a.next == kFar;
      exact_with_far += any_far;
    }
    if (c.hits != exact.hits) {
      REQUIRE(c.ambiguous > 0);
      ++inexact;
    }
  }
  // The property was exercised on both sides.
  CHECK(exact_with_far > 10);
  CHECK(inexact > 0);
}

// ------------------------------------------------------------- StepBatch

// Feeds tr[begin, end) to p->StepBatch in blocks of random size, with the
// reveals of each block, per-read costs (or null) and a hits array (or null).
void FeedBatches(Policy* p, const StreamTrace& tr, const std::vector<uint64_t>* id_costs,
                 bool want_hits, std::mt19937_64& rng, std::vector<uint8_t>* hits_out) {
  const size_t len = tr.accesses.size();
  hits_out->assign(len, 2);
  size_t at = 0;
  while (at < len) {
    const size_t n = std::min<size_t>(len - at, 1 + rng() % 100);
    std::vector<StepReveal> reveals;
    std::vector<uint64_t> costs(n);
    for (size_t i = 0; i < n; ++i) {
      const Reveal& r = tr.reveals[at + i];
      if (r.valid) reveals.push_back({i, r.id, r.next});
      costs[i] = id_costs ? (*id_costs)[tr.accesses[at + i].id] : 1;
    }
    p->StepBatch(tr.accesses.data() + at, n, id_costs ? costs.data() : nullptr,
                 reveals.data(), reveals.size(), want_hits ? hits_out->data() + at : nullptr);
    at += n;
  }
}

TEST_CASE("StepBatch equals Step and OnReveal read by read, for every policy",
          "[policy][batch]") {
  std::mt19937_64 rng(8080);
  for (int trial = 0; trial < 40; ++trial) {
    const uint64_t ids = 5 + rng() % 100;
    std::vector<ItemId> seq(200 + rng() % 1300);
    for (auto& x : seq) x = static_cast<ItemId>(std::min(rng() % ids, rng() % ids));
    const uint64_t window = trial % 3 == 0 ? 0 : 1 + rng() % (2 * ids);
    const StreamTrace tr = TraceStream(seq, window);
    std::vector<uint64_t> sizes(tr.num_ids);
    for (auto& s : sizes) s = 1 + rng() % 30;
    for (PolicyKind kind : AllPolicies()) {
      for (bool bytes : {false, true}) {
        const uint64_t cap = bytes ? 20 + rng() % 300 : 1 + rng() % ids;
        INFO("trial " << trial << " " << PolicyName(kind) << (bytes ? " bytes " : " items ")
                      << cap << " window " << tr.window);
        const std::vector<uint64_t>* costs = bytes ? &sizes : nullptr;
        // Reference: Step then OnReveal, read by read.
        auto one = MakePolicy(kind, cap, tr.num_ids, tr.window, trial);
        std::vector<uint8_t> want_hits(seq.size());
        std::vector<ItemId> evicted;
        for (size_t t = 0; t < seq.size(); ++t) {
          const Access& a = tr.accesses[t];
          want_hits[t] = one->Step(a, costs ? (*costs)[a.id] : 1, &evicted);
          if (tr.reveals[t].valid) one->OnReveal(tr.reveals[t]);
        }
        auto batched = MakePolicy(kind, cap, tr.num_ids, tr.window, trial);
        std::vector<uint8_t> hits;
        FeedBatches(batched.get(), tr, costs, true, rng, &hits);
        CheckSameCounters(batched->counters(), one->counters());
        CHECK(hits == want_hits);
        CHECK(batched->used() == one->used());
        for (ItemId id = 0; id < tr.num_ids; ++id) {
          REQUIRE(batched->Contains(id) == one->Contains(id));
        }
        if (kind == PolicyKind::kOpt && !bytes) {
          // Untracked, unit costs, no hits array: opt's own tight loop.
          auto fast = MakePolicy(kind, cap, tr.num_ids, tr.window, trial, false);
          FeedBatches(fast.get(), tr, nullptr, false, rng, &hits);
          CheckSameCounters(fast->counters(), one->counters());
          auto fast_hits = MakePolicy(kind, cap, tr.num_ids, tr.window, trial, false);
          FeedBatches(fast_hits.get(), tr, nullptr, true, rng, &hits);
          CheckSameCounters(fast_hits->counters(), one->counters());
          CHECK(hits == want_hits);
        }
      }
    }
  }
}

}  // namespace
}  // namespace opt4store

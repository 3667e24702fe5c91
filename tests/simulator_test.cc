// Simulator: Simulate() against running each policy by hand through a
// NextUseStream (Step, then OnReveal); the known OPT result on shuffled
// epochs; validation; byte capacities; LruHitCurve against per-capacity
// runs and against Mattson's definition; multi-capacity runs; determinism.
// Also ItemSizes.
#include "opt4store/simulator.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "opt4store/item_sizes.h"
#include "opt4store/next_use.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "policy_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::TempDir;
using opt4store_test::WriteBytes;

PlanSpec Generated(SamplerKind kind, uint64_t n, uint64_t epochs, uint64_t seed) {
  PlanSpec s;
  s.kind = kind;
  s.dataset_size = n;
  s.epochs = epochs;
  s.seed = seed;
  return s;
}

PlanSpec Explicit(std::vector<ItemId> ids, uint64_t dataset_size = 0) {
  PlanSpec s;
  s.kind = SamplerKind::kExplicit;
  s.ids = std::make_shared<const std::vector<ItemId>>(std::move(ids));
  s.dataset_size = dataset_size;
  return s;
}

std::vector<ItemId> SequenceOf(const PlanSpec& spec) {
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(spec, &source).ok());
  std::vector<ItemId> all, buf(256);
  for (;;) {
    size_t count = 0;
    REQUIRE(source->Read(buf.data(), buf.size(), &count).ok());
    if (count == 0) break;
    all.insert(all.end(), buf.begin(), buf.begin() + count);
  }
  REQUIRE(all.size() == source->shape().total_reads);
  return all;
}

// One policy at one capacity, by hand: the reference for Simulate().
struct HandRun {
  PolicyCounters counters;
  uint64_t bytes_read = 0;
  uint64_t bytes_hit = 0;
  uint64_t window = 0;
  bool whole = false;
  PlanShape shape;
};

HandRun RunByHand(const SimulationOptions& o, PolicyKind kind, uint64_t capacity) {
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(o.plan, &source).ok());
  std::unique_ptr<NextUseStream> stream;
  REQUIRE(NextUseStream::Open(std::move(source), o.window, &stream).ok());
  HandRun r;
  r.shape = stream->shape();
  r.window = stream->window();
  r.whole = stream->covers_whole_plan();
  PolicyOptions po;
  po.kind = kind;
  po.capacity = capacity;
  po.num_ids = stream->shape().dataset_size;
  po.window = stream->window();
  po.seed = o.seed;
  std::unique_ptr<Policy> policy;
  REQUIRE(NewPolicy(po, &policy).ok());
  Access a;
  Reveal rv;
  std::vector<ItemId> evicted;
  while (stream->Next(&a, &rv)) {
    const uint64_t size = o.sizes.Size(a.id);
    evicted.clear();
    const bool hit = policy->Step(a, size, &evicted);
    r.bytes_read += size;
    if (hit) r.bytes_hit += size;
    if (rv.valid) policy->OnReveal(rv);
  }
  REQUIRE(stream->status().ok());
  r.counters = policy->counters();
  return r;
}

// The counters of two runs are the same (policy_test_util.h).
void CheckCounters(const PolicyCounters& got, const PolicyCounters& want) {
  policy_test::CheckSameCounters(got, want);
}

// Simulate() must equal the hand runs, point by point, policy by policy.
void CheckAgainstHand(const SimulationOptions& o) {
  SimulationResult result;
  Status st = Simulate(o, &result);
  INFO(st.ToString());
  REQUIRE(st.ok());
  const std::vector<ItemId> seq = SequenceOf(o.plan);
  const std::set<ItemId> distinct(seq.begin(), seq.end());
  CHECK(result.accesses == seq.size());
  CHECK(result.distinct_ids == distinct.size());
  REQUIRE(result.points.size() == o.capacities.size());
  for (size_t i = 0; i < o.capacities.size(); ++i) {
    const CapacityResult& point = result.points[i];
    CHECK(point.capacity == o.capacities[i]);
    REQUIRE(point.policies.size() == o.policies.size());
    for (size_t j = 0; j < o.policies.size(); ++j) {
      const PolicyResult& pr = point.policies[j];
      INFO("capacity " << o.capacities[i] << " policy " << PolicyName(o.policies[j]));
      CHECK(pr.kind == o.policies[j]);
      const HandRun hand = RunByHand(o, o.policies[j], o.capacities[i]);
      CheckCounters(pr.counters, hand.counters);
      CHECK(pr.bytes_read == hand.bytes_read);
      CHECK(pr.bytes_hit == hand.bytes_hit);
      CHECK(pr.seconds >= 0);
      if (j == 0 && i == 0) {
        CHECK(result.window == hand.window);
        CHECK(result.exact_window == hand.whole);
        CHECK(result.shape.dataset_size == hand.shape.dataset_size);
        CHECK(result.shape.epochs == hand.shape.epochs);
        CHECK(result.shape.epoch_length == hand.shape.epoch_length);
        CHECK(result.shape.total_reads == hand.shape.total_reads);
      }
      // The helpers on the result.
      CHECK(pr.hit_rate(result.accesses) ==
            Approx(static_cast<double>(pr.counters.hits) / result.accesses));
      if (pr.bytes_read) {
        CHECK(pr.byte_hit_rate() ==
              Approx(static_cast<double>(pr.bytes_hit) / pr.bytes_read));
      }
    }
  }
}

// ------------------------------------------------------------------ tests

TEST_CASE("Simulate equals each policy run by hand on small plans", "[simulator]") {
  std::vector<PlanSpec> plans;
  plans.push_back(Generated(SamplerKind::kShuffle, 50, 3, 1));
  plans.push_back(Generated(SamplerKind::kSequential, 40, 2, 0));
  {
    PlanSpec rep = Generated(SamplerKind::kReplacement, 60, 2, 2);
    rep.num_samples = 90;
    plans.push_back(rep);
  }
  {
    PlanSpec dist = Generated(SamplerKind::kDistributed, 101, 4, 3);
    dist.world_size = 3;
    dist.rank = 2;
    plans.push_back(dist);
  }
  {
    std::mt19937_64 rng(6);
    std::vector<ItemId> ids(400);
    for (auto& x : ids) x = static_cast<ItemId>(std::min(rng() % 80, rng() % 80));
    plans.push_back(Explicit(ids, 80));
  }
  for (const PlanSpec& plan : plans) {
    for (uint64_t window : {0ull, 7ull, 64ull}) {
      INFO(plan.Describe() << " window " << window);
      SimulationOptions o;
      o.plan = plan;
      o.window = window;
      o.policies = AllPolicies();
      o.capacities = {1, 5, 20, 40};
      o.seed = 9;
      CheckAgainstHand(o);
    }
  }
}

TEST_CASE("OPT (and static) hit exactly C x (E - 1) on shuffled epochs", "[simulator]") {
  for (uint64_t n : {10ull, 100ull, 1000ull}) {
    for (uint64_t e : {1ull, 2ull, 4ull}) {
      SimulationOptions o;
      o.plan = Generated(SamplerKind::kShuffle, n, e, n * 7 + e);
      o.policies = {PolicyKind::kOpt, PolicyKind::kStatic, PolicyKind::kLru};
      o.capacities = {0, 1, n / 10, n / 3, n - 1, n};
      SimulationResult result;
      REQUIRE(Simulate(o, &result).ok());
      REQUIRE(result.points.size() == o.capacities.size());
      CHECK(result.exact_window);
      CHECK(result.accesses == n * e);
      CHECK(result.distinct_ids == n);
      for (size_t i = 0; i < o.capacities.size(); ++i) {
        const uint64_t c = o.capacities[i];
        INFO("n " << n << " epochs " << e << " capacity " << c);
        CHECK(result.points[i].policies[0].counters.hits == c * (e - 1));
        CHECK(result.points[i].policies[1].counters.hits == c * (e - 1));
        CHECK(result.points[i].policies[2].counters.hits <= c * (e - 1));
      }
    }
  }
}

TEST_CASE("Simulate rejects what it cannot run", "[simulator][validation]") {
  SimulationOptions base;
  base.plan = Generated(SamplerKind::kShuffle, 100, 2, 0);
  base.policies = {PolicyKind::kOpt};
  base.capacities = {100};
  SimulationResult result;
  REQUIRE(Simulate(base, &result).ok());  // capacity == N is fine

  SimulationOptions too_big = base;
  too_big.capacities = {10, 101};
  CHECK_FALSE(Simulate(too_big, &result).ok());

  SimulationOptions no_policies = base;
  no_policies.policies.clear();
  CHECK_FALSE(Simulate(no_policies, &result).ok());

  SimulationOptions no_capacities = base;
  no_capacities.capacities.clear();
  CHECK_FALSE(Simulate(no_capacities, &result).ok());

  SimulationOptions wrong_sizes = base;
  wrong_sizes.sizes = ItemSizes::FromVector(std::vector<uint64_t>(99, 10));
  wrong_sizes.capacities = {500};
  CHECK_FALSE(Simulate(wrong_sizes, &result).ok());

  SimulationOptions bad_plan = base;
  bad_plan.plan.dataset_size = 0;
  CHECK_FALSE(Simulate(bad_plan, &result).ok());

  // Bytes: the capacity may not exceed the total size of the dataset.
  SimulationOptions bytes = base;
  std::vector<uint64_t> sizes(100);
  for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = 1 + i % 7;
  bytes.sizes = ItemSizes::FromVector(sizes);
  const uint64_t total = bytes.sizes.Total();
  bytes.capacities = {total};
  CHECK(Simulate(bytes, &result).ok());
  bytes.capacities = {total + 1};
  CHECK_FALSE(Simulate(bytes, &result).ok());
}

TEST_CASE("Byte capacities with per-item sizes", "[simulator][bytes]") {
  std::mt19937_64 rng(17);
  const uint64_t n = 120;
  std::vector<uint64_t> sizes(n);
  for (auto& s : sizes) s = 1 + rng() % 50;
  sizes[3] = 5000;  // larger than any capacity below: always bypassed
  std::vector<ItemId> ids(1500);
  for (auto& x : ids) x = static_cast<ItemId>(std::min(rng() % n, rng() % n));
  ids[10] = 3;
  ids[700] = 3;
  SimulationOptions o;
  o.plan = Explicit(ids, n);
  o.sizes = ItemSizes::FromVector(sizes);
  o.policies = AllPolicies();
  o.capacities = {0, 50, 400, 1500};
  o.seed = 4;
  for (uint64_t window : {0ull, 33ull}) {
    o.window = window;
    INFO("window " << window);
    CheckAgainstHand(o);
  }
  // bytes_read is the sum of sizes over all reads.
  SimulationResult result;
  REQUIRE(Simulate(o, &result).ok());
  uint64_t want_bytes = 0;
  for (ItemId x : ids) want_bytes += sizes[x];
  for (const CapacityResult& point : result.points) {
    for (const PolicyResult& pr : point.policies) {
      CHECK(pr.bytes_read == want_bytes);
      CHECK(pr.bytes_hit <= pr.bytes_read);
    }
  }
}

TEST_CASE("Default sizes: every item costs 1", "[simulator]") {
  SimulationOptions o;
  o.plan = Generated(SamplerKind::kReplacement, 30, 3, 1);
  o.policies = {PolicyKind::kLru, PolicyKind::kOpt};
  o.capacities = {7};
  SimulationResult result;
  REQUIRE(Simulate(o, &result).ok());
  for (const PolicyResult& pr : result.points[0].policies) {
    CHECK(pr.bytes_read == result.accesses);
    CHECK(pr.bytes_hit == pr.counters.hits);
  }
}

// Mattson's definition, by brute force: a read hits an LRU cache of c items
// iff fewer than c distinct ids were read since the previous read of its id.
std::vector<uint64_t> MattsonByDefinition(const std::vector<ItemId>& seq,
                                          const std::vector<uint64_t>& capacities) {
  std::vector<uint64_t> hits(capacities.size(), 0);
  for (size_t t = 0; t < seq.size(); ++t) {
    size_t prev = t;
    for (size_t q = t; q-- > 0;) {
      if (seq[q] == seq[t]) {
        prev = q;
        break;
      }
    }
    if (prev == t) continue;  // first read: a miss at any capacity
    const std::set<ItemId> between(seq.begin() + prev + 1, seq.begin() + t);
    for (size_t i = 0; i < capacities.size(); ++i) {
      if (between.size() < capacities[i]) ++hits[i];
    }
  }
  return hits;
}

TEST_CASE("LruHitCurve equals per-capacity lru runs and Mattson's definition",
          "[simulator][curve]") {
  std::mt19937_64 rng(2);
  std::vector<PlanSpec> plans = {Generated(SamplerKind::kShuffle, 60, 3, 5),
                                 Generated(SamplerKind::kReplacement, 80, 2, 6)};
  {
    std::vector<ItemId> ids(700);
    for (auto& x : ids) x = static_cast<ItemId>(std::min(rng() % 90, rng() % 90));
    plans.push_back(Explicit(ids, 90));
  }
  for (const PlanSpec& plan : plans) {
    INFO(plan.Describe());
    const std::vector<ItemId> seq = SequenceOf(plan);
    std::unique_ptr<PlanSource> source;
    REQUIRE(OpenPlanSource(plan, &source).ok());
    const uint64_t n = source->shape().dataset_size;
    std::vector<uint64_t> capacities = {0, 1, 2, 3, 5, 10, 17, 30, n / 2, n - 1, n};
    std::vector<uint64_t> hits;
    REQUIRE(LruHitCurve(plan, capacities, &hits).ok());
    REQUIRE(hits.size() == capacities.size());
    CHECK(hits == MattsonByDefinition(seq, capacities));
    SimulationOptions o;
    o.plan = plan;
    o.policies = {PolicyKind::kLru};
    o.capacities = capacities;
    SimulationResult result;
    REQUIRE(Simulate(o, &result).ok());
    for (size_t i = 0; i < capacities.size(); ++i) {
      INFO("capacity " << capacities[i]);
      CHECK(hits[i] == result.points[i].policies[0].counters.hits);
      CHECK(hits[i] == RunByHand(o, PolicyKind::kLru, capacities[i]).counters.hits);
    }
    // Capacities in any order give the same answers, in the given order.
    std::vector<uint64_t> reversed(capacities.rbegin(), capacities.rend());
    std::vector<uint64_t> hits_reversed;
    REQUIRE(LruHitCurve(plan, reversed, &hits_reversed).ok());
    CHECK(std::vector<uint64_t>(hits_reversed.rbegin(), hits_reversed.rend()) == hits);
  }
}

TEST_CASE("A multi-capacity run equals separate runs", "[simulator]") {
  SimulationOptions o;
  PlanSpec dist = Generated(SamplerKind::kDistributed, 500, 3, 8);
  dist.world_size = 4;
  dist.rank = 1;
  o.plan = dist;
  o.window = 50;
  o.policies = AllPolicies();
  o.capacities = {100, 3, 50, 125};
  o.seed = 77;
  SimulationResult together;
  REQUIRE(Simulate(o, &together).ok());
  for (size_t i = 0; i < o.capacities.size(); ++i) {
    SimulationOptions one = o;
    one.capacities = {o.capacities[i]};
    SimulationResult alone;
    REQUIRE(Simulate(one, &alone).ok());
    REQUIRE(alone.points.size() == 1);
    for (size_t j = 0; j < o.policies.size(); ++j) {
      INFO("capacity " << o.capacities[i] << " policy " << PolicyName(o.policies[j]));
      CheckCounters(together.points[i].policies[j].counters,
                    alone.points[0].policies[j].counters);
    }
  }
  // A subset and another order of policies: the same numbers.
  SimulationOptions some = o;
  some.policies = {PolicyKind::kFifo, PolicyKind::kOpt};
  SimulationResult subset;
  REQUIRE(Simulate(some, &subset).ok());
  for (size_t i = 0; i < o.capacities.size(); ++i) {
    CheckCounters(subset.points[i].policies[0].counters, together.points[i].policies[4].counters);
    CheckCounters(subset.points[i].policies[1].counters, together.points[i].policies[0].counters);
  }
}

TEST_CASE("Simulate is deterministic", "[simulator]") {
  SimulationOptions o;
  o.plan = Generated(SamplerKind::kReplacement, 300, 3, 12);
  o.policies = AllPolicies();
  o.capacities = {10, 100};
  o.window = 100;
  o.seed = 5;
  SimulationResult a, b;
  REQUIRE(Simulate(o, &a).ok());
  REQUIRE(Simulate(o, &b).ok());
  REQUIRE(a.points.size() == b.points.size());
  for (size_t i = 0; i < a.points.size(); ++i) {
    for (size_t j = 0; j < a.points[i].policies.size(); ++j) {
      CheckCounters(a.points[i].policies[j].counters, b.points[i].policies[j].counters);
      CHECK(a.points[i].policies[j].bytes_hit == b.points[i].policies[j].bytes_hit);
    }
  }
  // The random policy follows the seed.
  SimulationOptions other = o;
  other.seed = 6;
  other.policies = {PolicyKind::kRandom};
  SimulationResult c;
  REQUIRE(Simulate(other, &c).ok());
  CHECK(RunByHand(other, PolicyKind::kRandom, 10).counters.hits ==
        c.points[0].policies[0].counters.hits);
}

TEST_CASE("Constant sizes make the capacities count bytes", "[simulator][bytes]") {
  // "They count items while sizes is the default ItemSizes(); they count
  // bytes once sizes names the dataset's items (Constant(bytes, n), ...)".
  const uint64_t n = 200;
  SimulationOptions items;
  items.plan = Generated(SamplerKind::kShuffle, n, 3, 4);
  items.policies = {PolicyKind::kOpt, PolicyKind::kLru, PolicyKind::kStatic};
  items.capacities = {10, 50};
  SimulationResult by_items;
  REQUIRE(Simulate(items, &by_items).ok());

  SimulationOptions bytes = items;
  bytes.sizes = ItemSizes::Constant(4096, n);
  bytes.capacities = {10 * 4096, 50 * 4096 + 4095, 10, 0};
  SimulationResult by_bytes;
  REQUIRE(Simulate(bytes, &by_bytes).ok());
  for (size_t j = 0; j < items.policies.size(); ++j) {
    INFO(PolicyName(items.policies[j]));
    CHECK(by_bytes.points[0].policies[j].counters.hits ==
          by_items.points[0].policies[j].counters.hits);
    CHECK(by_bytes.points[1].policies[j].counters.hits ==
          by_items.points[1].policies[j].counters.hits);
    CHECK(by_bytes.points[0].policies[j].bytes_read == 4096 * n * 3);
    CHECK(by_bytes.points[0].policies[j].bytes_hit ==
          4096 * by_bytes.points[0].policies[j].counters.hits);
    // 10 bytes hold no 4096-byte item.
    CHECK(by_bytes.points[2].policies[j].counters.hits == 0);
    CHECK(by_bytes.points[3].policies[j].counters.hits == 0);
  }
  CHECK(by_bytes.points[0].policies[0].counters.hits == 10 * 2);  // C x (E - 1)
  bytes.capacities = {4096 * n};
  CHECK(Simulate(bytes, &by_bytes).ok());
  bytes.capacities = {4096 * n + 1};
  CHECK_FALSE(Simulate(bytes, &by_bytes).ok());
  SimulationOptions mismatch = items;
  mismatch.sizes = ItemSizes::Constant(4096, n + 1);
  CHECK_FALSE(Simulate(mismatch, &by_bytes).ok());
}

// ----------------------------------------------------------------- sizes

TEST_CASE("ItemSizes: constant, vector and file", "[simulator][sizes]") {
  ItemSizes unit;
  CHECK(unit.uniform());
  CHECK(unit.Size(12345) == 1);

  ItemSizes c = ItemSizes::Constant(4096, 10);
  CHECK(c.uniform());
  CHECK(c.num_ids() == 10);
  CHECK(c.Size(0) == 4096);
  CHECK(c.Size(9) == 4096);
  CHECK(c.Total() == 40960);

  ItemSizes v = ItemSizes::FromVector({5, 0, 7, 100});
  CHECK_FALSE(v.uniform());
  CHECK(v.num_ids() == 4);
  CHECK(v.Size(0) == 5);
  CHECK(v.Size(2) == 7);
  CHECK(v.Size(3) == 100);
  CHECK(v.Total() == 112);

  TempDir dir;
  const std::string path = dir.File("sizes.txt");
  WriteBytes(path, "# bytes per id\n10\n20\n\n30\n");
  ItemSizes f;
  REQUIRE(ItemSizes::FromFile(path, 3, &f).ok());
  CHECK(f.num_ids() == 3);
  CHECK(f.Size(1) == 20);
  CHECK(f.Total() == 60);
  ItemSizes any;
  REQUIRE(ItemSizes::FromFile(path, 0, &any).ok());  // defines the dataset size
  CHECK(any.num_ids() == 3);
  CHECK(any.Total() == 60);
  ItemSizes wrong;
  CHECK_FALSE(ItemSizes::FromFile(path, 4, &wrong).ok());
  CHECK_FALSE(ItemSizes::FromFile(path, 2, &wrong).ok());
  CHECK(ItemSizes::FromFile(dir.File("none.txt"), 3, &wrong).IsNotFound());
  std::string u32;
  for (uint32_t s : {1, 2, 3, 4, 5}) u32 += opt4store_test::LE(s, 4);
  WriteBytes(dir.File("sizes.u32"), u32);
  ItemSizes b;
  REQUIRE(ItemSizes::FromFile(dir.File("sizes.u32"), 5, &b).ok());
  CHECK(b.Total() == 15);
  CHECK(b.Size(4) == 5);
}

}  // namespace
}  // namespace opt4store

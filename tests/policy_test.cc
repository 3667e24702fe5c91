// Policy: the exactness tests.
//   a. hand-checked traces for every policy, step by step;
//   b. opt against an exhaustive search on thousands of small random cases;
//   c. opt against a textbook Belady (tests/reference/reference_belady.h) on 200k reads;
//   d. byte capacities with variable sizes: invariants of every policy,
//      checked against a shadow model at every step, Erase included;
//   e. OnReveal: a small window plus reveals against the full window.
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
namespace {

// ------------------------------------------------------------------ helpers

std::unique_ptr<Policy> MakePolicy(PolicyKind kind, uint64_t capacity, uint64_t num_ids,
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

std::vector<uint64_t> NextUses(const std::vector<ItemId>& seq) {
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
std::vector<Access> ExactAccesses(const std::vector<ItemId>& seq) {
  const std::vector<uint64_t> next = NextUses(seq);
  std::vector<Access> out(seq.size());
  for (size_t t = 0; t < seq.size(); ++t) out[t] = Access{t, seq[t], next[t]};
  return out;
}

std::vector<ItemId> Letters(const std::string& s) {
  std::vector<ItemId> ids;
  for (char c : s) ids.push_back(static_cast<ItemId>(c - 'A'));
  return ids;
}

uint64_t MaxId(const std::vector<ItemId>& seq) {
  return seq.empty() ? 0 : *std::max_element(seq.begin(), seq.end());
}

PlanSpec Explicit(std::vector<ItemId> ids) {
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

StreamTrace TraceStream(const std::vector<ItemId>& seq, uint64_t window_arg,
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
PolicyCounters Feed(Policy* p, const StreamTrace& tr, bool reveals = true,
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

PolicyCounters RunStream(PolicyKind kind, const std::vector<ItemId>& seq, uint64_t capacity,
                         uint64_t window_arg, bool reveals = true, uint64_t seed = 0,
                         bool track_ids = true) {
  const StreamTrace tr = TraceStream(seq, window_arg);
  auto p = MakePolicy(kind, capacity, tr.num_ids, tr.window, seed, track_ids);
  return Feed(p.get(), tr, reveals);
}

// track_ids = false only skips bookkeeping: every decision is the same.
void CheckSameCounters(const PolicyCounters& got, const PolicyCounters& want) {
  CHECK(got.hits == want.hits);
  CHECK(got.misses == want.misses);
  CHECK(got.admissions == want.admissions);
  CHECK(got.bypasses == want.bypasses);
  CHECK(got.evictions == want.evictions);
  CHECK(got.ambiguous == want.ambiguous);
}

// --------------------------------------------------------------- names

TEST_CASE("Policy names parse, print and list", "[policy]") {
  const std::vector<std::pair<std::string, PolicyKind>> names = {
      {"opt", PolicyKind::kOpt},       {"opt-size", PolicyKind::kOptSize},
      {"lru", PolicyKind::kLru},       {"lfu", PolicyKind::kLfu},
      {"fifo", PolicyKind::kFifo},     {"random", PolicyKind::kRandom},
      {"static", PolicyKind::kStatic}, {"none", PolicyKind::kNone}};
  std::vector<PolicyKind> all;
  for (const auto& [name, kind] : names) {
    PolicyKind parsed = PolicyKind::kNone;
    REQUIRE(ParsePolicyKind(name, &parsed).ok());
    CHECK(parsed == kind);
    CHECK(std::string(PolicyName(kind)) == name);
    all.push_back(kind);
  }
  CHECK(AllPolicies() == all);
  PolicyKind unused;
  CHECK_FALSE(ParsePolicyKind("belady", &unused).ok());
  CHECK_FALSE(ParsePolicyKind("", &unused).ok());

  std::vector<PolicyKind> list;
  REQUIRE(ParsePolicyList("all", &list).ok());
  CHECK(list == all);
  REQUIRE(ParsePolicyList("lru,opt", &list).ok());
  CHECK(list == std::vector<PolicyKind>{PolicyKind::kLru, PolicyKind::kOpt});
  REQUIRE(ParsePolicyList("opt,lru,opt,static,lru", &list).ok());
  CHECK(list == std::vector<PolicyKind>{PolicyKind::kOpt, PolicyKind::kLru,
                                        PolicyKind::kStatic});
  CHECK_FALSE(ParsePolicyList("opt,bogus", &list).ok());
}

// ------------------------------------------------- a. hand-checked traces

// One expected event per read: "H" hit, "B" bypass, "A" admit with no
// eviction, "A:XY" admit after evicting X then Y (ids as letters).
struct Expected {
  std::string events;
  PolicyCounters counters;
  std::string resident;  // letters, any order
};

void CheckTrace(PolicyKind kind, const std::string& letters, uint64_t capacity,
                const Expected& want, uint64_t seed = 0) {
  const std::vector<ItemId> seq = Letters(letters);
  const std::vector<Access> accesses = ExactAccesses(seq);
  const uint64_t num_ids = MaxId(seq) + 1;
  auto p = MakePolicy(kind, capacity, num_ids, seq.size(), seed);
  std::istringstream events(want.events);
  std::vector<ItemId> evicted;
  for (size_t t = 0; t < seq.size(); ++t) {
    std::string token;
    REQUIRE(static_cast<bool>(events >> token));
    INFO(PolicyName(kind) << " step " << t << " (" << letters[t] << ", next "
                          << accesses[t].next << "): want " << token);
    evicted.clear();
    const bool hit = p->Step(accesses[t], 1, &evicted);
    CHECK(hit == (token == "H"));
    CHECK(p->Contains(seq[t]) == (token[0] != 'B'));
    std::vector<ItemId> want_evicted;
    if (token.size() > 2) want_evicted = Letters(token.substr(2));
    CHECK(evicted == want_evicted);
    for (ItemId v : evicted) CHECK_FALSE(p->Contains(v));
  }
  std::string extra;
  CHECK_FALSE(static_cast<bool>(events >> extra));
  const PolicyCounters& c = p->counters();
  INFO(PolicyName(kind));
  CHECK(c.hits == want.counters.hits);
  CHECK(c.misses == want.counters.misses);
  CHECK(c.admissions == want.counters.admissions);
  CHECK(c.bypasses == want.counters.bypasses);
  CHECK(c.evictions == want.counters.evictions);
  CHECK(c.ambiguous == 0);
  const std::vector<ItemId> resident_letters = Letters(want.resident);
  const std::set<ItemId> resident_want(resident_letters.begin(), resident_letters.end());
  std::set<ItemId> resident_got;
  for (ItemId id = 0; id < num_ids; ++id) {
    if (p->Contains(id)) resident_got.insert(id);
  }
  CHECK(resident_got == resident_want);
  CHECK(p->used() == resident_want.size());
}

PolicyCounters Counters(uint64_t hits, uint64_t misses, uint64_t admissions, uint64_t bypasses,
                        uint64_t evictions) {
  PolicyCounters c;
  c.hits = hits;
  c.misses = misses;
  c.admissions = admissions;
  c.bypasses = bypasses;
  c.evictions = evictions;
  return c;
}

// OPT, capacity 2, on E A B A C B D A D C B F A F.
//   pos id next   decision
//    0  E  never  miss, never read again: bypass                      {}
//    1  A  3      miss, room: admit                                   {A:3}
//    2  B  5      miss, room: admit                                   {A:3 B:5}
//    3  A  7      hit                                                 {A:7 B:5}
//    4  C  9      miss, furthest resident A:7 <= 9: bypass            {A:7 B:5}
//    5  B  10     hit                                                 {A:7 B:10}
//    6  D  8      miss, furthest B:10 > 8: evict B, admit             {A:7 D:8}
//    7  A  12     hit                                                 {A:12 D:8}
//    8  D  never  hit                                                 {A:12 D:never}
//    9  C  never  miss, never read again: bypass
//   10  B  never  miss, never read again: bypass
//   11  F  13     miss, furthest D:never: evict D, admit              {A:12 F:13}
//   12  A  never  hit
//   13  F  never  hit                                                 {A F}
//   hits 6, misses 8, admissions 4, bypasses 4, evictions 2.
const char kOptSeq[] = "EABACBDADCBFAF";
const Expected kOptExpected = {"B A A H B H A:B H H B B A:D H H", Counters(6, 8, 4, 4, 2), "AF"};

TEST_CASE("opt: hand-checked trace", "[policy][hand][opt]") {
  CheckTrace(PolicyKind::kOpt, kOptSeq, 2, kOptExpected);
}

TEST_CASE("opt-size with uniform sizes: the same hand-checked trace as opt",
          "[policy][hand][opt-size]") {
  // With cost 1, size x (next - last read) orders this trace exactly like
  // next: at 4, C: 9-4=5 vs A 7-3=4, B 5-2=3 -> bypass; at 6, D: 8-6=2 vs
  // B 10-5=5 -> evict B; at 11, F: 2 vs D never -> evict D.
  CheckTrace(PolicyKind::kOptSize, kOptSeq, 2, kOptExpected);
}

// LRU, capacity 3, on A B C A D B E A C D B E A (LRU order oldest first).
//    0 A admit [A]        1 B admit [A B]      2 C admit [A B C]
//    3 A hit   [B C A]    4 D evict B [C A D]  5 B evict C [A D B]
//    6 E evict A [D B E]  7 A evict D [B E A]  8 C evict B [E A C]
//    9 D evict E [A C D] 10 B evict A [C D B] 11 E evict C [D B E]
//   12 A evict D [B E A]
//   hits 1, misses 12, admissions 12, bypasses 0, evictions 9; {A B E}.
TEST_CASE("lru: hand-checked trace", "[policy][hand][lru]") {
  CheckTrace(PolicyKind::kLru, "ABCADBEACDBEA", 3,
             {"A A A H A:B A:C A:A A:D A:B A:E A:A A:C A:D", Counters(1, 12, 12, 0, 9), "ABE"});
}

// FIFO, capacity 3, same sequence (admission order, oldest first; hits do
// not reorder).
//    0 A admit [A]        1 B [A B]            2 C [A B C]
//    3 A hit   [A B C]    4 D evict A [B C D]  5 B hit [B C D]
//    6 E evict B [C D E]  7 A evict C [D E A]  8 C evict D [E A C]
//    9 D evict E [A C D] 10 B evict A [C D B] 11 E evict C [D B E]
//   12 A evict D [B E A]
//   hits 2, misses 11, admissions 11, evictions 8; {A B E}.
TEST_CASE("fifo: hand-checked trace", "[policy][hand][fifo]") {
  CheckTrace(PolicyKind::kFifo, "ABCADBEACDBEA", 3,
             {"A A A H A:A H A:B A:C A:D A:E A:A A:C A:D", Counters(2, 11, 11, 0, 8), "ABE"});
}

// LFU, capacity 2, on A B B A C C C D E A A B C (count = reads since
// admission; ties to the least recently used).
//    0 A admit A1            1 B admit A1 B1
//    2 B hit  B2             3 A hit  A2          (A used at 3, B at 2)
//    4 C tie A2/B2: evict the least recently used, B      {A2 C1}
//    5 C hit C2              6 C hit C3
//    7 D evict A (2 < 3)     {C3 D1}
//    8 E evict D             {C3 E1}
//    9 A evict E             {C3 A1}   A's count restarts at 1
//   10 A hit A2
//   11 B evict A (2 < 3)     {C3 B1}   (had A kept its old count it would be
//                                       2+2 = 4 and C would go)
//   12 C hit
//   hits 6, misses 7, admissions 7, evictions 5; {B C}.
TEST_CASE("lfu: hand-checked trace", "[policy][hand][lfu]") {
  CheckTrace(PolicyKind::kLfu, "ABBACCCDEAABC", 2,
             {"A A H H A:B H H A:A A:D A:E H A:A H", Counters(6, 7, 7, 0, 5), "BC"});
}

// STATIC, capacity 2, on the opt sequence: it fills with the first two
// items, E (never read again!) and A, and never evicts.
//    0 E admit  1 A admit  2 B bypass  3 A hit  4 C bypass  5 B bypass
//    6 D bypass 7 A hit    8 D bypass  9 C bypass 10 B bypass 11 F bypass
//   12 A hit   13 F bypass
//   hits 3, misses 11, admissions 2, bypasses 9, evictions 0; {A E}.
TEST_CASE("static: hand-checked trace", "[policy][hand][static]") {
  CheckTrace(PolicyKind::kStatic, kOptSeq, 2,
             {"A A B H B B B H B B B B H B", Counters(3, 11, 2, 9, 0), "AE"});
  // Shuffled epochs ABCD CADB BDCA: it keeps A and B, which hit once in
  // each later epoch: C x (E - 1) = 4 hits.
  //    0 A admit 1 B admit 2 C bypass 3 D bypass | 4 C bypass 5 A hit
  //    6 D bypass 7 B hit | 8 B hit 9 D bypass 10 C bypass 11 A hit
  CheckTrace(PolicyKind::kStatic, "ABCDCADBBDCA", 2,
             {"A A B B B H B H H B B H", Counters(4, 8, 2, 6, 0), "AB"});
}

// NONE keeps nothing: every read is a bypassed miss.
TEST_CASE("none: hand-checked trace", "[policy][hand][none]") {
  CheckTrace(PolicyKind::kNone, "ABAABA", 3, {"B B B B B B", Counters(0, 6, 0, 6, 0), ""});
}

TEST_CASE("Capacity 0 keeps nothing, for every policy", "[policy][hand]") {
  for (PolicyKind kind : AllPolicies()) {
    CheckTrace(kind, "ABAABA", 0, {"B B B B B B", Counters(0, 6, 0, 6, 0), ""});
  }
}

TEST_CASE("random: invariants, determinism and uniform victims", "[policy][hand][random]") {
  std::mt19937_64 rng(3);
  std::vector<ItemId> seq(40000);
  for (auto& x : seq) x = static_cast<ItemId>(rng() % 40);
  const std::vector<Access> accesses = ExactAccesses(seq);
  auto run = [&](uint64_t seed, std::vector<uint64_t>* rank_counts) {
    auto p = MakePolicy(PolicyKind::kRandom, 4, 40, seq.size(), seed);
    std::vector<ItemId> admitted_order;  // residents, oldest admission first
    std::vector<ItemId> all_victims, evicted;
    for (const Access& a : accesses) {
      const bool was = std::find(admitted_order.begin(), admitted_order.end(), a.id) !=
                       admitted_order.end();
      REQUIRE(p->Contains(a.id) == was);
      evicted.clear();
      const bool hit = p->Step(a, 1, &evicted);
      REQUIRE(hit == was);
      if (hit) {
        REQUIRE(evicted.empty());
        continue;
      }
      REQUIRE(p->Contains(a.id));  // always admits
      REQUIRE(evicted.size() == (admitted_order.size() == 4 ? 1u : 0u));
      for (ItemId v : evicted) {
        auto it = std::find(admitted_order.begin(), admitted_order.end(), v);
        REQUIRE(it != admitted_order.end());
        if (rank_counts) ++(*rank_counts)[it - admitted_order.begin()];
        admitted_order.erase(it);
        REQUIRE_FALSE(p->Contains(v));
        all_victims.push_back(v);
      }
      admitted_order.push_back(a.id);
      REQUIRE(p->used() == admitted_order.size());
    }
    const PolicyCounters& c = p->counters();
    CHECK(c.hits + c.misses == seq.size());
    CHECK(c.admissions == c.misses);
    CHECK(c.bypasses == 0);
    CHECK(c.evictions == c.admissions - 4);
    return all_victims;
  };
  std::vector<uint64_t> ranks(4, 0);
  const std::vector<ItemId> v1 = run(11, &ranks);
  CHECK(run(11, nullptr) == v1);  // seeded: deterministic
  CHECK(run(12, nullptr) != v1);  // another seed, other victims
  // Each resident is equally likely to leave, whatever its age.
  const uint64_t evictions = ranks[0] + ranks[1] + ranks[2] + ranks[3];
  for (uint64_t r : ranks) {
    INFO("victims by admission rank: " << ranks[0] << " " << ranks[1] << " " << ranks[2] << " "
                                       << ranks[3]);
    CHECK(std::abs(static_cast<double>(r) - evictions / 4.0) < 0.1 * evictions / 4.0);
  }
}

TEST_CASE("Every policy bypasses an item larger than the whole capacity", "[policy]") {
  for (PolicyKind kind : AllPolicies()) {
    INFO(PolicyName(kind));
    auto p = MakePolicy(kind, 10, 4, 100);
    std::vector<ItemId> evicted;
    if (kind != PolicyKind::kNone) {
      CHECK_FALSE(p->Step(Access{0, 0, 5}, 4, &evicted));
      REQUIRE(p->Contains(0));
      CHECK(p->used() == 4);
    }
    const uint64_t used = p->used();
    evicted.clear();
    CHECK_FALSE(p->Step(Access{1, 1, 3}, 11, &evicted));
    CHECK_FALSE(p->Contains(1));
    CHECK(evicted.empty());
    CHECK(p->used() == used);
    CHECK(p->counters().bypasses == 1);
    if (kind != PolicyKind::kNone) CHECK(p->Contains(0));
    // Exactly the capacity fits (after evicting what is in the way).
    evicted.clear();
    if (kind != PolicyKind::kNone && kind != PolicyKind::kStatic) {
      CHECK_FALSE(p->Step(Access{2, 2, 3}, 10, &evicted));
      CHECK(p->Contains(2));
      CHECK(evicted == std::vector<ItemId>{0});
      CHECK(p->used() == 10);
    }
  }
}

TEST_CASE("opt pushes back a victim it popped when it bypasses", "[policy][opt]") {
  // The peer implementation's bug: in the bypass branch the popped victim is
  // never pushed back, so it stays resident but can never be evicted again.
  for (PolicyKind kind : {PolicyKind::kOpt, PolicyKind::kOptSize}) {
    INFO(PolicyName(kind));
    {  // uniform sizes
      auto p = MakePolicy(kind, 2, 8, 100);
      std::vector<ItemId> ev;
      CHECK_FALSE(p->Step(Access{0, 0, 10}, 1, &ev));  // A: admit
      CHECK_FALSE(p->Step(Access{1, 1, 20}, 1, &ev));  // B: admit
      REQUIRE(ev.empty());
      // X next 30: the furthest resident, B at 20, is sooner: bypass.
      CHECK_FALSE(p->Step(Access{2, 2, 30}, 1, &ev));
      CHECK(ev.empty());
      CHECK_FALSE(p->Contains(2));
      CHECK(p->Contains(0));
      CHECK(p->Contains(1));
      CHECK(p->used() == 2);
      CHECK(p->counters().bypasses == 1);
      // Y next 15: B (20) must still be the eviction candidate.
      CHECK_FALSE(p->Step(Access{3, 3, 15}, 1, &ev));
      CHECK(ev == std::vector<ItemId>{1});
      CHECK(p->Contains(3));
      CHECK(p->Contains(0));
      CHECK_FALSE(p->Contains(1));
      // Z next 12: Y (15) goes, then Z is resident with A.
      ev.clear();
      CHECK_FALSE(p->Step(Access{4, 4, 12}, 1, &ev));
      CHECK(ev == std::vector<ItemId>{3});
      CHECK(p->Step(Access{10, 0, kNever}, 1, &ev));
      CHECK(p->counters().hits == 1);
    }
    if (kind == PolicyKind::kOpt) {
      {  // bytes: a bypass after popping one of two needed victims
        // Capacity 4: A (1 byte, next 100), B (3 bytes, next 20).
        auto p = MakePolicy(kind, 4, 8, 200);
        std::vector<ItemId> ev;
        CHECK_FALSE(p->Step(Access{0, 0, 100}, 1, &ev));
        CHECK_FALSE(p->Step(Access{1, 1, 20}, 3, &ev));
        REQUIRE(p->used() == 4);
        // X (2 bytes, next 50): freeing 2 bytes takes A (100) then B (20).
        ev.clear();
        p->Step(Access{2, 2, 50}, 2, &ev);
        if (!p->Contains(2)) {
          // Bypassed (B is needed sooner than X): nothing changed.
          CHECK(ev.empty());
          CHECK(p->Contains(0));
          CHECK(p->Contains(1));
          CHECK(p->used() == 4);
          // Y (1 byte, next 30): A (100) must still be evictable.
          ev.clear();
          CHECK_FALSE(p->Step(Access{3, 3, 30}, 1, &ev));
          CHECK(p->Contains(3));
          CHECK(ev == std::vector<ItemId>{0});
          CHECK(p->Contains(1));
          CHECK(p->used() == 4);
        } else {
          // Admitted: the furthest first, until it fits.
          CHECK(ev == std::vector<ItemId>{0, 1});
          CHECK(p->used() == 2);
        }
      }
      {  // bytes: a bypass with one victim needed
        auto p = MakePolicy(kind, 4, 8, 200);
        std::vector<ItemId> ev;
        CHECK_FALSE(p->Step(Access{0, 0, 10}, 1, &ev));  // A 1 byte, next 10
        CHECK_FALSE(p->Step(Access{1, 1, 20}, 3, &ev));  // B 3 bytes, next 20
        // X (2 bytes, next 30): B alone would make room, but B is sooner.
        CHECK_FALSE(p->Step(Access{2, 2, 30}, 2, &ev));
        CHECK_FALSE(p->Contains(2));
        CHECK(ev.empty());
        CHECK(p->used() == 4);
        // Y (2 bytes, next 15): B (20) goes and Y fits.
        CHECK_FALSE(p->Step(Access{3, 3, 15}, 2, &ev));
        CHECK(ev == std::vector<ItemId>{1});
        CHECK(p->Contains(3));
        CHECK(p->Contains(0));
        CHECK(p->used() == 3);
      }
    }
  }
}

TEST_CASE("opt-size sends one large far item before several small ones",
          "[policy][opt-size]") {
  // Capacity 4 bytes. A (2 bytes) read at 0, next 50; B (1 byte) at 1,
  // next 60; C (1 byte) at 2, next 55. D (2 bytes) at 3, next 10.
  //   opt: furthest first: B (60), then C (55): D admitted, A stays.
  //   opt-size at time 3: class 0 (1 byte) top is B (60), byte-time 57;
  //   class 1 (2 bytes) top is A, byte-time 2 x 47 = 94 > 57: A goes alone,
  //   and D (2 x 7 = 14) is admitted since 94 > 14.
  for (PolicyKind kind : {PolicyKind::kOpt, PolicyKind::kOptSize}) {
    INFO(PolicyName(kind));
    auto p = MakePolicy(kind, 4, 8, 100);
    std::vector<ItemId> ev;
    CHECK_FALSE(p->Step(Access{0, 0, 50}, 2, &ev));
    CHECK_FALSE(p->Step(Access{1, 1, 60}, 1, &ev));
    CHECK_FALSE(p->Step(Access{2, 2, 55}, 1, &ev));
    REQUIRE(ev.empty());
    CHECK_FALSE(p->Step(Access{3, 3, 10}, 2, &ev));
    CHECK(p->Contains(3));
    if (kind == PolicyKind::kOpt) {
      CHECK(ev == std::vector<ItemId>{1, 2});
      CHECK(p->Contains(0));
      CHECK(p->used() == 4);
    } else {
      CHECK(ev == std::vector<ItemId>{0});
      CHECK(p->Contains(1));
      CHECK(p->Contains(2));
      CHECK(p->used() == 4);
    }
  }
}

TEST_CASE("opt-size: kFar counts as the window's length, also against another kFar",
          "[policy][opt-size][far]") {
  // Window 10, capacity 4 bytes. A (3 bytes, next kFar): byte-time 3 x 10 =
  // 30. B (2 bytes, next kFar) arrives: byte-time 2 x 10 = 20. Making room
  // takes A, whose byte-time 30 exceeds B's 20, so by policy.h ("A kFar next
  // read counts as the window's length ... The item is bypassed unless every
  // victim's byte-time exceeds its own") B is admitted and A leaves.
  auto p = MakePolicy(PolicyKind::kOptSize, 4, 8, 10);
  std::vector<ItemId> ev;
  CHECK_FALSE(p->Step(Access{0, 0, kFar}, 3, &ev));
  REQUIRE(p->Contains(0));
  CHECK_FALSE(p->Step(Access{1, 1, kFar}, 2, &ev));
  CHECK(p->Contains(1));
  CHECK(ev == std::vector<ItemId>{0});
  CHECK(p->used() == 2);
  // The other way round, a larger kFar item does not displace a smaller one.
  auto q = MakePolicy(PolicyKind::kOptSize, 4, 8, 10);
  ev.clear();
  CHECK_FALSE(q->Step(Access{0, 0, kFar}, 2, &ev));
  CHECK_FALSE(q->Step(Access{1, 1, kFar}, 3, &ev));
  CHECK_FALSE(q->Contains(1));
  CHECK(q->Contains(0));
  CHECK(ev.empty());
}

// ------------------------------------------------ b. exhaustive optimum

// The most hits any policy with bypass can get, by a memoized search over
// every decision at every miss: bypass, insert if there is room, or evict
// any one resident and insert.
uint64_t BruteMaxHits(const std::vector<ItemId>& seq, uint32_t num_ids, uint64_t capacity) {
  const uint32_t masks = 1u << num_ids;
  std::vector<int> memo((seq.size() + 1) * masks, -1);
  std::function<int(size_t, uint32_t)> best = [&](size_t pos, uint32_t mask) -> int {
    if (pos == seq.size()) return 0;
    int& m = memo[pos * masks + mask];
    if (m >= 0) return m;
    const uint32_t bit = 1u << seq[pos];
    int result;
    if (mask & bit) {
      result = 1 + best(pos + 1, mask);
    } else {
      result = best(pos + 1, mask);  // bypass
      if (static_cast<uint64_t>(__builtin_popcount(mask)) < capacity) {
        result = std::max(result, best(pos + 1, mask | bit));
      }
      for (uint32_t rest = mask; rest != 0; rest &= rest - 1) {
        const uint32_t victim = rest & (~rest + 1);
        result = std::max(result, best(pos + 1, (mask & ~victim) | bit));
      }
    }
    return m = result;
  };
  return static_cast<uint64_t>(best(0, 0));
}

TEST_CASE("The exhaustive search agrees with tests/reference/exhaustive_opt.h", "[policy][reference]") {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t ids = 1 + rng() % 6;
    std::vector<ItemId> seq(1 + rng() % 14);
    for (auto& x : seq) x = static_cast<ItemId>(rng() % ids);
    const uint64_t cap = rng() % 5;
    REQUIRE(BruteMaxHits(seq, ids, cap) ==
            reference::ExhaustiveMaxHits(seq, std::vector<uint64_t>(ids, 1), cap));
  }
  // Hand-checked: the opt trace above gets 6 hits and nothing gets more.
  CHECK(BruteMaxHits(Letters(kOptSeq), 6, 2) == 6);
}

TEST_CASE("opt equals the exhaustive optimum on 2000 small random cases",
          "[policy][exhaustive][opt]") {
  std::mt19937_64 rng(20240601);
  int cases = 0, with_bypass = 0, with_eviction = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const uint32_t ids = 2 + rng() % 5;  // 2..6
    const size_t len = 1 + rng() % 14;   // 1..14
    std::vector<ItemId> seq(len);
    for (auto& x : seq) x = static_cast<ItemId>(rng() % ids);
    const uint64_t cap = 1 + rng() % 4;  // 1..4
    // A window covering the whole plan: 0 (default), exactly len, or more.
    const uint64_t choice = rng() % 3;
    const uint64_t window = choice == 0 ? 0 : choice == 1 ? len : len + 1 + rng() % 20;
    const uint64_t optimum = BruteMaxHits(seq, ids, cap);
    INFO("trial " << trial << " cap " << cap << " window " << window << " seq "
                  << ::Catch::Detail::stringify(seq));
    const PolicyCounters opt = RunStream(PolicyKind::kOpt, seq, cap, window);
    REQUIRE(opt.hits == optimum);
    REQUIRE(opt.hits + opt.misses == len);
    REQUIRE(opt.admissions + opt.bypasses == opt.misses);
    REQUIRE(opt.ambiguous == 0);
    const PolicyCounters untracked =
        RunStream(PolicyKind::kOpt, seq, cap, window, true, 0, /*track_ids=*/false);
    REQUIRE(untracked.hits == optimum);
    CheckSameCounters(untracked, opt);
    const PolicyCounters opt_size = RunStream(PolicyKind::kOptSize, seq, cap, window);
    REQUIRE(opt_size.hits == optimum);
    // No policy beats the optimum.
    for (PolicyKind kind : {PolicyKind::kLru, PolicyKind::kLfu, PolicyKind::kFifo,
                            PolicyKind::kRandom, PolicyKind::kStatic, PolicyKind::kNone}) {
      const PolicyCounters c = RunStream(kind, seq, cap, window, true, trial);
      INFO(PolicyName(kind));
      REQUIRE(c.hits <= optimum);
      REQUIRE(c.hits + c.misses == len);
    }
    ++cases;
    with_bypass += opt.bypasses > 0;
    with_eviction += opt.evictions > 0;
  }
  CHECK(cases == 2000);
  CHECK(with_bypass > 500);
  CHECK(with_eviction > 300);
}

TEST_CASE("opt with a short window never claims more than the optimum",
          "[policy][exhaustive][opt]") {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 1000; ++trial) {
    const uint32_t ids = 2 + rng() % 5;
    const size_t len = 2 + rng() % 13;
    std::vector<ItemId> seq(len);
    for (auto& x : seq) x = static_cast<ItemId>(rng() % ids);
    const uint64_t cap = 1 + rng() % 3;
    const uint64_t window = 1 + rng() % (len - 1);  // shorter than the plan
    const uint64_t optimum = BruteMaxHits(seq, ids, cap);
    INFO("trial " << trial << " cap " << cap << " window " << window << " seq "
                  << ::Catch::Detail::stringify(seq));
    const PolicyCounters c = RunStream(PolicyKind::kOpt, seq, cap, window);
    REQUIRE(c.hits <= optimum);
    // "0 means the result is exact."
    if (c.ambiguous == 0) REQUIRE(c.hits == optimum);
    CheckSameCounters(RunStream(PolicyKind::kOpt, seq, cap, window, true, 0, false), c);
  }
}

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

// ------------------------------- d. byte capacities and variable sizes

struct ShadowItem {
  uint64_t cost = 0;
  uint64_t next = kNever;  // as of its last read
  uint64_t last = 0;       // position of its last read
  uint64_t admitted = 0;   // position of its admission
  uint64_t reads = 0;      // reads since admission
};

constexpr uint64_t kInf = UINT64_MAX;

// The eviction key of a resident, per policy: the larger leaves first.
// (opt-size is modelled by OptSizeModel below.)
using Key = std::pair<uint64_t, uint64_t>;
Key EvictionKey(PolicyKind kind, const ShadowItem& s) {
  switch (kind) {
    case PolicyKind::kOpt: return {s.next, 0};
    case PolicyKind::kLru: return {kInf - s.last, 0};
    case PolicyKind::kFifo: return {kInf - s.admitted, 0};
    case PolicyKind::kLfu: return {kInf - s.reads, kInf - s.last};
    default: return {0, 0};
  }
}

// opt-size as policy.h documents it: byte-time = size x (next - now), a kFar
// next read counting as the window's length and kNever as infinite; items
// in power-of-two size classes, the furthest next read leaving first inside
// a class, the class tops compared by their byte-time now; the incoming item
// is bypassed unless every victim's byte-time exceeds its own.
struct OptSizeModel {
  uint64_t window;

  static int SizeClass(uint64_t cost) { return 63 - __builtin_clzll(cost | 1); }

  uint64_t ByteTime(uint64_t cost, uint64_t next, uint64_t now) const {
    if (next == kNever) return kInf;
    if (next == kFar) return cost * window;
    return cost * (next - now);
  }

  // The residents that may leave next, and (when there is exactly one) its
  // byte-time. A class's top is its furthest next read; several items can
  // tie for it (kNever or kFar), and any of them may be the top. So v may
  // leave next iff it is one of its class's tied tops and its byte-time is
  // at least that of some tied top of every other class.
  std::vector<ItemId> Candidates(const std::map<ItemId, ShadowItem>& items, uint64_t now,
                                 uint64_t* byte_time) const {
    std::map<int, std::vector<ItemId>> tops;
    std::map<int, uint64_t> top_next;
    for (const auto& [id, s] : items) {
      const int c = SizeClass(s.cost);
      auto it = top_next.find(c);
      if (it == top_next.end() || s.next > it->second) {
        top_next[c] = s.next;
        tops[c] = {id};
      } else if (s.next == it->second) {
        tops[c].push_back(id);
      }
    }
    std::map<int, uint64_t> min_bt;  // per class: the smallest tied top's byte-time
    for (const auto& [c, ids] : tops) {
      uint64_t lo = kInf;
      for (ItemId id : ids) lo = std::min(lo, ByteTime(items.at(id).cost, items.at(id).next, now));
      min_bt[c] = lo;
    }
    std::vector<ItemId> result;
    for (const auto& [c, ids] : tops) {
      uint64_t others = 0;
      for (const auto& [c2, lo] : min_bt) {
        if (c2 != c) others = std::max(others, lo);
      }
      for (ItemId id : ids) {
        const uint64_t b = ByteTime(items.at(id).cost, items.at(id).next, now);
        if (b >= others) result.push_back(id);
      }
    }
    *byte_time = result.size() == 1
                     ? ByteTime(items.at(result[0]).cost, items.at(result[0]).next, now)
                     : 0;
    return result;
  }
};

struct ShadowCheck {
  PolicyKind kind;
  uint64_t capacity;
  bool check_order;  // victims in the policy's documented order
  uint64_t window;   // the policy's window (opt-size's kFar byte-time)
  std::map<ItemId, ShadowItem> items;
  uint64_t used = 0;
  uint64_t steps = 0, evictions = 0;

  // One Step with every check; returns "" or what went wrong.
  std::string Step(Policy* p, const Access& a, uint64_t cost) {
    std::ostringstream err;
    err << PolicyName(kind) << " pos " << a.pos << " id " << a.id << " cost " << cost
        << " next " << a.next << " used " << used << "/" << capacity << ": ";
    const bool was = items.count(a.id) > 0;
    if (p->Contains(a.id) != was) return err.str() + "Contains() disagrees before the step";
    std::vector<ItemId> evicted = {987654};  // Step appends; keep a marker
    const bool hit = p->Step(a, cost, &evicted);
    ++steps;
    if (evicted.empty() || evicted[0] != 987654) return err.str() + "evicted was not appended to";
    evicted.erase(evicted.begin());
    if (hit != was) return err.str() + "hit disagrees with residency";
    if (hit) {
      if (!evicted.empty()) return err.str() + "a hit evicted something";
      ShadowItem& s = items[a.id];
      s.next = a.next;
      s.last = a.pos;
      ++s.reads;
      return Finish(p, err);
    }
    const bool admitted = p->Contains(a.id);
    const uint64_t free = capacity - used;
    if (!admitted) {
      if (!evicted.empty()) return err.str() + "a bypass evicted something";
      // Legal reasons to bypass, per policy.
      bool justified = cost > capacity;
      switch (kind) {
        case PolicyKind::kNone: justified = true; break;
        case PolicyKind::kStatic: justified = justified || cost > free; break;
        case PolicyKind::kOpt: {
          if (a.next == kNever) {
            justified = true;
            break;
          }
          if (cost <= free) break;  // room: it must be admitted
          // Evicting every resident read later than the incoming item would
          // not make room: some needed victim is read no later than it.
          uint64_t outranked = 0;
          for (const auto& [id, s] : items) {
            if (s.next > a.next) outranked += s.cost;
          }
          justified = justified || free + outranked < cost;
          break;
        }
        case PolicyKind::kOptSize: {
          if (a.next == kNever) {
            justified = true;
            break;
          }
          if (cost <= free || cost > capacity) break;
          // Replay the documented victim order: the bypass is right when a
          // victim needed to make room has a byte-time no larger than the
          // incoming item's (or when a tie made the order undefined).
          const OptSizeModel m{window};
          const uint64_t x = m.ByteTime(cost, a.next, a.pos);
          std::map<ItemId, ShadowItem> rest = items;
          uint64_t freed = 0;
          while (used - freed + cost > capacity && !rest.empty()) {
            uint64_t bt = 0;
            const std::vector<ItemId> cands = m.Candidates(rest, a.pos, &bt);
            if (bt <= x || cands.size() > 1) {
              justified = true;
              break;
            }
            freed += rest[cands[0]].cost;
            rest.erase(cands[0]);
          }
          break;
        }
        default: break;  // lru, lfu, fifo, random always admit what fits
      }
      if (!justified) {
        err << "bypassed without a reason; residents {id: size, next}:";
        for (const auto& [id, r] : items) {
          err << " {" << id << ": " << r.cost << ", "
              << (r.next == kFar ? "far" : r.next == kNever ? "never" : std::to_string(r.next))
              << "}";
        }
        return err.str();
      }
      return Finish(p, err);
    }
    // Admitted.
    if (cost > capacity) return err.str() + "admitted an item larger than the capacity";
    if (kind == PolicyKind::kNone) return err.str() + "none admitted something";
    if ((kind == PolicyKind::kOpt || kind == PolicyKind::kOptSize) && a.next == kNever) {
      return err.str() + "admitted an item never read again";
    }
    if (kind == PolicyKind::kStatic && !evicted.empty()) return err.str() + "static evicted";
    uint64_t freed = 0;
    std::map<ItemId, ShadowItem> remaining = items;
    for (size_t i = 0; i < evicted.size(); ++i) {
      const ItemId v = evicted[i];
      auto it = remaining.find(v);
      if (it == remaining.end()) return err.str() + "evicted a non-resident " + std::to_string(v);
      if (v == a.id) return err.str() + "evicted the incoming item";
      // Minimal: before this victim the item did not fit yet.
      if (used - freed + cost <= capacity) return err.str() + "evicted more than needed";
      const Key vk = EvictionKey(kind, it->second);
      freed += it->second.cost;
      remaining.erase(it);
      if (check_order && kind != PolicyKind::kOptSize) {
        for (const auto& [id, s] : remaining) {
          if (EvictionKey(kind, s) > vk) {
            return err.str() + "victim " + std::to_string(v) + " left before " +
                   std::to_string(id) + ", which ranks higher";
          }
        }
      }
      if (p->Contains(v)) return err.str() + "an evicted item is still Contains()";
    }
    if (used - freed + cost > capacity) return err.str() + "admitted without room";
    if (kind == PolicyKind::kOpt && !evicted.empty() && check_order) {
      if (!(a.next < items[evicted[0]].next)) {
        return err.str() + "admitted although read no sooner than the first victim";
      }
    }
    if (kind == PolicyKind::kOptSize) {
      // "Bypassed unless every victim's byte-time exceeds its own", and the
      // victims leave in the documented order.
      const OptSizeModel m{window};
      const uint64_t x = m.ByteTime(cost, a.next, a.pos);
      std::map<ItemId, ShadowItem> rest = items;
      for (ItemId v : evicted) {
        uint64_t bt = 0;
        const std::vector<ItemId> cands = m.Candidates(rest, a.pos, &bt);
        const ShadowItem& s = rest.at(v);
        if (m.ByteTime(s.cost, s.next, a.pos) <= x) {
          return err.str() + "evicted " + std::to_string(v) +
                 " whose byte-time does not exceed the incoming item's";
        }
        if (check_order && std::find(cands.begin(), cands.end(), v) == cands.end()) {
          err << "victim " << v << " is not the class top with the largest byte-time ("
              << cands[0] << " is); residents {id: size, next, byte-time}:";
          for (const auto& [id, r] : rest) {
            err << " {" << id << ": " << r.cost << ", "
                << (r.next == kFar ? "far" : r.next == kNever ? "never" : std::to_string(r.next))
                << ", " << m.ByteTime(r.cost, r.next, a.pos) << "}";
          }
          return err.str();
        }
        rest.erase(v);
      }
    }
    evictions += evicted.size();
    items = std::move(remaining);
    used = used - freed + cost;
    items[a.id] = ShadowItem{cost, a.next, a.pos, a.pos, 1};
    return Finish(p, err);
  }

  // A reveal updates a resident item whose next read was kFar.
  void Reveal(const opt4store::Reveal& r) {
    auto it = items.find(r.id);
    if (it != items.end() && it->second.next == kFar) it->second.next = r.next;
  }

  std::string Erase(Policy* p, ItemId id) {
    const bool was = items.count(id) > 0;
    const bool got = p->Erase(id);
    std::ostringstream err;
    err << PolicyName(kind) << " Erase(" << id << "): ";
    if (got != was) return err.str() + "returned " + (got ? "true" : "false");
    if (was) {
      used -= items[id].cost;
      items.erase(id);
    }
    if (p->Contains(id)) return err.str() + "still Contains()";
    return Finish(p, err);
  }

  std::string Finish(Policy* p, std::ostringstream& err) {
    if (p->used() != used) {
      err << "used() " << p->used() << " want " << used;
      return err.str();
    }
    if (p->used() > p->capacity()) return err.str() + "used() above capacity()";
    const PolicyCounters& c = p->counters();
    if (c.hits + c.misses != steps || c.admissions + c.bypasses != c.misses) {
      return err.str() + "counters do not add up";
    }
    if (c.evictions != evictions) {
      err << "counters().evictions " << c.evictions << " want " << evictions;
      return err.str();
    }
    for (const auto& [id, s] : items) {
      if (!p->Contains(id)) return err.str() + "lost resident " + std::to_string(id);
    }
    return "";
  }
};

struct SizedCase {
  std::vector<ItemId> seq;
  std::vector<uint64_t> sizes;
  uint64_t capacity;
};

SizedCase RandomSizedCase(std::mt19937_64& rng) {
  SizedCase c;
  const uint64_t ids = 5 + rng() % 60;
  c.capacity = 20 + rng() % 200;
  c.sizes.resize(ids);
  for (auto& s : c.sizes) {
    const uint64_t r = rng() % 20;
    s = r == 0 ? c.capacity + 1 + rng() % 10  // too large for the cache
        : r == 1 ? c.capacity               // exactly the capacity
                 : 1 + rng() % 40;
  }
  c.seq.resize(200 + rng() % 800);
  for (auto& x : c.seq) {
    // Skewed: low ids more often.
    const uint64_t a = rng() % ids, b = rng() % ids;
    x = static_cast<ItemId>(std::min(a, b));
  }
  return c;
}

// Random sized cases through every policy in `kinds`, each step checked
// against the shadow model. short_window: a window of 5..60 positions
// (kFar next uses, and reveals forwarded to policy and shadow alike);
// else the whole plan.
void CheckSizedRuns(bool check_order, const std::vector<PolicyKind>& kinds, int trials,
                    bool with_erase, bool short_window = false) {
  std::mt19937_64 rng(short_window ? 4343 : 4242);
  for (int trial = 0; trial < trials; ++trial) {
    const SizedCase c = RandomSizedCase(rng);
    const uint64_t window = short_window ? 5 + rng() % 56 : 0;
    const StreamTrace tr = TraceStream(c.seq, window, c.sizes.size());
    const uint64_t erase_seed = rng();
    for (PolicyKind kind : kinds) {
      INFO("trial " << trial << " policy " << PolicyName(kind) << " capacity " << c.capacity
                    << " window " << tr.window);
      auto p = MakePolicy(kind, c.capacity, c.sizes.size(), tr.window, trial);
      ShadowCheck sh{kind, c.capacity, check_order, tr.window, {}, 0, 0, 0};
      std::mt19937_64 erng(erase_seed);
      for (size_t t = 0; t < tr.accesses.size(); ++t) {
        const Access& a = tr.accesses[t];
        const std::string problem = sh.Step(p.get(), a, c.sizes[a.id]);
        REQUIRE(problem == "");
        if (tr.reveals[t].valid) {
          p->OnReveal(tr.reveals[t]);
          sh.Reveal(tr.reveals[t]);
        }
        if (with_erase && erng() % 13 == 0) {
          const ItemId victim = static_cast<ItemId>(erng() % c.sizes.size());
          const std::string e = sh.Erase(p.get(), victim);
          REQUIRE(e == "");
        }
      }
      for (ItemId id = 0; id < c.sizes.size(); ++id) {
        REQUIRE(p->Contains(id) == (sh.items.count(id) > 0));
      }
    }
  }
}

TEST_CASE("Byte capacities: every policy's invariants, with Erase", "[policy][bytes]") {
  // used() == the shadow's sum <= capacity; oversized items bypassed; evicted
  // items gone; a bypass changes nothing; victims in each policy's order
  // (opt: furthest next use first; lru: least recent; fifo: oldest; lfu:
  // fewest reads, then least recent); no more victims than needed.
  CheckSizedRuns(true,
                 {PolicyKind::kOpt, PolicyKind::kLru, PolicyKind::kLfu, PolicyKind::kFifo,
                  PolicyKind::kRandom, PolicyKind::kStatic, PolicyKind::kNone},
                 60, true);
}

TEST_CASE("Byte capacities: opt-size follows its documented size-class rule, with Erase",
          "[policy][bytes][opt-size]") {
  // Victims: class tops (power-of-two size classes, furthest next read first
  // inside a class) by largest byte-time now, size x (next - now); admitted
  // only when every victim's byte-time exceeds the incoming item's.
  CheckSizedRuns(true, {PolicyKind::kOptSize}, 60, true);
}

TEST_CASE("Byte capacities with a short window: kFar, reveals and Erase", "[policy][bytes]") {
  // opt: kNever leaves first, then kFar, then the furthest exact read; a
  // kFar item is never admitted over a kFar victim (unknown order).
  CheckSizedRuns(true,
                 {PolicyKind::kOpt, PolicyKind::kLru, PolicyKind::kLfu, PolicyKind::kFifo,
                  PolicyKind::kRandom, PolicyKind::kStatic, PolicyKind::kNone},
                 40, true, true);
}

TEST_CASE("Byte capacities with a short window: opt-size counts kFar as the window",
          "[policy][bytes][opt-size]") {
  // "A kFar next read counts as the window's length, kNever as infinite.
  // The item is bypassed unless every victim's byte-time exceeds its own."
  CheckSizedRuns(true, {PolicyKind::kOptSize}, 40, true, true);
}

TEST_CASE("Erase frees the item's cost and the policy carries on", "[policy][erase]") {
  for (PolicyKind kind : AllPolicies()) {
    if (kind == PolicyKind::kNone) continue;
    INFO(PolicyName(kind));
    auto p = MakePolicy(kind, 10, 8, 100);
    std::vector<ItemId> ev;
    CHECK_FALSE(p->Step(Access{0, 1, 3}, 4, &ev));
    CHECK_FALSE(p->Step(Access{1, 2, 60}, 6, &ev));
    REQUIRE(p->used() == 10);
    CHECK_FALSE(p->Erase(3));
    CHECK(p->used() == 10);
    CHECK(p->Erase(2));
    CHECK_FALSE(p->Contains(2));
    CHECK(p->used() == 4);
    CHECK_FALSE(p->Erase(2));
    // The freed room is usable without evicting anything.
    ev.clear();
    CHECK_FALSE(p->Step(Access{2, 3, 40}, 6, &ev));
    CHECK(ev.empty());
    CHECK(p->Contains(3));
    CHECK(p->used() == 10);
    // The erased id can come back.
    ev.clear();
    CHECK(p->Step(Access{3, 1, 70}, 4, &ev));  // a hit on 1
    CHECK(p->Erase(1));
    CHECK(p->Erase(3));
    CHECK(p->used() == 0);
    CHECK_FALSE(p->Step(Access{4, 2, 80}, 6, &ev));
    CHECK(p->Contains(2));
    CHECK(p->used() == 6);
  }
}

TEST_CASE("opt and opt-size give the same hits with uniform sizes", "[policy][opt-size]") {
  std::mt19937_64 rng(31337);
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t ids = 5 + rng() % 200;
    std::vector<ItemId> seq(100 + rng() % 2000);
    for (auto& x : seq) x = static_cast<ItemId>(rng() % ids);
    const uint64_t cap = 1 + rng() % ids;
    INFO("trial " << trial << " ids " << ids << " cap " << cap);
    const PolicyCounters a = RunStream(PolicyKind::kOpt, seq, cap, 0);
    const PolicyCounters b = RunStream(PolicyKind::kOptSize, seq, cap, 0);
    REQUIRE(a.hits == b.hits);
  }
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

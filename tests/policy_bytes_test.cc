// Policy: the exactness tests, continued (policy_test.cc has a-b,
// policy_belady_test.cc c and e).
//   d. byte capacities with variable sizes: invariants of every policy,
//      checked against a shadow model at every step, Erase included.
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

}  // namespace
}  // namespace opt4store

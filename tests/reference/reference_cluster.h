// reference_cluster.h: the cluster simulator's five placements
// (opt4store/cluster_simulator.h) done the slow, obvious way, for tests on
// small plans: the whole timeline materialised, next uses from one backward
// pass, Belady's MIN as a std::map scanned for the furthest next use, and
// static sets as std::set. It shares no code with the engine: it takes the
// ranks' streams as PlanSource gives them and builds the timeline itself.
//
// The rules it implements are the ones the simulator's header states:
//   timeline    host h's i-th read of an epoch (its local rank i % R's read
//               i / R) sits at index i * H + h of the epoch;
//   MIN         bypass a miss never read again, or when every resident is
//               needed sooner; an item leaves at its last read;
//   cluster-opt a loaded item goes to the loader if it has room, else to the
//               host of the item it displaced, else round robin from the
//               last host chosen that way;
//   home-opt    home x % H, MIN per home over the reads of its items;
//   static      first `capacity` home items loaded, never evicted;
//   frequency   top `capacity` of a host's own stream by (count desc, first
//               read asc), filled at the host's first read, from a filled
//               peer if any.
//
// Thread safety: pure functions; reentrant.
#ifndef OPT4STORE_TESTS_REFERENCE_CLUSTER_H_
#define OPT4STORE_TESTS_REFERENCE_CLUSTER_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace opt4store {
namespace reference {

struct RefCounters {
  uint64_t local_hits = 0;
  uint64_t peer_fetches = 0;
  uint64_t source_loads = 0;
  uint64_t pushes = 0;
};

// counters[host][epoch].
using RefTable = std::vector<std::vector<RefCounters>>;

struct RefRead {
  uint32_t host;
  uint32_t epoch;
  uint32_t id;
};

constexpr uint64_t kRefNone = UINT64_MAX;

// rank_epochs[r][e] = rank r's reads in epoch e.
inline std::vector<RefRead> RefTimeline(
    const std::vector<std::vector<std::vector<uint32_t>>>& rank_epochs, uint32_t hosts,
    uint32_t ranks_per_host) {
  std::vector<RefRead> t;
  const size_t epochs = rank_epochs[0].size();
  const size_t per_rank = rank_epochs[0][0].size();
  const size_t per_host = per_rank * ranks_per_host;
  for (size_t e = 0; e < epochs; ++e) {
    for (size_t i = 0; i < per_host; ++i) {
      for (uint32_t h = 0; h < hosts; ++h) {
        const uint32_t rank = h * ranks_per_host + static_cast<uint32_t>(i % ranks_per_host);
        t.push_back({h, static_cast<uint32_t>(e),
                     rank_epochs[rank][e][i / ranks_per_host]});
      }
    }
  }
  return t;
}

inline std::vector<uint64_t> RefNext(const std::vector<uint32_t>& ids) {
  std::vector<uint64_t> next(ids.size());
  std::map<uint32_t, uint64_t> seen;
  for (size_t t = ids.size(); t-- > 0;) {
    auto it = seen.find(ids[t]);
    next[t] = it == seen.end() ? kRefNone : it->second;
    seen[ids[t]] = t;
  }
  return next;
}

struct MinStep {
  bool hit = false;
  bool left = false;      // hit, never read again: it leaves
  bool admitted = false;
  bool evicted = false;
  uint32_t victim = 0;
};

inline std::vector<MinStep> RefMin(const std::vector<uint32_t>& ids, uint64_t capacity) {
  const std::vector<uint64_t> next = RefNext(ids);
  std::map<uint32_t, uint64_t> resident;  // id -> next use
  std::vector<MinStep> steps(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    MinStep& s = steps[t];
    const uint32_t id = ids[t];
    if (resident.count(id)) {
      s.hit = true;
      if (next[t] == kRefNone) {
        resident.erase(id);
        s.left = true;
      } else {
        resident[id] = next[t];
      }
      continue;
    }
    if (next[t] == kRefNone || capacity == 0) continue;
    if (resident.size() < capacity) {
      resident[id] = next[t];
      s.admitted = true;
      continue;
    }
    auto far = resident.begin();
    for (auto it = resident.begin(); it != resident.end(); ++it) {
      if (it->second > far->second) far = it;
    }
    if (far->second <= next[t]) continue;
    s.evicted = true;
    s.victim = far->first;
    resident.erase(far);
    resident[id] = next[t];
    s.admitted = true;
  }
  return steps;
}

inline RefTable EmptyTable(uint32_t hosts, size_t epochs) {
  return RefTable(hosts, std::vector<RefCounters>(epochs));
}

inline RefTable RefPerHostOpt(const std::vector<RefRead>& t, uint32_t hosts, size_t epochs,
                              uint64_t capacity) {
  RefTable out = EmptyTable(hosts, epochs);
  for (uint32_t h = 0; h < hosts; ++h) {
    std::vector<uint32_t> ids, ep;
    for (const RefRead& r : t) {
      if (r.host == h) {
        ids.push_back(r.id);
        ep.push_back(r.epoch);
      }
    }
    const std::vector<MinStep> steps = RefMin(ids, capacity);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (steps[i].hit) {
        ++out[h][ep[i]].local_hits;
      } else {
        ++out[h][ep[i]].source_loads;
      }
    }
  }
  return out;
}

inline RefTable RefClusterOpt(const std::vector<RefRead>& t, uint32_t hosts, size_t epochs,
                              uint64_t capacity) {
  RefTable out = EmptyTable(hosts, epochs);
  std::vector<uint32_t> ids;
  for (const RefRead& r : t) ids.push_back(r.id);
  const std::vector<MinStep> steps = RefMin(ids, capacity * hosts);
  std::map<uint32_t, uint32_t> holder;
  std::vector<uint64_t> used(hosts, 0);
  uint32_t cursor = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const RefRead& r = t[i];
    const MinStep& s = steps[i];
    RefCounters& c = out[r.host][r.epoch];
    if (s.hit) {
      const uint32_t h = holder.at(r.id);
      if (h == r.host) {
        ++c.local_hits;
      } else {
        ++c.peer_fetches;
      }
      if (s.left) {
        --used[h];
        holder.erase(r.id);
      }
      continue;
    }
    ++c.source_loads;
    uint32_t freed = 0;
    if (s.evicted) {
      freed = holder.at(s.victim);
      --used[freed];
      holder.erase(s.victim);
    }
    if (!s.admitted) continue;
    uint32_t h = r.host;
    if (used[h] == capacity) {
      if (s.evicted) {
        h = freed;
      } else {
        while (used[cursor] == capacity) cursor = (cursor + 1) % hosts;
        h = cursor;
      }
    }
    ++used[h];
    holder[r.id] = h;
    if (h != r.host) ++c.pushes;
  }
  return out;
}

inline RefTable RefHomeOpt(const std::vector<RefRead>& t, uint32_t hosts, size_t epochs,
                           uint64_t capacity) {
  RefTable out = EmptyTable(hosts, epochs);
  for (uint32_t home = 0; home < hosts; ++home) {
    std::vector<uint32_t> ids;
    std::vector<const RefRead*> reads;
    for (const RefRead& r : t) {
      if (r.id % hosts == home) {
        ids.push_back(r.id);
        reads.push_back(&r);
      }
    }
    const std::vector<MinStep> steps = RefMin(ids, capacity);
    for (size_t i = 0; i < ids.size(); ++i) {
      RefCounters& c = out[reads[i]->host][reads[i]->epoch];
      if (steps[i].hit) {
        if (reads[i]->host == home) {
          ++c.local_hits;
        } else {
          ++c.peer_fetches;
        }
      } else {
        ++c.source_loads;
        if (steps[i].admitted && reads[i]->host != home) ++c.pushes;
      }
    }
  }
  return out;
}

inline RefTable RefStaticPartition(const std::vector<RefRead>& t, uint32_t hosts,
                                   size_t epochs, uint64_t capacity) {
  RefTable out = EmptyTable(hosts, epochs);
  std::set<uint32_t> cached;
  std::vector<uint64_t> used(hosts, 0);
  for (const RefRead& r : t) {
    RefCounters& c = out[r.host][r.epoch];
    const uint32_t home = r.id % hosts;
    if (cached.count(r.id)) {
      if (home == r.host) {
        ++c.local_hits;
      } else {
        ++c.peer_fetches;
      }
      continue;
    }
    ++c.source_loads;
    if (used[home] < capacity) {
      ++used[home];
      cached.insert(r.id);
      if (home != r.host) ++c.pushes;
    }
  }
  return out;
}

inline RefTable RefFrequencyStatic(const std::vector<RefRead>& t, uint32_t hosts,
                                   size_t epochs, uint64_t capacity) {
  RefTable out = EmptyTable(hosts, epochs);
  std::vector<std::set<uint32_t>> held(hosts);
  for (uint32_t h = 0; h < hosts; ++h) {
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> stat;  // id -> (count, first)
    uint64_t pos = 0;
    for (const RefRead& r : t) {
      if (r.host != h) continue;
      auto it = stat.find(r.id);
      if (it == stat.end()) {
        stat[r.id] = {1, pos};
      } else {
        ++it->second.first;
      }
      ++pos;
    }
    std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> all(stat.begin(), stat.end());
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      if (a.second.first != b.second.first) return a.second.first > b.second.first;
      return a.second.second < b.second.second;
    });
    for (size_t i = 0; i < all.size() && i < capacity; ++i) held[h].insert(all[i].first);
  }
  std::set<std::pair<uint32_t, uint32_t>> filled;  // (id, host)
  for (const RefRead& r : t) {
    RefCounters& c = out[r.host][r.epoch];
    const bool holds = held[r.host].count(r.id) > 0;
    if (holds && filled.count({r.id, r.host})) {
      ++c.local_hits;
      continue;
    }
    auto it = filled.lower_bound({r.id, 0});
    if (it != filled.end() && it->first == r.id) {
      ++c.peer_fetches;
    } else {
      ++c.source_loads;
    }
    if (holds) filled.insert({r.id, r.host});
  }
  return out;
}

}  // namespace reference
}  // namespace opt4store

#endif  // OPT4STORE_TESTS_REFERENCE_CLUSTER_H_

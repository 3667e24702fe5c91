// HostStreamPass (cluster_passes.h): per-host-opt and frequency-static's
// held sets, from each host's whole stream.
//
// A host's next uses are far apart (with H hosts an id comes back to the
// same host about every H epochs), so they cannot come from a window of a
// few epochs as on the cluster timeline: the pass holds whole host streams,
// as many as stream_memory allows, and generates the plan once per group.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "engine/plan/belady_cache.h"
#include "engine/plan/cluster_passes.h"
#include "opt4store/next_use.h"

namespace opt4store {

namespace {

using Clock = std::chrono::steady_clock;

// How many reads ahead per-id tables are prefetched: their lookups are at
// random, and the stream says which come next.
constexpr uint64_t kAhead = 16;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// An id and its rank under frequency-static: smaller ranks first.
struct Ranked {
  uint32_t inverse_count;  // UINT32_MAX - reads
  uint64_t first;          // its first read in the host's stream
  ItemId id;
  bool operator<(const Ranked& o) const {
    return inverse_count != o.inverse_count ? inverse_count < o.inverse_count : first < o.first;
  }
};

// Per-id scratch reused from host to host, restored after each use by
// walking that host's stream (cheaper than clearing N entries per host).
struct HostScratch {
  explicit HostScratch(uint64_t n) : last(n, kNever), count(n, 0), first(n, 0) {}
  std::vector<uint64_t> last;
  std::vector<uint32_t> count;
  std::vector<uint64_t> first;
  std::vector<uint64_t> next;
  std::vector<ItemId> distinct;
  std::vector<Ranked> ranked;
  BitSet resident;
};

// Belady over one host's stream: its source loads (misses) and local hits
// per epoch into out[epoch].
void RunPerHostOpt(const ItemId* stream, uint64_t length, uint64_t host_epoch_length,
                   uint64_t capacity, HostScratch* s, ClusterCounters* out) {
  s->next.resize(length);
  for (uint64_t t = length; t-- > 0;) {
    if (t >= kAhead) __builtin_prefetch(&s->last[stream[t - kAhead]]);
    s->next[t] = s->last[stream[t]];
    s->last[stream[t]] = t;
  }
  for (uint64_t t = 0; t < length; ++t) s->last[stream[t]] = kNever;
  s->resident.Reset(length);
  BeladyCache cache(capacity, &s->resident);
  for (uint64_t t = 0; t < length; ++t) {
    if (t + kAhead < length && s->next[t + kAhead] != kNever) {
      s->resident.Prefetch(s->next[t + kAhead]);
    }
    ClusterCounters& c = out[t / host_epoch_length];
    if (cache.Read(t, stream[t], s->next[t]).hit) {
      ++c.local_hits;
    } else {
      ++c.source_loads;
    }
  }
}

// Sets HeldBit(id, host) for the `capacity` ids the stream reads most,
// ties going to the one read first.
void ChooseFrequent(const ItemId* stream, uint64_t length, uint64_t capacity, uint32_t hosts,
                    uint32_t host, HostScratch* s, BitSet* held) {
  s->distinct.clear();
  for (uint64_t t = 0; t < length; ++t) {
    if (t + kAhead < length) {
      __builtin_prefetch(&s->count[stream[t + kAhead]]);
      __builtin_prefetch(&s->first[stream[t + kAhead]]);
    }
    const ItemId id = stream[t];
    if (s->count[id]++ == 0) {
      s->first[id] = t;
      s->distinct.push_back(id);
    }
  }
  std::vector<ItemId>& ids = s->distinct;
  if (ids.size() > capacity) {
    // Rank by (count descending, first read ascending), on keys packed
    // next to their ids: a comparator that looked the counts up would miss
    // the cache on every comparison.
    std::vector<Ranked>& ranked = s->ranked;
    ranked.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kAhead < ids.size()) {
        __builtin_prefetch(&s->count[ids[i + kAhead]]);
        __builtin_prefetch(&s->first[ids[i + kAhead]]);
      }
      ranked[i] = {UINT32_MAX - s->count[ids[i]], s->first[ids[i]], ids[i]};
      s->count[ids[i]] = 0;
    }
    std::nth_element(ranked.begin(), ranked.begin() + static_cast<ptrdiff_t>(capacity),
                     ranked.end());
    ids.resize(capacity);
    for (uint64_t i = 0; i < capacity; ++i) ids[i] = ranked[i].id;
  } else {
    for (ItemId id : ids) s->count[id] = 0;
  }
  const uint64_t keep = std::min<uint64_t>(capacity, ids.size());
  for (uint64_t i = 0; i < keep; ++i) {
    if (i + kAhead < keep) held->Prefetch(HeldBit(ids[i + kAhead], host, hosts));
    held->Set(HeldBit(ids[i], host, hosts));
  }
}

}  // namespace

Status HostStreamPass(const ClusterPlan& plan, uint64_t capacity, uint64_t stream_memory,
                      ClusterPlacementResult* per_host_opt, BitSet* held, double* held_seconds,
                      uint64_t* passes) {
  const ClusterShape& shape = plan.shape();
  const uint64_t hosts = shape.hosts;
  const uint64_t lh = shape.host_epoch_length;
  const uint64_t length = lh * shape.epochs;  // one host's whole stream
  const uint64_t n = shape.dataset_size;
  *passes = 0;
  *held_seconds = 0;
  if (per_host_opt) {
    per_host_opt->host_epoch.assign(hosts * shape.epochs, ClusterCounters());
    per_host_opt->seconds = 0;
  }
  if (held) held->Reset(n * 128 * HostWords(shape.hosts));
  if (!per_host_opt && !held) return Status::OK();

  const uint64_t bytes_per_host = length * sizeof(ItemId);
  const uint64_t group = std::max<uint64_t>(
      1, std::min<uint64_t>(hosts, stream_memory / std::max<uint64_t>(1, bytes_per_host)));
  std::vector<ItemId> streams;
  std::vector<ItemId> epoch_ids, scratch;
  HostScratch s(n);
  double generate_seconds = 0;
  for (uint64_t h0 = 0; h0 < hosts; h0 += group) {
    const uint64_t h1 = std::min(hosts, h0 + group);
    streams.resize((h1 - h0) * length);
    Clock::time_point start = Clock::now();
    for (uint64_t e = 0; e < shape.epochs; ++e) {
      plan.GenerateEpoch(e, &epoch_ids, &scratch);
      for (uint64_t i = 0; i < lh; ++i) {
        const ItemId* row = epoch_ids.data() + i * hosts;
        for (uint64_t h = h0; h < h1; ++h) streams[(h - h0) * length + e * lh + i] = row[h];
      }
    }
    generate_seconds += SecondsSince(start);
    ++*passes;
    for (uint64_t h = h0; h < h1; ++h) {
      const ItemId* stream = streams.data() + (h - h0) * length;
      if (per_host_opt) {
        start = Clock::now();
        RunPerHostOpt(stream, length, lh, capacity, &s,
                      per_host_opt->host_epoch.data() + h * shape.epochs);
        per_host_opt->seconds += SecondsSince(start);
      }
      if (held) {
        start = Clock::now();
        ChooseFrequent(stream, length, capacity, shape.hosts, static_cast<uint32_t>(h), &s, held);
        *held_seconds += SecondsSince(start);
      }
    }
  }
  // Generating the streams is per-host-opt's cost when it runs.
  if (per_host_opt) per_host_opt->seconds += generate_seconds;
  return Status::OK();
}

}  // namespace opt4store

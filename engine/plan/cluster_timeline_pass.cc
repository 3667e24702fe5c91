// TimelinePass (cluster_passes.h): the placements that serve the whole
// cluster's reads in timeline order, one epoch at a time.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "engine/plan/belady_cache.h"
#include "engine/plan/cluster_epochs.h"
#include "engine/plan/cluster_passes.h"
#include "opt4store/next_use.h"

namespace opt4store {

namespace {

using Clock = std::chrono::steady_clock;

// How many reads ahead the placements prefetch their per-id and
// per-position state: the plan is known, and its lookups are at random.
constexpr uint64_t kAhead = 16;

// What every placement sees of one epoch.
struct EpochView {
  uint64_t epoch = 0;
  uint64_t base = 0;  // cluster position of index 0
  const std::vector<ItemId>* ids = nullptr;
  const std::vector<uint64_t>* next = nullptr;
  uint32_t hosts = 0;
  uint64_t epochs = 0;
  // The counters of host h in this epoch.
  ClusterCounters& At(std::vector<ClusterCounters>* host_epoch, uint32_t h) const {
    return (*host_epoch)[uint64_t{h} * epochs + epoch];
  }
};

class Placement {
 public:
  virtual ~Placement() = default;
  virtual void RunEpoch(const EpochView& v, std::vector<ClusterCounters>* out) = 0;
};

// One OPT cache of hosts * capacity over the timeline; the holder rule is in
// cluster_simulator.h.
class ClusterOpt : public Placement {
 public:
  ClusterOpt(const ClusterShape& shape, uint64_t capacity)
      : resident_(shape.total_reads),
        cache_(capacity * shape.hosts, &resident_),
        holder_(shape.dataset_size, 0),
        room_(shape.hosts, capacity) {}

  void RunEpoch(const EpochView& v, std::vector<ClusterCounters>* out) override {
    const std::vector<ItemId>& ids = *v.ids;
    const std::vector<uint64_t>& next = *v.next;
    for (uint64_t c = 0; c < ids.size(); ++c) {
      if (c + kAhead < ids.size()) {
        __builtin_prefetch(&holder_[ids[c + kAhead]]);
        if (next[c + kAhead] != kNever) resident_.Prefetch(next[c + kAhead]);
      }
      const ItemId id = ids[c];
      const uint32_t g = static_cast<uint32_t>(c % v.hosts);
      ClusterCounters& counters = v.At(out, g);
      const BeladyCache::Outcome o = cache_.Read(v.base + c, id, next[c]);
      if (o.hit) {
        if (holder_[id] == g) {
          ++counters.local_hits;
        } else {
          ++counters.peer_fetches;
        }
        if (o.released) ++room_[holder_[id]];
        continue;
      }
      ++counters.source_loads;
      if (o.evicted) ++room_[holder_[o.victim]];
      if (!o.admitted) continue;
      uint32_t h = g;
      if (room_[h] == 0) h = o.evicted ? holder_[o.victim] : NextWithRoom(v.hosts);
      --room_[h];
      holder_[id] = h;
      if (h != g) ++counters.pushes;
    }
  }

 private:
  // Round robin over the hosts; the union cache has room, so one has.
  uint32_t NextWithRoom(uint32_t hosts) {
    while (room_[cursor_] == 0) cursor_ = (cursor_ + 1) % hosts;
    return cursor_;
  }

  BitSet resident_;
  BeladyCache cache_;
  std::vector<uint32_t> holder_;  // per id: the host holding it, if resident
  std::vector<uint64_t> room_;    // per host: free slots
  uint32_t cursor_ = 0;
};

// Each host an OPT cache of its home items over the cluster's reads of them.
class HomeOpt : public Placement {
 public:
  HomeOpt(const ClusterShape& shape, uint64_t capacity) : resident_(shape.total_reads) {
    for (uint32_t h = 0; h < shape.hosts; ++h) {
      homes_.push_back(std::make_unique<BeladyCache>(capacity, &resident_));
    }
  }

  void RunEpoch(const EpochView& v, std::vector<ClusterCounters>* out) override {
    const std::vector<ItemId>& ids = *v.ids;
    const std::vector<uint64_t>& next = *v.next;
    for (uint64_t c = 0; c < ids.size(); ++c) {
      if (c + kAhead < ids.size() && next[c + kAhead] != kNever) {
        resident_.Prefetch(next[c + kAhead]);
      }
      const ItemId id = ids[c];
      const uint32_t g = static_cast<uint32_t>(c % v.hosts);
      const uint32_t home = HomeHost(id, v.hosts);
      ClusterCounters& counters = v.At(out, g);
      const BeladyCache::Outcome o = homes_[home]->Read(v.base + c, id, next[c]);
      if (o.hit) {
        if (home == g) {
          ++counters.local_hits;
        } else {
          ++counters.peer_fetches;
        }
      } else {
        ++counters.source_loads;
        if (o.admitted && home != g) ++counters.pushes;
      }
    }
  }

 private:
  BitSet resident_;  // the homes read disjoint positions: one set serves all
  std::vector<std::unique_ptr<BeladyCache>> homes_;
};

// CoorDL: home items cached at their first load while the home has room.
class StaticPartition : public Placement {
 public:
  StaticPartition(const ClusterShape& shape, uint64_t capacity)
      : cached_(shape.dataset_size), room_(shape.hosts, capacity) {}

  void RunEpoch(const EpochView& v, std::vector<ClusterCounters>* out) override {
    const std::vector<ItemId>& ids = *v.ids;
    for (uint64_t c = 0; c < ids.size(); ++c) {
      const ItemId id = ids[c];
      const uint32_t g = static_cast<uint32_t>(c % v.hosts);
      const uint32_t home = HomeHost(id, v.hosts);
      ClusterCounters& counters = v.At(out, g);
      if (cached_.Test(id)) {
        if (home == g) {
          ++counters.local_hits;
        } else {
          ++counters.peer_fetches;
        }
        continue;
      }
      ++counters.source_loads;
      if (room_[home] == 0) continue;
      --room_[home];
      cached_.Set(id);
      if (home != g) ++counters.pushes;
    }
  }

 private:
  BitSet cached_;
  std::vector<uint64_t> room_;
};

// NoPFS: each host holds a fixed set (HostStreamPass chose it), filled at the
// host's first read of each item, from a peer that holds it filled, else
// from the source.
class FrequencyStatic : public Placement {
 public:
  explicit FrequencyStatic(BitSet* sets) : sets_(sets) {}

  void RunEpoch(const EpochView& v, std::vector<ClusterCounters>* out) override {
    const std::vector<ItemId>& ids = *v.ids;
    const uint64_t words = HostWords(v.hosts);
    for (uint64_t c = 0; c < ids.size(); ++c) {
      if (c + kAhead < ids.size()) {
        const uint64_t bit = HeldBit(ids[c + kAhead], 0, v.hosts);
        sets_->Prefetch(bit);
        sets_->Prefetch(bit + 128 * words - 1);  // a record may straddle two lines
      }
      const ItemId id = ids[c];
      const uint32_t g = static_cast<uint32_t>(c % v.hosts);
      ClusterCounters& counters = v.At(out, g);
      const bool holds = sets_->Test(HeldBit(id, g, v.hosts));
      const uint64_t filled = FilledBit(id, g, v.hosts);
      if (holds && sets_->Test(filled)) {
        ++counters.local_hits;
        continue;
      }
      // Here g's own copy is not filled, so any filled copy is a peer's.
      bool peer = false;
      const uint64_t first_word = FilledBit(id, 0, v.hosts) / 64;
      for (uint64_t w = 0; w < words && !peer; ++w) peer = sets_->Word(first_word + w) != 0;
      if (peer) {
        ++counters.peer_fetches;
      } else {
        ++counters.source_loads;
      }
      if (holds) sets_->Set(filled);
    }
  }

 private:
  BitSet* sets_;  // HeldBit and FilledBit (cluster_passes.h)
};

}  // namespace

Status TimelinePass(const ClusterPlan& plan, uint64_t capacity,
                    ClusterPlacementResult* cluster_opt, ClusterPlacementResult* home_opt,
                    ClusterPlacementResult* static_partition,
                    ClusterPlacementResult* frequency_static, BitSet* held) {
  const ClusterShape& shape = plan.shape();
  if (frequency_static && !held) {
    return Status::InvalidArgument("frequency-static needs the held sets of the host pass");
  }
  std::vector<std::pair<std::unique_ptr<Placement>, ClusterPlacementResult*>> runs;
  if (cluster_opt) runs.emplace_back(std::make_unique<ClusterOpt>(shape, capacity), cluster_opt);
  if (home_opt) runs.emplace_back(std::make_unique<HomeOpt>(shape, capacity), home_opt);
  if (static_partition) {
    runs.emplace_back(std::make_unique<StaticPartition>(shape, capacity), static_partition);
  }
  if (frequency_static) {
    runs.emplace_back(std::make_unique<FrequencyStatic>(held), frequency_static);
  }
  for (auto& run : runs) {
    run.second->host_epoch.assign(uint64_t{shape.hosts} * shape.epochs, ClusterCounters());
  }
  if (runs.empty()) return Status::OK();

  ClusterEpochs epochs(&plan);
  std::vector<ItemId> ids;
  std::vector<uint64_t> next;
  double walk_seconds = 0;
  for (;;) {
    const uint64_t e = epochs.epoch();
    Clock::time_point start = Clock::now();
    if (!epochs.Next(&ids, &next)) break;
    walk_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    EpochView view;
    view.epoch = e;
    view.base = e * shape.epoch_length;
    view.ids = &ids;
    view.next = &next;
    view.hosts = shape.hosts;
    view.epochs = shape.epochs;
    for (auto& run : runs) {
      start = Clock::now();
      run.first->RunEpoch(view, &run.second->host_epoch);
      run.second->seconds += std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  // The walk (generating epochs, next uses) is shared: each pays a share.
  for (auto& run : runs) run.second->seconds += walk_seconds / static_cast<double>(runs.size());
  return Status::OK();
}

}  // namespace opt4store

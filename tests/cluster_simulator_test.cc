// Cluster simulator: ClusterPlan against each rank's PlanSource stream;
// ClusterEpochs' next uses against a backward pass over the whole timeline;
// every placement against the brute-force reference (reference_cluster.h),
// per host and per epoch, on small plans with and without padding, with
// several ranks per host; and the figures for 4 hosts.
#include "opt4store/cluster_simulator.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/plan/cluster_epochs.h"
#include "opt4store/cluster_plan.h"
#include "opt4store/next_use.h"
#include "opt4store/plan.h"
#include "reference/reference_belady.h"
#include "reference/reference_cluster.h"

namespace opt4store {
namespace {

PlanSpec Distributed(uint64_t n, uint64_t epochs, uint32_t world, bool drop_last = false,
                     uint64_t seed = 7) {
  PlanSpec s;
  s.kind = SamplerKind::kDistributed;
  s.dataset_size = n;
  s.epochs = epochs;
  s.seed = seed;
  s.world_size = world;
  s.drop_last = drop_last;
  return s;
}

// rank_epochs[r][e]: what PlanSource streams for rank r.
std::vector<std::vector<std::vector<uint32_t>>> RankEpochs(const PlanSpec& spec) {
  std::vector<std::vector<std::vector<uint32_t>>> out;
  for (uint32_t r = 0; r < spec.world_size; ++r) {
    PlanSpec rank = spec;
    rank.rank = r;
    std::unique_ptr<PlanSource> source;
    REQUIRE(OpenPlanSource(rank, &source).ok());
    const PlanShape shape = source->shape();
    std::vector<std::vector<uint32_t>> epochs(shape.epochs,
                                              std::vector<uint32_t>(shape.epoch_length));
    for (auto& epoch : epochs) {
      size_t got = 0;
      REQUIRE(source->Read(epoch.data(), epoch.size(), &got).ok());
      REQUIRE(got == epoch.size());
    }
    out.push_back(std::move(epochs));
  }
  return out;
}

void CheckTable(const ClusterPlacementResult& r, const reference::RefTable& want,
                uint64_t epochs) {
  INFO(ClusterPlacementName(r.placement));
  for (size_t h = 0; h < want.size(); ++h) {
    for (size_t e = 0; e < epochs; ++e) {
      INFO("host " << h << " epoch " << e);
      const ClusterCounters& got = r.host_epoch[h * epochs + e];
      CHECK(got.local_hits == want[h][e].local_hits);
      CHECK(got.peer_fetches == want[h][e].peer_fetches);
      CHECK(got.source_loads == want[h][e].source_loads);
      CHECK(got.pushes == want[h][e].pushes);
    }
  }
}

ClusterSimulationResult Run(const PlanSpec& spec, uint32_t hosts, uint32_t ranks_per_host,
                            uint64_t capacity, uint64_t stream_memory = uint64_t{1} << 28) {
  ClusterSimulationOptions o;
  o.plan = spec;
  o.hosts = hosts;
  o.ranks_per_host = ranks_per_host;
  o.capacity = capacity;
  o.stream_memory = stream_memory;
  REQUIRE(ParseClusterPlacementList("all", &o.placements).ok());
  ClusterSimulationResult r;
  const Status s = SimulateCluster(o, &r);
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(r.placements.size() == 5);
  return r;
}

TEST_CASE("a host's cluster reads are its ranks' PlanSource streams", "[cluster]") {
  for (uint32_t ranks_per_host : {1u, 2u, 3u}) {
    for (bool drop_last : {false, true}) {
      const uint32_t hosts = 3;
      const PlanSpec spec = Distributed(29, 3, hosts * ranks_per_host, drop_last);
      ClusterPlan plan;
      REQUIRE(ClusterPlan::Create(spec, hosts, ranks_per_host, &plan).ok());
      const auto ranks = RankEpochs(spec);
      const auto timeline = reference::RefTimeline(ranks, hosts, ranks_per_host);
      REQUIRE(plan.shape().total_reads == timeline.size());
      std::vector<ItemId> ids, scratch;
      for (uint64_t e = 0; e < plan.shape().epochs; ++e) {
        plan.GenerateEpoch(e, &ids, &scratch);
        REQUIRE(ids.size() == plan.shape().epoch_length);
        for (uint64_t c = 0; c < ids.size(); ++c) {
          const auto& want = timeline[e * plan.shape().epoch_length + c];
          CHECK(ids[c] == want.id);
          CHECK(plan.HostOf(c) == want.host);
        }
      }
    }
  }
}

TEST_CASE("ClusterEpochs' next uses equal a backward pass over the timeline", "[cluster]") {
  // 10 items on 8 ranks: padding reads some ids twice an epoch, and
  // drop_last leaves ids out of whole epochs.
  for (bool drop_last : {false, true}) {
    for (uint64_t n : {10u, 37u}) {
      const PlanSpec spec = Distributed(n, 6, 8, drop_last, 3);
      ClusterPlan plan;
      REQUIRE(ClusterPlan::Create(spec, 4, 2, &plan).ok());
      const auto timeline = reference::RefTimeline(RankEpochs(spec), 4, 2);
      std::vector<uint32_t> all;
      for (const auto& r : timeline) all.push_back(r.id);
      const std::vector<uint64_t> want = reference::NextUses(all, n);
      ClusterEpochs epochs(&plan);
      std::vector<ItemId> ids;
      std::vector<uint64_t> next;
      uint64_t base = 0;
      while (epochs.Next(&ids, &next)) {
        for (uint64_t c = 0; c < ids.size(); ++c) {
          CHECK(ids[c] == all[base + c]);
          CHECK(next[c] == (want[base + c] == reference::kRefNever ? kNever : want[base + c]));
        }
        base += ids.size();
      }
      CHECK(base == all.size());
    }
  }
}

TEST_CASE("every placement equals the reference per host and epoch", "[cluster]") {
  struct Case {
    uint64_t n;
    uint64_t epochs;
    uint32_t hosts;
    uint32_t ranks_per_host;
    bool drop_last;
  };
  const Case cases[] = {{40, 3, 4, 1, false}, {37, 4, 3, 1, false}, {37, 3, 3, 2, true},
                        {50, 3, 2, 2, false}, {23, 5, 5, 1, true},  {30, 3, 1, 1, false}};
  for (const Case& k : cases) {
    const PlanSpec spec = Distributed(k.n, k.epochs, k.hosts * k.ranks_per_host, k.drop_last);
    const auto t = reference::RefTimeline(RankEpochs(spec), k.hosts, k.ranks_per_host);
    for (uint64_t capacity : {uint64_t{0}, uint64_t{1}, k.n / 8, k.n / 4, k.n / 2, k.n}) {
      INFO("n=" << k.n << " hosts=" << k.hosts << " R=" << k.ranks_per_host
                << " drop_last=" << k.drop_last << " capacity=" << capacity);
      // A small stream budget makes one plan pass per host.
      const ClusterSimulationResult r = Run(spec, k.hosts, k.ranks_per_host, capacity, 1);
      CHECK(r.stream_passes == k.hosts);
      CheckTable(r.placements[0], reference::RefPerHostOpt(t, k.hosts, k.epochs, capacity),
                 k.epochs);
      CheckTable(r.placements[1], reference::RefClusterOpt(t, k.hosts, k.epochs, capacity),
                 k.epochs);
      CheckTable(r.placements[2], reference::RefHomeOpt(t, k.hosts, k.epochs, capacity),
                 k.epochs);
      CheckTable(r.placements[3],
                 reference::RefStaticPartition(t, k.hosts, k.epochs, capacity), k.epochs);
      CheckTable(r.placements[4],
                 reference::RefFrequencyStatic(t, k.hosts, k.epochs, capacity), k.epochs);
      for (const ClusterPlacementResult& p : r.placements) CHECK(p.total.reads() == t.size());
    }
  }
}

TEST_CASE("the stream budget changes the passes, never the counts", "[cluster]") {
  const PlanSpec spec = Distributed(200, 3, 6);
  const ClusterSimulationResult one = Run(spec, 6, 1, 30);
  CHECK(one.stream_passes == 1);
  // 3 epochs x 34 reads x 4 bytes per host: 2 hosts a pass.
  const ClusterSimulationResult three = Run(spec, 6, 1, 30, 2 * 3 * 34 * 4);
  CHECK(three.stream_passes == 3);
  for (size_t p = 0; p < one.placements.size(); ++p) {
    INFO(ClusterPlacementName(one.placements[p].placement));
    CHECK(one.placements[p].host_epoch == three.placements[p].host_epoch);
  }
}

TEST_CASE("the OPT placements hit as often as textbook Belady", "[cluster]") {
  // Leaving at the last read (the simulator's rule) must not change hits.
  const PlanSpec spec = Distributed(300, 4, 4);
  const auto t = reference::RefTimeline(RankEpochs(spec), 4, 1);
  std::vector<uint32_t> all;
  for (const auto& r : t) all.push_back(r.id);
  for (uint64_t capacity : {uint64_t{10}, uint64_t{40}, uint64_t{75}}) {
    const ClusterSimulationResult r = Run(spec, 4, 1, capacity);
    const ClusterCounters& cluster = r.placements[1].total;
    CHECK(cluster.local_hits + cluster.peer_fetches ==
          reference::Belady(all, 4 * capacity, 300).hits);
    uint64_t per_host_hits = 0;
    for (uint32_t h = 0; h < 4; ++h) {
      std::vector<uint32_t> own;
      for (const auto& read : t) {
        if (read.host == h) own.push_back(read.id);
      }
      per_host_hits += reference::Belady(own, capacity, 300).hits;
    }
    CHECK(r.placements[0].total.local_hits == per_host_hits);
  }
}

TEST_CASE("4 hosts at 25% each over 3 epochs: the issue's figures", "[cluster]") {
  const uint64_t n = 4000;
  const ClusterSimulationResult r = Run(Distributed(n, 3, 4), 4, 1, n / 4);
  const ClusterCounters& per_host = r.placements[0].total;
  const ClusterCounters& cluster = r.placements[1].total;
  // The union holds the dataset: each sample is loaded once.
  CHECK(cluster.source_loads == n);
  CHECK(r.placements[2].total.source_loads == n);
  CHECK(per_host.source_loads >= 23 * n / 10);
  CHECK(per_host.source_loads <= 25 * n / 10);
  CHECK(per_host.peer_fetches == 0);
}

TEST_CASE("cluster simulation refuses what it cannot run", "[cluster]") {
  ClusterSimulationOptions o;
  o.plan = Distributed(100, 2, 4);
  o.hosts = 4;
  o.capacity = 10;
  ClusterSimulationResult r;
  CHECK(SimulateCluster(o, &r).IsInvalidArgument());  // no placement
  REQUIRE(ParseClusterPlacementList("cluster-opt,per-host-opt", &o.placements).ok());
  CHECK(o.placements.size() == 2);
  o.capacity = 101;
  CHECK(SimulateCluster(o, &r).IsInvalidArgument());
  o.capacity = 10;
  o.hosts = 3;  // world 4 is not 3 x 1
  CHECK(SimulateCluster(o, &r).IsInvalidArgument());
  o.hosts = 4;
  o.plan.kind = SamplerKind::kShuffle;
  CHECK(SimulateCluster(o, &r).IsInvalidArgument());
  std::vector<ClusterPlacement> list;
  CHECK(ParseClusterPlacementList("cluster-opt,bogus", &list).IsInvalidArgument());
  CHECK(ParseClusterPlacementList("home-opt,home-opt", &list).IsInvalidArgument());
  REQUIRE(ParseClusterPlacementList("all", &list).ok());
  CHECK(list.size() == 5);
}

}  // namespace
}  // namespace opt4store

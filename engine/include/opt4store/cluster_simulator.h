// Cluster simulator: replays a cluster plan (cluster_plan.h) through several
// ways of placing cached items on H hosts, each host with the same RAM
// budget of `capacity` items, and counts for every host and epoch where its
// reads were served: its own RAM, a peer's RAM, or the source.
//
// The placements, with the rules they are simulated by:
//   per-host-opt      each host caches for its own reads only, Belady's OPT
//                     over its own stream (the store with shared="local").
//   cluster-opt       one OPT cache of hosts * capacity items over the whole
//                     cluster timeline. A loaded item is held by the host
//                     that loaded it if that host has room, else by the host
//                     whose item it displaced, else by the next host with
//                     room (round robin).
//   home-opt          item x's home is host x % hosts (HomeHost); each host's
//                     cache holds only its home items, OPT over the cluster's
//                     reads of them.
//   static-partition  CoorDL: each host caches its first `capacity` home
//                     items to be loaded and never evicts.
//   frequency-static  NoPFS: each host holds the `capacity` items its own
//                     stream reads most (ties: the one it reads first); a
//                     held item is filled at its first read by that host,
//                     from a peer whose copy is filled if any, else from the
//                     source.
// The OPT caches are Belady's MIN with bypass, timed by cluster positions
// (cluster_plan.h); an item leaves at its last read, freeing its host's room.
// A read is a local hit if its host holds the item, a peer fetch if another
// host does, else a source load. A source load that is cached on another
// host than the reader's is pushed there: a transfer, as a peer fetch is.
//
// Memory: O(N) per-id tables, 16 * ceil(hosts / 64) bytes per id for
// frequency-static's sets, one bit per plan position for each OPT placement's residency, one
// epoch or two of the plan, and at most `stream_memory` bytes of per-host
// streams (per-host-opt and frequency-static need each host's whole stream;
// with more hosts than fit, the plan is generated once per group of hosts).
// Never the plan's next-use array.
//
// Thread safety: SimulateCluster() is reentrant; it shares nothing.
#ifndef OPT4STORE_CLUSTER_SIMULATOR_H_
#define OPT4STORE_CLUSTER_SIMULATOR_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "opt4store/cluster_plan.h"
#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

enum class ClusterPlacement {
  kPerHostOpt,
  kClusterOpt,
  kHomeOpt,
  kStaticPartition,
  kFrequencyStatic,
};

// "per-host-opt", "cluster-opt", "home-opt", "static-partition",
// "frequency-static".
const char* ClusterPlacementName(ClusterPlacement placement);
// A comma-separated list of those names, or "all" (every placement, in the
// order above).
Status ParseClusterPlacementList(std::string_view text, std::vector<ClusterPlacement>* out);

// The fixed partition of home-opt and static-partition.
inline uint32_t HomeHost(ItemId id, uint32_t hosts) { return id % hosts; }

// Where one host's reads in one epoch were served.
struct ClusterCounters {
  uint64_t local_hits = 0;
  uint64_t peer_fetches = 0;
  uint64_t source_loads = 0;
  uint64_t pushes = 0;  // loaded here, cached on another host

  uint64_t reads() const { return local_hits + peer_fetches + source_loads; }
  // Items sent between hosts.
  uint64_t transfers() const { return peer_fetches + pushes; }
  void Add(const ClusterCounters& o) {
    local_hits += o.local_hits;
    peer_fetches += o.peer_fetches;
    source_loads += o.source_loads;
    pushes += o.pushes;
  }
  bool operator==(const ClusterCounters& o) const {
    return local_hits == o.local_hits && peer_fetches == o.peer_fetches &&
           source_loads == o.source_loads && pushes == o.pushes;
  }
};

struct ClusterSimulationOptions {
  PlanSpec plan;  // distributed, world_size == hosts * ranks_per_host
  uint32_t hosts = 1;
  uint32_t ranks_per_host = 1;
  uint64_t capacity = 0;  // items each host's RAM holds
  std::vector<ClusterPlacement> placements;
  // Bytes of per-host streams held at once (4 per read). Fewer means more
  // passes over the plan, not a different result; the default holds the
  // 115 M reads of 90 ImageNet epochs in one pass.
  uint64_t stream_memory = uint64_t{512} << 20;
};

struct ClusterPlacementResult {
  ClusterPlacement placement = ClusterPlacement::kPerHostOpt;
  // host_epoch[host * epochs + epoch].
  std::vector<ClusterCounters> host_epoch;
  ClusterCounters total;
  double seconds = 0;  // wall time of this placement's share
};

struct ClusterSimulationResult {
  ClusterShape shape;
  uint64_t stream_passes = 0;  // plan passes made for per-host streams
  std::vector<ClusterPlacementResult> placements;  // in options.placements order
};

// Validates (a placement list that is empty, capacity above N, ...) and runs.
Status SimulateCluster(const ClusterSimulationOptions& options, ClusterSimulationResult* result);

}  // namespace opt4store

#endif  // OPT4STORE_CLUSTER_SIMULATOR_H_

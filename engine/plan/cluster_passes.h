// The two passes SimulateCluster() (cluster_simulator.h) makes over a plan.
//
// HostStreamPass sees each host's own stream whole, one group of hosts at a
// time: per-host-opt, and frequency-static's choice of what each host holds.
// TimelinePass walks the cluster timeline epoch by epoch (ClusterEpochs):
// cluster-opt, home-opt, static-partition, and frequency-static's reads.
//
// Thread safety: reentrant; they share nothing.
#ifndef OPT4STORE_ENGINE_CLUSTER_PASSES_H_
#define OPT4STORE_ENGINE_CLUSTER_PASSES_H_

#include <cstdint>

#include "engine/plan/bit_set.h"
#include "opt4store/cluster_plan.h"
#include "opt4store/cluster_simulator.h"
#include "opt4store/status.h"

namespace opt4store {

// frequency-static's sets, id-major so that a read touches one cache line:
// for each id, HostWords() words whose bit h says that host h holds it, then
// as many whose bit h says that host h's copy is filled.
inline uint64_t HostWords(uint32_t hosts) { return (uint64_t{hosts} + 63) / 64; }
inline uint64_t HeldBit(ItemId id, uint32_t host, uint32_t hosts) {
  return uint64_t{id} * 128 * HostWords(hosts) + host;
}
inline uint64_t FilledBit(ItemId id, uint32_t host, uint32_t hosts) {
  return HeldBit(id, host, hosts) + 64 * HostWords(hosts);
}

// Each output may be null (not wanted). Non-null outputs:
//   per_host_opt->host_epoch is sized hosts * epochs and filled;
//   *held gets HeldBit(id, host) for each id the host holds under
//   frequency-static, and *held_seconds the time choosing them took.
// *passes counts the passes over the plan (groups of hosts).
Status HostStreamPass(const ClusterPlan& plan, uint64_t capacity, uint64_t stream_memory,
                      ClusterPlacementResult* per_host_opt, BitSet* held, double* held_seconds,
                      uint64_t* passes);

// Each output may be null (not wanted). frequency_static needs `held` from
// HostStreamPass, and marks its fills in it.
Status TimelinePass(const ClusterPlan& plan, uint64_t capacity,
                    ClusterPlacementResult* cluster_opt, ClusterPlacementResult* home_opt,
                    ClusterPlacementResult* static_partition,
                    ClusterPlacementResult* frequency_static, BitSet* held);

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_CLUSTER_PASSES_H_

// ClusterPlan: how a cluster of hosts reads one dataset under
// torch.utils.data.DistributedSampler, as a single timeline.
//
// world = hosts * ranks_per_host ranks; rank r lives on host r / ranks_per_host.
// Each epoch the sampler's padded (or, with drop_last, truncated)
// permutation has epoch_length = per_rank * world entries, and rank r reads
// entries r, r + world, r + 2 * world, ... (plan.h gives the generator).
// Host h reads its ranks' reads round-robin: its i-th read of an epoch is
// its local rank (i % ranks_per_host)'s (i / ranks_per_host)-th read.
//
// The hosts advance in lockstep: within an epoch, host h's i-th read sits at
// cluster index c = i * hosts + h, so host(c) = c % hosts. Across epochs,
// cluster position P = epoch * epoch_length + c, the key every cluster
// placement orders next uses by. With one rank per host the cluster order of
// an epoch is the sampler's padded permutation itself.
//
// Thread safety: a ClusterPlan is an immutable value; GenerateEpoch() is
// const and reentrant.
#ifndef OPT4STORE_CLUSTER_PLAN_H_
#define OPT4STORE_CLUSTER_PLAN_H_

#include <cstdint>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

struct ClusterShape {
  uint64_t dataset_size = 0;       // N
  uint64_t epochs = 0;
  uint32_t hosts = 0;              // H
  uint32_t ranks_per_host = 0;     // R
  uint64_t epoch_length = 0;       // reads of the whole cluster per epoch (T)
  uint64_t host_epoch_length = 0;  // reads of one host per epoch (T / H)
  uint64_t total_reads = 0;        // epochs * epoch_length
};

class ClusterPlan {
 public:
  ClusterPlan() = default;

  // spec: a distributed plan (kind kDistributed) whose world_size is
  // hosts * ranks_per_host; its rank is ignored. Returns InvalidArgument for
  // any other plan, zero hosts, or an epoch too long for 32-bit indices.
  static Status Create(const PlanSpec& spec, uint32_t hosts, uint32_t ranks_per_host,
                       ClusterPlan* plan);

  const ClusterShape& shape() const { return shape_; }
  uint32_t HostOf(uint64_t cluster_index) const {
    return static_cast<uint32_t>(cluster_index % shape_.hosts);
  }

  // out[c] = the id read at cluster index c of `epoch`; out->size() ==
  // epoch_length. *scratch holds the permutation (kept to save allocations).
  void GenerateEpoch(uint64_t epoch, std::vector<ItemId>* out,
                     std::vector<ItemId>* scratch) const;

  // The cluster index of entry k of the sampler's padded (or truncated)
  // list, which holds the permutation's entry k mod N.
  // REQUIRES: k < epoch_length.
  uint64_t ClusterIndex(uint64_t k) const {
    const uint64_t r = shape_.ranks_per_host;
    const uint64_t world = uint64_t{shape_.hosts} * r;
    const uint64_t rem = k % world;
    return ((k / world) * r + rem % r) * shape_.hosts + rem / r;
  }

  // The plan of one rank, as PlanSource would stream it.
  PlanSpec RankSpec(uint32_t rank) const;

 private:
  PlanSpec spec_;
  ClusterShape shape_;
};

}  // namespace opt4store

#endif  // OPT4STORE_CLUSTER_PLAN_H_

#include "opt4store/cluster_plan.h"

#include <string>

namespace opt4store {

Status ClusterPlan::Create(const PlanSpec& spec, uint32_t hosts, uint32_t ranks_per_host,
                           ClusterPlan* plan) {
  if (spec.kind != SamplerKind::kDistributed) {
    return Status::InvalidArgument(std::string("a cluster plan needs the distributed sampler, "
                                               "not ") + SamplerName(spec.kind));
  }
  if (hosts == 0 || ranks_per_host == 0) {
    return Status::InvalidArgument("a cluster needs at least one host and one rank per host");
  }
  const uint64_t world = uint64_t{hosts} * ranks_per_host;
  if (world != spec.world_size) {
    return Status::InvalidArgument("the plan's world size " + std::to_string(spec.world_size) +
                                   " is not hosts x ranks per host = " + std::to_string(world));
  }
  PlanSpec rank0 = spec;
  rank0.rank = 0;
  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(rank0, &source));
  const PlanShape& rank_shape = source->shape();
  ClusterShape& s = plan->shape_;
  s = ClusterShape();
  s.dataset_size = rank_shape.dataset_size;
  s.epochs = rank_shape.epochs;
  s.hosts = hosts;
  s.ranks_per_host = ranks_per_host;
  s.epoch_length = rank_shape.epoch_length * world;
  s.host_epoch_length = rank_shape.epoch_length * ranks_per_host;
  s.total_reads = s.epoch_length * s.epochs;
  if (s.epoch_length >= UINT32_MAX) {
    return Status::InvalidArgument("a cluster epoch of " + std::to_string(s.epoch_length) +
                                   " reads is too long (at most 2^32 - 2)");
  }
  if (s.epoch_length == 0) {
    return Status::InvalidArgument("the world of " + std::to_string(world) +
                                   " ranks reads nothing: drop_last with fewer items than ranks");
  }
  plan->spec_ = rank0;
  return Status::OK();
}

void ClusterPlan::GenerateEpoch(uint64_t epoch, std::vector<ItemId>* out,
                                std::vector<ItemId>* scratch) const {
  PlanSpec shuffle = spec_;
  shuffle.kind = SamplerKind::kShuffle;
  opt4store::GenerateEpoch(shuffle, epoch, scratch);
  const std::vector<ItemId>& perm = *scratch;
  const uint64_t n = shape_.dataset_size;
  const uint64_t hosts = shape_.hosts;
  const uint64_t r = shape_.ranks_per_host;
  const uint64_t world = hosts * r;
  out->resize(shape_.epoch_length);
  ItemId* dst = out->data();
  if (r == 1) {
    // The padded permutation: entry k is perm[k mod n] (plan.h).
    for (uint64_t k = 0; k < shape_.epoch_length; ++k) dst[k] = perm[k < n ? k : k % n];
    return;
  }
  for (uint64_t c = 0; c < shape_.epoch_length; ++c) {
    const uint64_t i = c / hosts;
    const uint64_t h = c % hosts;
    const uint64_t k = (i / r) * world + h * r + i % r;
    dst[c] = perm[k % n];
  }
}

PlanSpec ClusterPlan::RankSpec(uint32_t rank) const {
  PlanSpec spec = spec_;
  spec.rank = rank;
  return spec;
}

}  // namespace opt4store

#include "engine/plan/cluster_epochs.h"

#include <utility>

#include "opt4store/next_use.h"

namespace opt4store {

ClusterEpochs::ClusterEpochs(const ClusterPlan* plan)
    : plan_(plan),
      later_(plan->shape().dataset_size, 0),
      stamp_(plan->shape().dataset_size, 0) {}

const ClusterEpochs::Epoch& ClusterEpochs::Ahead(uint64_t k) {
  while (ahead_.empty() || ahead_.back().index < k) {
    const uint64_t index = ahead_.empty() ? next_epoch_ : ahead_.back().index + 1;
    ahead_.emplace_back();
    Epoch& epoch = ahead_.back();
    epoch.index = index;
    plan_->GenerateEpoch(index, &epoch.ids, &scratch_);
    epoch.first.assign(plan_->shape().dataset_size, kAbsent);
    for (uint64_t c = epoch.ids.size(); c-- > 0;) {
      epoch.first[epoch.ids[c]] = static_cast<uint32_t>(c);
    }
  }
  return ahead_[k - ahead_.front().index];
}

uint64_t ClusterEpochs::FirstAfter(ItemId id, uint64_t e) {
  const ClusterShape& shape = plan_->shape();
  for (uint64_t k = e + 1; k < shape.epochs; ++k) {
    const uint32_t c = Ahead(k).first[id];
    if (c != kAbsent) return k * shape.epoch_length + c;
  }
  return kNever;
}

bool ClusterEpochs::Next(std::vector<ItemId>* ids, std::vector<uint64_t>* next) {
  const ClusterShape& shape = plan_->shape();
  const uint64_t e = next_epoch_;
  if (e >= shape.epochs) return false;
  Ahead(e);
  const std::vector<ItemId>& cur = ahead_.front().ids;
  const uint64_t base = e * shape.epoch_length;
  next->resize(cur.size());
  // Backward: an id read again in this epoch points at that read, else at
  // its first read in a later epoch.
  for (uint64_t c = cur.size(); c-- > 0;) {
    const ItemId id = cur[c];
    (*next)[c] = stamp_[id] == e + 1 ? base + later_[id] : FirstAfter(id, e);
    stamp_[id] = e + 1;
    later_[id] = static_cast<uint32_t>(c);
  }
  *ids = std::move(ahead_.front().ids);
  ahead_.pop_front();
  ++next_epoch_;
  return true;
}

}  // namespace opt4store

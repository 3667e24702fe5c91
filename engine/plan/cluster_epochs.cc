#include "engine/plan/cluster_epochs.h"

#include <algorithm>
#include <utility>

#include "opt4store/next_use.h"

namespace opt4store {

ClusterEpochs::ClusterEpochs(const ClusterPlan* plan) : plan_(plan) {}

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
  const uint64_t t = shape.epoch_length;
  const uint64_t n = shape.dataset_size;
  next->resize(cur.size());
  uint64_t* out = next->data();
  // Every read first points at its id's first read in a later epoch: the
  // next epoch's, unless drop_last left the id out of it.
  if (e + 1 < shape.epochs) {
    const std::vector<uint32_t>& first = Ahead(e + 1).first;
    const uint64_t base = (e + 1) * t;
    constexpr uint64_t kAheadReads = 16;  // first[] is read at random
    for (uint64_t c = 0; c < cur.size(); ++c) {
      if (c + kAheadReads < cur.size()) __builtin_prefetch(&first[cur[c + kAheadReads]]);
      const uint32_t f = first[cur[c]];
      out[c] = f != kAbsent ? base + f : FirstAfter(cur[c], e + 1);
    }
  } else {
    std::fill(out, out + cur.size(), kNever);
  }
  // Padding reads the permutation's entry j at padded entries j, j + N,
  // j + 2N, ...: each of those reads but the last points at the next one.
  const uint64_t epoch_base = e * t;
  std::vector<uint64_t> reads;
  for (uint64_t j = 0; j < n && j + n < t; ++j) {
    reads.clear();
    for (uint64_t k = j; k < t; k += n) reads.push_back(plan_->ClusterIndex(k));
    std::sort(reads.begin(), reads.end());
    for (size_t i = 0; i + 1 < reads.size(); ++i) out[reads[i]] = epoch_base + reads[i + 1];
  }
  *ids = std::move(ahead_.front().ids);
  ahead_.pop_front();
  ++next_epoch_;
  return true;
}

}  // namespace opt4store

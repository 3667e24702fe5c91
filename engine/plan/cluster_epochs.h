// ClusterEpochs: walks a ClusterPlan epoch by epoch and gives each read its
// next use on the cluster timeline, without the plan's next-use array.
//
// A read's next use lies later in its own epoch (padding reads the
// permutation's first entries again, at known places) or in a later epoch.
// With padding every id is read in every epoch, so the next epoch's first
// read of each id answers all the rest; with drop_last an id missing from
// it is looked up in the epochs after. Each epoch is generated once and kept only
// until the walk has passed it: about two epochs in memory.
//
// Thread safety: not thread-safe; one owner.
#ifndef OPT4STORE_ENGINE_CLUSTER_EPOCHS_H_
#define OPT4STORE_ENGINE_CLUSTER_EPOCHS_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "opt4store/cluster_plan.h"

namespace opt4store {

class ClusterEpochs {
 public:
  // REQUIRES: plan outlives this object.
  explicit ClusterEpochs(const ClusterPlan* plan);

  // The epoch that Next() hands out next.
  uint64_t epoch() const { return next_epoch_; }

  // Epoch epoch()'s ids in cluster order (ids[c]) and each read's next use,
  // a cluster position or kNever. Returns false after the last epoch.
  bool Next(std::vector<ItemId>* ids, std::vector<uint64_t>* next);

 private:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  struct Epoch {
    uint64_t index = 0;
    std::vector<ItemId> ids;
    std::vector<uint32_t> first;  // per id: its first cluster index, or kAbsent
  };

  // Epoch k, generated on first use. REQUIRES: k >= the deque's front.
  const Epoch& Ahead(uint64_t k);
  // The first position after epoch e at which id is read, or kNever.
  uint64_t FirstAfter(ItemId id, uint64_t e);

  const ClusterPlan* plan_;
  uint64_t next_epoch_ = 0;
  std::deque<Epoch> ahead_;  // consecutive epochs from next_epoch_ on
  std::vector<ItemId> scratch_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_CLUSTER_EPOCHS_H_

// CostTable: the cost of each resident item. Costs are all 1 until the first
// item of another cost arrives, so an item-count cache pays no memory for it.
//
// Thread safety: not thread-safe.
#ifndef OPT4STORE_ENGINE_COST_TABLE_H_
#define OPT4STORE_ENGINE_COST_TABLE_H_

#include <cstdint>
#include <vector>

#include "opt4store/huge_page_allocator.h"
#include "opt4store/plan.h"

namespace opt4store {

class CostTable {
 public:
  explicit CostTable(uint64_t num_ids) : num_ids_(num_ids) {}

  void Set(ItemId id, uint64_t cost) {
    if (costs_.empty()) {
      if (cost == 1) return;
      costs_.assign(num_ids_, 1);
    }
    costs_[id] = cost;
  }
  uint64_t Get(ItemId id) const { return costs_.empty() ? 1 : costs_[id]; }

 private:
  uint64_t num_ids_;
  HugeVector<uint64_t> costs_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_COST_TABLE_H_

// ItemSizes: the byte size of each item, for capacities given in bytes.
// Either one constant for every id, or one value per id from a number file
// (see number_file.h) whose i-th value is the size of id i.
//
// Thread safety: immutable after construction; safe to share.
#ifndef OPT4STORE_ITEM_SIZES_H_
#define OPT4STORE_ITEM_SIZES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

class ItemSizes {
 public:
  // Every item costs 1: capacities count items.
  ItemSizes() = default;

  static ItemSizes Constant(uint64_t bytes, uint64_t num_ids);
  // Reads one size per id; the file must hold exactly num_ids values (or, if
  // num_ids == 0, any number, which then defines the dataset size).
  static Status FromFile(const std::string& path, uint64_t num_ids, ItemSizes* sizes);
  static ItemSizes FromVector(std::vector<uint64_t> sizes);

  bool uniform() const { return per_item_.empty(); }
  uint64_t num_ids() const { return num_ids_; }
  uint64_t Size(ItemId id) const { return per_item_.empty() ? constant_ : per_item_[id]; }
  // Sum over all ids.
  uint64_t Total() const { return total_; }

 private:
  uint64_t constant_ = 1;
  uint64_t num_ids_ = 0;
  uint64_t total_ = 0;
  std::vector<uint64_t> per_item_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ITEM_SIZES_H_

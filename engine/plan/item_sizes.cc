#include "opt4store/item_sizes.h"

#include <numeric>

#include "opt4store/number_file.h"

namespace opt4store {

ItemSizes ItemSizes::Constant(uint64_t bytes, uint64_t num_ids) {
  ItemSizes s;
  s.constant_ = bytes;
  s.num_ids_ = num_ids;
  s.total_ = bytes * num_ids;
  return s;
}

ItemSizes ItemSizes::FromVector(std::vector<uint64_t> sizes) {
  ItemSizes s;
  s.num_ids_ = sizes.size();
  s.total_ = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  s.per_item_ = std::move(sizes);
  // An empty vector would read as "uniform"; keep it non-uniform and empty.
  s.constant_ = 0;
  return s;
}

Status ItemSizes::FromFile(const std::string& path, uint64_t num_ids, ItemSizes* sizes) {
  std::vector<uint64_t> values;
  // 2^40 bytes per item is far beyond any sample and keeps sums from overflowing.
  OPT4STORE_RETURN_IF_ERROR(ReadNumberFile(path, uint64_t{1} << 40, &values));
  if (values.empty()) return Status::InvalidArgument(path + ": sizes file holds no values");
  if (num_ids != 0 && values.size() != num_ids) {
    return Status::InvalidArgument(path + ": holds " + std::to_string(values.size()) +
                                   " sizes, but the dataset has " + std::to_string(num_ids) +
                                   " items");
  }
  *sizes = FromVector(std::move(values));
  return Status::OK();
}

}  // namespace opt4store

// BitSet: a flat set of small integers, one bit each, for the cluster
// simulator's per-position and per-(host, id) flags, where a byte each
// would not fit in memory (a 90-epoch ImageNet plan has 115 M positions).
//
// Thread safety: not thread-safe.
#ifndef OPT4STORE_ENGINE_BIT_SET_H_
#define OPT4STORE_ENGINE_BIT_SET_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace opt4store {

class BitSet {
 public:
  BitSet() = default;
  explicit BitSet(uint64_t bits) { Reset(bits); }

  // Makes the set hold `bits` bits, all clear.
  void Reset(uint64_t bits) {
    words_.assign((bits + 63) / 64, 0);
  }

  bool Test(uint64_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  void Set(uint64_t i) { words_[i >> 6] |= uint64_t{1} << (i & 63); }
  void Clear(uint64_t i) { words_[i >> 6] &= ~(uint64_t{1} << (i & 63)); }
  void Prefetch(uint64_t i) const { __builtin_prefetch(&words_[i >> 6], 1); }
  // Bits [64 * w, 64 * w + 64).
  uint64_t Word(uint64_t w) const { return words_[w]; }

 private:
  std::vector<uint64_t> words_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_BIT_SET_H_

// WindowBitmap: a hierarchical bitmap (64-ary summary levels) answering
// "highest set bit at or below i" in O(log64 n) word operations.
//
// OPT keys are next-use positions, and two resident items never share one
// (a position is one read of one id), so the set of resident keys inside a
// window is a set of distinct small integers: a bitmap, not a heap. A set,
// a clear and a find each touch 3-4 words for a 16 Mi-slot window.
//
// Thread safety: not thread-safe.
#ifndef OPT4STORE_ENGINE_WINDOW_BITMAP_H_
#define OPT4STORE_ENGINE_WINDOW_BITMAP_H_

#include <cstdint>
#include <vector>

#include "opt4store/huge_page_allocator.h"

namespace opt4store {

class WindowBitmap {
 public:
  static constexpr uint64_t kNone = UINT64_MAX;

  explicit WindowBitmap(uint64_t bits) {
    uint64_t n = bits == 0 ? 1 : bits;
    do {
      n = (n + 63) / 64;
      levels_.emplace_back(n, 0);
    } while (n > 1);
  }

  void Prefetch(uint64_t i) const { __builtin_prefetch(&levels_[0][i >> 6], 1); }

  bool Test(uint64_t i) const { return (levels_[0][i >> 6] >> (i & 63)) & 1; }

  void Set(uint64_t i) {
    for (auto& level : levels_) {
      uint64_t& word = level[i >> 6];
      const bool was_empty = word == 0;
      word |= uint64_t{1} << (i & 63);
      if (!was_empty) return;
      i >>= 6;
    }
  }

  void Clear(uint64_t i) {
    for (auto& level : levels_) {
      uint64_t& word = level[i >> 6];
      word &= ~(uint64_t{1} << (i & 63));
      if (word != 0) return;
      i >>= 6;
    }
  }

  // The highest set index <= i, or kNone.
  uint64_t FindPrev(uint64_t i) const {
    size_t level = 0;
    for (;;) {
      const uint64_t word_index = i >> 6;
      const unsigned bit = i & 63;
      const uint64_t mask = bit == 63 ? ~uint64_t{0} : (uint64_t{2} << bit) - 1;
      const uint64_t word = levels_[level][word_index] & mask;
      if (word != 0) {
        i = (word_index << 6) + 63 - __builtin_clzll(word);
        break;
      }
      if (word_index == 0 || level + 1 == levels_.size()) return kNone;
      i = word_index - 1;
      ++level;
    }
    while (level > 0) {
      --level;
      i = (i << 6) + 63 - __builtin_clzll(levels_[level][i]);
    }
    return i;
  }

 private:
  std::vector<HugeVector<uint64_t>> levels_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_WINDOW_BITMAP_H_

// Checked arithmetic on sizes: every size that comes from a user (an option,
// a flag) or from a file (a header, a statvfs) is added and multiplied here,
// so that a huge value is refused or saturated, never wrapped around into a
// small one.
//
// Thread safety: plain functions.
#ifndef OPT4STORE_ENGINE_BASE_CHECKED_MATH_H_
#define OPT4STORE_ENGINE_BASE_CHECKED_MATH_H_

#include <cstdint>
#include <limits>

namespace opt4store {

// *out = a + b. Returns false (and leaves *out alone) when that overflows.
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return false;
  *out = sum;
  return true;
}

// *out = a * b. Returns false (and leaves *out alone) when that overflows.
inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return false;
  *out = product;
  return true;
}

// a * b, or 2^64 - 1 when that overflows: for quantities where "more than
// can be counted" means the same as the largest count (free space).
inline uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<uint64_t>::max() : product;
}

// a + b, or 2^64 - 1 when that overflows.
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<uint64_t>::max() : sum;
}

// v rounded up to a multiple of `to` (> 0). Returns false when that
// overflows.
inline bool CheckedRoundUp(uint64_t v, uint64_t to, uint64_t* out) {
  uint64_t bumped = 0;
  if (!CheckedAdd(v, to - 1, &bumped)) return false;
  *out = bumped / to * to;
  return true;
}

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_BASE_CHECKED_MATH_H_

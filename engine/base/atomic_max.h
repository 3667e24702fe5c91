// RaiseTo: an atomic's value becomes the larger of it and a given value,
// lock-free (a compare-exchange loop). For high-water marks that several
// threads or processes raise: positions asked, consumed, begun, reserved.
//
// Header-only.
#ifndef OPT4STORE_ENGINE_BASE_ATOMIC_MAX_H_
#define OPT4STORE_ENGINE_BASE_ATOMIC_MAX_H_

#include <atomic>
#include <cstdint>

namespace opt4store {

// *a = max(*a, value). `order` is the compare-exchange's on success (its
// failure order is derived from it); a value at or below *a writes nothing.
inline void RaiseTo(std::atomic<uint64_t>* a, uint64_t value,
                    std::memory_order order = std::memory_order_seq_cst) {
  uint64_t seen = a->load(std::memory_order_relaxed);
  while (seen < value && !a->compare_exchange_weak(seen, value, order)) {
  }
}

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_BASE_ATOMIC_MAX_H_

// AlignedBuffer: a posix_memalign'ed buffer for O_DIRECT reads, and the
// alignment arithmetic those reads need (kDirectIoAlignment, engine/base/env.h).
#ifndef OPT4STORE_TIERS_ALIGNED_BUFFER_H_
#define OPT4STORE_TIERS_ALIGNED_BUFFER_H_

#include <cstdint>
#include <cstdlib>

#include "engine/base/env.h"

namespace opt4store {

inline uint64_t AlignDown(uint64_t x) { return x & ~uint64_t{kDirectIoAlignment - 1}; }
inline uint64_t AlignUp(uint64_t x) { return AlignDown(x + kDirectIoAlignment - 1); }

// A posix_memalign'ed buffer for O_DIRECT reads, grown on demand.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), capacity_(o.capacity_) {
    o.data_ = nullptr;
    o.capacity_ = 0;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  bool Reserve(size_t n) {
    if (n <= capacity_) return true;
    void* p = nullptr;
    if (posix_memalign(&p, kDirectIoAlignment, n) != 0) return false;
    std::free(data_);
    data_ = static_cast<char*>(p);
    capacity_ = n;
    return true;
  }
  char* data() const { return data_; }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_ALIGNED_BUFFER_H_

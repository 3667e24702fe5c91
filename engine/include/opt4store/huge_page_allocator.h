// HugePageAllocator: a std::allocator for large arrays that are read at
// random (per-id tables, the next-use ring, the OPT bitmap). Blocks of 2 MiB
// or more are 2 MiB-aligned and advised MADV_HUGEPAGE, so that a random read
// costs one cache miss instead of a cache miss plus a TLB miss. Where the
// kernel has transparent huge pages off, the advice is ignored and nothing
// else changes. Smaller blocks come from operator new.
//
// Thread safety: stateless; safe from any thread.
#ifndef OPT4STORE_HUGE_PAGE_ALLOCATOR_H_
#define OPT4STORE_HUGE_PAGE_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <vector>

namespace opt4store {

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugePageAllocator() noexcept = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes));
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, rounded, MADV_HUGEPAGE);  // advice only; failure is harmless
    return static_cast<T*>(p);
  }

  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugePage) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const noexcept { return false; }
};

template <typename T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace opt4store

#endif  // OPT4STORE_HUGE_PAGE_ALLOCATOR_H_

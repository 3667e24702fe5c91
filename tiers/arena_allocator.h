// ArenaAllocator: the owner-side allocator behind the RAM tier's arena.
//
// It hands out ranges of "units" (the RAM tier uses 64-byte units) from an
// arena of a fixed number of units. It is a two-level segregated fit (TLSF,
// Masmano et al., 2004): free blocks sit in 29 x 32 size classes whose
// bounds grow by 1/32 steps, two bitmaps find the smallest non-empty class
// that fits in O(1), and a freed block is merged at once with free physical
// neighbours, so no two free blocks are ever adjacent. The good-fit search
// rounds the request up to the next class boundary; when that finds nothing
// it scans the request's own class too, so Allocate fails only when no free
// block is large enough. The waste is at most a 1/32 class step of the
// block taken, and coalescing returns evicted space to large requests.
//
// The bookkeeping (about 40 bytes per block, free or used) is private to
// the process that owns the arena; nothing of it lives in the arena itself,
// so readers in other processes never see allocator state.
//
// Thread safety: not thread-safe; the RAM tier calls it under its owner's
// mutex. Process safety: private memory of one process.
#ifndef OPT4STORE_TIERS_ARENA_ALLOCATOR_H_
#define OPT4STORE_TIERS_ARENA_ALLOCATOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace opt4store {

class ArenaAllocator {
 public:
  using Handle = uint32_t;
  static constexpr Handle kNoHandle = 0xFFFFFFFFu;
  // Units above this cannot be described by the size classes.
  static constexpr uint64_t kMaxCapacityUnits = uint64_t{1} << 32;

  // REQUIRES: 1 <= capacity_units <= kMaxCapacityUnits.
  explicit ArenaAllocator(uint64_t capacity_units);

  ArenaAllocator(const ArenaAllocator&) = delete;
  ArenaAllocator& operator=(const ArenaAllocator&) = delete;

  // Takes `units` units. Returns false (and changes nothing) when no free
  // block has that many; the caller frees something and retries.
  // O(1), plus a scan of one size class when only that class could fit.
  bool Allocate(uint64_t units, uint64_t* offset, Handle* handle);

  // Returns the block to the free space and merges it with free neighbours.
  // Returns false when `handle` is not an allocated block (a caller bug).
  bool Free(Handle handle);

  // Extends the arena to capacity_units (the RAM tier reserves its pages as
  // it fills): the new units become free, merged with a free last block.
  // REQUIRES: capacity_units() < capacity_units <= kMaxCapacityUnits. O(1).
  void Grow(uint64_t capacity_units);

  uint64_t BlockOffset(Handle handle) const { return blocks_[handle].offset; }
  uint64_t BlockUnits(Handle handle) const { return blocks_[handle].size; }

  uint64_t capacity_units() const { return capacity_; }
  uint64_t used_units() const { return used_units_; }
  uint64_t free_units() const { return capacity_ - used_units_; }
  uint64_t used_blocks() const { return used_blocks_; }
  uint64_t free_blocks() const { return free_blocks_; }
  // Bookkeeping bytes held now (descriptors and their spare list).
  uint64_t MemoryUsage() const;

  // The free units at the arena's end (the last block's, when it is free).
  uint64_t FreeTailUnits() const {
    return blocks_[last_].state == BlockState::kFree ? blocks_[last_].size : 0;
  }
  // The largest free block, in units. O(free blocks in the largest
  // non-empty class); for stats, not for the insert path.
  uint64_t LargestFreeBlock() const;

  // Walks every block and list. Returns "" when all invariants hold (blocks
  // tile the arena, no two free blocks adjacent, each free block in the list
  // of its class, bitmaps match the lists, counters match), else the first
  // violation. O(blocks); for tests.
  std::string CheckInvariants() const;

 private:
  static constexpr int kSlLog2 = 5;
  static constexpr int kSlCount = 1 << kSlLog2;  // classes per power of two
  static constexpr int kFlCount = 29;            // sizes below 2^33 units
  static constexpr uint32_t kNil = 0xFFFFFFFFu;

  enum class BlockState : uint8_t { kFree, kUsed, kSpare };

  struct Block {
    uint64_t offset = 0;
    uint64_t size = 0;          // units
    uint32_t prev_phys = kNil;  // physical neighbours
    uint32_t next_phys = kNil;
    uint32_t prev_free = kNil;  // links in the free list of the block's class
    uint32_t next_free = kNil;
    BlockState state = BlockState::kSpare;
  };

  static void Mapping(uint64_t size, int* fl, int* sl);
  uint32_t FindSuitable(int fl, int sl) const;
  void InsertFree(uint32_t b);
  void RemoveFree(uint32_t b);
  uint32_t NewBlock();
  void ReleaseBlock(uint32_t b);

  uint64_t capacity_;
  uint32_t last_ = 0;  // the block that ends at capacity_
  uint64_t used_units_ = 0;
  uint64_t used_blocks_ = 0;
  uint64_t free_blocks_ = 0;
  uint32_t fl_bitmap_ = 0;
  uint32_t sl_bitmap_[kFlCount] = {};
  uint32_t heads_[kFlCount][kSlCount];
  std::vector<Block> blocks_;    // descriptors; index 0 always starts at offset 0
  std::vector<uint32_t> spare_;  // descriptor indices not in use
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_ARENA_ALLOCATOR_H_

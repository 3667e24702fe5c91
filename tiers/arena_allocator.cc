// Invariants (checked by CheckInvariants):
//  - The blocks, followed by next_phys from descriptor 0, tile [0, capacity_)
//    without gaps or overlap; prev_phys mirrors next_phys.
//  - No two physically adjacent blocks are both free (Free merges at once).
//  - A free block sits in exactly one list: heads_[fl][sl] for Mapping(size).
//    Bit sl of sl_bitmap_[fl] is set iff that list is non-empty, and bit fl
//    of fl_bitmap_ iff sl_bitmap_[fl] != 0.
//  - Every block of class (fl, sl) has size in [lower(fl, sl), lower of the
//    next class). After rounding a request up to the next class bound, any
//    block of the class found is large enough without looking at it.
//  - used_units_ / used_blocks_ / free_blocks_ count the kUsed / kFree blocks.
//  - last_ is the chain's last block.
#include "tiers/arena_allocator.h"

#include <cassert>
#include <cstdio>

namespace opt4store {

namespace {

inline int Log2Floor(uint64_t v) { return 63 - __builtin_clzll(v); }

}  // namespace

ArenaAllocator::ArenaAllocator(uint64_t capacity_units) : capacity_(capacity_units) {
  assert(capacity_units >= 1 && capacity_units <= kMaxCapacityUnits);
  for (auto& row : heads_) {
    for (uint32_t& h : row) h = kNil;
  }
  blocks_.reserve(1024);
  const uint32_t b = NewBlock();  // == 0
  blocks_[b].offset = 0;
  blocks_[b].size = capacity_units;
  InsertFree(b);
}

// Sizes below 32 units map one class per size (fl 0). Above, fl counts the
// powers of two and sl the 1/32 steps inside one.
void ArenaAllocator::Mapping(uint64_t size, int* fl, int* sl) {
  if (size < static_cast<uint64_t>(kSlCount)) {
    *fl = 0;
    *sl = static_cast<int>(size);
    return;
  }
  const int h = Log2Floor(size);
  *fl = h - kSlLog2 + 1;
  *sl = static_cast<int>((size >> (h - kSlLog2)) - kSlCount);
}

uint32_t ArenaAllocator::FindSuitable(int fl, int sl) const {
  uint32_t sl_bits = sl_bitmap_[fl] & (~0u << sl);
  if (sl_bits == 0) {
    const uint32_t fl_bits = fl + 1 < 32 ? fl_bitmap_ & (~0u << (fl + 1)) : 0;
    if (fl_bits == 0) return kNil;
    fl = __builtin_ctz(fl_bits);
    sl_bits = sl_bitmap_[fl];
  }
  return heads_[fl][__builtin_ctz(sl_bits)];
}

void ArenaAllocator::InsertFree(uint32_t b) {
  Block& blk = blocks_[b];
  int fl, sl;
  Mapping(blk.size, &fl, &sl);
  blk.state = BlockState::kFree;
  blk.prev_free = kNil;
  blk.next_free = heads_[fl][sl];
  if (blk.next_free != kNil) blocks_[blk.next_free].prev_free = b;
  heads_[fl][sl] = b;
  sl_bitmap_[fl] |= 1u << sl;
  fl_bitmap_ |= 1u << fl;
  ++free_blocks_;
}

void ArenaAllocator::RemoveFree(uint32_t b) {
  Block& blk = blocks_[b];
  int fl, sl;
  Mapping(blk.size, &fl, &sl);
  if (blk.prev_free != kNil) {
    blocks_[blk.prev_free].next_free = blk.next_free;
  } else {
    heads_[fl][sl] = blk.next_free;
  }
  if (blk.next_free != kNil) blocks_[blk.next_free].prev_free = blk.prev_free;
  blk.prev_free = blk.next_free = kNil;
  if (heads_[fl][sl] == kNil) {
    sl_bitmap_[fl] &= ~(1u << sl);
    if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(1u << fl);
  }
  --free_blocks_;
}

uint32_t ArenaAllocator::NewBlock() {
  uint32_t b;
  if (!spare_.empty()) {
    b = spare_.back();
    spare_.pop_back();
    blocks_[b] = Block();
  } else {
    b = static_cast<uint32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  return b;
}

void ArenaAllocator::ReleaseBlock(uint32_t b) {
  blocks_[b].state = BlockState::kSpare;
  spare_.push_back(b);
}

bool ArenaAllocator::Allocate(uint64_t units, uint64_t* offset, Handle* handle) {
  if (units == 0 || units > capacity_ - used_units_) return false;
  uint32_t b = kNil;
  int fl, sl;
  // Good fit: round up to the next class bound, so any block found fits.
  uint64_t rounded = units;
  if (units >= static_cast<uint64_t>(kSlCount)) {
    rounded += (uint64_t{1} << (Log2Floor(units) - kSlLog2)) - 1;
  }
  Mapping(rounded, &fl, &sl);
  if (fl < kFlCount) b = FindSuitable(fl, sl);
  if (b == kNil) {
    // Only the request's own class was skipped by the rounding; look in it.
    Mapping(units, &fl, &sl);
    for (uint32_t c = heads_[fl][sl]; c != kNil; c = blocks_[c].next_free) {
      if (blocks_[c].size >= units) {
        b = c;
        break;
      }
    }
    if (b == kNil) return false;
  }
  RemoveFree(b);
  if (blocks_[b].size > units) {
    const uint32_t r = NewBlock();  // may move blocks_; index again below
    Block& blk = blocks_[b];
    Block& rest = blocks_[r];
    rest.offset = blk.offset + units;
    rest.size = blk.size - units;
    rest.prev_phys = b;
    rest.next_phys = blk.next_phys;
    if (rest.next_phys != kNil) blocks_[rest.next_phys].prev_phys = r;
    if (rest.next_phys == kNil) last_ = r;
    blk.next_phys = r;
    blk.size = units;
    InsertFree(r);
  }
  blocks_[b].state = BlockState::kUsed;
  used_units_ += blocks_[b].size;
  ++used_blocks_;
  *offset = blocks_[b].offset;
  *handle = b;
  return true;
}

bool ArenaAllocator::Free(Handle handle) {
  if (handle >= blocks_.size() || blocks_[handle].state != BlockState::kUsed) return false;
  uint32_t b = handle;
  used_units_ -= blocks_[b].size;
  --used_blocks_;
  const uint32_t prev = blocks_[b].prev_phys;
  if (prev != kNil && blocks_[prev].state == BlockState::kFree) {
    RemoveFree(prev);
    blocks_[prev].size += blocks_[b].size;
    blocks_[prev].next_phys = blocks_[b].next_phys;
    if (blocks_[b].next_phys != kNil) blocks_[blocks_[b].next_phys].prev_phys = prev;
    ReleaseBlock(b);
    b = prev;
  }
  const uint32_t next = blocks_[b].next_phys;
  if (next != kNil && blocks_[next].state == BlockState::kFree) {
    RemoveFree(next);
    blocks_[b].size += blocks_[next].size;
    blocks_[b].next_phys = blocks_[next].next_phys;
    if (blocks_[next].next_phys != kNil) blocks_[blocks_[next].next_phys].prev_phys = b;
    ReleaseBlock(next);
  }
  if (blocks_[b].next_phys == kNil) last_ = b;  // the merges may have taken the last
  InsertFree(b);
  return true;
}

void ArenaAllocator::Grow(uint64_t capacity_units) {
  assert(capacity_units > capacity_ && capacity_units <= kMaxCapacityUnits);
  const uint64_t added = capacity_units - capacity_;
  capacity_ = capacity_units;
  if (blocks_[last_].state == BlockState::kFree) {
    RemoveFree(last_);
    blocks_[last_].size += added;
    InsertFree(last_);
    return;
  }
  const uint32_t b = NewBlock();  // may move blocks_
  blocks_[b].offset = capacity_ - added;
  blocks_[b].size = added;
  blocks_[b].prev_phys = last_;
  blocks_[last_].next_phys = b;
  last_ = b;
  InsertFree(b);
}

uint64_t ArenaAllocator::MemoryUsage() const {
  return blocks_.capacity() * sizeof(Block) + spare_.capacity() * sizeof(uint32_t) + sizeof(*this);
}

uint64_t ArenaAllocator::LargestFreeBlock() const {
  if (fl_bitmap_ == 0) return 0;
  const int fl = 31 - __builtin_clz(fl_bitmap_);
  const int sl = 31 - __builtin_clz(sl_bitmap_[fl]);
  uint64_t best = 0;
  for (uint32_t c = heads_[fl][sl]; c != kNil; c = blocks_[c].next_free) {
    if (blocks_[c].size > best) best = blocks_[c].size;
  }
  return best;
}

std::string ArenaAllocator::CheckInvariants() const {
  char buf[256];
  uint64_t expect_offset = 0, used = 0, used_blocks = 0, free_blocks = 0;
  uint32_t prev = kNil;
  bool prev_free = false;
  size_t steps = 0;
  for (uint32_t b = 0; b != kNil; b = blocks_[b].next_phys) {
    if (b >= blocks_.size() || ++steps > blocks_.size()) return "physical chain broken or cyclic";
    const Block& blk = blocks_[b];
    if (blk.state == BlockState::kSpare) return "spare descriptor in the physical chain";
    if (blk.offset != expect_offset) {
      std::snprintf(buf, sizeof buf, "block %u at offset %llu, expected %llu", b,
                    static_cast<unsigned long long>(blk.offset),
                    static_cast<unsigned long long>(expect_offset));
      return buf;
    }
    if (blk.size == 0) return "empty block";
    if (blk.prev_phys != prev) return "prev_phys does not mirror next_phys";
    const bool is_free = blk.state == BlockState::kFree;
    if (is_free && prev_free) return "two adjacent free blocks (missed coalescing)";
    if (is_free) {
      ++free_blocks;
      int fl, sl;
      Mapping(blk.size, &fl, &sl);
      bool found = false;
      for (uint32_t c = heads_[fl][sl]; c != kNil; c = blocks_[c].next_free) {
        if (c == b) {
          found = true;
          break;
        }
      }
      if (!found) return "free block missing from the list of its class";
    } else {
      used += blk.size;
      ++used_blocks;
    }
    prev_free = is_free;
    prev = b;
    expect_offset += blk.size;
  }
  if (expect_offset != capacity_) return "blocks do not cover the arena";
  if (prev != last_) return "last_ is not the chain's last block";
  if (used != used_units_) return "used_units_ does not match the blocks";
  if (used_blocks != used_blocks_) return "used_blocks_ does not match the blocks";
  if (free_blocks != free_blocks_) return "free_blocks_ does not match the blocks";
  uint64_t listed = 0;
  for (int fl = 0; fl < kFlCount; ++fl) {
    if (((fl_bitmap_ >> fl) & 1) != (sl_bitmap_[fl] != 0 ? 1u : 0u)) return "fl bitmap mismatch";
    for (int sl = 0; sl < kSlCount; ++sl) {
      if (((sl_bitmap_[fl] >> sl) & 1) != (heads_[fl][sl] != kNil ? 1u : 0u)) {
        return "sl bitmap mismatch";
      }
      uint32_t p = kNil;
      for (uint32_t c = heads_[fl][sl]; c != kNil; c = blocks_[c].next_free) {
        if (++listed > blocks_.size()) return "free list cyclic";
        if (blocks_[c].state != BlockState::kFree) return "used block in a free list";
        if (blocks_[c].prev_free != p) return "prev_free does not mirror next_free";
        int f, s;
        Mapping(blocks_[c].size, &f, &s);
        if (f != fl || s != sl) return "free block in the wrong class";
        p = c;
      }
    }
  }
  if (listed != free_blocks_) return "free lists hold a different number of blocks";
  return "";
}

}  // namespace opt4store

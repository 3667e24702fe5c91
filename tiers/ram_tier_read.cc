// The RAM tier's readers' side (ram_tier.h; the protocol at the top of
// ram_tier.cc): Peek, the seqlock CopyOut and Read, Wait on an item's state
// word, and Stats. Any process that attached the segment runs these.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tiers/ram_tier.h"
#include "tiers/ram_tier_layout.h"

namespace opt4store {

using namespace ram_tier_internal;  // the state word and the layout's constants

// ---------------------------------------------------------------- readers

bool RamTier::Contains(ItemId id) const {
  return id < num_items_ && StateOf(table_[id].word.load(std::memory_order_acquire)) == kResident;
}

void RamTier::PrefetchEntry(ItemId id) const {
  if (id < num_items_) __builtin_prefetch(&table_[id], 0, 3);
}

void RamTier::PrefetchData(ItemId id) const {
  if (id >= num_items_) return;
  const Entry& e = table_[id];
  const uint64_t w = e.word.load(std::memory_order_relaxed);
  if (StateOf(w) != kResident) return;
  const uint64_t offset = OffsetUnitsOf(w) << unit_shift_;
  const uint64_t sizes = e.sizes.load(std::memory_order_relaxed);
  // The head of the block; the hardware prefetcher follows a long copy.
  // A stale word only warms the wrong lines.
  const uint64_t bytes = std::min<uint64_t>(MetaOf(sizes) + PayloadOf(sizes), 256);
  if (offset >= arena_bytes_ || bytes > arena_bytes_ - offset) return;
  for (uint64_t i = 0; i < bytes; i += 64) __builtin_prefetch(arena_ + offset + i, 0, 3);
}

uint64_t RamTier::Version(ItemId id) const {
  return id < num_items_ ? Clean(table_[id].word.load(std::memory_order_acquire)) : 0;
}

Status RamTier::Peek(ItemId id, ItemInfo* info) {
  if (id >= num_items_) {
    return Status::OutOfRange("RamTier::Peek: id " + std::to_string(id) + " >= num_items " +
                              std::to_string(num_items_));
  }
  const Entry& e = table_[id];
  info->id = id;
  for (int attempt = 0; attempt < kMaxReadAttempts; ++attempt) {
    const uint64_t v = Clean(e.word.load(std::memory_order_acquire));
    info->version = v;
    if (StateOf(v) != kResident) {
      Slot()->misses.fetch_add(1, std::memory_order_relaxed);
      return Status::NotFound("not resident");
    }
    const uint64_t sizes = e.sizes.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (Clean(e.word.load(std::memory_order_relaxed)) == v) {
      info->meta_size = MetaOf(sizes);
      info->payload_size = PayloadOf(sizes);
      return Status::OK();
    }
    Slot()->retries.fetch_add(1, std::memory_order_relaxed);
  }
  return Status::Busy("RamTier::Peek: item " + std::to_string(id) + " keeps changing");
}

Status RamTier::CopyOut(const ItemInfo& info, void* meta_dst, void* payload_dst,
                        const ReadSink* pieces_of) {
  if (info.id >= num_items_ || StateOf(info.version) != kResident) {
    return Status::InvalidArgument("RamTier::CopyOut: info is not from a successful Peek");
  }
  const uint64_t offset = OffsetUnitsOf(info.version) << unit_shift_;
  const uint64_t total = info.meta_size + info.payload_size;
  // Holds for any version the owner wrote; guards against a corrupt segment.
  if (offset > arena_bytes_ || total > arena_bytes_ - offset) {
    return Status::Corruption("RamTier::CopyOut: item " + std::to_string(info.id) +
                              " lies outside the arena");
  }
  const char* src = arena_ + offset;
  // The seqlock data race (see the top of this file): these bytes may be
  // changing; they are returned only if the version still matches below.
  if (payload_dst == nullptr && pieces_of != nullptr) {
    CopyPayload(*pieces_of, nullptr, src, info.payload_size);
  } else if (info.payload_size > 0) {
    std::memcpy(payload_dst, src, info.payload_size);
  }
  if (copy_hook_ != nullptr) copy_hook_(copy_hook_arg_, info);
  if (info.meta_size > 0) std::memcpy(meta_dst, src + info.payload_size, info.meta_size);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t now = Clean(table_[info.id].word.load(std::memory_order_relaxed));
  StatsSlot* slot = Slot();
  if (now == info.version) {
    slot->hits.fetch_add(1, std::memory_order_relaxed);
    slot->bytes_copied.fetch_add(total, std::memory_order_relaxed);
    return Status::OK();
  }
  slot->retries.fetch_add(1, std::memory_order_relaxed);
  if (StateOf(now) == kResident) {
    return Status::Busy("RamTier::CopyOut: item " + std::to_string(info.id) +
                        " was replaced during the copy");
  }
  slot->misses.fetch_add(1, std::memory_order_relaxed);
  return Status::NotFound("evicted during the copy");
}

Status RamTier::Read(ItemId id, ReadSink* sink) {
  for (int attempt = 0; attempt < kMaxReadAttempts; ++attempt) {
    ItemInfo info;
    OPT4STORE_RETURN_IF_ERROR(Peek(id, &info));
    void* meta_dst = nullptr;
    void* payload_dst = nullptr;
    OPT4STORE_RETURN_IF_ERROR(
        sink->Prepare(info.meta_size, info.payload_size, &meta_dst, &payload_dst));
    Status s = CopyOut(info, meta_dst, payload_dst, sink);
    if (!s.IsBusy()) return s;
  }
  return Status::Busy("RamTier::Read: item " + std::to_string(id) + " keeps changing");
}

Status RamTier::Wait(ItemId id, uint64_t observed, int64_t timeout_ms,
                     const shm::ProcessIdentity* putter) {
  if (id >= num_items_) {
    return Status::OutOfRange("RamTier::Wait: id " + std::to_string(id) + " >= num_items " +
                              std::to_string(num_items_));
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  Entry& e = table_[id];
  observed = Clean(observed);
  bool counted = false;
  for (;;) {
    uint64_t w = e.word.load(std::memory_order_acquire);
    const uint64_t v = Clean(w);
    if (v != observed) {
      if (StateOf(v) == kResident) return Status::OK();
      if (StateOf(v) == kAbsent) return Status::NotFound("RamTier::Wait: item not made resident");
      observed = v;  // filling: the answer is on its way
      continue;
    }
    // Resident at the version observed: it came before the caller read
    // that version, and nothing the caller waits for would change it.
    if (StateOf(v) == kResident) return Status::OK();
    if (header_->owner_closed.load(std::memory_order_acquire) != 0 ||
        !ProcessAlive(owner_.pid, owner_.start_ticks)) {
      return Status::IOError("RamTier::Wait: the owner process is gone");
    }
    if (putter != nullptr && !ProcessAlive(putter->pid, putter->start_ticks)) {
      return Status::IOError("RamTier::Wait: the process that was to put it is gone");
    }
    int64_t slice = putter != nullptr ? kPutterCheckNs : kWaitSliceNs;
    if (timeout_ms >= 0) {
      const int64_t left =
          std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Status::Busy("RamTier::Wait: timed out");
      if (left < slice) slice = left;
    }
    // Tell the owner to wake us: it sees the bit in the word it replaces.
    if (!(w & kWaitersBit)) {
      if (!e.word.compare_exchange_weak(w, w | kWaitersBit, std::memory_order_relaxed)) continue;
      w |= kWaitersBit;
    }
    if (!counted) {
      Slot()->waits.fetch_add(1, std::memory_order_relaxed);
      counted = true;
    }
    FutexWait(&e.word, static_cast<uint32_t>(w), slice);
  }
}

Status RamTier::MapAllPages() {
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14; older headers lack it
#endif
  char* begin = reinterpret_cast<char*>(table_);
  // table_ is page-aligned; the arena follows it and ends the segment.
  const uint64_t bytes = static_cast<uint64_t>(arena_ + arena_bytes_ - begin);
  if (madvise(begin, bytes, MADV_POPULATE_READ) != 0) {
    const int e = errno;
    if (e == EINVAL) return Status::NotSupported("RamTier::MapAllPages: needs Linux 5.14");
    return Status::FromErrno("RamTier::MapAllPages: madvise", e);
  }
  return Status::OK();
}

// ---------------------------------------------------------------- stats

RamTierStats RamTier::Stats() {
  RamTierStats s;
  for (uint32_t i = 0; i < kNumSlots; ++i) {
    const StatsSlot& slot = slots_[i];
    if (slot.owner.load(std::memory_order_relaxed) != 0) ++s.processes;
    s.hits += slot.hits.load(std::memory_order_relaxed);
    s.misses += slot.misses.load(std::memory_order_relaxed);
    s.bytes_copied += slot.bytes_copied.load(std::memory_order_relaxed);
    s.retries += slot.retries.load(std::memory_order_relaxed);
    s.waits += slot.waits.load(std::memory_order_relaxed);
    s.inserts += slot.inserts.load(std::memory_order_relaxed);
    s.evictions += slot.evictions.load(std::memory_order_relaxed);
  }
  Header& h = *header_;
  if (IsOwner()) {
    // The arena not reserved yet continues the allocator's free tail.
    const uint64_t tail = (allocator_->FreeTailUnits() << unit_shift_) +
                          (arena_bytes_ - reserved_bytes_);
    h.largest_free_block.store(std::max(allocator_->LargestFreeBlock() << unit_shift_, tail),
                               std::memory_order_relaxed);
    s.allocator_bytes = allocator_->MemoryUsage();
  }
  // The owner holds its handle table whichever process asks.
  s.owner_bytes_per_item = sizeof(ArenaAllocator::Handle);
  s.items_resident = h.items_resident.load(std::memory_order_relaxed);
  s.bytes_used = h.bytes_used.load(std::memory_order_relaxed);
  s.bytes_stored = h.bytes_stored.load(std::memory_order_relaxed);
  s.free_blocks = h.free_blocks.load(std::memory_order_relaxed);
  s.largest_free_block = h.largest_free_block.load(std::memory_order_relaxed);
  s.bytes_used_peak = h.bytes_used_peak.load(std::memory_order_relaxed);
  s.capacity_bytes = arena_bytes_;
  const uint64_t free_bytes = arena_bytes_ - s.bytes_used;
  s.fragmentation = free_bytes == 0 ? 0.0
                                    : 1.0 - static_cast<double>(s.largest_free_block) /
                                                static_cast<double>(free_bytes);
  if (s.fragmentation < 0) s.fragmentation = 0;
  s.unit_bytes = uint64_t{1} << unit_shift_;
  s.table_bytes_per_item = sizeof(Entry);
  s.segment_bytes = segment_->mapped_bytes();
  return s;
}

}  // namespace opt4store

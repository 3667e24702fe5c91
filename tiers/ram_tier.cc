// Invariants and the process-safety argument.
//
// Segment layout (offsets from SharedSegment::data(), all page-aligned):
//   [0, 4 KiB)      Header: geometry, owner identity, owner gauges on their
//                   own cache lines.
//   slots           kNumSlots StatsSlot of 128 bytes (two cache lines, so the
//                   adjacent-line prefetcher does not couple two processes).
//                   Slot 0 is shared overflow; slots 1.. are claimed per process.
//   table           num_items Entry of 16 bytes. All-zero bytes are a valid
//                   absent entry, so a fresh (zero-filled) table needs no pass.
//   arena           capacity bytes of item data: payload, then meta, of each
//                   resident item in one block of whole units (64 B or more).
//
// Entry.word (64 bits):  [63..32] arena offset in units
//                        [31..3]  generation (29 bits, wraps)
//                        [2]      waiters: a reader sleeps in Wait()
//                        [1..0]   state: absent 0, resident 1, filling 2
// Entry.sizes (64 bits): [63..40] meta size, [39..0] payload size.
// The low half of word is the futex word of Wait(): every owner transition
// bumps the generation, so it changes the low half.
//
// I1. Only the owner process writes word (except the waiters bit, which
//     readers set by CAS), sizes, and the arena. It writes them under its
//     own mutex, one call at a time.
// I2. Every owner transition of an entry replaces word with a new
//     generation (exchange). sizes and the block's bytes change only while
//     the entry is not resident, i.e. after the word that readers may have
//     seen as resident has been replaced.
// I3. A block is returned to the allocator only after its entry left the
//     resident (or filling) state, and BeginInsert issues a release fence
//     before it writes sizes or arena bytes. So the word change that ended
//     the old item's life is ordered before any byte that reuses its space.
// I4. A version (word value with the waiters bit cleared) that a reader saw
//     as resident identifies exactly one (offset, sizes, bytes). A reader
//     returns bytes only if word still equals that version after its copy.
//
// Why a reader never returns bytes an eviction overwrote (the seqlock
// argument, as in Boehm, "Can seqlocks get along with programming language
// memory models?", MSPC 2012):
//   reader:  v = word.load(acquire)            (resident, offset, gen g)
//            copy bytes at offset              (plain memcpy)
//            atomic_thread_fence(acquire)
//            w = word.load(relaxed); hit iff w == v
//   owner:   word.exchange(absent, g+1)       (Evict: X)
//            ... atomic_thread_fence(release)  (BeginInsert of another item: F)
//            write sizes and bytes into the freed space (Y)
// If the reader's copy read any byte written by Y, then F (before Y)
// synchronizes with the reader's acquire fence (after the copy), so X
// happens before the reader's second load, which must then read X or a
// later value: w != v and the copy is discarded. If the copy read no byte of
// Y, it read only bytes of version v. The acquire on the first load makes
// the bytes of v (written before CommitInsert's release exchange) visible.
// Generations wrap after 2^29 transitions of one id; a reader would have to
// sleep through that many between its two loads, at the same offset, to be
// fooled.
//
// The memcpy of bytes that the owner may be overwriting at the same moment
// is the standard seqlock data race: formally undefined in C++ (the bytes
// are not atomics), relied on by every seqlock (Linux, folly, the JDK's
// StampedLock). It is benign here because torn bytes are never used: they
// are discarded by the check above, the fences keep the compiler from moving
// the copy across the loads, and on x86-64 (TSO) loads are not reordered with
// loads nor stores with stores. If another owner thread (not the one that
// called BeginInsert) writes the bytes, it must receive the pointers through
// a release/acquire hand-off, as any thread hand-off requires.
//
// No reader holds anything: no lock, no pin, no refcount. A reader killed
// at any point leaves the shared state as it found it, except possibly the
// waiters bit, which costs the owner one spurious futex wake.
#include "tiers/ram_tier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>

#include "engine/base/atomic_max.h"
#include "opt4store/ram_units.h"
#include "opt4store/sizes.h"
#include "tiers/ram_tier_layout.h"

namespace opt4store {

using namespace ram_tier_internal;  // the state word and the layout's constants

// ---------------------------------------------------------------- setup

RamTier::RamTier(std::unique_ptr<SharedSegment> segment) : segment_(std::move(segment)) {
  static_assert(sizeof(Entry) == 16, "16 bytes of shared state per item");
  static_assert(sizeof(StatsSlot) == 128, "one slot, two cache lines");
  static_assert(sizeof(Header) <= kPage, "the header fits its page");
}

RamTier::~RamTier() {
  if (IsOwner() && header_ != nullptr) {
    header_->owner_closed.store(1, std::memory_order_release);
  }
}

Status RamTier::Create(const RamTierOptions& options, std::unique_ptr<RamTier>* out) {
  if (options.capacity_bytes == 0) {
    return Status::InvalidArgument("RamTier: capacity_bytes must be > 0");
  }
  if (options.num_items == 0 || options.num_items > kMaxDatasetSize) {
    return Status::InvalidArgument("RamTier: num_items must be in [1, 2^32 - 1], got " +
                                   std::to_string(options.num_items));
  }
  SharedSegmentOptions so;
  so.prefix = options.name_prefix;
  so.what = "RAM tier";
  so.remedy = "lower ram=";
  so.reserve = options.reserve_memory;
  so.free_space = options.free_space_for_testing;
  if (options.capacity_bytes > SharedSegment::kMaxSegmentBytes) {
    // The layout below would overflow: let Create refuse the size, naming
    // the free space.
    std::unique_ptr<SharedSegment> refused;
    Status s = SharedSegment::Create(so, options.capacity_bytes, &refused);
    return s.ok() ? Status::NoSpace("RamTier: capacity_bytes is too large") : s;
  }
  // The offset field holds 32 bits of units: the unit grows for arenas over
  // 256 GiB rather than limit the arena (opt4store/ram_units.h).
  static_assert(kRamMaxUnits == ArenaAllocator::kMaxCapacityUnits &&
                    RamUnitBytes(1) == uint64_t{1} << kMinUnitShift,
                "the RAM tier's units are those ram_units.h names");
  const uint64_t unit = RamUnitBytes(options.capacity_bytes);
  const uint32_t shift = static_cast<uint32_t>(__builtin_ctzll(unit));
  const uint64_t arena_bytes = RoundUp(options.capacity_bytes, unit);
  const uint64_t slots_offset = kPage;
  const uint64_t table_offset = RoundUp(slots_offset + kNumSlots * sizeof(StatsSlot), kPage);
  const uint64_t arena_offset = RoundUp(table_offset + options.num_items * sizeof(Entry), kPage);
  const uint64_t data_bytes = arena_offset + arena_bytes;
  const uint64_t step = std::max(unit, RoundUp(std::max<uint64_t>(options.reserve_step_bytes, 1),
                                               std::max(unit, kPage)));
  const uint64_t first_step = std::min(
      {arena_bytes, step, RoundUp(std::max<uint64_t>(options.first_step_bytes, 1),
                                  std::max(unit, kPage))});
  so.reserve_data_bytes = arena_offset + first_step;

  std::unique_ptr<SharedSegment> segment;
  OPT4STORE_RETURN_IF_ERROR(SharedSegment::Create(so, data_bytes, &segment));

  char* d = segment->data();
  auto* h = new (d) Header();
  h->version = kRamVersion;
  h->unit_shift = shift;
  h->num_items = options.num_items;
  h->arena_bytes = arena_bytes;
  h->slots_offset = slots_offset;
  h->table_offset = table_offset;
  h->arena_offset = arena_offset;
  h->num_slots = kNumSlots;
  h->entry_bytes = sizeof(Entry);
  const ProcessIdentity me = CurrentProcess();
  h->owner_pid = me.pid;
  h->owner_start_ticks = me.start_ticks;
  for (uint32_t i = 0; i < kNumSlots; ++i) {
    new (d + slots_offset + i * sizeof(StatsSlot)) StatsSlot();
  }
  // The table stays as the zero pages the segment came with (all absent).
  h->magic.store(kRamMagic, std::memory_order_release);

  std::unique_ptr<RamTier> tier(new RamTier(std::move(segment)));
  tier->reserved_bytes_ = options.reserve_memory ? first_step : arena_bytes;
  tier->prepared_bytes_.store(tier->reserved_bytes_, std::memory_order_relaxed);
  tier->reserve_step_bytes_ = step;
  OPT4STORE_RETURN_IF_ERROR(tier->InitLayout(/*create=*/true));
  *out = std::move(tier);
  return Status::OK();
}

bool RamTier::ReserveStep() {
  if (reserved_bytes_ >= arena_bytes_ || !reserve_error_.empty()) return false;
  uint64_t next = prepared_bytes_.load(std::memory_order_acquire);
  if (next <= reserved_bytes_) {  // not reserved ahead: reserve it here
    next = std::min(arena_bytes_, reserved_bytes_ + reserve_step_bytes_);
    const Status s = segment_->Reserve(arena_offset_ + reserved_bytes_, next - reserved_bytes_);
    if (!s.ok()) {
      reserve_error_ = "the RAM tier holds " + FormatSize(reserved_bytes_) + " of its " +
                       FormatSize(arena_bytes_) + ": " + s.message();
      return false;
    }
    ++steps_inline_;
    RaiseTo(&prepared_bytes_, next, std::memory_order_release);
  }
  allocator_->Grow(next >> unit_shift_);
  reserved_bytes_ = next;
  return true;
}

RamTier::ArenaRange RamTier::StepToReserveAhead() const {
  if (reserved_bytes_ >= arena_bytes_ || !reserve_error_.empty() ||
      ahead_failed_.load(std::memory_order_relaxed) ||
      prepared_bytes_.load(std::memory_order_acquire) > reserved_bytes_ ||
      (allocator_->free_units() << unit_shift_) >= reserve_step_bytes_ / 2) {
    return {};
  }
  return {reserved_bytes_, std::min(arena_bytes_, reserved_bytes_ + reserve_step_bytes_)};
}

void RamTier::ReserveAhead(const ArenaRange& range) {
  // An insert may reserve the same range meanwhile (ReserveStep): the pages
  // are then reserved twice over, which costs nothing more.
  if (range.to <= range.from) return;
  if (!segment_->Reserve(arena_offset_ + range.from, range.to - range.from).ok()) {
    // /dev/shm is short: no more tries ahead (the planner would retry every
    // turn); the inserts reserve, and report, their own steps from here.
    ahead_failed_.store(true, std::memory_order_relaxed);
    return;
  }
  steps_ahead_.fetch_add(1, std::memory_order_relaxed);
  RaiseTo(&prepared_bytes_, range.to, std::memory_order_release);
}

Status RamTier::Attach(const std::string& name, std::unique_ptr<RamTier>* out) {
  std::unique_ptr<SharedSegment> segment;
  OPT4STORE_RETURN_IF_ERROR(SharedSegment::Attach(name, &segment));
  std::unique_ptr<RamTier> tier(new RamTier(std::move(segment)));
  OPT4STORE_RETURN_IF_ERROR(tier->InitLayout(/*create=*/false));
  *out = std::move(tier);
  return Status::OK();
}

Status RamTier::AttachReadOnly(const std::string& name, std::unique_ptr<RamTier>* out) {
  std::unique_ptr<SharedSegment> segment;
  OPT4STORE_RETURN_IF_ERROR(SharedSegment::AttachReadOnly(name, &segment));
  std::unique_ptr<RamTier> tier(new RamTier(std::move(segment)));
  OPT4STORE_RETURN_IF_ERROR(tier->InitLayout(/*create=*/false));
  *out = std::move(tier);
  return Status::OK();
}

Status RamTier::InitLayout(bool create) {
  char* d = segment_->data();
  header_ = reinterpret_cast<Header*>(d);
  const Header& h = *header_;
  if (h.magic.load(std::memory_order_acquire) != kRamMagic || h.version != kRamVersion) {
    return Status::Corruption(segment_->name() +
                              ": not an opt4store RAM tier (or another version)");
  }
  const uint64_t avail = segment_->data_bytes();
  if (h.num_slots != kNumSlots || h.entry_bytes != sizeof(Entry) || h.unit_shift < kMinUnitShift ||
      h.unit_shift > 40 || h.arena_offset > avail || h.arena_bytes > avail - h.arena_offset ||
      h.table_offset + h.num_items * sizeof(Entry) > h.arena_offset ||
      h.slots_offset + kNumSlots * sizeof(StatsSlot) > h.table_offset) {
    return Status::Corruption(segment_->name() + ": RAM tier header does not fit its segment");
  }
  num_items_ = h.num_items;
  arena_bytes_ = h.arena_bytes;
  unit_shift_ = h.unit_shift;
  slots_ = reinterpret_cast<StatsSlot*>(d + h.slots_offset);
  table_ = reinterpret_cast<Entry*>(d + h.table_offset);
  arena_ = d + h.arena_offset;
  arena_offset_ = h.arena_offset;
  owner_.pid = h.owner_pid;
  owner_.start_ticks = h.owner_start_ticks;
  if (create) {
    owner_local_pid_ = CurrentProcess().pid;
    allocator_ = std::make_unique<ArenaAllocator>(reserved_bytes_ >> unit_shift_);
    handles_.assign(num_items_, ArenaAllocator::kNoHandle);
    PublishGauges();
    header_->largest_free_block.store(arena_bytes_, std::memory_order_relaxed);
  }
  return Status::OK();
}

const std::string& RamTier::name() const { return segment_->name(); }

bool RamTier::IsOwner() const {
  return owner_local_pid_ != 0 && CurrentProcess().pid == owner_local_pid_;
}

Status RamTier::CheckOwner(ItemId id, const char* op) const {
  if (!IsOwner()) {
    return Status::InvalidArgument(std::string("RamTier::") + op +
                                   ": only the owner process writes the RAM tier "
                                   "(this handle is a reader, or was inherited by fork)");
  }
  if (id >= num_items_) {
    return Status::OutOfRange(std::string("RamTier::") + op + ": id " + std::to_string(id) +
                              " >= num_items " + std::to_string(num_items_));
  }
  return Status::OK();
}

// ---------------------------------------------------------------- stats slots

RamTier::StatsSlot* RamTier::Slot() {
  StatsSlot* s = slot_.load(std::memory_order_relaxed);
  if (s != nullptr && slot_fork_generation_.load(std::memory_order_relaxed) == ForkGeneration()) {
    return s;
  }
  return ClaimSlot();
}

// Idempotent: two threads racing here may claim two slots for one process,
// which only splits its counts over both (they are summed anyway).
RamTier::StatsSlot* RamTier::ClaimSlot() {
  const uint32_t generation = ForkGeneration();
  const uint64_t mine = PackProcess(CurrentProcess());
  StatsSlot* found = nullptr;
  for (uint32_t i = 1; i < kNumSlots && !found; ++i) {
    if (slots_[i].owner.load(std::memory_order_relaxed) == mine) found = &slots_[i];
  }
  for (uint32_t i = 1; i < kNumSlots && !found; ++i) {
    uint64_t expected = 0;
    if (slots_[i].owner.compare_exchange_strong(expected, mine, std::memory_order_relaxed)) {
      found = &slots_[i];
    }
  }
  // All taken: adopt a dead process's slot. Its counts stay, and ours add to
  // them, so the totals remain exact.
  for (uint32_t i = 1; i < kNumSlots && !found; ++i) {
    uint64_t other = slots_[i].owner.load(std::memory_order_relaxed);
    const ProcessIdentity p = UnpackProcess(other);
    if (!ProcessAlive(p.pid, p.start_ticks) &&
        slots_[i].owner.compare_exchange_strong(other, mine, std::memory_order_relaxed)) {
      found = &slots_[i];
    }
  }
  if (!found) found = &slots_[0];
  slot_fork_generation_.store(generation, std::memory_order_relaxed);
  slot_.store(found, std::memory_order_relaxed);
  return found;
}

// ---------------------------------------------------------------- owner

void RamTier::Publish(Entry* e, uint64_t word) {
  const uint64_t old = e->word.exchange(word, std::memory_order_acq_rel);
  if (old & kWaitersBit) FutexWake(&e->word, INT32_MAX);
}

void RamTier::PublishGauges() {
  Header& h = *header_;
  h.items_resident.store(items_resident_, std::memory_order_relaxed);
  const uint64_t used = allocator_->used_units() << unit_shift_;
  h.bytes_used.store(used, std::memory_order_relaxed);
  bytes_used_peak_ = std::max(bytes_used_peak_, used);
  h.bytes_used_peak.store(bytes_used_peak_, std::memory_order_relaxed);
  h.bytes_stored.store(bytes_stored_, std::memory_order_relaxed);
  h.free_blocks.store(allocator_->free_blocks(), std::memory_order_relaxed);
}

Status RamTier::BeginInsert(ItemId id, uint64_t meta_size, uint64_t payload_size,
                            PendingInsert* pending) {
  OPT4STORE_RETURN_IF_ERROR(CheckOwner(id, "BeginInsert"));
  if (meta_size > kMaxMetaSize || payload_size > kMaxPayloadSize) {
    return Status::InvalidArgument("RamTier::BeginInsert: item " + std::to_string(id) +
                                   " too large (meta " + std::to_string(meta_size) +
                                   " bytes, payload " + std::to_string(payload_size) + " bytes)");
  }
  Entry* e = &table_[id];
  const uint64_t w = e->word.load(std::memory_order_relaxed);
  if (StateOf(w) != kAbsent) {
    return Status::InvalidArgument(
        "RamTier::BeginInsert: item " + std::to_string(id) +
        (StateOf(w) == kResident ? " is already resident" : " has an insert in progress"));
  }
  const uint64_t total = meta_size + payload_size;
  const uint64_t units = total == 0 ? 1 : (total + (uint64_t{1} << unit_shift_) - 1) >> unit_shift_;
  uint64_t offset_units = 0;
  ArenaAllocator::Handle handle;
  bool allocated = allocator_->Allocate(units, &offset_units, &handle);
  while (!allocated && ReserveStep()) {
    allocated = allocator_->Allocate(units, &offset_units, &handle);
  }
  if (!allocated) {
    if (!reserve_error_.empty() && reserved_bytes_ < arena_bytes_) {
      return Status::NoSpace("RAM tier: item " + std::to_string(id) + " does not fit: " +
                             reserve_error_);
    }
    return Status::NoSpace("RAM tier full: item " + std::to_string(id) + " needs " +
                           FormatSize(units << unit_shift_) + ", " +
                           FormatSize(allocator_->free_units() << unit_shift_) + " free in " +
                           std::to_string(allocator_->free_blocks()) + " blocks");
  }
  handles_[id] = handle;
  PublishGauges();  // the peak counts items while they fill
  // I3: order every earlier state change (the eviction that freed this
  // space) before the sizes and bytes written from here on.
  std::atomic_thread_fence(std::memory_order_release);
  e->sizes.store(PackSizes(meta_size, payload_size), std::memory_order_relaxed);
  Publish(e, NextWord(w, kFilling, offset_units));
  char* block = arena_ + (offset_units << unit_shift_);
  pending->id = id;
  pending->payload = block;
  pending->meta = block + payload_size;
  pending->meta_size = meta_size;
  pending->payload_size = payload_size;
  return Status::OK();
}

Status RamTier::CommitInsert(const PendingInsert& pending) {
  OPT4STORE_RETURN_IF_ERROR(CheckOwner(pending.id, "CommitInsert"));
  Entry* e = &table_[pending.id];
  const uint64_t w = e->word.load(std::memory_order_relaxed);
  if (StateOf(w) != kFilling) {
    return Status::InvalidArgument("RamTier::CommitInsert: item " + std::to_string(pending.id) +
                                   " has no insert in progress");
  }
  // Release: the bytes are visible to whoever acquires this word.
  Publish(e, NextWord(w, kResident, OffsetUnitsOf(w)));
  ++items_resident_;
  bytes_stored_ += pending.meta_size + pending.payload_size;
  Slot()->inserts.fetch_add(1, std::memory_order_relaxed);
  PublishGauges();
  return Status::OK();
}

Status RamTier::AbortInsert(const PendingInsert& pending) {
  OPT4STORE_RETURN_IF_ERROR(CheckOwner(pending.id, "AbortInsert"));
  Entry* e = &table_[pending.id];
  const uint64_t w = e->word.load(std::memory_order_relaxed);
  if (StateOf(w) != kFilling) {
    return Status::InvalidArgument("RamTier::AbortInsert: item " + std::to_string(pending.id) +
                                   " has no insert in progress");
  }
  Publish(e, NextWord(w, kAbsent, 0));  // before the space can be reused (I3)
  const bool freed = allocator_->Free(handles_[pending.id]);
  assert(freed);
  (void)freed;
  handles_[pending.id] = ArenaAllocator::kNoHandle;
  PublishGauges();
  return Status::OK();
}

Status RamTier::Insert(ItemId id, const void* meta, uint64_t meta_size, const void* payload,
                       uint64_t payload_size) {
  PendingInsert p;
  OPT4STORE_RETURN_IF_ERROR(BeginInsert(id, meta_size, payload_size, &p));
  if (payload_size > 0) std::memcpy(p.payload, payload, payload_size);
  if (meta_size > 0) std::memcpy(p.meta, meta, meta_size);
  return CommitInsert(p);
}

Status RamTier::Evict(ItemId id) {
  OPT4STORE_RETURN_IF_ERROR(CheckOwner(id, "Evict"));
  Entry* e = &table_[id];
  const uint64_t w = e->word.load(std::memory_order_relaxed);
  if (StateOf(w) == kFilling) {
    return Status::InvalidArgument("RamTier::Evict: item " + std::to_string(id) +
                                   " has an insert in progress; use AbortInsert");
  }
  if (StateOf(w) != kResident) {
    return Status::NotFound("RamTier::Evict: item " + std::to_string(id) + " is not resident");
  }
  const uint64_t sizes = e->sizes.load(std::memory_order_relaxed);
  // I2/I3: readers must see the item gone before anyone can reuse its space.
  Publish(e, NextWord(w, kAbsent, 0));
  const bool freed = allocator_->Free(handles_[id]);
  assert(freed);
  (void)freed;
  handles_[id] = ArenaAllocator::kNoHandle;
  --items_resident_;
  bytes_stored_ -= MetaOf(sizes) + PayloadOf(sizes);
  Slot()->evictions.fetch_add(1, std::memory_order_relaxed);
  PublishGauges();
  return Status::OK();
}

Status RamTier::AnswerAbsent(ItemId id) {
  OPT4STORE_RETURN_IF_ERROR(CheckOwner(id, "AnswerAbsent"));
  Entry* e = &table_[id];
  const uint64_t w = e->word.load(std::memory_order_relaxed);
  if (StateOf(w) != kAbsent) {
    return Status::InvalidArgument("RamTier::AnswerAbsent: item " + std::to_string(id) +
                                   " is resident or being inserted");
  }
  Publish(e, NextWord(w, kAbsent, 0));
  return Status::OK();
}

}  // namespace opt4store

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

#include "opt4store/sizes.h"

namespace opt4store {

using shm::CurrentProcess;
using shm::ForkGeneration;
using shm::FutexWait;
using shm::FutexWake;
using shm::PackProcess;
using shm::ProcessAlive;
using shm::ProcessIdentity;
using shm::UnpackProcess;

namespace {

constexpr uint64_t kRamMagic = 0x31524D41'52345F4FULL;  // "O_4RAMR1"
constexpr uint32_t kRamVersion = 1;
constexpr uint32_t kNumSlots = 256;
constexpr uint64_t kPage = 4096;
constexpr uint32_t kMinUnitShift = 6;  // 64-byte units: cache-line aligned payloads

constexpr uint64_t kStateMask = 0x3;
constexpr uint64_t kWaitersBit = 0x4;
constexpr uint64_t kGenOne = 0x8;
constexpr uint64_t kGenMask = 0xFFFFFFF8ULL;
constexpr uint64_t kAbsent = 0;
constexpr uint64_t kResident = 1;
constexpr uint64_t kFilling = 2;

constexpr uint64_t kPayloadMask = (uint64_t{1} << 40) - 1;

// Wait() sleeps at most this long before it checks that the owner lives.
constexpr int64_t kWaitSliceNs = 200 * 1000 * 1000;

inline uint64_t StateOf(uint64_t word) { return word & kStateMask; }
inline uint64_t OffsetUnitsOf(uint64_t word) { return word >> 32; }
inline uint64_t Clean(uint64_t word) { return word & ~kWaitersBit; }
inline uint64_t NextWord(uint64_t old, uint64_t state, uint64_t offset_units) {
  return (offset_units << 32) | ((old + kGenOne) & kGenMask) | state;
}
inline uint64_t PackSizes(uint64_t meta, uint64_t payload) { return (meta << 40) | payload; }
inline uint64_t MetaOf(uint64_t sizes) { return sizes >> 40; }
inline uint64_t PayloadOf(uint64_t sizes) { return sizes & kPayloadMask; }
inline uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the futex word is the low half of the 64-bit state word");

}  // namespace

struct RamTier::Header {
  std::atomic<uint64_t> magic;  // kRamMagic, stored last
  uint32_t version;
  uint32_t unit_shift;
  uint64_t num_items;
  uint64_t arena_bytes;
  uint64_t slots_offset;
  uint64_t table_offset;
  uint64_t arena_offset;
  uint32_t num_slots;
  uint32_t entry_bytes;
  int32_t owner_pid;
  uint32_t reserved;
  uint64_t owner_start_ticks;
  std::atomic<uint32_t> owner_closed;  // set by the owner's destructor
  // Owner gauges: written by the owner alone, read by anyone (relaxed).
  alignas(128) std::atomic<uint64_t> items_resident;
  std::atomic<uint64_t> bytes_used;
  std::atomic<uint64_t> bytes_stored;
  std::atomic<uint64_t> free_blocks;
  std::atomic<uint64_t> largest_free_block;
};

struct RamTier::Entry {
  std::atomic<uint64_t> word;
  std::atomic<uint64_t> sizes;
};

struct alignas(128) RamTier::StatsSlot {
  std::atomic<uint64_t> owner;  // PackProcess of the claimer; 0: free
  std::atomic<uint64_t> hits;
  std::atomic<uint64_t> misses;
  std::atomic<uint64_t> bytes_copied;
  std::atomic<uint64_t> retries;
  std::atomic<uint64_t> waits;
  std::atomic<uint64_t> inserts;
  std::atomic<uint64_t> evictions;
};

// ---------------------------------------------------------------- sinks

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
  // The offset field holds 32 bits of units: grow the unit for arenas over
  // 256 GiB rather than limit the arena.
  uint32_t shift = kMinUnitShift;
  while (shift < 40 &&
         ((options.capacity_bytes - 1) >> shift) >= ArenaAllocator::kMaxCapacityUnits) {
    ++shift;
  }
  const uint64_t unit = uint64_t{1} << shift;
  const uint64_t arena_bytes = RoundUp(options.capacity_bytes, unit);
  const uint64_t slots_offset = kPage;
  const uint64_t table_offset = RoundUp(slots_offset + kNumSlots * sizeof(StatsSlot), kPage);
  const uint64_t arena_offset = RoundUp(table_offset + options.num_items * sizeof(Entry), kPage);
  const uint64_t data_bytes = arena_offset + arena_bytes;

  SharedSegmentOptions so;
  so.prefix = options.name_prefix;
  so.what = "RAM tier";
  so.remedy = "lower ram=";
  so.reserve = options.reserve_memory;
  so.free_space = options.free_space_for_testing;
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
  OPT4STORE_RETURN_IF_ERROR(tier->InitLayout(/*create=*/true));
  *out = std::move(tier);
  return Status::OK();
}

Status RamTier::Attach(const std::string& name, std::unique_ptr<RamTier>* out) {
  std::unique_ptr<SharedSegment> segment;
  OPT4STORE_RETURN_IF_ERROR(SharedSegment::Attach(name, &segment));
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
  owner_.pid = h.owner_pid;
  owner_.start_ticks = h.owner_start_ticks;
  if (create) {
    owner_local_pid_ = CurrentProcess().pid;
    allocator_ = std::make_unique<ArenaAllocator>(arena_bytes_ >> unit_shift_);
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
  h.bytes_used.store(allocator_->used_units() << unit_shift_, std::memory_order_relaxed);
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
  if (!allocator_->Allocate(units, &offset_units, &handle)) {
    return Status::NoSpace("RAM tier full: item " + std::to_string(id) + " needs " +
                           FormatSize(units << unit_shift_) + ", " +
                           FormatSize(allocator_->free_units() << unit_shift_) + " free in " +
                           std::to_string(allocator_->free_blocks()) + " blocks");
  }
  handles_[id] = handle;
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

Status RamTier::Wait(ItemId id, uint64_t observed, int64_t timeout_ms) {
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
    if (header_->owner_closed.load(std::memory_order_acquire) != 0 ||
        !ProcessAlive(owner_.pid, owner_.start_ticks)) {
      return Status::IOError("RamTier::Wait: the owner process is gone");
    }
    int64_t slice = kWaitSliceNs;
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
    h.largest_free_block.store(allocator_->LargestFreeBlock() << unit_shift_,
                               std::memory_order_relaxed);
    s.allocator_bytes = allocator_->MemoryUsage();
    s.owner_bytes_per_item = sizeof(ArenaAllocator::Handle);
  }
  s.items_resident = h.items_resident.load(std::memory_order_relaxed);
  s.bytes_used = h.bytes_used.load(std::memory_order_relaxed);
  s.bytes_stored = h.bytes_stored.load(std::memory_order_relaxed);
  s.free_blocks = h.free_blocks.load(std::memory_order_relaxed);
  s.largest_free_block = h.largest_free_block.load(std::memory_order_relaxed);
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

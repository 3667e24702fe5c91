#include "engine/store/control_block.h"

#include <cstring>
#include <new>

#include "engine/base/atomic_max.h"

namespace opt4store {
namespace {

constexpr uint64_t kMagic = 0x6f707434637472ull;  // "opt4ctr"
// 3: the disk tier's gauges; 4: sync_every, the last write error; 5: record
// places; 7: plan asks and missed bits; 8: the consumers ring; 9: rank
// readers; 10: the reading ring; 11: disk bypasses
constexpr uint32_t kVersion = 12;

uint64_t RingOffset() { return (sizeof(ControlBlock::Header) + 4095) & ~uint64_t{4095}; }
uint64_t ConsumersOffset() { return RingOffset() + ControlBlock::kRingSize * 8; }
uint64_t ReadingOffset() { return ConsumersOffset() + ControlBlock::kRingSize * 8; }
uint64_t BitsOffset() { return ReadingOffset() + ControlBlock::kRingSize * 8; }
uint64_t BitmapBytes(uint64_t dataset_size) { return ((dataset_size + 63) / 64) * 8; }
// The on-disk bits, the missed bits, the expected positions, the places.
uint64_t MissedOffset(uint64_t dataset_size) { return BitsOffset() + BitmapBytes(dataset_size); }
uint64_t ExpectedOffset(uint64_t dataset_size) {
  return MissedOffset(dataset_size) + BitmapBytes(dataset_size);
}
uint64_t PlacesOffset(uint64_t dataset_size) {
  return ExpectedOffset(dataset_size) + 8 * dataset_size;
}
uint64_t TotalBytes(uint64_t dataset_size) { return PlacesOffset(dataset_size) + 16 * dataset_size; }

}  // namespace

Status ControlBlock::Create(const std::string& prefix, uint64_t dataset_size,
                            int64_t fetch_timeout_ms, const std::string& ram_name,
                            const std::string& queue_name, const std::string& segments_dir,
                            std::unique_ptr<ControlBlock>* out) {
  if (ram_name.size() > kMaxNameBytes || queue_name.size() > kMaxNameBytes) {
    return Status::InvalidArgument("shared-memory names are too long");
  }
  SharedSegmentOptions so;
  so.prefix = prefix;
  so.what = "the store's control block";
  so.remedy = "free some shared memory";
  std::unique_ptr<ControlBlock> cb(new ControlBlock());
  OPT4STORE_RETURN_IF_ERROR(SharedSegment::Create(so, TotalBytes(dataset_size), &cb->segment_));
  Header* h = new (cb->segment_->data()) Header();
  h->magic = kMagic;
  h->version = kVersion;
  h->dataset_size = dataset_size;
  h->fetch_timeout_ms = fetch_timeout_ms;
  std::memcpy(h->ram_name, ram_name.c_str(), ram_name.size() + 1);
  std::memcpy(h->queue_name, queue_name.c_str(), queue_name.size() + 1);
  if (segments_dir.size() <= kMaxPathBytes) {
    std::memcpy(h->segments_dir, segments_dir.c_str(), segments_dir.size() + 1);
  }
  OPT4STORE_RETURN_IF_ERROR(cb->Layout(true));
  *out = std::move(cb);
  return Status::OK();
}

Status ControlBlock::Attach(const std::string& name, std::unique_ptr<ControlBlock>* out) {
  return AttachMapped(name, /*read_only=*/false, out);
}

Status ControlBlock::AttachReadOnly(const std::string& name, std::unique_ptr<ControlBlock>* out) {
  return AttachMapped(name, /*read_only=*/true, out);
}

Status ControlBlock::AttachMapped(const std::string& name, bool read_only,
                                  std::unique_ptr<ControlBlock>* out) {
  std::unique_ptr<ControlBlock> cb(new ControlBlock());
  OPT4STORE_RETURN_IF_ERROR(read_only ? SharedSegment::AttachReadOnly(name, &cb->segment_)
                                      : SharedSegment::Attach(name, &cb->segment_));
  if (cb->segment_->data_bytes() < sizeof(Header)) {
    return Status::Corruption("'" + name + "' is not an opt4store control block");
  }
  OPT4STORE_RETURN_IF_ERROR(cb->Layout(false));
  *out = std::move(cb);
  return Status::OK();
}

Status ControlBlock::Layout(bool create) {
  header_ = reinterpret_cast<Header*>(segment_->data());
  if (header_->magic != kMagic || header_->version != kVersion) {
    return Status::Corruption("'" + segment_->name() + "' is not an opt4store control block");
  }
  if (segment_->data_bytes() < TotalBytes(header_->dataset_size)) {
    return Status::Corruption("control block '" + segment_->name() + "' is truncated");
  }
  ring_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() + RingOffset());
  consumers_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() + ConsumersOffset());
  reading_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() + ReadingOffset());
  on_disk_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() + BitsOffset());
  missed_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() +
                                                     MissedOffset(header_->dataset_size));
  expected_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() +
                                                       ExpectedOffset(header_->dataset_size));
  places_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() +
                                                     PlacesOffset(header_->dataset_size));
  // The segment arrives zero-filled: every slot empty, no bit set.
  if (create) {
    for (uint64_t id = 0; id < header_->dataset_size; ++id) {
      expected_[id].store(kNoExpectation, std::memory_order_relaxed);
    }
  }
  return Status::OK();
}

int ControlBlock::JoinRankReaders(uint64_t process) {
  for (int slot = 0; slot < kMaxRankReaders; ++slot) {
    uint64_t held = header_->rank_readers[slot].load(std::memory_order_acquire);
    if (held != 0) {
      const shm::ProcessIdentity p = shm::UnpackProcess(held);
      if (shm::ProcessAlive(p.pid, p.start_ticks)) continue;
    }
    if (header_->rank_readers[slot].compare_exchange_strong(held, process,
                                                            std::memory_order_acq_rel)) {
      header_->rank_readers_joined.fetch_add(1, std::memory_order_acq_rel);
      return slot;
    }
  }
  return -1;
}

void ControlBlock::LeaveRankReaders(int slot, uint64_t process) {
  if (slot < 0 || slot >= kMaxRankReaders) return;
  header_->rank_readers[slot].compare_exchange_strong(process, 0, std::memory_order_acq_rel);
}

std::vector<shm::ProcessIdentity> ControlBlock::LiveRankReaders() const {
  std::vector<shm::ProcessIdentity> live;
  for (int slot = 0; slot < kMaxRankReaders; ++slot) {
    const uint64_t held = header_->rank_readers[slot].load(std::memory_order_acquire);
    if (held == 0) continue;
    const shm::ProcessIdentity p = shm::UnpackProcess(held);
    if (shm::ProcessAlive(p.pid, p.start_ticks)) live.push_back(p);
  }
  return live;
}

uint64_t ControlBlock::SlotTag(uint64_t position) const {
  // 12 bits of plan generation, 20 bits of lap: 2^36 positions per plan.
  const uint64_t gen = header_->plan_generation.load(std::memory_order_acquire) & 0xFFF;
  const uint64_t lap = ((position >> kRingBits) + 1) & 0xFFFFF;
  return (gen << 52) | (lap << 32);
}

void ControlBlock::MarkConsumed(uint64_t position, ItemId id) {
  RaiseTo(&header_->high_water, position + 1, std::memory_order_relaxed);
  const uint64_t frontier = header_->frontier.load(std::memory_order_acquire);
  if (position < frontier || position >= frontier + kRingSize) return;
  const uint64_t slot = position & (kRingSize - 1);
  // The reader first: one who sees the slot's tag sees it (or a later lap's).
  consumers_[slot].store(shm::PackProcess(shm::CurrentProcess()), std::memory_order_relaxed);
  ring_[slot].store(SlotTag(position) | id, std::memory_order_release);
}

void ControlBlock::MarkReading(uint64_t position) {
  const uint64_t frontier = header_->frontier.load(std::memory_order_acquire);
  if (position < frontier || position >= frontier + kRingSize) return;
  reading_[position & (kRingSize - 1)].store(SlotTag(position) | 1, std::memory_order_relaxed);
}

bool ControlBlock::Reading(uint64_t position) const {
  return reading_[position & (kRingSize - 1)].load(std::memory_order_relaxed) ==
         (SlotTag(position) | 1);
}

bool ControlBlock::Consumed(uint64_t position, ItemId* id) const {
  const uint64_t v = ring_[position & (kRingSize - 1)].load(std::memory_order_acquire);
  if ((v & ~uint64_t{0xFFFFFFFF}) != SlotTag(position)) return false;
  *id = static_cast<ItemId>(v & 0xFFFFFFFFull);
  return true;
}

bool ControlBlock::ConsumedBy(uint64_t position, ItemId* id,
                              shm::ProcessIdentity* reader) const {
  const uint64_t slot = position & (kRingSize - 1);
  const uint64_t v = ring_[slot].load(std::memory_order_acquire);
  if ((v & ~uint64_t{0xFFFFFFFF}) != SlotTag(position)) return false;
  const uint64_t packed = consumers_[slot].load(std::memory_order_acquire);
  // Written again meanwhile: the reader read may be another lap's. (A later
  // lap's reader caught between its two stores is not seen so; it is alive,
  // so a wait on it lasts as long as one without a reader would.)
  if (ring_[slot].load(std::memory_order_acquire) != v || packed == 0) return false;
  *id = static_cast<ItemId>(v & 0xFFFFFFFFull);
  *reader = shm::UnpackProcess(packed);
  return true;
}

void ControlBlock::SetOnDisk(ItemId id, bool on) {
  const uint64_t bit = uint64_t{1} << (id & 63);
  if (on) {
    on_disk_[id >> 6].fetch_or(bit, std::memory_order_release);
  } else {
    on_disk_[id >> 6].fetch_and(~bit, std::memory_order_release);
    ClearPlace(id);
  }
}

void ControlBlock::ClearMissed() {
  const uint64_t words = BitmapBytes(header_->dataset_size) / 8;
  for (uint64_t w = 0; w < words; ++w) missed_[w].store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

// Word 0: segment << 32 | offset, 0 for none; word 1: length << 32 | crc.
// The owner clears word 0 before it writes word 1, so a reader that reads
// word 0 twice, the same and not 0, around word 1 has a pair that was
// published together (or, after a place was reused, a pair that is right
// for it now); ReadRecordAt's checks catch anything else.
void ControlBlock::SetPlace(ItemId id, const DiskRecordPlace& place) {
  std::atomic<uint64_t>* w = places_ + 2 * uint64_t{id};
  w[0].store(0, std::memory_order_release);
  if (place.segment == 0) return;
  w[1].store((uint64_t{place.length} << 32) | place.crc, std::memory_order_release);
  w[0].store((uint64_t{place.segment} << 32) | place.offset, std::memory_order_release);
}

bool ControlBlock::Place(ItemId id, DiskRecordPlace* place) const {
  const std::atomic<uint64_t>* w = places_ + 2 * uint64_t{id};
  const uint64_t where = w[0].load(std::memory_order_acquire);
  if (where == 0) return false;
  const uint64_t what = w[1].load(std::memory_order_acquire);
  if (w[0].load(std::memory_order_acquire) != where) return false;
  place->segment = static_cast<uint32_t>(where >> 32);
  place->offset = static_cast<uint32_t>(where);
  place->length = static_cast<uint32_t>(what >> 32);
  place->crc = static_cast<uint32_t>(what);
  return true;
}

}  // namespace opt4store

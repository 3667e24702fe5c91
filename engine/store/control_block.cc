#include "engine/store/control_block.h"

#include <cstring>
#include <new>

namespace opt4store {
namespace {

constexpr uint64_t kMagic = 0x6f707434637472ull;  // "opt4ctr"
constexpr uint32_t kVersion = 4;  // 3: the disk tier's gauges; 4: sync_every, the last write error

uint64_t RingOffset() { return (sizeof(ControlBlock::Header) + 4095) & ~uint64_t{4095}; }
uint64_t BitsOffset() { return RingOffset() + ControlBlock::kRingSize * 8; }
uint64_t BitmapBytes(uint64_t dataset_size) { return ((dataset_size + 63) / 64) * 8; }
uint64_t TotalBytes(uint64_t dataset_size) {
  return BitsOffset() + BitmapBytes(dataset_size) + 8 * dataset_size;
}

}  // namespace

Status ControlBlock::Create(const std::string& prefix, uint64_t dataset_size,
                            int64_t fetch_timeout_ms, const std::string& ram_name,
                            const std::string& queue_name, std::unique_ptr<ControlBlock>* out) {
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
  on_disk_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() + BitsOffset());
  expected_ = reinterpret_cast<std::atomic<uint64_t>*>(segment_->data() + BitsOffset() +
                                                       BitmapBytes(header_->dataset_size));
  // The segment arrives zero-filled: every slot empty, no bit set.
  if (create) {
    for (uint64_t id = 0; id < header_->dataset_size; ++id) {
      expected_[id].store(UINT64_MAX, std::memory_order_relaxed);
    }
  }
  return Status::OK();
}

uint64_t ControlBlock::SlotTag(uint64_t position) const {
  // 12 bits of plan generation, 20 bits of lap: 2^36 positions per plan.
  const uint64_t gen = header_->plan_generation.load(std::memory_order_acquire) & 0xFFF;
  const uint64_t lap = ((position >> kRingBits) + 1) & 0xFFFFF;
  return (gen << 52) | (lap << 32);
}

void ControlBlock::MarkConsumed(uint64_t position, ItemId id) {
  uint64_t high = header_->high_water.load(std::memory_order_relaxed);
  while (position + 1 > high &&
         !header_->high_water.compare_exchange_weak(high, position + 1,
                                                    std::memory_order_relaxed)) {
  }
  const uint64_t frontier = header_->frontier.load(std::memory_order_acquire);
  if (position < frontier || position >= frontier + kRingSize) return;
  ring_[position & (kRingSize - 1)].store(SlotTag(position) | id, std::memory_order_release);
}

bool ControlBlock::Consumed(uint64_t position, ItemId* id) const {
  const uint64_t v = ring_[position & (kRingSize - 1)].load(std::memory_order_acquire);
  if ((v & ~uint64_t{0xFFFFFFFF}) != SlotTag(position)) return false;
  *id = static_cast<ItemId>(v & 0xFFFFFFFFull);
  return true;
}

void ControlBlock::SetOnDisk(ItemId id, bool on) {
  const uint64_t bit = uint64_t{1} << (id & 63);
  if (on) {
    on_disk_[id >> 6].fetch_or(bit, std::memory_order_release);
  } else {
    on_disk_[id >> 6].fetch_and(~bit, std::memory_order_release);
  }
}

}  // namespace opt4store

// Writes (disk_tier_impl.h): Put appends a record to the active segment and
// indexes it in one RocksDB batch with the segment's watermark; segments roll
// over at segment_bytes; over budget, items never read again leave first,
// then the one read furthest in the future (or, with bypass, the new one
// stays out when it is read no sooner); Clear empties the tier. All under
// write_mu_.
#include "tiers/disk_tier_impl.h"

#include <algorithm>
#include <cstring>

namespace opt4store {

Status DiskTier::Impl::Put(ItemId id, std::string_view meta, std::string_view payload,
                           std::vector<ItemId>* evicted, bool* stored) {
  if (stored != nullptr) *stored = false;
  if (id > kMaxItemId) {
    return Status::InvalidArgument("id " + std::to_string(id) + " is over the limit of " +
                                   std::to_string(kMaxItemId));
  }
  if (meta.size() > kMaxMetaBytes) {
    return Status::InvalidArgument("meta of " + std::to_string(meta.size()) +
                                   " bytes is over the 64 KiB limit");
  }
  if (kRecordHeaderSize + meta.size() + payload.size() > kMaxRecordBytes) {
    return Status::InvalidArgument("record over 4 GiB");
  }
  if (options_.bypass && !closed_.load(std::memory_order_acquire)) {
    // A record left out would be compressed for nothing: the smallest it
    // can encode to (its head alone) decides whenever the tier is full for
    // that, and MakeRoom would decide the same for its encoded size. A
    // record whose raw size cannot fit goes on to MakeRoom's NoSpace.
    const uint64_t head = kRecordHeaderSize + meta.size();
    MutexLock lock(&mu_);
    if (head + payload.size() + segment_bytes_ <= options_.budget_bytes && LeavesOut(id, head)) {
      bypasses_.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
  }
  // Compression runs before the lock, so that readers and the writer's
  // other work do not wait for it.
  EncodedRecord rec;
  EncodeRecord(id, meta, payload,
               options_.compression == DiskTierOptions::Compression::kAuto, &rec);

  MutexLock wlock(&write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  OPT4STORE_RETURN_IF_ERROR(ResumeIndex());
  const uint64_t size = rec.size();
  bool bypassed = false;
  OPT4STORE_RETURN_IF_ERROR(MakeRoom(size, id, evicted, &bypassed));
  if (bypassed) {
    bypasses_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  SealRecord(next_sequence_, &rec);

  const std::string_view parts[2] = {rec.head, rec.body};
  uint16_t slot = 0;
  uint64_t offset = 0;
  OPT4STORE_RETURN_IF_ERROR(Append(parts, 2, size, &slot, &offset));
  Segment* seg = WriterSegment(slot);  // stable: only this thread changes the table
  if (every_put()) {
    Status s = seg->file->Sync();
    if (!s.ok()) {
      RollBack(slot, offset);
      return s;
    }
  }
  rocksdb::WriteBatch batch;
  batch.Put(IndexKey(id), EncodeIndexValue(MakeIndexValue(rec.header, seg->number,
                                                          static_cast<uint32_t>(offset))));
  batch.Put(SegmentKey(seg->number), Fixed64(offset + size));
  batch.Put(kSequenceKey, Fixed64(next_sequence_));
  Status s = IndexWritten(db_->Write(WriteOpts(), &batch), "write index");
  if (!s.ok()) {
    RollBack(slot, offset);
    return s;
  }
  ++next_sequence_;
  {
    MutexLock lock(&mu_);
    DiskIndex::Location old;
    const DiskIndex::Location loc{slot, static_cast<uint32_t>(offset), static_cast<uint32_t>(size)};
    if (index_.Put(id, loc, &old)) {
      segments_[old.slot]->live_bytes -= old.length;
      live_bytes_ -= old.length;
    }
    seg->live_bytes += size;
    live_bytes_ += size;
    if (every_put()) seg->dirty = false;  // synced above
  }
  puts_.fetch_add(1, std::memory_order_relaxed);
  user_bytes_.fetch_add(meta.size() + payload.size(), std::memory_order_relaxed);
  put_record_bytes_.fetch_add(size, std::memory_order_relaxed);
  if (rec.header.codec == Codec::kLz4) compressed_.fetch_add(1, std::memory_order_relaxed);
  if (stored != nullptr) *stored = true;
  return Status::OK();
}

Status DiskTier::Impl::Append(const std::string_view* parts, size_t count, uint64_t size,
                              uint16_t* slot, uint64_t* offset) {
  OPT4STORE_RETURN_IF_ERROR(EnsureActiveFits(size));
  Segment* seg = WriterSegment(active_);
  *slot = active_;
  *offset = seg->size;
  Status s = seg->file->Write(*offset, parts, count);
  if (!s.ok()) {
    RollBack(active_, *offset);
    return s.WithContext("append to " + seg->name);
  }
  physical_bytes_.fetch_add(size, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  seg->size += size;
  seg->dirty = true;
  file_bytes_ += size;
  return Status::OK();
}

void DiskTier::Impl::RollBack(uint16_t slot, uint64_t offset) {
  Segment* seg = WriterSegment(slot);
  // If the truncate fails too, the next append overwrites the bytes (writes
  // go to our own offset, not O_APPEND) and recovery would cut them off.
  seg->file->Truncate(offset).PermitUncheckedError();
  MutexLock lock(&mu_);
  if (seg->size > offset) {
    file_bytes_ -= seg->size - offset;
    seg->size = offset;
  }
}

Status DiskTier::Impl::EnsureActiveFits(uint64_t size) {
  if (active_ != 0) {
    const Segment* seg = WriterSegment(active_);
    // A record larger than a segment gets a segment of its own.
    if (seg->size == 0 || seg->size + size <= segment_bytes_) return Status::OK();
  }
  return RollOver();
}

Status DiskTier::Impl::RollOver() {
  // Seal the active segment: with O_DIRECT reads, sync it (in every
  // SyncMode), so that its reads need not wait for writeback. The kernel
  // would have to write these bytes soon anyway.
  if (options_.direct_io && active_ != 0 && WriterSegment(active_)->dirty) {
    Segment* sealed = WriterSegment(active_);
    OPT4STORE_RETURN_IF_ERROR(sealed->file->Sync());
    MutexLock lock(&mu_);
    sealed->dirty = false;
  }
  const uint32_t number = next_segment_number_;
  uint16_t slot;
  {
    MutexLock lock(&mu_);
    if (free_slots_.empty() && segments_.size() > DiskIndex::kMaxSlots) {
      return Status::NoSpace("more than 65535 segment files");
    }
  }
  // Number first, so that a crash cannot hand the same number out twice.
  rocksdb::WriteBatch batch;
  batch.Put(kNextSegmentKey, Fixed64(uint64_t{number} + 1));
  batch.Put(SegmentKey(number), Fixed64(0));
  OPT4STORE_RETURN_IF_ERROR(IndexWritten(db_->Write(WriteOpts(), &batch), "write segment list"));
  next_segment_number_ = number + 1;

  std::unique_ptr<Segment> seg;
  OPT4STORE_RETURN_IF_ERROR(OpenSegment(number, &seg));
  dir_dirty_ = true;
  {
    MutexLock lock(&mu_);
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      segments_[slot] = std::move(seg);
    } else {
      slot = static_cast<uint16_t>(segments_.size());
      segments_.push_back(std::move(seg));
    }
  }
  active_ = slot;
  if (every_put()) OPT4STORE_RETURN_IF_ERROR(env_->SyncDir(segment_dir_));
  return Status::OK();
}

Status DiskTier::Impl::MakeRoom(uint64_t size, ItemId id, std::vector<ItemId>* evicted,
                                bool* bypassed) {
  const uint64_t budget = options_.budget_bytes;
  // Refuse a record that can never fit before evicting anything for it.
  if (size + segment_bytes_ > budget) {
    return Status::NoSpace("a record of " + std::to_string(size) +
                           " bytes does not fit in the disk budget of " + std::to_string(budget) +
                           " bytes (" + std::to_string(segment_bytes_) +
                           " held back for compaction)");
  }
  if (options_.bypass) {
    // Belady's OPT over the items held (LeavesOut): one item leaves for each
    // one stored, the one read furthest in the future, or the new one stays
    // out if it is read no sooner. (The loop below alone evicts until dead
    // space calls for a compaction, a burst of evictions, and then stores
    // what comes next in the room they made, whenever it is read.)
    for (;;) {
      {
        MutexLock lock(&mu_);
        if (LeavesOut(id, size)) {
          *bypassed = true;
          return Status::OK();
        }
        if (index_.size() == 0 || live_bytes_ + size <= LiveBudget()) break;
      }
      OPT4STORE_RETURN_IF_ERROR(EvictOne(evicted));
    }
  }
  for (;;) {
    uint16_t best = 0;
    {
      MutexLock lock(&mu_);
      // Room for the record plus the compaction reserve: done.
      if (file_bytes_ + size + segment_bytes_ <= budget) return Status::OK();
      // The segment with the lowest live ratio whose live bytes fit in the
      // free space (the copy needs them) is the one to compact.
      const uint64_t free = budget > file_bytes_ ? budget - file_bytes_ : 0;
      double best_ratio = 2;
      for (size_t s = 1; s < segments_.size(); ++s) {
        const Segment* seg = segments_[s].get();
        if (seg == nullptr || seg->size == 0 || seg->live_bytes >= seg->size) continue;
        if (seg->live_bytes > free) continue;
        const double ratio = static_cast<double>(seg->live_bytes) / static_cast<double>(seg->size);
        if (ratio < best_ratio) {
          best_ratio = ratio;
          best = static_cast<uint16_t>(s);
        }
      }
      // Nothing left to reclaim or evict: every segment is empty, so the
      // check above guarantees room. Defensive: never loop forever.
      if (best == 0 && index_.size() == 0) {
        if (file_bytes_ + size <= budget) return Status::OK();
        return Status::NoSpace("disk budget exhausted by unreclaimable segments");
      }
      // Compacting a mostly live segment rewrites a lot to free a little:
      // evict instead, until a segment is sparse or dead space is plenty.
      const uint64_t dead = file_bytes_ - live_bytes_;
      if (best != 0 && index_.size() > 0 && best_ratio > options_.compact_below_live_ratio &&
          static_cast<double>(dead) < options_.max_dead_fraction * static_cast<double>(budget)) {
        best = 0;
      }
    }
    if (best != 0) {
      OPT4STORE_RETURN_IF_ERROR(CompactSegment(best));
    } else {
      OPT4STORE_RETURN_IF_ERROR(EvictOne(evicted));
    }
  }
}

uint64_t DiskTier::Impl::LiveBudget() const {
  // The budget less the compaction reserve and the dead space MakeRoom lets
  // build up before it compacts.
  const uint64_t budget = options_.budget_bytes;
  const uint64_t reserve =
      segment_bytes_ +
      static_cast<uint64_t>(options_.max_dead_fraction * static_cast<double>(budget));
  return budget > reserve ? budget - reserve : 0;
}

bool DiskTier::Impl::LeavesOut(ItemId id, uint64_t size) const {
  if (index_.size() == 0 || live_bytes_ + size <= LiveBudget() || index_.Contains(id)) {
    return false;
  }
  const uint64_t next = index_.NextUse(id);
  return next != DiskIndex::kUnknownNextUse && index_.NextUse(index_.Victim()) <= next;
}

Status DiskTier::Impl::EvictOne(std::vector<ItemId>* evicted) {
  ItemId victim;
  {
    MutexLock lock(&mu_);
    victim = index_.Victim();
    DiskIndex::Location loc;
    index_.Erase(victim, &loc);
    segments_[loc.slot]->live_bytes -= loc.length;
    live_bytes_ -= loc.length;
  }
  evictions_.fetch_add(1, std::memory_order_relaxed);
  if (evicted != nullptr) evicted->push_back(victim);
  return IndexWritten(db_->Delete(WriteOpts(), IndexKey(victim)), "evict from index");
}

Status DiskTier::Impl::Delete(ItemId id) {
  MutexLock wlock(&write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  OPT4STORE_RETURN_IF_ERROR(ResumeIndex());
  {
    MutexLock lock(&mu_);
    DiskIndex::Location loc;
    if (!index_.Erase(id, &loc)) {
      return Status::NotFound("id " + std::to_string(id) + " is not on disk");
    }
    segments_[loc.slot]->live_bytes -= loc.length;
    live_bytes_ -= loc.length;
  }
  return IndexWritten(db_->Delete(WriteOpts(), IndexKey(id)), "delete from index");
}

// Files first, then the index: a crash in between leaves index entries and
// watermarks that name missing files, which Recover drops. The other way
// round, Recover would re-index the records of a file without a watermark.
Status DiskTier::Impl::Clear() {
  MutexLock wlock(&write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  OPT4STORE_RETURN_IF_ERROR(ResumeIndex());
  std::vector<std::string> names;
  {
    MutexLock lock(&mu_);
    for (size_t s = 1; s < segments_.size(); ++s) {
      if (segments_[s]) names.push_back(segments_[s]->name);
    }
  }
  for (const std::string& name : names) {
    OPT4STORE_RETURN_IF_ERROR(RemoveSegmentFile(name));
  }
  if (!names.empty()) OPT4STORE_RETURN_IF_ERROR(env_->SyncDir(segment_dir_));
  dir_dirty_ = false;
  {
    // Readers that took a segment's file before this keep reading it (its
    // bytes are still that id's); later reads find nothing.
    MutexLock lock(&mu_);
    std::vector<ItemId> ids;
    ids.reserve(index_.size());
    index_.ForEach(0, index_.id_limit(),
                   [&ids](ItemId id, const DiskIndex::Location&) { ids.push_back(id); });
    for (ItemId id : ids) index_.Erase(id, nullptr);
    segments_.resize(1);  // slot 0: "not stored"
    free_slots_.clear();
    file_bytes_ = 0;
    live_bytes_ = 0;
  }
  active_ = 0;  // the next Put starts a new segment
  // The index entries, watermarks and records lost at an open (none of
  // them is in the tier now; the next segment number and the sequence stay,
  // so that no number is handed out twice); the store's own keys ('m') stay.
  rocksdb::WriteBatch batch;
  for (const char tag : {kIndexTag, kSegmentTag, kLostTag}) {
    const std::string begin(1, tag), end(1, static_cast<char>(tag + 1));
    OPT4STORE_RETURN_IF_ERROR(FromRocks(batch.DeleteRange(begin, end), "clear index"));
  }
  rocksdb::WriteOptions wo;
  wo.sync = syncing();
  return IndexWritten(db_->Write(wo, &batch), "clear index");
}

Status DiskTier::Impl::OpenSegment(uint32_t number, std::unique_ptr<Segment>* segment) {
  auto seg = std::make_unique<Segment>();
  seg->number = number;
  seg->name = SegmentName(number);
  FileOptions fo;
  fo.direct_reads = options_.direct_io;
  std::unique_ptr<File> file;
  OPT4STORE_RETURN_IF_ERROR(env_->OpenFile(SegmentPath(seg->name), fo, &file));
  seg->file = std::move(file);
  *segment = std::move(seg);
  return Status::OK();
}

}  // namespace opt4store

// Compaction (disk_tier_impl.h): the live records of a sparse segment are
// copied verbatim into the active segment, the index is pointed at the
// copies, both are synced, and only then is the old segment unlinked.
#include "tiers/disk_tier_impl.h"

#include <algorithm>
#include <cstring>

namespace opt4store {

Status DiskTier::Impl::CompactSegment(uint16_t slot) {
  if (slot == active_) OPT4STORE_RETURN_IF_ERROR(RollOver());
  Segment* seg;
  std::vector<ReadTarget> targets;
  {
    MutexLock lock(&mu_);
    seg = WriterSegment(slot);
  }
  // The records still live in this segment, from the index, a chunk at a
  // time so that readers are not held up by a long scan.
  for (size_t begin = 0;; begin += kScanChunk) {
    MutexLock lock(&mu_);
    if (begin >= index_.id_limit()) break;
    index_.ForEach(begin, begin + kScanChunk, [&](ItemId id, const DiskIndex::Location& loc) {
      mu_.AssertHeld();  // held around ForEach; a lambda is analysed on its own
      if (loc.slot != slot) return;
      ReadTarget t;
      TargetLocked(id, &t);
      targets.push_back(std::move(t));
    });
  }
  std::sort(targets.begin(), targets.end(),
            [](const ReadTarget& a, const ReadTarget& b) { return a.loc.offset < b.loc.offset; });

  struct Move {
    ItemId id;
    DiskIndex::Location from, to;
  };
  std::vector<Move> moves;
  rocksdb::WriteBatch batch;
  Status error;
  uint64_t moved_bytes = 0;
  // Makes a batch of copies visible: index first, then memory.
  auto commit = [&]() -> Status {
    write_mu_.AssertHeld();  // CompactSegment holds it; a lambda is analysed on its own
    if (moves.empty()) return Status::OK();
    // The copies are durable before the index points at them, as a Put's
    // record is: the index may reach the disk first (its log written back,
    // or synced per write), and then a power loss would leave entries that
    // point past their segment's end while the old copies, which nothing
    // points at any more, go with the next compaction.
    if (syncing()) OPT4STORE_RETURN_IF_ERROR(SyncDirty());
    const Segment* active = WriterSegment(active_);
    batch.Put(SegmentKey(active->number), Fixed64(active->size));
    OPT4STORE_RETURN_IF_ERROR(IndexWritten(db_->Write(WriteOpts(), &batch), "write index"));
    batch.Clear();
    MutexLock lock(&mu_);
    for (const Move& m : moves) {
      DiskIndex::Location cur;
      if (!index_.Lookup(m.id, &cur) || cur.slot != m.from.slot || cur.offset != m.from.offset) {
        continue;  // changed meanwhile: the copy is dead space
      }
      index_.Put(m.id, m.to, nullptr);
      segments_[m.from.slot]->live_bytes -= m.from.length;
      segments_[m.to.slot]->live_bytes += m.to.length;
    }
    moves.clear();
    return Status::OK();
  };

  std::vector<std::pair<ItemId, DiskIndex::Location>> corrupt;
  ReadRecords(targets.data(), targets.size(), [&](size_t i, Status s, const char* record) {
    write_mu_.AssertHeld();  // as in commit
    if (!error.ok()) return;
    const ReadTarget& t = targets[i];
    RecordHeader h;
    if (s.ok()) s = VerifyRecord(record, t.loc.length, t.id, &h);
    if (s.IsCorruption()) {
      corrupt.emplace_back(t.id, t.loc);  // not worth copying
      return;
    }
    if (!s.ok()) {
      error = s;
      return;
    }
    // The segment may roll over mid-way: commit what points at the old
    // active segment (its watermark) first.
    if (active_ != 0 && WriterSegment(active_)->size > 0 &&
        WriterSegment(active_)->size + t.loc.length > segment_bytes_) {
      error = commit();
      if (!error.ok()) return;
    }
    const std::string_view part(record, t.loc.length);
    uint16_t to_slot;
    uint64_t to_offset;
    error = Append(&part, 1, t.loc.length, &to_slot, &to_offset);
    if (!error.ok()) return;
    const Segment* to = WriterSegment(to_slot);
    batch.Put(IndexKey(t.id), EncodeIndexValue(MakeIndexValue(h, to->number,
                                                              static_cast<uint32_t>(to_offset))));
    moves.push_back({t.id, t.loc, {to_slot, static_cast<uint32_t>(to_offset), t.loc.length}});
    moved_bytes += t.loc.length;
    if (moves.size() >= kCompactionBatch) error = commit();
  });
  if (error.ok()) error = commit();
  // Copies never indexed are cut off the active segment (a roll-over
  // commits first, so all of them are there): left past its watermark, the
  // next open would index those whose id has no entry, an id deleted or
  // evicted meanwhile among them.
  if (!error.ok() && !moves.empty()) RollBack(moves.front().to.slot, moves.front().to.offset);
  for (const auto& c : corrupt) DropCorruptLocked(c.first, c.second);
  OPT4STORE_RETURN_IF_ERROR(error);

  // Every copy must be durable before the only other copy goes.
  if (syncing()) {
    OPT4STORE_RETURN_IF_ERROR(SyncDirty());
  }
  {
    MutexLock lock(&mu_);
    if (seg->live_bytes != 0) {
      return Status::IOError("compaction of " + seg->name + " left live records behind");
    }
  }
  OPT4STORE_RETURN_IF_ERROR(RemoveSegmentFile(seg->name));
  dir_dirty_ = true;
  // Open drops the key too.
  IndexWritten(db_->Delete(WriteOpts(), SegmentKey(seg->number)), "drop segment key")
      .PermitUncheckedError();
  {
    MutexLock lock(&mu_);
    file_bytes_ -= seg->size;
    segments_[slot].reset();
    free_slots_.push_back(slot);
  }
  compactions_.fetch_add(1, std::memory_order_relaxed);
  compaction_bytes_.fetch_add(moved_bytes, std::memory_order_relaxed);
  return Status::OK();
}

Status DiskTier::Impl::Compact() {
  MutexLock wlock(&write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  OPT4STORE_RETURN_IF_ERROR(ResumeIndex());
  std::vector<std::pair<double, uint32_t>> candidates;  // (live ratio, segment number)
  {
    MutexLock lock(&mu_);
    for (size_t s = 1; s < segments_.size(); ++s) {
      const Segment* seg = segments_[s].get();
      if (seg == nullptr || s == active_ || seg->size == 0) continue;
      const double ratio = static_cast<double>(seg->live_bytes) / static_cast<double>(seg->size);
      if (ratio < options_.compact_below_live_ratio || seg->live_bytes == 0) {
        candidates.emplace_back(ratio, seg->number);
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& c : candidates) {
    uint16_t slot = 0;
    bool fits = false;
    {
      MutexLock lock(&mu_);
      for (size_t s = 1; s < segments_.size(); ++s) {
        if (segments_[s] && segments_[s]->number == c.second) slot = static_cast<uint16_t>(s);
      }
      // A copy must fit in the budget beside the segment it empties; a
      // segment with nothing live only goes (a tier reopened over a
      // smaller budget is past it, and its dead files are what to free).
      if (slot != 0) {
        const uint64_t live = WriterSegment(slot)->live_bytes;
        fits = live == 0 || file_bytes_ + live <= options_.budget_bytes;
      }
    }
    if (slot != 0 && fits) OPT4STORE_RETURN_IF_ERROR(CompactSegment(slot));
  }
  return Status::OK();
}

}  // namespace opt4store

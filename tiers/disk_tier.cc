// DiskTier: RocksDB index + append-only segments, io_uring batched reads.
//
// Locking. Two mutexes, always taken in this order:
//   write_mu_  serializes mutations: Put, Delete, eviction, compaction,
//              Flush, Close, and the drop of a corrupt record. Held across
//              the mutation's I/O; readers never take it (except to drop a
//              record they found corrupt, which is rare).
//   mu_        guards the in-memory index and the segment table. Held only
//              for short, I/O-free sections: a reader takes what it needs
//              (file handle, offset, length) under mu_, releases it, then
//              reads, as LevelDB's DBImpl::Get does.
// Segment files are shared_ptr'ed so that a reader can finish reading a
// segment that compaction has just unlinked: the bytes it reads are still
// that id's (an older but correct version).
//
// Crash safety rests on this write order:
//   Put:     append the record -> (kEveryPut: fdatasync) -> one RocksDB
//            batch {index entry, segment watermark = end of the record,
//            highest sequence} -> make it visible in memory.
//   Compact: copy live records verbatim into the active segment -> index
//            batches pointing at the copies -> fdatasync the copies and the
//            RocksDB WAL -> unlink the old segment -> drop its manifest key.
//   Flush:   fdatasync written segments -> sync the RocksDB WAL.
// RocksDB recovers a prefix of its WAL, so an index entry never survives
// without the watermark that covers it, and a delete never survives without
// the put before it. On Open, records past a segment's watermark are ones
// whose index batch was lost: valid ones are re-indexed (the newest
// sequence wins), the first invalid one ends the segment (a torn tail,
// truncated). Records below the watermark whose entry is gone were deleted
// or evicted and stay gone. Entries pointing past the end of their segment
// (an OS crash lost the unsynced segment bytes) are dropped; any other
// damage is caught by the CRC on read.
//
// The implementation is split by job; disk_tier_impl.h maps it.
#include "tiers/disk_tier.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "tiers/disk_tier_impl.h"

namespace opt4store {

DiskTier::Impl::Impl(const DiskTierOptions& options, std::string dir)
    : options_(options),
      env_(options.env ? options.env : Env::Default()),
      dir_(std::move(dir)),
      segment_dir_(dir_ + "/segments") {}

DiskTier::Impl::~Impl() { Close().PermitUncheckedError(); }

// ------------------------------------------------------------------ sync

Status DiskTier::Impl::SyncDirty() {
  std::vector<Segment*> dirty;
  {
    MutexLock lock(&mu_);
    for (size_t s = 1; s < segments_.size(); ++s) {
      if (segments_[s] && segments_[s]->dirty) dirty.push_back(segments_[s].get());
    }
  }
  for (Segment* seg : dirty) {
    OPT4STORE_RETURN_IF_ERROR(seg->file->Sync());
    MutexLock lock(&mu_);
    seg->dirty = false;
  }
  if (dir_dirty_) {
    OPT4STORE_RETURN_IF_ERROR(env_->SyncDir(segment_dir_));
    dir_dirty_ = false;
  }
  OPT4STORE_RETURN_IF_ERROR(ResumeIndex());
  return IndexWritten(db_->FlushWAL(/*sync=*/true), "sync index");  // a failed sync stops it
}

Status DiskTier::Impl::IndexWritten(const rocksdb::Status& rs, const std::string& what) {
  if (!rs.ok()) {
    index_stopped_.store(rs.IsNoSpace() ? kStoppedNoSpace : kStoppedError,
                         std::memory_order_release);
  }
  return FromRocks(rs, what);
}

Status DiskTier::Impl::ResumeIndex() {
  const int stopped = index_stopped_.load(std::memory_order_acquire);
  if (stopped == kRunning) return Status::OK();
  // After a NoSpace, RocksDB's own recovery is off (ManualNoSpaceRecovery
  // in disk_recovery.cc): Resume flushes the memtable and starts a new WAL,
  // so writes go on once space is back, and it fails while the disk is full.
  const rocksdb::Status rs = db_->Resume();
  if (rs.IsBusy() || (!rs.ok() && stopped == kStoppedNoSpace)) {
    return Status::NoSpace("the index stopped taking writes when one found the disk full (" +
                           rs.ToString() + "); writes resume once space is freed");
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(rs, "resume the index after a failed write"));
  index_stopped_.store(kRunning, std::memory_order_release);
  return Status::OK();
}

Status DiskTier::Impl::Flush() {
  MutexLock wlock(&write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  if (!syncing()) return Status::OK();
  return SyncDirty();
}

// ------------------------------------------------------------ the rest

Status DiskTier::Impl::Verify(VerifyReport* report) {
  *report = VerifyReport();
  if (closed_) return Status::IOError("disk tier is closed");
  // Every Put up to this sequence has updated the index (a Put holds
  // write_mu_ from its append to its index update); later ones are left
  // out of the orphan check below.
  uint64_t settled_sequence = 0;
  {
    MutexLock wlock(&write_mu_);
    settled_sequence = next_sequence_ - 1;
  }
  std::vector<ReadTarget> targets;
  for (size_t begin = 0;; begin += kScanChunk) {
    MutexLock lock(&mu_);
    if (begin >= index_.id_limit()) break;
    index_.ForEach(begin, begin + kScanChunk, [&](ItemId id, const DiskIndex::Location&) {
      mu_.AssertHeld();  // held around ForEach; a lambda is analysed on its own
      ReadTarget t;
      TargetLocked(id, &t);
      targets.push_back(std::move(t));
    });
  }
  std::unordered_map<ItemId, uint64_t> indexed_sequence;
  ReadRecords(targets.data(), targets.size(), [&](size_t i, Status s, const char* record) {
    const ReadTarget& t = targets[i];
    RecordHeader h;
    if (s.ok()) s = VerifyRecord(record, t.loc.length, t.id, &h);
    ++report->records_checked;
    report->bytes_checked += t.loc.length;
    if (!s.ok()) report->bad.push_back({t.id, t.segment, t.loc.offset, s});
    if (s.ok()) indexed_sequence[t.id] = h.sequence;
  });
  OPT4STORE_RETURN_IF_ERROR(FindOrphans(indexed_sequence, settled_sequence, report));
  // Records an open dropped, unless a later Put has stored the id again.
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string lost_prefix(1, kLostTag);
  for (it->Seek(lost_prefix); it->Valid() && it->key().starts_with(lost_prefix); it->Next()) {
    if (it->key().size() != 5 || it->value().size() < 8) continue;
    const ItemId id = GetBE32(it->key().data() + 1);
    if (Contains(id)) continue;
    const uint32_t segment = static_cast<uint32_t>(GetLE(it->value().data(), 4));
    const std::string why(it->value().data() + 8, it->value().size() - 8);
    report->bad.push_back({id, SegmentName(segment), GetLE(it->value().data() + 4, 4),
                           Status::Corruption("lost at an open: " + why)});
    ++report->lost;
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(it->status(), "read the lost records"));
  if (report->bad.empty()) return Status::OK();
  return Status::Corruption(
      std::to_string(report->bad.size() - report->lost - report->orphaned) + " of " +
      std::to_string(report->records_checked) + " records failed checks, " +
      std::to_string(report->lost) + " were lost at an open, " +
      std::to_string(report->orphaned) + " newer records are not indexed");
}

// Orphaned segment data: a valid record of an id that is newer than the
// version the index holds means an index update was lost (an id evicted
// or deleted has no entry, and an older record below the watermark is
// dead space, so neither counts).
Status DiskTier::Impl::FindOrphans(const std::unordered_map<ItemId, uint64_t>& indexed_sequence,
                                   uint64_t settled_sequence, VerifyReport* report) {
  struct Scan {
    std::shared_ptr<File> file;
    std::string name;
    uint64_t size;
  };
  std::vector<Scan> scans;
  {
    MutexLock lock(&mu_);
    for (size_t slot = 1; slot < segments_.size(); ++slot) {
      if (segments_[slot]) {
        scans.push_back({segments_[slot]->file, segments_[slot]->name, segments_[slot]->size});
      }
    }
  }
  for (const Scan& scan : scans) {
    uint64_t end = 0, damaged = 0;
    OPT4STORE_RETURN_IF_ERROR(ScanSegmentRecords(
        scan.file.get(), scan.size,
        [&](uint64_t offset, const RecordHeader& h) {
          auto indexed = indexed_sequence.find(h.id);
          if (h.sequence > settled_sequence || indexed == indexed_sequence.end() ||
              h.sequence <= indexed->second) {
            return;
          }
          report->bad.push_back(
              {h.id, scan.name, offset,
               Status::Corruption("orphaned: this record (sequence " + std::to_string(h.sequence) +
                                  ") is newer than the indexed one (sequence " +
                                  std::to_string(indexed->second) + ")")});
          ++report->orphaned;
        },
        &end, &damaged));
  }
  return Status::OK();
}

Status DiskTier::Impl::PutMeta(std::string_view key, std::string_view value) {
  if (closed_) return Status::IOError("disk tier is closed");
  std::string k(1, kUserTag);
  k.append(key.data(), key.size());
  OPT4STORE_RETURN_IF_ERROR(ResumeIndex());
  return IndexWritten(db_->Put(WriteOpts(), k, rocksdb::Slice(value.data(), value.size())),
                      "put meta");
}

Status DiskTier::Impl::GetMeta(std::string_view key, std::string* value) {
  if (closed_) return Status::IOError("disk tier is closed");
  std::string k(1, kUserTag);
  k.append(key.data(), key.size());
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), k, value);
  if (s.IsNotFound()) return Status::NotFound("no meta key '" + std::string(key) + "'");
  return FromRocks(s, "get meta");
}

std::vector<DiskSegmentInfo> DiskTier::Impl::Segments() const {
  std::vector<DiskSegmentInfo> out;
  MutexLock lock(&mu_);
  for (size_t s = 1; s < segments_.size(); ++s) {
    if (!segments_[s]) continue;
    DiskSegmentInfo info;
    info.name = segments_[s]->name;
    info.file_bytes = segments_[s]->size;
    info.live_bytes = segments_[s]->live_bytes;
    out.push_back(std::move(info));
  }
  // active_ belongs to write_mu_; the newest number is the active segment.
  std::sort(out.begin(), out.end(),
            [](const DiskSegmentInfo& a, const DiskSegmentInfo& b) { return a.name < b.name; });
  if (!out.empty()) out.back().active = true;
  return out;
}

DiskTierStats DiskTier::Impl::GetStats() const {
  DiskTierStats st;
  {
    MutexLock lock(&mu_);
    st.items = index_.size();
    st.live_bytes = live_bytes_;
    st.file_bytes = file_bytes_;
    for (size_t s = 1; s < segments_.size(); ++s) {
      if (segments_[s]) {
        ++st.segments;
        st.direct_io = st.direct_io || segments_[s]->file->direct_reads();
      }
    }
    st.index_bytes = index_.MemoryBytes();
  }
  st.budget_bytes = options_.budget_bytes;
  st.segment_bytes = segment_bytes_;
  st.puts = puts_;
  st.user_bytes_put = user_bytes_;
  st.physical_bytes_written = physical_bytes_;
  st.put_record_bytes = put_record_bytes_;
  st.write_amplification =
      st.put_record_bytes ? static_cast<double>(st.physical_bytes_written) / st.put_record_bytes
                          : 0;
  st.compressed_records = compressed_;
  st.gets = gets_;
  st.hits = hits_;
  st.corrupt_records = corrupt_;
  st.read_errors = read_errors_;
  st.evictions = evictions_;
  st.bypasses = bypasses_;
  st.compactions = compactions_;
  st.compaction_bytes_moved = compaction_bytes_;
  st.recovered_records = recovered_;
  st.dropped_on_open = dropped_on_open_;
  st.truncated_bytes = truncated_bytes_;
  st.index_bytes_per_item =
      st.items ? static_cast<double>(st.index_bytes) / static_cast<double>(st.items) : 0;
  st.io_uring = uses_io_uring_;
  return st;
}

void DiskTier::Impl::FlushIndexForNextOpen() {
  uint64_t memtable = 0;
  if (index_stopped_.load(std::memory_order_acquire) != kRunning ||
      !db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &memtable)) {
    return;
  }
  uint64_t entries = 0;
  if (db_->GetIntProperty("rocksdb.num-entries-active-mem-table", &entries) && entries == 0) {
    return;
  }
  // A table about the memtable's size, a new MANIFEST record and WAL: a
  // margin on top, so that a nearly full disk keeps its WAL instead.
  struct statvfs fs;
  if (statvfs(dir_.c_str(), &fs) != 0 ||
      static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < 2 * memtable + (8u << 20)) {
    return;
  }
  rocksdb::FlushOptions fo;
  fo.wait = true;
  const rocksdb::Status rs = db_->Flush(fo);
  // A failed flush leaves the WAL, which the next Open replays as before;
  // the index stays as it was, so nothing more is wrong.
  if (!rs.ok()) IndexWritten(rs, "flush index").PermitUncheckedError();
}

Status DiskTier::Impl::Close() {
  MutexLock wlock(&write_mu_);
  if (closed_.exchange(true)) return Status::OK();
  Status s;
  if (db_ && getpid() != opener_pid_) {
    // A forked child's copy (a DataLoader worker, a script's own fork that
    // exits normally): the index is its parent's, which goes on writing
    // it. Closing RocksDB here would sync, flush a table into it and wait
    // for background work that no thread of this process runs; so the copy
    // is left as it is, and this process's exit frees it.
    (void)db_.release();
  }
  if (db_) {
    if (syncing()) s = SyncDirty();
    if (s.ok()) FlushIndexForNextOpen();
    Status c = FromRocks(db_->Close(), "close index");
    if (s.ok()) s = c;
    db_.reset();
  }
  {
    MutexLock lock(&mu_);
    segments_.clear();
    free_slots_.clear();
    std::vector<RecoveredEntry>().swap(recovered_entries_);
  }
  {
    MutexLock lock(&reader_mu_);
    idle_readers_.clear();
  }
  lock_.reset();
  return s;
}

// ------------------------------------------------------------ DiskTier

DiskTier::DiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::~DiskTier() = default;

Status DiskTier::Open(const DiskTierOptions& options, const std::string& dir,
                      std::unique_ptr<DiskTier>* tier) {
  auto impl = std::make_unique<Impl>(options, dir);
  OPT4STORE_RETURN_IF_ERROR(impl->Open().WithContext("open disk tier " + dir));
  tier->reset(new DiskTier(std::move(impl)));
  return Status::OK();
}

Status DiskTier::Put(ItemId id, std::string_view meta, std::string_view payload,
                     std::vector<ItemId>* evicted, bool* stored) {
  return impl_->Put(id, meta, payload, evicted, stored);
}

Status DiskTier::Get(ItemId id, std::string* meta, std::string* payload) {
  Status s;
  MultiGet(&id, 1, meta, payload, &s);
  return s;
}

void DiskTier::MultiGet(const ItemId* ids, size_t n, std::string* metas, std::string* payloads,
                        Status* statuses) {
  impl_->MultiGet(ids, n,
                  [&](size_t i, const Status& s, std::string_view meta, std::string_view payload) {
                    statuses[i] = s;
                    if (!s.ok()) return;
                    if (metas) metas[i].assign(meta.data(), meta.size());
                    if (payloads) payloads[i].assign(payload.data(), payload.size());
                  });
}

void DiskTier::MultiGet(const ItemId* ids, size_t n, const RecordCallback& fn) {
  impl_->MultiGet(ids, n, fn);
}

bool DiskTier::Contains(ItemId id) const { return impl_->Contains(id); }
Status DiskTier::Delete(ItemId id) { return impl_->Delete(id); }
Status DiskTier::Clear() { return impl_->Clear(); }
void DiskTier::SetNextUse(ItemId id, uint64_t next_use) { impl_->SetNextUse(id, next_use); }
Status DiskTier::Flush() { return impl_->Flush(); }
Status DiskTier::Compact() { return impl_->Compact(); }
Status DiskTier::Verify(VerifyReport* report) { return impl_->Verify(report); }
Status DiskTier::Repair(const DiskTierOptions& options, const std::string& dir,
                        DiskRepairReport* report) {
  *report = DiskRepairReport();
  Impl impl(options, dir);
  return impl.Repair(report).WithContext("repair " + dir);
}
Status DiskTier::PutMeta(std::string_view key, std::string_view value) {
  return impl_->PutMeta(key, value);
}
Status DiskTier::GetMeta(std::string_view key, std::string* value) {
  return impl_->GetMeta(key, value);
}
DiskTierStats DiskTier::GetStats() const { return impl_->GetStats(); }
std::vector<DiskSegmentInfo> DiskTier::Segments() const { return impl_->Segments(); }
Status DiskTier::ForEachItem(
    const std::function<void(ItemId id, uint64_t bytes, const DiskRecordPlace& place)>& fn)
    const {
  return impl_->ForEachItem(fn);
}
Status DiskTier::Locate(ItemId id, DiskRecordPlace* place) const {
  return impl_->Locate(id, place);
}
const std::string& DiskTier::segments_dir() const { return impl_->segments_dir(); }
Status DiskTier::Reconfigure(const DiskTierOptions& options) {
  return impl_->Reconfigure(options);
}
Status DiskTier::Close() { return impl_->Close(); }

}  // namespace opt4store

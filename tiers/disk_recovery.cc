// DiskTier::Impl::Open and recovery (disk_tier_impl.h; the write order it
// relies on is at the top of disk_tier.cc): the LOCK, the RocksDB index and
// its format key, the segment files found on disk, and the records past each
// segment's watermark, re-indexed when valid, cut off at the first torn one.
#include "tiers/disk_tier_impl.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include <rocksdb/env.h>
#include <rocksdb/listener.h>

#include "engine/base/file_limit.h"
#include "tiers/index_env.h"

namespace opt4store {

namespace {

// After a write meets a full disk, RocksDB would start its own recovery,
// which waits for more free space than a write buffer (16 MiB here, per
// open in the process: more than a small disk may ever have) and answers
// Busy to Resume all the while: the index took no writes until a reopen. Without it, the
// next write's ResumeIndex calls DB::Resume, which flushes the memtable and
// starts a new WAL once there is room, and fails (NoSpace again) until then.
class ManualNoSpaceRecovery : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status bg_error,
                            bool* auto_recovery) override {
    if (bg_error.IsNoSpace()) *auto_recovery = false;
    bg_error.PermitUncheckedError();
  }
};

// RocksDB's info LOG (index/LOG), written with plain appends whose errors
// are dropped: RocksDB's own log writer, once a line met a full disk,
// aborted the process (an assertion in WritableFileWriter) at its next
// line. Warnings and errors only, at most kMaxBytes a session; thread-safe.
class IndexInfoLog : public rocksdb::Logger {
 public:
  explicit IndexInfoLog(std::string path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), path_(std::move(path)) {}
  ~IndexInfoLog() override {
    if (fd_ >= 0) close(fd_);
  }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (written_.load(std::memory_order_relaxed) >= kMaxBytes) return;
    char line[1024];
    const int n = vsnprintf(line, sizeof(line) - 1, format, ap);
    if (n < 0) return;
    size_t len = std::min<size_t>(static_cast<size_t>(n), sizeof(line) - 2);
    line[len++] = '\n';
    // Opened at the first line: RocksDB makes index/ only as it opens.
    std::call_once(opened_, [this] {
      fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    });
    if (fd_ < 0) return;
    const ssize_t w = write(fd_, line, len);  // a full disk loses the line, nothing more
    if (w > 0) written_.fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
  }

 private:
  static constexpr uint64_t kMaxBytes = uint64_t{1} << 20;
  const std::string path_;
  std::once_flag opened_;
  int fd_ = -1;
  std::atomic<uint64_t> written_{0};
};

}  // namespace

Status DiskTier::Impl::SegmentBytesFor(uint64_t budget, uint64_t* segment_bytes) const {
  // One segment of the budget is the compaction reserve: at most 1/8. The
  // slot table holds 65535 segments, so a huge budget gets larger segments.
  uint64_t bytes = std::min({options_.segment_bytes, budget / 8, kMaxSegmentBytes});
  bytes = std::max(bytes, budget / 60000);
  if (budget == 0 || bytes < kMinSegmentBytes) {
    return Status::InvalidArgument("budget_bytes must be at least 32 KiB and segment_bytes 4 KiB");
  }
  *segment_bytes = bytes;
  return Status::OK();
}

void DiskTier::Impl::RaiseFileLimitFor(uint64_t budget, uint64_t segment_bytes,
                                       bool say_short) const {
  // The budget's segments, the active one and the compaction's, plus room
  // for RocksDB's files and whatever else the process opens.
  constexpr uint64_t kOtherFiles = 1024;
  const uint64_t segments = budget / segment_bytes + 2;
  uint64_t limit = 0;
  const Status s = RaiseOpenFileLimit(2 * segments + kOtherFiles, &limit);
  static std::atomic<bool> said{false};
  if (!s.ok() && say_short && !said.exchange(true)) {
    std::fprintf(stderr, "opt4store: the disk tier at %s may hold %llu segment files open: %s\n",
                 dir_.c_str(), static_cast<unsigned long long>(segments), s.ToString().c_str());
  }
}

Status DiskTier::Impl::Reconfigure(const DiskTierOptions& options) {
  MutexLock wlock(&write_mu_);
  MutexLock lock(&mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  uint64_t segment_bytes = 0;
  OPT4STORE_RETURN_IF_ERROR(SegmentBytesFor(options.budget_bytes, &segment_bytes));
  RaiseFileLimitFor(options.budget_bytes, segment_bytes, /*say_short=*/true);
  options_.budget_bytes = options.budget_bytes;
  options_.compression = options.compression;
  options_.sync = options.sync;
  options_.expected_ids = options.expected_ids;
  // The active segment may now be over the new segment size: the next Put
  // rolls over (EnsureActiveFits), as after an open with these options.
  segment_bytes_ = segment_bytes;
  index_.Reserve(std::min<size_t>(options_.expected_ids, size_t{kMaxItemId} + 1));
  return Status::OK();
}

Status DiskTier::Impl::Open() {
  if (options_.budget_bytes == 0) return Status::InvalidArgument("budget_bytes must be > 0");
  if (options_.queue_depth == 0 || options_.queue_depth > 4096) {
    return Status::InvalidArgument("queue_depth must be in [1, 4096]");
  }
  if (!(options_.compact_below_live_ratio >= 0 && options_.compact_below_live_ratio <= 1)) {
    return Status::InvalidArgument("compact_below_live_ratio must be in [0, 1]");
  }
  if (!(options_.max_dead_fraction >= 0 && options_.max_dead_fraction < 1)) {
    return Status::InvalidArgument("max_dead_fraction must be in [0, 1)");
  }
  OPT4STORE_RETURN_IF_ERROR(SegmentBytesFor(options_.budget_bytes, &segment_bytes_));
  RaiseFileLimitFor(options_.budget_bytes, segment_bytes_, /*say_short=*/false);

  OPT4STORE_RETURN_IF_ERROR(env_->CreateDirIfMissing(dir_));
  OPT4STORE_RETURN_IF_ERROR(env_->LockFile(dir_ + "/LOCK", &lock_));
  opener_pid_ = getpid();
  OPT4STORE_RETURN_IF_ERROR(env_->CreateDirIfMissing(segment_dir_));

  bool create = false;
  OPT4STORE_RETURN_IF_ERROR(CheckIndexBeforeOpen(&create));
  // RocksDB's open and Recover write (a new MANIFEST, OPTIONS file and WAL,
  // the recovered batch): on a full disk the reserve's space is theirs. A
  // failed open puts back what it released; a good one makes it whole.
  uint64_t released = 0;
  OPT4STORE_RETURN_IF_ERROR(ReleaseReserve(&released));
  Status s = OpenIndex(create);
  MakeReserve(s.ok() ? kReserveBytes : released);
  return s;
}

Status DiskTier::Impl::OpenIndex(bool create) {
  rocksdb::Options ro = IndexOptions();
  ro.create_if_missing = create;
  rocksdb::DB* db = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(ro, dir_ + "/index", &db);
  // A file CURRENT names (the MANIFEST, a table) gone is damage too.
  if (opened.IsCorruption() || (!create && opened.IsPathNotFound())) {
    return DamagedIndex("RocksDB cannot open it: " + opened.ToString());
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(opened, "open index " + dir_ + "/index"));
  db_.reset(db);

  std::string format;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), kFormatKey, &format);
  if (rs.IsNotFound()) {
    // The format key is the first write to a new index, before any
    // segment exists: an index without it beside records is a stand-in.
    bool records = false;
    OPT4STORE_RETURN_IF_ERROR(SegmentsHoldRecords(&records));
    if (records) return DamagedIndex("it has no format key, but segments hold records");
    OPT4STORE_RETURN_IF_ERROR(
        FromRocks(db_->Put(rocksdb::WriteOptions(), kFormatKey, kFormatValue), "write format"));
  } else if (rs.IsCorruption()) {  // a table of the index fails its checksum
    return DamagedIndex("reading it: " + rs.ToString());
  } else if (!rs.ok()) {
    return FromRocks(rs, "read format");
  } else if (format != kFormatValue) {
    return Status::NotSupported("store " + dir_ + " has format '" + format + "', expected '" +
                                kFormatValue + "'");
  }
  OPT4STORE_RETURN_IF_ERROR(Recover());
  // Set up one read queue now: a missing io_uring is reported at Open, and
  // GetStats() knows which path reads take.
  std::unique_ptr<Reader> reader = AcquireReader();
  if (!reader) return Status::IOError("cannot create a read queue");
  ReleaseReader(std::move(reader));
  return Status::OK();
}

rocksdb::Options DiskTier::Impl::IndexOptions() const {
  rocksdb::Options ro;
  ro.env = IndexEnv();  // background jobs on this process's own threads
  // RocksDB's info LOG keeps warnings and errors only (a damaged index, a
  // full disk), at most 1 MiB a session (IndexInfoLog). No stats dump or persist
  // timer: Stats() holds the store's own counters, and the dump ran
  // RocksDB's DumpStats on a timer thread every 10 minutes for nothing.
  ro.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  ro.info_log = std::make_shared<IndexInfoLog>(dir_ + "/index/LOG");
  ro.stats_dump_period_sec = 0;
  ro.stats_persist_period_sec = 0;
  ro.max_background_jobs = 2;
  // The index is a few small tables: one thread opens them, where the
  // default starts 16 at every open.
  ro.max_file_opening_threads = 1;
  ro.write_buffer_size = 16 << 20;
  ro.compression = rocksdb::kNoCompression;  // 37-byte values; not worth it
  // A full disk (see the reserve): recovery replays the WAL into the
  // memtable instead of writing it out as a table (which would need up to
  // write_buffer_size bytes), and nothing is preallocated (RocksDB would
  // take a WAL's worth of blocks up front, the reserve's included).
  ro.avoid_flush_during_recovery = true;
  ro.allow_fallocate = false;
  ro.listeners.push_back(std::make_shared<ManualNoSpaceRecovery>());
  return ro;
}

Status DiskTier::Impl::ReleaseReserve(uint64_t* released) {
  *released = 0;
  const std::string path = dir_ + "/" + kReserveName;
  Status s = env_->GetFileSize(path, released);
  if (s.IsNotFound()) return Status::OK();
  OPT4STORE_RETURN_IF_ERROR(s);
  return env_->DeleteFile(path);
}

void DiskTier::Impl::MakeReserve(uint64_t bytes) {
  const std::string path = dir_ + "/" + kReserveName;
  uint64_t size = 0;
  if (bytes == 0 || (env_->GetFileSize(path, &size).ok() && size >= bytes)) return;
  std::unique_ptr<File> file;
  if (!env_->OpenFile(path, FileOptions(), &file).ok()) return;
  // Zeros written, not fallocate: every file system and Env can. A disk
  // short of space keeps what fits less one chunk, which this session's
  // small index writes (the manifest, the cursor at Close) then use.
  const std::string zeros(kReserveChunk, '\0');
  for (; size < bytes; size += zeros.size()) {
    const std::string_view part(zeros.data(), std::min<uint64_t>(zeros.size(), bytes - size));
    if (!file->Write(size, &part, 1).ok()) {
      size = size > kReserveChunk ? size - kReserveChunk : 0;
      break;
    }
  }
  file->Truncate(std::min(size, bytes)).PermitUncheckedError();
}

Status DiskTier::Impl::DamagedIndex(const std::string& why) const {
  return Status::Corruption("the index of " + dir_ + " (" + dir_ + "/index) is missing or damaged: " +
                            why + "; nothing was changed. Run 'opt4store repair " + dir_ +
                            "' to rebuild it from the segment files");
}

Status DiskTier::Impl::SegmentNumbers(std::vector<uint32_t>* numbers) const {
  numbers->clear();
  std::vector<std::string> names;
  OPT4STORE_RETURN_IF_ERROR(env_->GetChildren(segment_dir_, &names));
  for (const std::string& name : names) {
    uint32_t number;
    if (ParseSegmentName(name, &number)) numbers->push_back(number);
  }
  std::sort(numbers->begin(), numbers->end());
  return Status::OK();
}

Status DiskTier::Impl::SegmentsHoldRecords(bool* any) {
  *any = false;
  std::vector<std::string> names;
  Status s = env_->GetChildren(segment_dir_, &names);
  if (s.IsNotFound()) return Status::OK();
  OPT4STORE_RETURN_IF_ERROR(s);
  for (const std::string& name : names) {
    uint32_t number;
    uint64_t size = 0;
    if (!ParseSegmentName(name, &number)) continue;
    OPT4STORE_RETURN_IF_ERROR(env_->GetFileSize(SegmentPath(name), &size));
    if (size > 0) *any = true;
  }
  return Status::OK();
}

// RocksDB, asked to open an index whose CURRENT is gone, creates a new empty
// one over the old files (and fails, or not): every record would be
// orphaned. So it may create an index only where there was none.
Status DiskTier::Impl::CheckIndexBeforeOpen(bool* create) {
  const std::string index_dir = dir_ + "/index";
  uint64_t size = 0;
  *create = false;
  if (env_->GetFileSize(index_dir + "/CURRENT", &size).ok()) return Status::OK();
  std::vector<std::string> names;
  Status s = env_->GetChildren(index_dir, &names);
  if (!s.ok() && !s.IsNotFound()) return s;
  auto ends_with = [](const std::string& name, const char* tail) {
    const size_t n = std::strlen(tail);
    return name.size() >= n && name.compare(name.size() - n, n, tail) == 0;
  };
  for (const std::string& name : names) {
    // A kill while a new index is made leaves a MANIFEST, OPTIONS or a
    // *.dbtmp without CURRENT, but data only lives in tables and logs.
    if (ends_with(name, ".sst") || ends_with(name, ".log") || ends_with(name, ".blob")) {
      return DamagedIndex("index/CURRENT is missing (" + name + " is there)");
    }
  }
  bool records = false;
  OPT4STORE_RETURN_IF_ERROR(SegmentsHoldRecords(&records));
  if (records) return DamagedIndex("there is no index, but segment files hold records");
  *create = true;
  return Status::OK();
}

Status DiskTier::Impl::Recover() {
  MutexLock wlock(&write_mu_);
  MutexLock lock(&mu_);
  index_.Reserve(std::min<size_t>(options_.expected_ids, size_t{kMaxItemId} + 1));
  recovered_entries_.clear();
  segments_.clear();
  segments_.emplace_back();  // slot 0: "not stored"

  // Segment files on disk.
  std::vector<uint32_t> numbers;
  OPT4STORE_RETURN_IF_ERROR(SegmentNumbers(&numbers));
  if (numbers.size() > DiskIndex::kMaxSlots) {  // slots 1 to kMaxSlots, as RollOver hands out
    return Status::NotSupported("too many segment files in " + segment_dir_);
  }
  std::unordered_map<uint32_t, uint16_t> slot_of;
  for (uint32_t number : numbers) {
    std::unique_ptr<Segment> seg;
    OPT4STORE_RETURN_IF_ERROR(OpenSegment(number, &seg));
    OPT4STORE_RETURN_IF_ERROR(seg->file->Size(&seg->size));
    slot_of[number] = static_cast<uint16_t>(segments_.size());
    segments_.push_back(std::move(seg));
  }
  std::vector<uint64_t> scan_from(segments_.size(), 0);  // watermarks
  std::vector<uint64_t> kept_end(segments_.size(), 0);   // the end of the last record kept

  rocksdb::WriteBatch batch;
  uint64_t max_seq = 0;
  uint64_t value = 0;
  std::string text;
  if (db_->Get(rocksdb::ReadOptions(), kSequenceKey, &text).ok() && ParseFixed64(text, &value)) {
    max_seq = value;
  }
  if (db_->Get(rocksdb::ReadOptions(), kNextSegmentKey, &text).ok() &&
      ParseFixed64(text, &value) && value <= UINT32_MAX) {
    next_segment_number_ = std::max<uint32_t>(1, static_cast<uint32_t>(value));
  }
  if (!numbers.empty()) next_segment_number_ = std::max(next_segment_number_, numbers.back() + 1);

  // Watermarks; keys of segments whose file is gone are removed.
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string seg_prefix(1, kSegmentTag);
  for (it->Seek(seg_prefix); it->Valid() && it->key().starts_with(seg_prefix); it->Next()) {
    if (it->key().size() != 5) continue;
    const uint32_t number = GetBE32(it->key().data() + 1);
    auto found = slot_of.find(number);
    if (found == slot_of.end()) {
      batch.Delete(it->key());
      continue;
    }
    if (it->value().size() == 8) scan_from[found->second] = GetLE(it->value().data(), 8);
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(it->status(), "read segment list"));

  // Index entries; those pointing at a missing segment or past its end go,
  // into the list of lost records that Verify reports: the store serves
  // the rest, and nobody is left unaware of what it no longer has.
  const std::string index_prefix(1, kIndexTag);
  uint64_t dropped = 0;
  std::string first_loss;
  auto lose = [&](const rocksdb::Slice& key, const IndexValue& v, const std::string& why) {
    batch.Delete(key);
    if (key.size() == 5) {
      batch.Put(LostKey(GetBE32(key.data() + 1)), LostValue(v.segment, v.offset, why));
    }
    if (dropped++ == 0) first_loss = why;
  };
  for (it->Seek(index_prefix); it->Valid() && it->key().starts_with(index_prefix); it->Next()) {
    IndexValue v;
    if (it->key().size() != 5 || !DecodeIndexValue(it->value(), &v)) {
      lose(it->key(), v, "its index entry is unreadable");
      continue;
    }
    const ItemId id = GetBE32(it->key().data() + 1);
    auto found = slot_of.find(v.segment);
    if (found == slot_of.end()) {
      lose(it->key(), v, "segment file " + SegmentName(v.segment) + " is missing");
      continue;
    }
    const uint64_t end = uint64_t{v.offset} + v.length;
    if (end > segments_[found->second]->size || v.length < kRecordHeaderSize) {
      lose(it->key(), v,
           "segment file " + SegmentName(v.segment) + " ends at byte " +
               std::to_string(segments_[found->second]->size) + ", before the record's end at " +
               std::to_string(end));
      continue;
    }
    const uint16_t slot = found->second;
    index_.Put(id, DiskIndex::Location{slot, v.offset, v.length}, nullptr);
    recovered_entries_.push_back(RecoveredEntry{id, v.meta_len, v.payload_len, PlaceOf(v)});
    segments_[slot]->live_bytes += v.length;
    live_bytes_ += v.length;
    scan_from[slot] = std::max<uint64_t>(scan_from[slot], end);
    kept_end[slot] = std::max<uint64_t>(kept_end[slot], end);
    max_seq = std::max(max_seq, v.sequence);
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(it->status(), "read index"));
  it.reset();
  dropped_on_open_ = dropped;
  if (dropped > 0) {
    std::fprintf(stderr,
                 "opt4store: %s: %" PRIu64 " indexed records are lost (%s%s); "
                 "'opt4store verify' lists them\n",
                 dir_.c_str(), dropped, first_loss.c_str(), dropped > 1 ? ", ..." : "");
  }

  // Tails: records written after the last indexed one. A watermark past
  // the file's end means the file lost bytes the index had (cut short, or
  // a power loss before the segment's last bytes reached the disk): every
  // record below the watermark was indexed with it, so those without an
  // entry now are dead. They are walked, not indexed, from the last record
  // kept to the first that is not whole, and the file is cut there: appends
  // after a partial record's bytes made a repair's scan, reading it as a
  // record of its stated length, step over the whole records behind it.
  std::unordered_map<ItemId, uint64_t> recovered_seq;
  for (size_t slot = 1; slot < segments_.size(); ++slot) {
    const bool cut_short = scan_from[slot] > segments_[slot]->size;
    OPT4STORE_RETURN_IF_ERROR(ScanTail(static_cast<uint16_t>(slot),
                                       cut_short ? kept_end[slot] : scan_from[slot],
                                       scan_from[slot], &batch, &recovered_seq, &max_seq));
  }
  for (size_t slot = 1; slot < segments_.size(); ++slot) file_bytes_ += segments_[slot]->size;

  next_sequence_ = max_seq + 1;
  batch.Put(kSequenceKey, Fixed64(max_seq));
  batch.Put(kNextSegmentKey, Fixed64(next_segment_number_));
  rocksdb::WriteOptions wo;
  wo.sync = syncing();
  OPT4STORE_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "write recovered index"));

  // Keep appending to the newest segment while it has room.
  if (segments_.size() > 1 && segments_.back()->size < segment_bytes_) {
    active_ = static_cast<uint16_t>(segments_.size() - 1);
    // A crashed predecessor may have left its last bytes dirty in the page
    // cache: read them through it until the next sync.
    segments_[active_]->dirty = true;
  }
  return Status::OK();
}

// REQUIRES: write_mu_ and mu_ held (Open only).
Status DiskTier::Impl::ScanTail(uint16_t slot, uint64_t from, uint64_t index_from,
                                rocksdb::WriteBatch* batch,
                                std::unordered_map<ItemId, uint64_t>* recovered_seq,
                                uint64_t* max_seq) {
  Segment* seg = segments_[slot].get();
  uint64_t pos = from;
  std::string record;
  while (pos < seg->size) {
    char head[kRecordHeaderSize];
    size_t got = 0;
    OPT4STORE_RETURN_IF_ERROR(ReadFully(seg->file.get(), pos, sizeof(head), head, &got));
    RecordHeader h;
    if (got < sizeof(head) || !DecodeRecordHeader(head, got, &h).ok() ||
        pos + h.record_size() > seg->size || pos + h.record_size() > UINT32_MAX) {
      break;
    }
    record.resize(h.record_size());
    OPT4STORE_RETURN_IF_ERROR(ReadFully(seg->file.get(), pos, record.size(), record.data(), &got));
    if (got < record.size() || !VerifyRecord(record.data(), got, h.id, &h).ok()) break;

    // A valid record whose index batch was lost. It wins unless the index
    // already holds a version at least as new.
    bool newer = pos >= index_from;
    DiskIndex::Location old;
    if (newer && index_.Lookup(h.id, &old)) {
      uint64_t current_seq = 0;
      auto r = recovered_seq->find(h.id);
      if (r != recovered_seq->end()) {
        current_seq = r->second;
      } else {
        std::string v;
        IndexValue iv;
        if (db_->Get(rocksdb::ReadOptions(), IndexKey(h.id), &v).ok() &&
            DecodeIndexValue(v, &iv)) {
          current_seq = iv.sequence;
        }
      }
      newer = h.sequence > current_seq;
    }
    if (newer) {
      const DiskIndex::Location loc{slot, static_cast<uint32_t>(pos),
                                    static_cast<uint32_t>(h.record_size())};
      if (index_.Put(h.id, loc, &old)) {
        segments_[old.slot]->live_bytes -= old.length;
        live_bytes_ -= old.length;
      }
      seg->live_bytes += loc.length;
      live_bytes_ += loc.length;
      (*recovered_seq)[h.id] = h.sequence;
      batch->Put(IndexKey(h.id), EncodeIndexValue(MakeIndexValue(h, seg->number, loc.offset)));
      ++recovered_;
    }
    *max_seq = std::max(*max_seq, h.sequence);
    pos += h.record_size();
  }
  if (pos < seg->size) {
    std::fprintf(stderr, "opt4store: %s: truncating a torn tail at offset %" PRIu64 " (%" PRIu64
                         " bytes)\n",
                 SegmentPath(seg->name).c_str(), pos, seg->size - pos);
    OPT4STORE_RETURN_IF_ERROR(seg->file->Truncate(pos));
    truncated_bytes_ += seg->size - pos;
    seg->size = pos;
  }
  // The watermark never points past the end: appends continue from there.
  batch->Put(SegmentKey(seg->number), Fixed64(std::min(pos, seg->size)));
  return Status::OK();
}

}  // namespace opt4store

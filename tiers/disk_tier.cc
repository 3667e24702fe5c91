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
#include "tiers/disk_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "tiers/disk_index.h"
#include "engine/base/env.h"
#include "tiers/segment.h"

namespace opt4store {

namespace {

// ------------------------------------------------------------ manifest keys

// Index entries: 'i' + id (big-endian, so that ids iterate in order).
constexpr char kIndexTag = 'i';
// Segments: 'w' + number -> watermark (end of the last indexed record).
constexpr char kSegmentTag = 'w';
// The store's own keys (PutMeta): 'm' + key.
constexpr char kUserTag = 'm';
const char kFormatKey[] = "format";
const char kFormatValue[] = "opt4store-disk-v1";
const char kNextSegmentKey[] = "n";
const char kSequenceKey[] = "q";

void PutBE32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t GetBE32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void PutLE(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string IndexKey(ItemId id) {
  std::string k(1, kIndexTag);
  PutBE32(&k, id);
  return k;
}
std::string SegmentKey(uint32_t number) {
  std::string k(1, kSegmentTag);
  PutBE32(&k, number);
  return k;
}
std::string Fixed64(uint64_t v) {
  std::string s;
  PutLE(&s, v, 8);
  return s;
}
bool ParseFixed64(const std::string& s, uint64_t* v) {
  if (s.size() != 8) return false;
  *v = GetLE(s.data(), 8);
  return true;
}

// An index entry: where the record is, and what its header says.
struct IndexValue {
  uint64_t sequence = 0;
  uint32_t segment = 0;
  uint32_t offset = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
  uint8_t codec = 0;
  uint32_t meta_len = 0;
  uint32_t payload_len = 0;
  uint32_t stored_len = 0;
};
constexpr size_t kIndexValueSize = 37;

std::string EncodeIndexValue(const IndexValue& v) {
  std::string s;
  s.reserve(kIndexValueSize);
  PutLE(&s, v.sequence, 8);
  PutLE(&s, v.segment, 4);
  PutLE(&s, v.offset, 4);
  PutLE(&s, v.length, 4);
  PutLE(&s, v.crc, 4);
  PutLE(&s, v.codec, 1);
  PutLE(&s, v.meta_len, 4);
  PutLE(&s, v.payload_len, 4);
  PutLE(&s, v.stored_len, 4);
  return s;
}
bool DecodeIndexValue(const rocksdb::Slice& s, IndexValue* v) {
  if (s.size() != kIndexValueSize) return false;
  const char* p = s.data();
  v->sequence = GetLE(p, 8);
  v->segment = static_cast<uint32_t>(GetLE(p + 8, 4));
  v->offset = static_cast<uint32_t>(GetLE(p + 12, 4));
  v->length = static_cast<uint32_t>(GetLE(p + 16, 4));
  v->crc = static_cast<uint32_t>(GetLE(p + 20, 4));
  v->codec = static_cast<uint8_t>(p[24]);
  v->meta_len = static_cast<uint32_t>(GetLE(p + 25, 4));
  v->payload_len = static_cast<uint32_t>(GetLE(p + 29, 4));
  v->stored_len = static_cast<uint32_t>(GetLE(p + 33, 4));
  return true;
}
IndexValue MakeIndexValue(const RecordHeader& h, uint32_t segment, uint32_t offset) {
  IndexValue v;
  v.sequence = h.sequence;
  v.segment = segment;
  v.offset = offset;
  v.length = static_cast<uint32_t>(h.record_size());
  v.crc = h.crc;
  v.codec = static_cast<uint8_t>(h.codec);
  v.meta_len = h.meta_len;
  v.payload_len = h.payload_len;
  v.stored_len = h.stored_len;
  return v;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  const std::string msg = what + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(msg);
  if (s.IsNoSpace()) return Status::NoSpace(msg);
  if (s.IsCorruption()) return Status::Corruption(msg);
  if (s.IsBusy()) return Status::Busy(msg);
  return Status::IOError(msg);
}

std::string SegmentName(uint32_t number) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%06" PRIu32 ".seg", number);
  return buf;
}
bool ParseSegmentName(const std::string& name, uint32_t* number) {
  if (name.size() < 5 || name.compare(name.size() - 4, 4, ".seg") != 0) return false;
  uint64_t n = 0;
  for (size_t i = 0; i + 4 < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    n = n * 10 + static_cast<uint64_t>(name[i] - '0');
    if (n > UINT32_MAX) return false;
  }
  *number = static_cast<uint32_t>(n);
  return n > 0;
}

uint64_t AlignDown(uint64_t x) { return x & ~uint64_t{kDirectIoAlignment - 1}; }
uint64_t AlignUp(uint64_t x) { return AlignDown(x + kDirectIoAlignment - 1); }

// A posix_memalign'ed buffer for O_DIRECT reads, grown on demand.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), capacity_(o.capacity_) {
    o.data_ = nullptr;
    o.capacity_ = 0;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  bool Reserve(size_t n) {
    if (n <= capacity_) return true;
    void* p = nullptr;
    if (posix_memalign(&p, kDirectIoAlignment, n) != 0) return false;
    std::free(data_);
    data_ = static_cast<char*>(p);
    capacity_ = n;
    return true;
  }
  char* data() const { return data_; }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

constexpr uint64_t kMaxSegmentBytes = uint64_t{2} << 30;
constexpr uint64_t kMinSegmentBytes = 4096;
// Compaction collects the records of a segment from the index in chunks of
// this many ids, releasing mu_ in between so that readers get through.
constexpr size_t kScanChunk = 1 << 16;
// Index updates of a compaction are committed in batches of this size.
constexpr size_t kCompactionBatch = 256;

}  // namespace

// ------------------------------------------------------------------ Impl

class DiskTier::Impl {
 public:
  Impl(const DiskTierOptions& options, std::string dir);
  ~Impl();

  Status Open();
  Status Put(ItemId id, std::string_view meta, std::string_view payload,
             std::vector<ItemId>* evicted);
  void MultiGet(const ItemId* ids, size_t n, const RecordCallback& fn);
  bool Contains(ItemId id) const;
  Status ForEachItemSize(const std::function<void(ItemId id, uint64_t bytes)>& fn) const;
  Status Delete(ItemId id);
  void SetNextUse(ItemId id, uint64_t next_use);
  Status Flush();
  Status Compact();
  Status Verify(VerifyReport* report);
  Status PutMeta(std::string_view key, std::string_view value);
  Status GetMeta(std::string_view key, std::string* value);
  DiskTierStats GetStats() const;
  std::vector<DiskSegmentInfo> Segments() const;
  Status Close();

 private:
  struct Segment {
    uint32_t number = 0;
    std::string name;
    std::shared_ptr<File> file;
    uint64_t size = 0;        // bytes appended (the file's logical end)
    uint64_t live_bytes = 0;  // bytes of records the index points to
    // Written since its last fdatasync. Set and cleared under write_mu_ and
    // mu_; readers (mu_) read a clean segment with O_DIRECT and a dirty one
    // through the page cache, where its recent bytes still are.
    bool dirty = false;
  };

  // One record to read, with everything needed to read it without mu_.
  struct ReadTarget {
    ItemId id = 0;
    DiskIndex::Location loc;
    std::shared_ptr<File> file;
    std::string segment;  // file name, for messages
    bool direct = false;  // the segment is synced: O_DIRECT cannot meet dirty pages
  };

  // A read queue with its buffers; pooled, one per concurrent reader. One
  // slot more than the queue's depth: a completion is processed (CRC, copy)
  // after its replacement read has been started.
  struct Reader {
    struct Slot {
      size_t target = 0;
      uint64_t base = 0;  // start of the read (aligned for O_DIRECT)
      size_t need = 0;    // bytes from base to the record's end
      size_t total = 0;   // bytes from base to the end of the read
    };
    std::unique_ptr<ReadQueue> queue;
    std::vector<AlignedBuffer> buffers;
    std::vector<ReadRequest> requests;
    std::vector<Slot> slots;
    std::vector<unsigned> free;
  };

  bool every_put() const { return options_.sync == DiskTierOptions::SyncMode::kEveryPut; }
  bool syncing() const { return options_.sync != DiskTierOptions::SyncMode::kNone; }
  rocksdb::WriteOptions WriteOpts() const {
    rocksdb::WriteOptions wo;
    wo.sync = every_put();
    return wo;
  }
  std::string SegmentPath(const std::string& name) const { return segment_dir_ + "/" + name; }

  Status Recover();
  Status ScanTail(uint16_t slot, uint64_t from, rocksdb::WriteBatch* batch,
                  std::unordered_map<ItemId, uint64_t>* recovered_seq, uint64_t* max_seq);

  // Reads each target's record (an aligned superset of it, O_DIRECT where
  // the file allows) with up to queue_depth reads in flight. fn(i, status,
  // record) runs once per target as soon as its bytes are in, while other
  // reads are still in flight; record (OK only) is valid during the call.
  template <typename Fn>
  void ReadRecords(const ReadTarget* targets, size_t n, Fn&& fn);
  std::unique_ptr<Reader> AcquireReader();
  void ReleaseReader(std::unique_ptr<Reader> reader);

  // Collects what a read needs. REQUIRES: mu_ held.
  bool TargetLocked(ItemId id, ReadTarget* target) const;

  // The rest REQUIRE write_mu_ held.
  Status MakeRoom(uint64_t size, std::vector<ItemId>* evicted);
  Status EvictOne(std::vector<ItemId>* evicted);
  Status RollOver();
  Status EnsureActiveFits(uint64_t size);
  // Appends a record's bytes to the active segment; on failure truncates
  // them away again. *slot, *offset: where it went.
  Status Append(const std::string_view* parts, size_t count, uint64_t size, uint16_t* slot,
                uint64_t* offset);
  void RollBack(uint16_t slot, uint64_t offset);
  Status CompactSegment(uint16_t slot);
  Status SyncDirty();
  void DropCorruptLocked(ItemId id, const DiskIndex::Location& loc);
  void DropCorrupt(ItemId id, const DiskIndex::Location& loc);

  const DiskTierOptions options_;
  Env* const env_;
  const std::string dir_;
  const std::string segment_dir_;
  uint64_t segment_bytes_ = 0;  // effective; also the compaction reserve

  std::unique_ptr<FileLock> lock_;
  std::unique_ptr<rocksdb::DB> db_;
  std::atomic<bool> closed_{false};

  std::mutex write_mu_;
  uint16_t active_ = 0;               // GUARDED_BY(write_mu_): slot of the active segment
  uint32_t next_segment_number_ = 1;  // GUARDED_BY(write_mu_)
  uint64_t next_sequence_ = 1;        // GUARDED_BY(write_mu_)
  bool dir_dirty_ = false;            // GUARDED_BY(write_mu_): segments created or removed

  mutable std::mutex mu_;
  DiskIndex index_;                                // GUARDED_BY(mu_)
  std::vector<std::unique_ptr<Segment>> segments_;  // GUARDED_BY(mu_): by slot, [0] unused
  std::vector<uint16_t> free_slots_;               // GUARDED_BY(mu_)
  uint64_t file_bytes_ = 0;                        // GUARDED_BY(mu_)
  uint64_t live_bytes_ = 0;                        // GUARDED_BY(mu_)

  std::mutex reader_mu_;
  std::vector<std::unique_ptr<Reader>> idle_readers_;  // GUARDED_BY(reader_mu_)

  // Counters; relaxed atomics, read together by GetStats.
  std::atomic<uint64_t> puts_{0}, user_bytes_{0}, physical_bytes_{0}, compressed_{0};
  std::atomic<uint64_t> gets_{0}, hits_{0}, corrupt_{0}, read_errors_{0};
  std::atomic<uint64_t> evictions_{0}, compactions_{0}, compaction_bytes_{0};
  std::atomic<uint64_t> recovered_{0}, dropped_on_open_{0}, truncated_bytes_{0};
  std::atomic<bool> uses_io_uring_{false};
};

DiskTier::Impl::Impl(const DiskTierOptions& options, std::string dir)
    : options_(options),
      env_(options.env ? options.env : Env::Default()),
      dir_(std::move(dir)),
      segment_dir_(dir_ + "/segments") {}

DiskTier::Impl::~Impl() { Close().PermitUncheckedError(); }

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
  // One segment of the budget is the compaction reserve: at most 1/8. The
  // slot table holds 65535 segments, so a huge budget gets larger segments.
  segment_bytes_ = std::min({options_.segment_bytes, options_.budget_bytes / 8, kMaxSegmentBytes});
  segment_bytes_ = std::max(segment_bytes_, options_.budget_bytes / 60000);
  if (segment_bytes_ < kMinSegmentBytes) {
    return Status::InvalidArgument("budget_bytes must be at least 32 KiB and segment_bytes 4 KiB");
  }

  OPT4STORE_RETURN_IF_ERROR(env_->CreateDirIfMissing(dir_));
  OPT4STORE_RETURN_IF_ERROR(env_->LockFile(dir_ + "/LOCK", &lock_));
  OPT4STORE_RETURN_IF_ERROR(env_->CreateDirIfMissing(segment_dir_));

  rocksdb::Options ro;
  ro.create_if_missing = true;
  // RocksDB's info LOG keeps warnings and errors only (a damaged index, a
  // full disk), in at most two files of 1 MiB. No stats dump or persist
  // timer: Stats() holds the store's own counters, and the dump ran
  // RocksDB's DumpStats on a timer thread every 10 minutes for nothing.
  ro.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  ro.max_log_file_size = 1 << 20;
  ro.keep_log_file_num = 2;
  ro.stats_dump_period_sec = 0;
  ro.stats_persist_period_sec = 0;
  ro.max_background_jobs = 2;
  ro.write_buffer_size = 16 << 20;
  ro.compression = rocksdb::kNoCompression;  // 37-byte values; not worth it
  rocksdb::DB* db = nullptr;
  OPT4STORE_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(ro, dir_ + "/index", &db), "open index " + dir_ + "/index"));
  db_.reset(db);

  std::string format;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), kFormatKey, &format);
  if (rs.IsNotFound()) {
    OPT4STORE_RETURN_IF_ERROR(
        FromRocks(db_->Put(rocksdb::WriteOptions(), kFormatKey, kFormatValue), "write format"));
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

Status DiskTier::Impl::Recover() {
  std::lock_guard<std::mutex> wlock(write_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  index_.Reserve(std::min<size_t>(options_.expected_ids, size_t{kMaxItemId} + 1));
  segments_.clear();
  segments_.emplace_back();  // slot 0: "not stored"

  // Segment files on disk.
  std::vector<std::string> names;
  OPT4STORE_RETURN_IF_ERROR(env_->GetChildren(segment_dir_, &names));
  std::vector<uint32_t> numbers;
  for (const std::string& name : names) {
    uint32_t number;
    if (ParseSegmentName(name, &number)) numbers.push_back(number);
  }
  std::sort(numbers.begin(), numbers.end());
  if (numbers.size() >= DiskIndex::kMaxSlots) {
    return Status::NotSupported("too many segment files in " + segment_dir_);
  }
  std::unordered_map<uint32_t, uint16_t> slot_of;
  for (uint32_t number : numbers) {
    auto seg = std::make_unique<Segment>();
    seg->number = number;
    seg->name = SegmentName(number);
    std::unique_ptr<File> file;
    FileOptions fo;
    fo.direct_reads = options_.direct_io;
    OPT4STORE_RETURN_IF_ERROR(env_->OpenFile(SegmentPath(seg->name), fo, &file));
    OPT4STORE_RETURN_IF_ERROR(file->Size(&seg->size));
    seg->file = std::move(file);
    slot_of[number] = static_cast<uint16_t>(segments_.size());
    segments_.push_back(std::move(seg));
  }
  std::vector<uint64_t> scan_from(segments_.size(), 0);

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

  // Index entries; those pointing at a missing segment or past its end go.
  const std::string index_prefix(1, kIndexTag);
  uint64_t dropped = 0;
  for (it->Seek(index_prefix); it->Valid() && it->key().starts_with(index_prefix); it->Next()) {
    IndexValue v;
    if (it->key().size() != 5 || !DecodeIndexValue(it->value(), &v)) {
      batch.Delete(it->key());
      ++dropped;
      continue;
    }
    const ItemId id = GetBE32(it->key().data() + 1);
    auto found = slot_of.find(v.segment);
    if (found == slot_of.end() ||
        uint64_t{v.offset} + v.length > segments_[found->second]->size ||
        v.length < kRecordHeaderSize) {
      batch.Delete(it->key());
      ++dropped;
      continue;
    }
    const uint16_t slot = found->second;
    index_.Put(id, DiskIndex::Location{slot, v.offset, v.length}, nullptr);
    segments_[slot]->live_bytes += v.length;
    live_bytes_ += v.length;
    scan_from[slot] = std::max<uint64_t>(scan_from[slot], uint64_t{v.offset} + v.length);
    max_seq = std::max(max_seq, v.sequence);
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(it->status(), "read index"));
  it.reset();
  dropped_on_open_ = dropped;

  // Tails: records written after the last indexed one.
  std::unordered_map<ItemId, uint64_t> recovered_seq;
  for (size_t slot = 1; slot < segments_.size(); ++slot) {
    OPT4STORE_RETURN_IF_ERROR(ScanTail(static_cast<uint16_t>(slot), scan_from[slot], &batch,
                                       &recovered_seq, &max_seq));
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
Status DiskTier::Impl::ScanTail(uint16_t slot, uint64_t from, rocksdb::WriteBatch* batch,
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
    bool newer = true;
    DiskIndex::Location old;
    if (index_.Lookup(h.id, &old)) {
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

// ------------------------------------------------------------------ reads

std::unique_ptr<DiskTier::Impl::Reader> DiskTier::Impl::AcquireReader() {
  {
    std::lock_guard<std::mutex> lock(reader_mu_);
    if (!idle_readers_.empty()) {
      std::unique_ptr<Reader> r = std::move(idle_readers_.back());
      idle_readers_.pop_back();
      return r;
    }
  }
  auto r = std::make_unique<Reader>();
  ReadQueueOptions qo;
  qo.depth = options_.queue_depth;
  qo.io_uring = options_.use_io_uring;
  if (!env_->NewReadQueue(qo, &r->queue).ok()) return nullptr;
  uses_io_uring_ = r->queue->uses_io_uring();
  const unsigned slots = r->queue->depth() + 1;
  r->buffers.resize(slots);
  r->requests.resize(slots);
  r->slots.resize(slots);
  for (unsigned i = 0; i < slots; ++i) r->free.push_back(slots - 1 - i);
  return r;
}

void DiskTier::Impl::ReleaseReader(std::unique_ptr<Reader> reader) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  idle_readers_.push_back(std::move(reader));
}

template <typename Fn>
void DiskTier::Impl::ReadRecords(const ReadTarget* targets, size_t n, Fn&& fn) {
  if (n == 0) return;
  std::unique_ptr<Reader> reader = AcquireReader();
  if (!reader) {
    for (size_t i = 0; i < n; ++i) fn(i, Status::IOError("cannot create a read queue"), nullptr);
    return;
  }
  ReadQueue* queue = reader->queue.get();
  size_t next = 0;
  // Keeps the queue full.
  auto top_up = [&] {
    while (next < n && queue->in_flight() < queue->depth() && !reader->free.empty()) {
      const unsigned s = reader->free.back();
      const ReadTarget& t = targets[next];
      Reader::Slot& slot = reader->slots[s];
      slot.target = next++;
      const uint64_t end = uint64_t{t.loc.offset} + t.loc.length;
      // O_DIRECT reads the aligned superset of the record; the page cache
      // path reads just the record.
      slot.base = t.direct ? AlignDown(t.loc.offset) : t.loc.offset;
      slot.total = static_cast<size_t>((t.direct ? AlignUp(end) : end) - slot.base);
      slot.need = static_cast<size_t>(end - slot.base);
      if (!reader->buffers[s].Reserve(slot.total)) {
        fn(slot.target, Status::IOError("out of memory for a read buffer"), nullptr);
        continue;
      }
      reader->free.pop_back();
      ReadRequest& req = reader->requests[s];
      req.file = t.file.get();
      req.offset = slot.base;
      req.length = slot.total;
      req.scratch = reader->buffers[s].data();
      req.context = reinterpret_cast<void*>(static_cast<uintptr_t>(s));
      req.allow_direct = t.direct;
      queue->Submit(&req);
    }
  };
  for (top_up(); queue->in_flight() > 0 || next < n; top_up()) {
    ReadRequest* req = queue->WaitOne();
    if (req == nullptr) continue;  // every remaining target failed to start
    const unsigned s = static_cast<unsigned>(reinterpret_cast<uintptr_t>(req->context));
    Reader::Slot& slot = reader->slots[s];
    const ReadTarget& t = targets[slot.target];
    char* buffer = reader->buffers[s].data();
    const size_t have = static_cast<size_t>(req->offset - slot.base) + req->result;
    if (req->status.ok() && have < slot.need && req->result > 0) {
      // A short read: ask for the rest, into the same buffer.
      req->offset = slot.base + have;
      req->length = slot.total - have;
      req->scratch = buffer + have;
      queue->Submit(req);
      continue;
    }
    top_up();  // the replacement read starts before this one is processed
    if (!req->status.ok()) {
      fn(slot.target, req->status, nullptr);
    } else if (have >= slot.need) {
      fn(slot.target, Status::OK(), buffer + (t.loc.offset - slot.base));
    } else {
      fn(slot.target,
         Status::Corruption(t.segment + " ends before the record at offset " +
                            std::to_string(t.loc.offset) + " does"),
         nullptr);
    }
    reader->free.push_back(s);
  }
  ReleaseReader(std::move(reader));
}

bool DiskTier::Impl::TargetLocked(ItemId id, ReadTarget* target) const {
  if (!index_.Lookup(id, &target->loc)) return false;
  if (target->loc.slot >= segments_.size() || !segments_[target->loc.slot]) return false;
  const Segment* seg = segments_[target->loc.slot].get();
  target->id = id;
  target->file = seg->file;
  target->segment = seg->name;
  target->direct = !seg->dirty;
  return true;
}

void DiskTier::Impl::MultiGet(const ItemId* ids, size_t n, const RecordCallback& fn) {
  gets_.fetch_add(n, std::memory_order_relaxed);
  if (closed_) {
    for (size_t i = 0; i < n; ++i) fn(i, Status::IOError("disk tier is closed"), {}, {});
    return;
  }
  std::vector<ReadTarget> targets;
  std::vector<size_t> index_of;  // target -> position in ids
  targets.reserve(n);
  index_of.reserve(n);
  std::vector<size_t> missing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      ReadTarget t;
      if (TargetLocked(ids[i], &t)) {
        targets.push_back(std::move(t));
        index_of.push_back(i);
      } else {
        missing.push_back(i);
      }
    }
  }
  for (size_t i : missing) {
    fn(i, Status::NotFound("id " + std::to_string(ids[i]) + " is not on disk"), {}, {});
  }
  std::vector<size_t> corrupt;
  uint64_t hits = 0, errors = 0;
  std::string scratch;  // decompressed payloads
  ReadRecords(targets.data(), targets.size(), [&](size_t t, Status s, const char* record) {
    const size_t i = index_of[t];
    std::string_view meta, payload;
    if (s.ok()) {
      s = DecodeRecordView(record, targets[t].loc.length, ids[i], &meta, &payload, &scratch);
      if (!s.ok()) {
        s = Status::Corruption(targets[t].segment + " offset " +
                               std::to_string(targets[t].loc.offset) + ": " + s.message());
      }
    }
    if (s.ok()) {
      ++hits;
    } else if (s.IsCorruption()) {
      corrupt.push_back(t);
    } else {
      ++errors;
    }
    fn(i, s, meta, payload);
  });
  hits_.fetch_add(hits, std::memory_order_relaxed);
  read_errors_.fetch_add(errors, std::memory_order_relaxed);
  for (size_t t : corrupt) DropCorrupt(targets[t].id, targets[t].loc);
}

bool DiskTier::Impl::Contains(ItemId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.Contains(id);
}

Status DiskTier::Impl::ForEachItemSize(
    const std::function<void(ItemId id, uint64_t bytes)>& fn) const {
  if (closed_) return Status::IOError("disk tier is closed");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kIndexTag);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    IndexValue v;
    if (it->key().size() != 5 || !DecodeIndexValue(it->value(), &v)) continue;
    const ItemId id = GetBE32(it->key().data() + 1);
    if (Contains(id)) fn(id, uint64_t{v.meta_len} + v.payload_len);
  }
  return FromRocks(it->status(), "scan the index");
}

void DiskTier::Impl::SetNextUse(ItemId id, uint64_t next_use) {
  if (id > kMaxItemId) return;  // cannot be stored either
  std::lock_guard<std::mutex> lock(mu_);
  index_.SetNextUse(id, next_use);
}

void DiskTier::Impl::DropCorrupt(ItemId id, const DiskIndex::Location& loc) {
  std::lock_guard<std::mutex> wlock(write_mu_);
  if (closed_) return;
  DropCorruptLocked(id, loc);
}

void DiskTier::Impl::DropCorruptLocked(ItemId id, const DiskIndex::Location& loc) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    DiskIndex::Location cur;
    // Someone may have moved or replaced it since it was read.
    if (!index_.Lookup(id, &cur) || cur.slot != loc.slot || cur.offset != loc.offset) return;
    index_.Erase(id, nullptr);
    segments_[loc.slot]->live_bytes -= loc.length;
    live_bytes_ -= loc.length;
  }
  corrupt_.fetch_add(1, std::memory_order_relaxed);
  // Best effort: if the delete is lost, the next Open finds the record
  // again and the next read drops it again.
  db_->Delete(WriteOpts(), IndexKey(id)).PermitUncheckedError();
}

// ------------------------------------------------------------------ writes

Status DiskTier::Impl::Put(ItemId id, std::string_view meta, std::string_view payload,
                           std::vector<ItemId>* evicted) {
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
  // Compression runs before the lock, so that readers and the writer's
  // other work do not wait for it.
  EncodedRecord rec;
  EncodeRecord(id, meta, payload,
               options_.compression == DiskTierOptions::Compression::kAuto, &rec);

  std::lock_guard<std::mutex> wlock(write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  const uint64_t size = rec.size();
  OPT4STORE_RETURN_IF_ERROR(MakeRoom(size, evicted));
  SealRecord(next_sequence_, &rec);

  const std::string_view parts[2] = {rec.head, rec.body};
  uint16_t slot = 0;
  uint64_t offset = 0;
  OPT4STORE_RETURN_IF_ERROR(Append(parts, 2, size, &slot, &offset));
  Segment* seg = segments_[slot].get();  // stable: only this thread changes the table
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
  Status s = FromRocks(db_->Write(WriteOpts(), &batch), "write index");
  if (!s.ok()) {
    RollBack(slot, offset);
    return s;
  }
  ++next_sequence_;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  if (rec.header.codec == Codec::kLz4) compressed_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status DiskTier::Impl::Append(const std::string_view* parts, size_t count, uint64_t size,
                              uint16_t* slot, uint64_t* offset) {
  OPT4STORE_RETURN_IF_ERROR(EnsureActiveFits(size));
  Segment* seg = segments_[active_].get();
  *slot = active_;
  *offset = seg->size;
  Status s = seg->file->Write(*offset, parts, count);
  if (!s.ok()) {
    RollBack(active_, *offset);
    return s.WithContext("append to " + seg->name);
  }
  physical_bytes_.fetch_add(size, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  seg->size += size;
  seg->dirty = true;
  file_bytes_ += size;
  return Status::OK();
}

void DiskTier::Impl::RollBack(uint16_t slot, uint64_t offset) {
  Segment* seg = segments_[slot].get();
  // If the truncate fails too, the next append overwrites the bytes (writes
  // go to our own offset, not O_APPEND) and recovery would cut them off.
  seg->file->Truncate(offset).PermitUncheckedError();
  std::lock_guard<std::mutex> lock(mu_);
  if (seg->size > offset) {
    file_bytes_ -= seg->size - offset;
    seg->size = offset;
  }
}

Status DiskTier::Impl::EnsureActiveFits(uint64_t size) {
  if (active_ != 0) {
    const Segment* seg = segments_[active_].get();
    // A record larger than a segment gets a segment of its own.
    if (seg->size == 0 || seg->size + size <= segment_bytes_) return Status::OK();
  }
  return RollOver();
}

Status DiskTier::Impl::RollOver() {
  // Seal the active segment: with O_DIRECT reads, sync it (in every
  // SyncMode), so that its reads need not wait for writeback. The kernel
  // would have to write these bytes soon anyway.
  if (options_.direct_io && active_ != 0 && segments_[active_]->dirty) {
    Segment* sealed = segments_[active_].get();
    OPT4STORE_RETURN_IF_ERROR(sealed->file->Sync());
    std::lock_guard<std::mutex> lock(mu_);
    sealed->dirty = false;
  }
  const uint32_t number = next_segment_number_;
  uint16_t slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_slots_.empty() && segments_.size() > DiskIndex::kMaxSlots) {
      return Status::NoSpace("more than 65535 segment files");
    }
  }
  // Number first, so that a crash cannot hand the same number out twice.
  rocksdb::WriteBatch batch;
  batch.Put(kNextSegmentKey, Fixed64(uint64_t{number} + 1));
  batch.Put(SegmentKey(number), Fixed64(0));
  OPT4STORE_RETURN_IF_ERROR(FromRocks(db_->Write(WriteOpts(), &batch), "write segment list"));
  next_segment_number_ = number + 1;

  auto seg = std::make_unique<Segment>();
  seg->number = number;
  seg->name = SegmentName(number);
  std::unique_ptr<File> file;
  FileOptions fo;
  fo.direct_reads = options_.direct_io;
  OPT4STORE_RETURN_IF_ERROR(env_->OpenFile(SegmentPath(seg->name), fo, &file));
  seg->file = std::move(file);
  dir_dirty_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
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

Status DiskTier::Impl::MakeRoom(uint64_t size, std::vector<ItemId>* evicted) {
  const uint64_t budget = options_.budget_bytes;
  // Refuse a record that can never fit before evicting anything for it.
  if (size + segment_bytes_ > budget) {
    return Status::NoSpace("a record of " + std::to_string(size) +
                           " bytes does not fit in the disk budget of " + std::to_string(budget) +
                           " bytes (" + std::to_string(segment_bytes_) +
                           " held back for compaction)");
  }
  for (;;) {
    uint16_t best = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
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

Status DiskTier::Impl::EvictOne(std::vector<ItemId>* evicted) {
  ItemId victim;
  {
    std::lock_guard<std::mutex> lock(mu_);
    victim = index_.Victim();
    DiskIndex::Location loc;
    index_.Erase(victim, &loc);
    segments_[loc.slot]->live_bytes -= loc.length;
    live_bytes_ -= loc.length;
  }
  evictions_.fetch_add(1, std::memory_order_relaxed);
  if (evicted != nullptr) evicted->push_back(victim);
  return FromRocks(db_->Delete(WriteOpts(), IndexKey(victim)), "evict from index");
}

Status DiskTier::Impl::Delete(ItemId id) {
  std::lock_guard<std::mutex> wlock(write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    DiskIndex::Location loc;
    if (!index_.Erase(id, &loc)) {
      return Status::NotFound("id " + std::to_string(id) + " is not on disk");
    }
    segments_[loc.slot]->live_bytes -= loc.length;
    live_bytes_ -= loc.length;
  }
  return FromRocks(db_->Delete(WriteOpts(), IndexKey(id)), "delete from index");
}

// ------------------------------------------------------------ compaction

Status DiskTier::Impl::CompactSegment(uint16_t slot) {
  if (slot == active_) OPT4STORE_RETURN_IF_ERROR(RollOver());
  Segment* seg;
  std::vector<ReadTarget> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seg = segments_[slot].get();
  }
  // The records still live in this segment, from the index, a chunk at a
  // time so that readers are not held up by a long scan.
  for (size_t begin = 0;; begin += kScanChunk) {
    std::lock_guard<std::mutex> lock(mu_);
    if (begin >= index_.id_limit()) break;
    index_.ForEach(begin, begin + kScanChunk, [&](ItemId id, const DiskIndex::Location& loc) {
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
    if (moves.empty()) return Status::OK();
    const Segment* active = segments_[active_].get();
    batch.Put(SegmentKey(active->number), Fixed64(active->size));
    OPT4STORE_RETURN_IF_ERROR(FromRocks(db_->Write(WriteOpts(), &batch), "write index"));
    batch.Clear();
    std::lock_guard<std::mutex> lock(mu_);
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
    if (active_ != 0 && segments_[active_]->size > 0 &&
        segments_[active_]->size + t.loc.length > segment_bytes_) {
      error = commit();
      if (!error.ok()) return;
    }
    const std::string_view part(record, t.loc.length);
    uint16_t to_slot;
    uint64_t to_offset;
    error = Append(&part, 1, t.loc.length, &to_slot, &to_offset);
    if (!error.ok()) return;
    const Segment* to = segments_[to_slot].get();
    batch.Put(IndexKey(t.id), EncodeIndexValue(MakeIndexValue(h, to->number,
                                                              static_cast<uint32_t>(to_offset))));
    moves.push_back({t.id, t.loc, {to_slot, static_cast<uint32_t>(to_offset), t.loc.length}});
    moved_bytes += t.loc.length;
    if (moves.size() >= kCompactionBatch) error = commit();
  });
  if (error.ok()) error = commit();
  for (const auto& c : corrupt) DropCorruptLocked(c.first, c.second);
  OPT4STORE_RETURN_IF_ERROR(error);

  // Every copy must be durable before the only other copy goes.
  if (syncing()) {
    OPT4STORE_RETURN_IF_ERROR(SyncDirty());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seg->live_bytes != 0) {
      return Status::IOError("compaction of " + seg->name + " left live records behind");
    }
  }
  OPT4STORE_RETURN_IF_ERROR(env_->DeleteFile(SegmentPath(seg->name)));
  dir_dirty_ = true;
  db_->Delete(WriteOpts(), SegmentKey(seg->number)).PermitUncheckedError();  // Open drops it too
  {
    std::lock_guard<std::mutex> lock(mu_);
    file_bytes_ -= seg->size;
    segments_[slot].reset();
    free_slots_.push_back(slot);
  }
  compactions_.fetch_add(1, std::memory_order_relaxed);
  compaction_bytes_.fetch_add(moved_bytes, std::memory_order_relaxed);
  return Status::OK();
}

Status DiskTier::Impl::Compact() {
  std::lock_guard<std::mutex> wlock(write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  std::vector<std::pair<double, uint32_t>> candidates;  // (live ratio, segment number)
  {
    std::lock_guard<std::mutex> lock(mu_);
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
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t s = 1; s < segments_.size(); ++s) {
        if (segments_[s] && segments_[s]->number == c.second) slot = static_cast<uint16_t>(s);
      }
      if (slot != 0) {
        fits = file_bytes_ + segments_[slot]->live_bytes <= options_.budget_bytes;
      }
    }
    if (slot != 0 && fits) OPT4STORE_RETURN_IF_ERROR(CompactSegment(slot));
  }
  return Status::OK();
}

// ------------------------------------------------------------------ sync

Status DiskTier::Impl::SyncDirty() {
  std::vector<Segment*> dirty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t s = 1; s < segments_.size(); ++s) {
      if (segments_[s] && segments_[s]->dirty) dirty.push_back(segments_[s].get());
    }
  }
  for (Segment* seg : dirty) {
    OPT4STORE_RETURN_IF_ERROR(seg->file->Sync());
    std::lock_guard<std::mutex> lock(mu_);
    seg->dirty = false;
  }
  if (dir_dirty_) {
    OPT4STORE_RETURN_IF_ERROR(env_->SyncDir(segment_dir_));
    dir_dirty_ = false;
  }
  return FromRocks(db_->FlushWAL(/*sync=*/true), "sync index");
}

Status DiskTier::Impl::Flush() {
  std::lock_guard<std::mutex> wlock(write_mu_);
  if (closed_) return Status::IOError("disk tier is closed");
  if (!syncing()) return Status::OK();
  return SyncDirty();
}

// ------------------------------------------------------------ the rest

Status DiskTier::Impl::Verify(VerifyReport* report) {
  *report = VerifyReport();
  if (closed_) return Status::IOError("disk tier is closed");
  std::vector<ReadTarget> targets;
  for (size_t begin = 0;; begin += kScanChunk) {
    std::lock_guard<std::mutex> lock(mu_);
    if (begin >= index_.id_limit()) break;
    index_.ForEach(begin, begin + kScanChunk, [&](ItemId id, const DiskIndex::Location&) {
      ReadTarget t;
      TargetLocked(id, &t);
      targets.push_back(std::move(t));
    });
  }
  ReadRecords(targets.data(), targets.size(), [&](size_t i, Status s, const char* record) {
    const ReadTarget& t = targets[i];
    RecordHeader h;
    if (s.ok()) s = VerifyRecord(record, t.loc.length, t.id, &h);
    ++report->records_checked;
    report->bytes_checked += t.loc.length;
    if (!s.ok()) report->bad.push_back({t.id, t.segment, t.loc.offset, s});
  });
  if (report->bad.empty()) return Status::OK();
  return Status::Corruption(std::to_string(report->bad.size()) + " of " +
                            std::to_string(report->records_checked) + " records failed checks");
}

Status DiskTier::Impl::PutMeta(std::string_view key, std::string_view value) {
  if (closed_) return Status::IOError("disk tier is closed");
  std::string k(1, kUserTag);
  k.append(key.data(), key.size());
  return FromRocks(db_->Put(WriteOpts(), k, rocksdb::Slice(value.data(), value.size())),
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
  std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
  st.write_amplification =
      st.user_bytes_put ? static_cast<double>(st.physical_bytes_written) / st.user_bytes_put : 0;
  st.compressed_records = compressed_;
  st.gets = gets_;
  st.hits = hits_;
  st.corrupt_records = corrupt_;
  st.read_errors = read_errors_;
  st.evictions = evictions_;
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

Status DiskTier::Impl::Close() {
  std::lock_guard<std::mutex> wlock(write_mu_);
  if (closed_.exchange(true)) return Status::OK();
  Status s;
  if (db_) {
    if (syncing()) s = SyncDirty();
    Status c = FromRocks(db_->Close(), "close index");
    if (s.ok()) s = c;
    db_.reset();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    segments_.clear();
    free_slots_.clear();
  }
  {
    std::lock_guard<std::mutex> lock(reader_mu_);
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
                     std::vector<ItemId>* evicted) {
  return impl_->Put(id, meta, payload, evicted);
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
void DiskTier::SetNextUse(ItemId id, uint64_t next_use) { impl_->SetNextUse(id, next_use); }
Status DiskTier::Flush() { return impl_->Flush(); }
Status DiskTier::Compact() { return impl_->Compact(); }
Status DiskTier::Verify(VerifyReport* report) { return impl_->Verify(report); }
Status DiskTier::PutMeta(std::string_view key, std::string_view value) {
  return impl_->PutMeta(key, value);
}
Status DiskTier::GetMeta(std::string_view key, std::string* value) {
  return impl_->GetMeta(key, value);
}
DiskTierStats DiskTier::GetStats() const { return impl_->GetStats(); }
std::vector<DiskSegmentInfo> DiskTier::Segments() const { return impl_->Segments(); }
Status DiskTier::ForEachItemSize(const std::function<void(ItemId id, uint64_t bytes)>& fn) const {
  return impl_->ForEachItemSize(fn);
}
Status DiskTier::Close() { return impl_->Close(); }

}  // namespace opt4store

// DiskTier::Impl: the state behind DiskTier (disk_tier.h), and where each of
// its jobs lives:
//   disk_tier.cc        the facade, Open's options, sync, Verify, metadata,
//                       stats, Close; the locking rules and the write order
//                       that crash safety rests on
//   disk_format.h       the RocksDB keys and values of the index
//   disk_recovery.cc    Open: the index, the segments, the tails to re-index
//   disk_read_pool.cc   reads: pooled io_uring queues, MultiGet, CRC checks
//   disk_writes.cc      Put, Delete, Clear, segment roll-over, eviction by next use
//   disk_compaction.cc  Compact: live records copied out of sparse segments
//   disk_repair.cc      Repair: the index rebuilt from a scan of the segments
// Internal to tiers/.
#ifndef OPT4STORE_TIERS_DISK_TIER_IMPL_H_
#define OPT4STORE_TIERS_DISK_TIER_IMPL_H_

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/base/env.h"
#include "engine/base/mutex.h"
#include "tiers/aligned_buffer.h"
#include "tiers/disk_format.h"
#include "tiers/disk_index.h"
#include "tiers/disk_tier.h"
#include "tiers/segment.h"

namespace opt4store {

constexpr uint64_t kMaxSegmentBytes = uint64_t{2} << 30;
// The reserve file beside the index, and its size. An open writes a
// MANIFEST and an OPTIONS file of a few KiB each and a new WAL with
// Recover's batch (about 50 bytes per segment and per re-indexed record;
// the replayed WAL stays in the memtable): 1 MiB holds that many times
// over for stores of thousands of segments, not for millions of records
// to re-index on a full disk.
constexpr const char* kReserveName = "RESERVE";
constexpr uint64_t kReserveBytes = uint64_t{1} << 20;
constexpr uint64_t kReserveChunk = uint64_t{64} << 10;
constexpr uint64_t kMinSegmentBytes = 4096;
// Compaction collects the records of a segment from the index in chunks of
// this many ids, releasing mu_ in between so that readers get through.
constexpr size_t kScanChunk = 1 << 16;
// Index updates of a compaction are committed in batches of this size.
constexpr size_t kCompactionBatch = 256;

// Walks a segment file's records from offset 0: fn(offset, header) for each
// valid one (header and body checked). A record whose body fails its CRC is
// stepped over by its length, which the header's own CRC vouches for; bytes
// without a valid header are skipped up to the next record magic. *end: the
// end of the last valid record; *damaged: bytes that are in no valid record.
// Returns: OK, IOError.
Status ScanSegmentRecords(File* file, uint64_t size,
                          const std::function<void(uint64_t offset, const RecordHeader& h)>& fn,
                          uint64_t* end, uint64_t* damaged);

class DiskTier::Impl {
 public:
  Impl(const DiskTierOptions& options, std::string dir);
  ~Impl();

  Status Open();
  Status Reconfigure(const DiskTierOptions& options);
  Status Repair(DiskRepairReport* report);
  // Repair's writes, once the segments were scanned and the space checked:
  // the old index salvaged, then replaced by `newest` and the watermarks.
  Status RebuildIndex(const std::string& index_dir,
                      const std::unordered_map<ItemId, IndexValue>& newest,
                      const std::vector<std::pair<uint32_t, uint64_t>>& watermarks,
                      uint64_t max_seq, DiskRepairReport* report);
  Status Put(ItemId id, std::string_view meta, std::string_view payload,
             std::vector<ItemId>* evicted, bool* stored);
  void MultiGet(const ItemId* ids, size_t n, const RecordCallback& fn);
  bool Contains(ItemId id) const;
  Status ForEachItem(
      const std::function<void(ItemId id, uint64_t bytes, const DiskRecordPlace& place)>& fn)
      const;
  Status Locate(ItemId id, DiskRecordPlace* place) const;
  const std::string& segments_dir() const { return segment_dir_; }
  Status Delete(ItemId id);
  Status Clear();
  void SetNextUse(ItemId id, uint64_t next_use);
  Status Flush();
  Status Compact();
  Status Verify(VerifyReport* report);
  // Verify's scan of the segments for valid records newer than the
  // indexed version of their id (indexed_sequence), up to settled_sequence.
  Status FindOrphans(const std::unordered_map<ItemId, uint64_t>& indexed_sequence,
                     uint64_t settled_sequence, VerifyReport* report) EXCLUDES(mu_);
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

  // An index entry as Recover read it (recovered_entries_).
  struct RecoveredEntry {
    ItemId id = 0;
    uint32_t meta_len = 0;
    uint32_t payload_len = 0;
    DiskRecordPlace place;
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
    std::vector<AlignedBuffer> buffers;
    std::vector<ReadRequest> requests;
    std::vector<Slot> slots;
    std::vector<unsigned> free;
    // Last, so destroyed first: its destructor waits for the reads in flight,
    // which write into buffers and requests (a callback that throws out of
    // ReadRecords leaves some in flight).
    std::unique_ptr<ReadQueue> queue;
  };

  bool every_put() const { return options_.sync == DiskTierOptions::SyncMode::kEveryPut; }
  bool syncing() const { return options_.sync != DiskTierOptions::SyncMode::kNone; }
  rocksdb::WriteOptions WriteOpts() const {
    rocksdb::WriteOptions wo;
    wo.sync = every_put();
    return wo;
  }
  std::string SegmentPath(const std::string& name) const { return segment_dir_ + "/" + name; }
  // Unlinks a segment file; one gone already (a Clear that failed part way,
  // a hand) is what was wanted, not an error.
  Status RemoveSegmentFile(const std::string& name) const {
    const Status s = env_->DeleteFile(SegmentPath(name));
    return s.IsNotFound() ? Status::OK() : s;
  }

  // A RocksDB write's status. After a failed write (a full disk) RocksDB
  // takes no more writes until it is resumed, and syncing its WAL then
  // trips an assertion inside RocksDB: the failure is remembered, and
  // ResumeIndex (called before each mutation and sync) tries to resume it.
  Status IndexWritten(const rocksdb::Status& rs, const std::string& what);
  // OK when the index takes writes (again); else why not (NoSpace ...).
  Status ResumeIndex();
  // RocksDB's options for the index, the same for Open and Repair.
  rocksdb::Options IndexOptions() const;
  // Open's part after the checks: RocksDB, the format key, Recover.
  Status OpenIndex(bool create);
  // The reserve (kReserveName): headroom that Open frees before RocksDB
  // writes anything, so that a store opens on a full disk. Release deletes
  // it (*released: its size); Make writes it back up to `bytes`, or as
  // much as fits (best effort: without it the store still works, but a
  // later open on a full disk may fail).
  Status ReleaseReserve(uint64_t* released);
  // The segment size a budget gets (options_.segment_bytes, capped by the
  // budget); InvalidArgument for a budget too small.
  Status SegmentBytesFor(uint64_t budget, uint64_t* segment_bytes) const;
  // Raises the process's limit on open files to what a budget in segments
  // of this size may hold open (two descriptors a segment file). With
  // `say_short`, says once on stderr when the hard limit is lower: not at
  // the Store's first open, whose budget is a provisional 1 TiB until the
  // manifest's is read (Reconfigure, which says it).
  void RaiseFileLimitFor(uint64_t budget, uint64_t segment_bytes, bool say_short) const;
  void MakeReserve(uint64_t bytes);
  // Before RocksDB touches the index: whether it may create one (a new
  // store), or Corruption when the index is gone but records are not.
  Status CheckIndexBeforeOpen(bool* create);
  // True when a segment file holds any bytes.
  Status SegmentsHoldRecords(bool* any);
  // The numbers of the segment files on disk, in increasing order.
  Status SegmentNumbers(std::vector<uint32_t>* numbers) const;
  // Corruption: the index is damaged (why), with what to run.
  Status DamagedIndex(const std::string& why) const;
  Status Recover();
  // Walks slot's records from `from` on, indexes those at index_from or
  // later that the index lacks (their index batch was lost), and cuts the
  // file at the first one that is not whole: its watermark goes there.
  Status ScanTail(uint16_t slot, uint64_t from, uint64_t index_from, rocksdb::WriteBatch* batch,
                  std::unordered_map<ItemId, uint64_t>* recovered_seq, uint64_t* max_seq)
      REQUIRES(write_mu_, mu_);

  // Reads each target's record (an aligned superset of it, O_DIRECT where
  // the file allows) with up to queue_depth reads in flight. fn(i, status,
  // record) runs once per target as soon as its bytes are in, while other
  // reads are still in flight; record (OK only) is valid during the call.
  using RecordFn = std::function<void(size_t target, Status status, const char* record)>;
  void ReadRecords(const ReadTarget* targets, size_t n, const RecordFn& fn);
  std::unique_ptr<Reader> AcquireReader();
  void ReleaseReader(std::unique_ptr<Reader> reader);

  // Collects what a read needs.
  bool TargetLocked(ItemId id, ReadTarget* target) const REQUIRES(mu_);

  // Mutations: under write_mu_ (each takes mu_ for its short index updates).
  // Room for a record of `size` bytes of id; *bypassed (DiskTierOptions::
  // bypass) when every item that could leave for it is read no later.
  Status MakeRoom(uint64_t size, ItemId id, std::vector<ItemId>* evicted, bool* bypassed)
      REQUIRES(write_mu_);
  // Whether Belady's bypass leaves out a record of `size` bytes of id now:
  // the items held fill the live budget for it, and none is read later.
  bool LeavesOut(ItemId id, uint64_t size) const REQUIRES(mu_);
  // What the items held may fill under bypass.
  uint64_t LiveBudget() const;
  Status EvictOne(std::vector<ItemId>* evicted) REQUIRES(write_mu_);
  Status RollOver() REQUIRES(write_mu_);
  Status EnsureActiveFits(uint64_t size) REQUIRES(write_mu_);
  // Appends a record's bytes to the active segment; on failure truncates
  // them away again. *slot, *offset: where it went.
  Status Append(const std::string_view* parts, size_t count, uint64_t size, uint16_t* slot,
                uint64_t* offset) REQUIRES(write_mu_);
  void RollBack(uint16_t slot, uint64_t offset) REQUIRES(write_mu_);
  Status CompactSegment(uint16_t slot) REQUIRES(write_mu_);
  Status SyncDirty() REQUIRES(write_mu_);
  // At Close: writes the index's memtable out as a table, so that the next
  // Open has no WAL to replay and RocksDB can delete the old ones (with
  // avoid_flush_during_recovery, every open leaves one more WAL otherwise).
  // Skipped when the disk lacks room for it; best effort either way.
  void FlushIndexForNextOpen() REQUIRES(write_mu_);
  void DropCorruptLocked(ItemId id, const DiskIndex::Location& loc) REQUIRES(write_mu_);
  void DropCorrupt(ItemId id, const DiskIndex::Location& loc) EXCLUDES(write_mu_, mu_);
  // The segment table changes only with both write_mu_ and mu_ held, so a
  // writer, which holds write_mu_, may read it without mu_. The analysis
  // knows one lock per member: writers read the table through here.
  Segment* WriterSegment(uint16_t slot) const REQUIRES(write_mu_) NO_THREAD_SAFETY_ANALYSIS {
    return segments_[slot].get();
  }
  // Opens (creating if missing) segment file `number`, with O_DIRECT reads
  // when configured; the caller sets its size and slot.
  Status OpenSegment(uint32_t number, std::unique_ptr<Segment>* segment);
  // Moves recovered_entries_ into *entries when each of them is still the
  // index's entry for its id and the index holds nothing else; false (and
  // *entries empty) otherwise. Empties recovered_entries_ either way.
  bool TakeRecoveredEntries(std::vector<RecoveredEntry>* entries) const EXCLUDES(mu_);

  // Read without a lock: written only at construction and by Reconfigure,
  // which comes before any other call.
  DiskTierOptions options_;
  Env* const env_;
  const std::string dir_;
  const std::string segment_dir_;
  uint64_t segment_bytes_ = 0;  // effective; also the compaction reserve

  std::unique_ptr<FileLock> lock_;
  pid_t opener_pid_ = 0;  // the process that opened the index; Close's alone
  std::unique_ptr<rocksdb::DB> db_;
  std::atomic<bool> closed_{false};
  // Whether a RocksDB write failed, and how; see IndexWritten.
  enum : int { kRunning, kStoppedNoSpace, kStoppedError };
  std::atomic<int> index_stopped_{kRunning};

  Mutex write_mu_ ACQUIRED_BEFORE(mu_);
  uint16_t active_ GUARDED_BY(write_mu_) = 0;  // slot of the active segment
  uint32_t next_segment_number_ GUARDED_BY(write_mu_) = 1;
  uint64_t next_sequence_ GUARDED_BY(write_mu_) = 1;
  bool dir_dirty_ GUARDED_BY(write_mu_) = false;  // segments created or removed

  mutable Mutex mu_;
  DiskIndex index_ GUARDED_BY(mu_);
  // Each entry Recover indexed, with what the in-memory index lacks (its
  // CRC and sizes). The first ForEachItem, a store's open, is served from
  // here instead of a second pass over RocksDB (a third of a 200 000-item
  // store's open), and empties it: 28 bytes an item until then. Later
  // writes leave it as it is; TakeRecoveredEntries checks it against the
  // index.
  mutable std::vector<RecoveredEntry> recovered_entries_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Segment>> segments_ GUARDED_BY(mu_);  // by slot, [0] unused
  std::vector<uint16_t> free_slots_ GUARDED_BY(mu_);
  uint64_t file_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t live_bytes_ GUARDED_BY(mu_) = 0;

  Mutex reader_mu_;
  std::vector<std::unique_ptr<Reader>> idle_readers_ GUARDED_BY(reader_mu_);

  // Counters; relaxed atomics, read together by GetStats.
  std::atomic<uint64_t> puts_{0}, user_bytes_{0}, put_record_bytes_{0}, physical_bytes_{0},
      compressed_{0};
  std::atomic<uint64_t> gets_{0}, hits_{0}, corrupt_{0}, read_errors_{0};
  std::atomic<uint64_t> evictions_{0}, bypasses_{0}, compactions_{0}, compaction_bytes_{0};
  std::atomic<uint64_t> recovered_{0}, dropped_on_open_{0}, truncated_bytes_{0};
  std::atomic<bool> uses_io_uring_{false};
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_DISK_TIER_IMPL_H_

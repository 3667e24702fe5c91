// DiskTier: the persistent second tier of the store. It keeps decoded samples
// (a small `meta` blob and a `payload` blob per item) on local disk within a
// byte budget, survives restarts and kill -9, and reads in batches.
//
// Layout of a store directory:
//   dir/LOCK                 flock'ed by the owner; holds its pid. Children it
//                            forks do not keep it (env.h): a worker that
//                            outlives a killed owner does not lock it out
//   dir/index/               RocksDB: the index (id -> segment, offset,
//                            length, sequence, CRC, codec, sizes) and the
//                            manifest (format, segment list with a
//                            recovery watermark each, next segment number,
//                            highest sequence, the store's own PutMeta keys)
//   dir/segments/000001.seg  append-only record files (format: segment.h),
//                            rolled over at segment_bytes
//
// Reads go through io_uring (Env's ReadQueue) at a fixed queue depth, with
// O_DIRECT on an aligned superset of each record; without a ring they fall
// back to pread, without O_DIRECT to the page cache.
//
// Budget and eviction. The segment files together never exceed
// budget_bytes. A Put that would cross it makes room: it compacts a segment
// (rewrites its live records, deletes the file) when one is sparse enough or
// when dead space (records deleted, overwritten or evicted) has grown past
// max_dead_fraction of the budget; otherwise it evicts, in Belady's order:
// never read again first, then unknown next use, then the furthest next use
// (SetNextUse). While space allows, items stay, so that a restart finds
// them. One segment's worth of the budget is held back so that compaction
// can always make progress. By default every Put is stored; with
// DiskTierOptions::bypass the tier runs Belady's OPT with bypass over the
// items it holds (a Put read no sooner than every item held is left out).
//
// Durability (SyncMode): kNone leaves write-back to the OS; kOnFlush makes
// everything Put before a Flush() durable (segments fdatasync'ed, then the
// RocksDB WAL); kEveryPut syncs each Put before it returns. A kill -9 loses
// nothing that Put returned OK for; an OS crash loses the unsynced writes.
// No read ever returns wrong bytes: every record carries a CRC32C, checked
// on every read; a failing record is dropped and reported as Corruption.
//
// Thread safety: a DiskTier is safe for concurrent use by the threads of the
// process that opened it. Mutations (Put, Delete, Compact, Flush) are
// serialized; reads (Get, MultiGet, Contains) run concurrently with them and
// with each other, and never wait for a mutation's I/O. One process at a
// time: a second Open of the same directory, from this process or another,
// returns Busy. The tier does not survive fork(): open it in the process
// that uses it.
#ifndef OPT4STORE_TIERS_DISK_TIER_H_
#define OPT4STORE_TIERS_DISK_TIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/status.h"
#include "tiers/segment_reader.h"

namespace opt4store {

class Env;

// Ids are dense dataset indices: the in-memory index is an array by id
// (disk_index.h), 20 bytes per id up to the largest one stored or told.
constexpr ItemId kMaxItemId = (ItemId{1} << 31) - 1;

struct DiskTierOptions {
  // The most bytes the segment files may hold together. Required (> 0).
  uint64_t budget_bytes = 0;

  // Segment files roll over at this size. Larger segments mean fewer files
  // and larger compaction steps. Capped at budget_bytes / 8 (one segment is
  // held back for compaction) and at 2 GiB.
  uint64_t segment_bytes = uint64_t{64} << 20;

  enum class Compression {
    kNone,  // store payloads as given
    kAuto,  // LZ4 per record, kept only when it saves >= 10%
  };
  Compression compression = Compression::kAuto;

  // When writes become durable (see the class comment). In every mode, a
  // segment that fills up is fdatasync'ed as it is sealed when direct_io is
  // on: an O_DIRECT read of pages still dirty would wait for their
  // writeback, far longer than the sync costs once per segment.
  enum class SyncMode {
    kNone,      // the OS writes back when it likes; Flush() does nothing
    kOnFlush,   // Flush() syncs the segments, then the index
    kEveryPut,  // each Put syncs its segment and the index before returning
  };
  SyncMode sync = SyncMode::kOnFlush;

  // Read aligned supersets of records with O_DIRECT: no double caching in
  // the page cache, and the RAM tier decides what stays in memory.
  bool direct_io = true;
  // Batched reads through io_uring; false forces the pread fallback.
  bool use_io_uring = true;
  // Reads in flight per MultiGet.
  unsigned queue_depth = 32;

  // Compact() rewrites segments whose live bytes are below this fraction of
  // their size. Under budget pressure too, such a segment is compacted
  // before anything is evicted.
  double compact_below_live_ratio = 0.5;

  // Under budget pressure, dead space (records deleted, overwritten or
  // evicted) is reclaimed by compacting the segment with the lowest live
  // ratio once dead space reaches this fraction of the budget; below it,
  // room is made by evicting. Higher: fewer bytes rewritten per byte freed
  // (lower write amplification), but more of the budget holds dead bytes
  // instead of items. 0: reclaim dead space before any eviction.
  double max_dead_fraction = 0.125;

  // Belady's bypass: a Put that would have to evict an item read no later
  // than the one it brings (SetNextUse) stores nothing instead, and says so
  // (Put's *stored). Without it, every Put is stored and evicts, which
  // under a budget smaller than the reads' working set churns out the
  // items read soonest for ones read later. A new version of a stored id
  // is never bypassed, nor an id never told a next use (the caller has no
  // plan for it): those are stored, evicting, as without bypass.
  bool bypass = false;

  // Ids are expected below this (the dataset's size): the in-memory index
  // is sized for it at Open and never grows (24 bytes per id). 0: grow on
  // demand, with up to 25% slack.
  uint32_t expected_ids = 0;

  // The file layer for segment I/O; nullptr: Env::Default(). Must outlive
  // the tier. RocksDB uses its own.
  Env* env = nullptr;
};

struct DiskTierStats {
  uint64_t items = 0;              // ids stored
  uint64_t live_bytes = 0;         // bytes of the records the index points to
  uint64_t file_bytes = 0;         // bytes in segment files (<= budget_bytes)
  uint64_t budget_bytes = 0;
  uint64_t segments = 0;
  uint64_t segment_bytes = 0;      // the effective segment size

  uint64_t puts = 0;
  uint64_t user_bytes_put = 0;     // meta + payload bytes given to Put
  uint64_t put_record_bytes = 0;   // bytes of the records Puts appended (as stored)
  uint64_t physical_bytes_written = 0;  // record bytes appended, compaction included
  // physical_bytes_written / put_record_bytes: 1 until compaction rewrites
  // records (compression is no part of it: records count as stored).
  double write_amplification = 0;
  uint64_t compressed_records = 0;  // Puts stored with LZ4

  uint64_t gets = 0;               // ids asked for, by Get and MultiGet
  uint64_t hits = 0;
  uint64_t corrupt_records = 0;    // records dropped by a failed check
  uint64_t read_errors = 0;        // reads that failed with an I/O error

  uint64_t evictions = 0;
  uint64_t bypasses = 0;           // Puts not stored (DiskTierOptions::bypass)
  uint64_t compactions = 0;        // segments compacted (or deleted empty)
  uint64_t compaction_bytes_moved = 0;

  // Recovery, at the last Open.
  uint64_t recovered_records = 0;  // re-indexed from segment tails
  uint64_t dropped_on_open = 0;    // index entries past a segment's end
  uint64_t truncated_bytes = 0;    // torn tails cut off

  uint64_t index_bytes = 0;        // RAM held by the in-memory index
  double index_bytes_per_item = 0;

  bool io_uring = false;           // batched reads go through io_uring
  bool direct_io = false;          // aligned reads bypass the page cache
};

// One segment file, for `opt4store inspect`.
struct DiskSegmentInfo {
  std::string name;         // file name under dir/segments
  uint64_t file_bytes = 0;  // bytes appended
  uint64_t live_bytes = 0;  // bytes of the records the index points to
  bool active = false;      // the segment Puts append to
};

// What Verify found.
struct VerifyReport {
  struct Bad {
    ItemId id = 0;
    std::string segment;  // file name
    uint64_t offset = 0;
    Status status;        // Corruption or IOError, with the reason
  };
  uint64_t records_checked = 0;
  uint64_t bytes_checked = 0;
  // Records an open had to drop (their segment was deleted or cut short),
  // and that no later Put has replaced. Listed in bad as well.
  uint64_t lost = 0;
  // Orphaned segment data: valid records newer than the version the index
  // holds for their id (an index update was lost). Listed in bad as well.
  uint64_t orphaned = 0;
  std::vector<Bad> bad;  // in no particular order
};

// What Repair did.
struct DiskRepairReport {
  uint64_t segments = 0;         // segment files scanned
  uint64_t records = 0;          // ids indexed: the newest valid record of each
  uint64_t older_versions = 0;   // valid records that a newer one of the same id replaces
  uint64_t damaged_bytes = 0;    // segment bytes that hold no valid record
  uint64_t metadata_keys = 0;    // PutMeta keys that the old index still held
  ItemId largest_id = 0;         // the largest id indexed (with records > 0)
  // Ids that the old index (or its list of lost records) knew and that no
  // segment holds: gone for good.
  std::vector<ItemId> lost;
  // What RocksDB's own repair of the old index said, when it failed (the
  // index was then started afresh, and its metadata is gone); "" if fine.
  std::string index_salvage;
};

class DiskTier {
 public:
  // Opens (creating if needed) the store in dir and recovers it: loads the
  // index, drops entries that point past a segment's end, re-indexes valid
  // records found after a segment's last indexed one (the newest sequence
  // wins) and truncates a torn tail. On success *tier owns the store.
  // Entries dropped because their segment is gone or too short are kept
  // in a list of lost records, which Verify reports until the id is stored
  // again or Repair rebuilds the index.
  // A missing or damaged index (dir/index/CURRENT gone while segments hold
  // records, an index RocksDB cannot open, an index without its format key)
  // is not replaced: Open fails with Corruption naming `opt4store repair`,
  // and changes nothing on disk but dir/LOCK.
  // Returns: OK, Busy (another open holds dir/LOCK; the message names the
  // lock file and the holder's pid), InvalidArgument (options),
  // Corruption (an index or manifest that cannot be read), IOError.
  static Status Open(const DiskTierOptions& options, const std::string& dir,
                     std::unique_ptr<DiskTier>* tier);

  // Rebuilds the index of the store in dir from its segment files, which
  // hold every record's id, sequence and checksums: the newest valid record
  // of each id is indexed (an id evicted or deleted but not yet compacted
  // away comes back; values are immutable per id, so it is still right).
  // What the old index still holds is salvaged first with RocksDB's own
  // repair, for the metadata (PutMeta) kept beside the index. Damaged bytes
  // inside a segment are skipped up to the next valid record. Takes
  // dir/LOCK; run it instead of Open, not beside it. options: only env is used.
  // Returns: OK, Busy, IOError.
  static Status Repair(const DiskTierOptions& options, const std::string& dir,
                       DiskRepairReport* report);

  // Closes the store (see Close()).
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Stores a new version of id. meta and payload are copied (or compressed)
  // before Put returns. If the budget needs room, dead space is reclaimed
  // and items may be evicted; their ids are appended to *evicted if given.
  // With DiskTierOptions::bypass, id may be left out instead (OK, *stored
  // false if given; nothing stored is harmed, though items evicted before
  // the tier found no further victim stay evicted). When the items held
  // fill the budget even for the record's header and meta, that is decided
  // before the payload is compressed.
  // On an error nothing already stored is harmed and the segment is cut
  // back to its last good record.
  // Returns: OK, InvalidArgument (id over kMaxItemId, meta over 64 KiB,
  // record over 4 GiB), NoSpace (ENOSPC; or the record does not fit in the
  // budget), IOError.
  Status Put(ItemId id, std::string_view meta, std::string_view payload,
             std::vector<ItemId>* evicted = nullptr, bool* stored = nullptr);

  // Reads id's newest version into *meta and *payload (either may be null).
  // A record that fails its checks is dropped from the index.
  // Returns: OK, NotFound, Corruption (treat as a miss), IOError.
  Status Get(ItemId id, std::string* meta, std::string* payload);

  // Get for n ids at once: up to queue_depth reads in flight, each record
  // checked and decoded as soon as it arrives. statuses[i] is what Get(ids[i])
  // would return. metas or payloads may be null.
  void MultiGet(const ItemId* ids, size_t n, std::string* metas, std::string* payloads,
                Status* statuses);

  // What the zero-copy MultiGet hands over for ids[i]. meta and payload
  // (empty unless status is OK) are valid only during the call.
  using RecordCallback = std::function<void(size_t i, const Status& status,
                                            std::string_view meta, std::string_view payload)>;

  // MultiGet without the copy into strings: fn(i, ...) runs once per id, on
  // the calling thread and with no lock held, as soon as the id's record has
  // arrived and passed its checks, while other reads are still in flight.
  // Made for a prefetcher that copies straight into the RAM tier. Raw
  // payloads are viewed in the read buffer; LZ4 ones are decompressed into
  // a scratch buffer first.
  void MultiGet(const ItemId* ids, size_t n, const RecordCallback& fn);

  // True when id is stored (its bytes are not read or checked).
  bool Contains(ItemId id) const;
  // Calls fn(id, meta bytes + payload bytes (uncompressed), its record's
  // place) for every stored item, from the index (no segment is read): for
  // a store that needs every item's size and place at open. The first call
  // after the open reuses the open's pass over RocksDB when the index has
  // not changed since; later calls make one pass each.
  // Returns: OK, IOError.
  Status ForEachItem(
      const std::function<void(ItemId id, uint64_t bytes, const DiskRecordPlace& place)>& fn)
      const;
  // Where id's newest record is now, for a process that reads it with
  // ReadRecordAt (segment_reader.h). Compaction moves records later; the
  // caller publishes the place again when a reader finds it out of date.
  // Returns: OK, NotFound, IOError.
  Status Locate(ItemId id, DiskRecordPlace* place) const;
  // The folder that holds the segment files (dir/segments).
  const std::string& segments_dir() const;

  // Removes id. Its bytes become dead space for compaction.
  // Returns: OK, NotFound, IOError.
  Status Delete(ItemId id);

  // Removes every item and deletes every segment file; PutMeta's keys stay.
  // Crash safe: the files go first, then their index entries (which Open
  // would drop anyway once their files are gone). A read already under way
  // may still return the old bytes of its id.
  // Returns: OK, IOError.
  Status Clear();

  // Tells when id is read next, for the eviction order: a position of the
  // plan, DiskIndex::kNeverRead (UINT64_MAX) for never again. Ids never
  // told rank as "unknown": after the never-read ones, before the rest.
  // Kept in memory only; the store re-tells after a restart. Works for ids
  // not stored yet.
  void SetNextUse(ItemId id, uint64_t next_use);

  // SyncMode kOnFlush: makes every earlier Put durable: fdatasync of the
  // segments written since the last Flush, then a sync of the index.
  // kEveryPut: nothing left to do. kNone: does nothing.
  // Returns: OK, IOError.
  Status Flush();

  // Rewrites the live records of every sealed segment whose live ratio is
  // below compact_below_live_ratio into the active segment, then deletes
  // the old file; the new locations are indexed (and synced, unless
  // SyncMode is kNone) before the old file goes. Segments whose live bytes
  // do not fit in the budget's free space are skipped.
  // Returns: OK, NoSpace, IOError.
  Status Compact();

  // Reads and checks every indexed record; fills *report with each one that
  // fails, with each record lost at an open (see Open), and with each
  // orphaned record: a scan of every segment finds a valid record newer
  // than the version the index holds for its id. Changes nothing (Get
  // drops a corrupt record when it meets it).
  // Returns: OK when every record checks out, Corruption when report->bad
  // is not empty, IOError when the tier is closed.
  Status Verify(VerifyReport* report);

  // Small key/value metadata that persists with the store (options, plan
  // identity, cursor, ...), in the same RocksDB as the index. Synced like
  // Puts are (Flush, or every put).
  // Returns: OK, IOError.
  Status PutMeta(std::string_view key, std::string_view value);
  // Returns: OK, NotFound, IOError.
  Status GetMeta(std::string_view key, std::string* value);

  DiskTierStats GetStats() const;
  // The segment files, oldest first.
  std::vector<DiskSegmentInfo> Segments() const;

  // Takes budget_bytes, compression, sync and expected_ids from options on
  // a tier just opened, instead of a close and an open with them: the
  // store opens its tier with a provisional budget to read its manifest,
  // which holds the real settings. Other fields are not read. Checks the
  // budget as Open does.
  // REQUIRES: no other call on this tier has begun.
  // Returns: OK, InvalidArgument, IOError (closed).
  Status Reconfigure(const DiskTierOptions& options);

  // Flushes (per SyncMode), closes the index and releases the lock. Later
  // calls return IOError. Also done by the destructor.
  // REQUIRES: no other call on this tier is in progress.
  // Returns: OK, IOError.
  Status Close();

 private:
  class Impl;
  explicit DiskTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_DISK_TIER_H_

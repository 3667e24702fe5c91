// DiskTier::Repair (disk_tier.h): the index rebuilt from the segment files.
//
// The segments are the truth: each record carries its id, a sequence that
// grows with every write, its lengths under a header CRC and its bytes
// under a CRC. So the index is what a scan of every segment finds: the
// newest valid record of each id. What the index holds beside the records
// (the store's metadata, PutMeta) exists nowhere else; RocksDB's RepairDB
// salvages what its tables and logs still hold before the index entries,
// the watermarks and the lost list are replaced in one atomic batch. Repair
// only reads the segments, so a crash during one loses nothing that a
// second run cannot rebuild. A disk too full for the rebuilt index is found
// before anything is written (RepairDB would move a log it could not
// convert aside, into index/lost/): the repair fails with NoSpace and
// changes nothing.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "engine/base/checked_math.h"
#include "tiers/disk_tier_impl.h"
#include "tiers/shared_memory.h"

namespace opt4store {

namespace {

// Bytes searched at a time for the next record magic after damage.
constexpr size_t kResyncChunk = size_t{1} << 20;
// What a repair may write, for the free-space check: RepairDB copies the old
// index's logs into tables and writes a MANIFEST, OPTIONS and LOG files
// (kRepairFixedBytes); the rebuilt index goes to the WAL and then a table
// (kRepairBytesPerRecord each: a 5-byte key, a 37-byte value, overheads).
constexpr uint64_t kRepairFixedBytes = uint64_t{512} << 10;
constexpr uint64_t kRepairBytesPerRecord = 256;

// Total bytes of the files in dir (0 when it does not exist).
uint64_t DirBytes(Env* env, const std::string& dir) {
  std::vector<std::string> names;
  if (!env->GetChildren(dir, &names).ok()) return 0;
  uint64_t total = 0;
  for (const std::string& name : names) {
    uint64_t size = 0;
    if (env->GetFileSize(dir + "/" + name, &size).ok()) total = SaturatingAdd(total, size);
  }
  return total;
}

// The first offset in [from, size) where the record magic starts, or size.
Status FindMagic(File* file, uint64_t from, uint64_t size, uint64_t* at) {
  char magic[4];
  for (int i = 0; i < 4; ++i) magic[i] = static_cast<char>((kRecordMagic >> (8 * i)) & 0xFF);
  std::string chunk;
  for (uint64_t pos = from; pos < size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kResyncChunk, size - pos));
    chunk.resize(want);
    size_t got = 0;
    OPT4STORE_RETURN_IF_ERROR(ReadFully(file, pos, want, chunk.data(), &got));
    if (got < sizeof(magic)) break;
    const auto hit = std::search(chunk.begin(), chunk.begin() + got, magic, magic + 4);
    if (hit != chunk.begin() + got) {
      *at = pos + static_cast<uint64_t>(hit - chunk.begin());
      return Status::OK();
    }
    pos += got - (sizeof(magic) - 1);  // a magic may straddle two chunks
  }
  *at = size;
  return Status::OK();
}

}  // namespace

Status ScanSegmentRecords(File* file, uint64_t size,
                          const std::function<void(uint64_t offset, const RecordHeader& h)>& fn,
                          uint64_t* end, uint64_t* damaged) {
  *end = 0;
  *damaged = 0;
  std::string record;
  uint64_t pos = 0;
  while (pos < size) {
    char head[kRecordHeaderSize];
    size_t got = 0;
    OPT4STORE_RETURN_IF_ERROR(ReadFully(file, pos, sizeof(head), head, &got));
    RecordHeader h;
    if (got == sizeof(head) && DecodeRecordHeader(head, got, &h).ok() &&
        pos + h.record_size() <= size) {
      record.resize(h.record_size());
      OPT4STORE_RETURN_IF_ERROR(ReadFully(file, pos, record.size(), record.data(), &got));
      if (got == record.size() && VerifyRecord(record.data(), got, h.id, &h).ok()) {
        fn(pos, h);
        *end = pos + h.record_size();
      } else {
        *damaged += h.record_size();
      }
      pos += h.record_size();
      continue;
    }
    uint64_t next = size;
    OPT4STORE_RETURN_IF_ERROR(FindMagic(file, pos + 1, size, &next));
    *damaged += next - pos;
    pos = next;
  }
  return Status::OK();
}

Status DiskTier::Impl::Repair(DiskRepairReport* report) {
  OPT4STORE_RETURN_IF_ERROR(env_->CreateDirIfMissing(dir_));
  OPT4STORE_RETURN_IF_ERROR(env_->LockFile(dir_ + "/LOCK", &lock_));
  opener_pid_ = getpid();
  OPT4STORE_RETURN_IF_ERROR(env_->CreateDirIfMissing(segment_dir_));
  // Every segment, oldest first: the newest valid record of each id wins.
  std::vector<uint32_t> numbers;
  OPT4STORE_RETURN_IF_ERROR(SegmentNumbers(&numbers));
  std::unordered_map<ItemId, IndexValue> newest;
  std::vector<std::pair<uint32_t, uint64_t>> watermarks;
  uint64_t max_seq = 0;
  for (uint32_t number : numbers) {
    std::unique_ptr<File> file;
    uint64_t size = 0, end = 0, damaged = 0;
    OPT4STORE_RETURN_IF_ERROR(
        env_->OpenFile(SegmentPath(SegmentName(number)), FileOptions(), &file));
    OPT4STORE_RETURN_IF_ERROR(file->Size(&size));
    OPT4STORE_RETURN_IF_ERROR(ScanSegmentRecords(
        file.get(), size,
        [&](uint64_t offset, const RecordHeader& h) {
          max_seq = std::max(max_seq, h.sequence);
          auto [at, fresh] = newest.try_emplace(h.id);
          if (!fresh) {
            ++report->older_versions;
            if (at->second.sequence >= h.sequence) return;
          }
          at->second = MakeIndexValue(h, number, static_cast<uint32_t>(offset));
        },
        &end, &damaged));
    report->damaged_bytes += damaged;
    ++report->segments;
    // Appends go on after the last valid record; the next Open cuts what follows.
    watermarks.emplace_back(number, end);
  }

  // Room for what the repair writes, the reserve's included (released for
  // it, as an open does), before anything is written.
  const std::string index_dir = dir_ + "/index";
  const uint64_t need = SaturatingAdd(
      SaturatingAdd(kRepairFixedBytes, DirBytes(env_, index_dir)),
      SaturatingMul(kRepairBytesPerRecord, SaturatingAdd(newest.size(), numbers.size())));
  uint64_t free_bytes = 0, reserve = 0;
  OPT4STORE_RETURN_IF_ERROR(shm::FreeSpace(dir_, &free_bytes));
  env_->GetFileSize(dir_ + "/" + kReserveName, &reserve).PermitUncheckedError();
  if (SaturatingAdd(free_bytes, reserve) < need) {
    return Status::NoSpace("repairing " + dir_ + " needs about " + std::to_string(need) +
                           " bytes free for the rebuilt index, and its disk has " +
                           std::to_string(free_bytes) + " (and a reserve of " +
                           std::to_string(reserve) + "); nothing was changed: free space, then "
                           "run the repair again");
  }
  for (const auto& entry : newest) report->largest_id = std::max(report->largest_id, entry.first);
  uint64_t released = 0;
  OPT4STORE_RETURN_IF_ERROR(ReleaseReserve(&released));
  Status s = RebuildIndex(index_dir, newest, watermarks, max_seq, report);
  MakeReserve(s.ok() ? kReserveBytes : released);
  if (!s.ok()) return s;
  return Close();
}

Status DiskTier::Impl::RebuildIndex(const std::string& index_dir,
                                    const std::unordered_map<ItemId, IndexValue>& newest,
                                    const std::vector<std::pair<uint32_t, uint64_t>>& watermarks,
                                    uint64_t max_seq, DiskRepairReport* report) {
  // Salvage the old index: RepairDB rebuilds RocksDB's MANIFEST from the
  // tables and logs it finds, CURRENT or not.
  rocksdb::Options ro = IndexOptions();
  std::vector<std::string> old_files;
  if (env_->GetChildren(index_dir, &old_files).ok() && !old_files.empty()) {
    rocksdb::Status rs = rocksdb::RepairDB(index_dir, ro);
    if (!rs.ok()) report->index_salvage = rs.ToString();
  }
  ro.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(ro, index_dir, &db);
  if (opened.IsNoSpace()) return FromRocks(opened, "open the index " + index_dir);
  if (!opened.ok()) {
    // Beyond salvage: keep it aside for a post-mortem, start afresh.
    report->index_salvage += (report->index_salvage.empty() ? "" : "; ") + opened.ToString();
    const std::string aside = index_dir + ".damaged." + std::to_string(time(nullptr));
    OPT4STORE_RETURN_IF_ERROR(env_->RenameFile(index_dir, aside));
    OPT4STORE_RETURN_IF_ERROR(
        FromRocks(rocksdb::DB::Open(ro, index_dir, &db), "create index " + index_dir));
  }
  db_.reset(db);

  // The ids the old index knew, indexed or lost: those found nowhere are reported.
  std::unordered_set<ItemId> known;
  uint64_t metadata_keys = 0;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const rocksdb::Slice k = it->key();
      if (k.empty()) continue;
      if ((k[0] == kIndexTag || k[0] == kLostTag) && k.size() == 5) {
        known.insert(GetBE32(k.data() + 1));
      }
      if (k[0] == kUserTag) ++metadata_keys;
    }
    OPT4STORE_RETURN_IF_ERROR(FromRocks(it->status(), "read the old index"));
  }
  report->metadata_keys = metadata_keys;

  // One atomic batch, applied in order: the old entries, watermarks and
  // lost list go, then the new ones come.
  rocksdb::WriteBatch batch;
  for (const char tag : {kIndexTag, kSegmentTag, kLostTag}) {
    OPT4STORE_RETURN_IF_ERROR(FromRocks(
        batch.DeleteRange(std::string(1, tag), std::string(1, static_cast<char>(tag + 1))),
        "clear the old index"));
  }
  for (const auto& [id, value] : newest) batch.Put(IndexKey(id), EncodeIndexValue(value));
  for (const auto& [number, end] : watermarks) batch.Put(SegmentKey(number), Fixed64(end));
  uint64_t value = 0;
  std::string text;
  if (db_->Get(rocksdb::ReadOptions(), kSequenceKey, &text).ok() && ParseFixed64(text, &value)) {
    max_seq = std::max(max_seq, value);
  }
  batch.Put(kSequenceKey, Fixed64(max_seq));
  batch.Put(kNextSegmentKey,
            Fixed64(watermarks.empty() ? 1 : uint64_t{watermarks.back().first} + 1));
  batch.Put(kFormatKey, kFormatValue);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  OPT4STORE_RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "write the rebuilt index"));
  // Flushed to a table, so that the next open does not replay the batch.
  OPT4STORE_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush the index"));

  report->records = newest.size();
  for (ItemId id : known) {
    if (newest.count(id) == 0) report->lost.push_back(id);
  }
  std::sort(report->lost.begin(), report->lost.end());
  return Status::OK();
}

}  // namespace opt4store

// Reads (disk_tier_impl.h): a pool of read queues (io_uring where it can be
// set up, else pread), each with aligned buffers, one per concurrent reader.
// A reader takes what it needs under mu_, releases it, then reads; each
// record's CRC is checked before its bytes reach the caller, and a corrupt
// record is dropped from the index.
#include "tiers/disk_tier_impl.h"

#include <algorithm>
#include <cstring>

namespace opt4store {

std::unique_ptr<DiskTier::Impl::Reader> DiskTier::Impl::AcquireReader() {
  {
    MutexLock lock(&reader_mu_);
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
  MutexLock lock(&reader_mu_);
  idle_readers_.push_back(std::move(reader));
}

void DiskTier::Impl::ReadRecords(const ReadTarget* targets, size_t n, const RecordFn& fn) {
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
    MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
  return index_.Contains(id);
}

Status DiskTier::Impl::ForEachItem(
    const std::function<void(ItemId id, uint64_t bytes, const DiskRecordPlace& place)>& fn)
    const {
  if (closed_) return Status::IOError("disk tier is closed");
  std::vector<RecoveredEntry> recovered;
  if (TakeRecoveredEntries(&recovered)) {
    for (const RecoveredEntry& e : recovered) {
      fn(e.id, uint64_t{e.meta_len} + e.payload_len, e.place);
    }
    return Status::OK();
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kIndexTag);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    IndexValue v;
    if (it->key().size() != 5 || !DecodeIndexValue(it->value(), &v)) continue;
    const ItemId id = GetBE32(it->key().data() + 1);
    if (Contains(id)) fn(id, uint64_t{v.meta_len} + v.payload_len, PlaceOf(v));
  }
  return FromRocks(it->status(), "scan the index");
}

bool DiskTier::Impl::TakeRecoveredEntries(std::vector<RecoveredEntry>* entries) const {
  entries->clear();
  MutexLock lock(&mu_);
  entries->swap(recovered_entries_);
  if (entries->size() != index_.size()) {
    entries->clear();
    return false;
  }
  for (const RecoveredEntry& e : *entries) {
    DiskIndex::Location loc;
    // Segment numbers are never reused, and a segment's bytes are never
    // rewritten: the same number, offset and length are the same record.
    if (!index_.Lookup(e.id, &loc) || segments_[loc.slot]->number != e.place.segment ||
        loc.offset != e.place.offset || loc.length != e.place.length) {
      entries->clear();
      return false;
    }
  }
  return true;
}

Status DiskTier::Impl::Locate(ItemId id, DiskRecordPlace* place) const {
  *place = DiskRecordPlace();
  if (closed_) return Status::IOError("disk tier is closed");
  if (!Contains(id)) return Status::NotFound("id " + std::to_string(id) + " is not stored");
  // The CRC is only in RocksDB's entry, not in the in-memory index.
  std::string value;
  OPT4STORE_RETURN_IF_ERROR(
      FromRocks(db_->Get(rocksdb::ReadOptions(), IndexKey(id), &value), "read the index"));
  IndexValue v;
  if (!DecodeIndexValue(value, &v)) {
    return Status::NotFound("id " + std::to_string(id) + " has no readable index entry");
  }
  *place = PlaceOf(v);
  return Status::OK();
}

void DiskTier::Impl::SetNextUse(ItemId id, uint64_t next_use) {
  if (id > kMaxItemId) return;  // cannot be stored either
  MutexLock lock(&mu_);
  index_.SetNextUse(id, next_use);
}

void DiskTier::Impl::DropCorrupt(ItemId id, const DiskIndex::Location& loc) {
  MutexLock wlock(&write_mu_);
  if (closed_) return;
  DropCorruptLocked(id, loc);
}

void DiskTier::Impl::DropCorruptLocked(ItemId id, const DiskIndex::Location& loc) {
  {
    MutexLock lock(&mu_);
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
  IndexWritten(db_->Delete(WriteOpts(), IndexKey(id)), "drop a corrupt record")
      .PermitUncheckedError();
}

}  // namespace opt4store

// The read path (store_impl.h, and store.h for the whole picture): Get,
// GetBatch and Put in any process, and Peek, which counts nothing. A batch
// takes three passes: the RAM tier for every read (waiting for an item
// being filled, or for the Put of the reader loading it); then the disk
// tier for the rest, in one io_uring batch in the owner, or as fetch
// requests sent all at once and then waited for in a reader (protocol.h);
// then the counters and statuses. A reader process reads a disk item from
// its segment file itself where the owner published its place (ReadPlaced),
// and asks the owner only when that fails. A reader's Put goes to the owner
// on the queue; the owner's own goes to OwnerPut.
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/base/atomic_max.h"
#include "engine/store/protocol.h"
#include "engine/store/store_impl.h"
#include "opt4store/sizes.h"
#include "opt4store/value.h"

namespace opt4store {

namespace {

// A wait on another process's progress: 20 us, doubling up to 2 ms.
void Backoff(int64_t* us) {
  std::this_thread::sleep_for(std::chrono::microseconds(*us));
  *us = std::min<int64_t>(*us * 2, 2000);
}

}  // namespace

Status CopyToSink(ReadSink* sink, std::string_view meta, std::string_view payload) {
  void* meta_dst = nullptr;
  void* payload_dst = nullptr;
  OPT4STORE_RETURN_IF_ERROR(sink->Prepare(meta.size(), payload.size(), &meta_dst, &payload_dst));
  if (!meta.empty()) std::memcpy(meta_dst, meta.data(), meta.size());
  CopyPayload(*sink, payload_dst, payload.data(), payload.size());
  return Status::OK();
}

Status Store::Impl::ReadRam(ItemId id, ReadSink* sink, bool* found) {
  *found = false;
  Status s = ram_->Read(id, sink);
  if (s.ok()) {
    *found = true;
    return s;
  }
  if (s.IsNotFound() || s.IsBusy()) return Status::OK();
  return s;  // the sink's error
}

Status Store::Impl::WaitAndRead(ItemId id, uint64_t version, int64_t timeout_ms, ReadSink* sink,
                                bool* found, const shm::ProcessIdentity* putter,
                                bool* timed_out) {
  *found = false;
  const int64_t t0 = NowNs();
  Status w = ram_->Wait(id, version, timeout_ms, putter);
  SharedCounters& c = ctl_->counters();
  c.waits.fetch_add(1, std::memory_order_relaxed);
  c.wait_ns.fetch_add(NowNs() - t0, std::memory_order_relaxed);
  if (timed_out) *timed_out = w.IsBusy();
  if (!w.ok()) return Status::OK();
  return ReadRam(id, sink, found);
}

bool Store::Impl::InEarlierEpoch(uint64_t from, uint64_t position) const {
  const uint64_t length = ctl_->gauges().epoch_length.load(std::memory_order_relaxed);
  return length > 0 && from / length < position / length;
}

void Store::Impl::CountExpectTimeout() {
  ctl_->counters().expect_timeouts.fetch_add(1, std::memory_order_relaxed);
  if (expect_timeouts_.fetch_add(1) + 1 == kMaxExpectTimeouts) {
    Warn(kWarnExpect, "readers waited in vain for the owner's planner or for values other "
                      "readers should have Put; this process stops waiting for them");
  }
}

Status Store::Impl::LookupAfterQueuedPuts(ItemId id, ReadSink* sink, bool* found) {
  if (WaitForPuts(kExpectTimeoutMs).IsBusy()) CountExpectTimeout();
  return LookupRam(id, sink, found);
}

bool Store::Impl::OwnerGone() {
  if (ctl_->header()->owner_closed.load(std::memory_order_acquire) != 0) return true;
  if (owner_dead_.load(std::memory_order_acquire)) return true;
  const int64_t now = NowNs();
  int64_t last = owner_checked_ns_.load(std::memory_order_relaxed);
  // One thread looks the process up per period; the others take the answer.
  if (now - last < kOwnerCheckMs * 1000000 ||
      !owner_checked_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    return false;
  }
  const shm::ProcessIdentity owner = ctl_->creator();
  if (shm::ProcessAlive(owner.pid, owner.start_ticks)) return false;
  if (!owner_dead_.exchange(true, std::memory_order_acq_rel)) {
    log_("the store's owner, pid " + std::to_string(owner.pid) +
         ", is gone without closing it; this process waits for it no more and loads what it "
         "misses from the source");
  }
  return true;
}

void Store::Impl::AwaitPlanned(uint64_t position) {
  ControlBlock::Header* h = ctl_->header();
  auto answered = [&] {
    return h->planned.load(std::memory_order_acquire) > position ||
           h->plan_answered.load(std::memory_order_acquire) > position;
  };
  if (answered()) return;
  RaiseTo(&h->plan_asked, position + 1, std::memory_order_acq_rel);
  ctl_->counters().plan_waits.fetch_add(1, std::memory_order_relaxed);
  const int64_t deadline = NowNs() + kExpectTimeoutMs * 1000000;
  for (int64_t us = 20; !answered(); Backoff(&us)) {
    if (OwnerGone()) return;
    if (NowNs() > deadline) {
      CountExpectTimeout();
      return;
    }
  }
}

void Store::Impl::Mark(uint64_t position, ItemId id) {
  if (PlanPosition(position)) ctl_->MarkConsumed(position, id);
}

void Store::Impl::MarkConsumed(uint64_t position, ItemId id) {
  // Marked with no id: readers waiting for a Put from this position see
  // that it read something else, and stop (the owner answers them too).
  if (ctl_ && id < dataset_size_) Mark(position, kSkippedRead);
}

void Store::Impl::Locate(const ItemId* ids, size_t n, GetSource* sources) const {
  for (size_t i = 0; i < n; ++i) {
    const ItemId id = ids[i];
    if (!ctl_ || id >= dataset_size_) {
      sources[i] = GetSource::kMiss;
    } else if (ram_->Contains(id)) {
      sources[i] = GetSource::kRam;
    } else {
      sources[i] = ctl_->OnDisk(id) ? GetSource::kDisk : GetSource::kMiss;
    }
  }
}

Status Store::Impl::Get(uint64_t position, ItemId id, ReadSink* sink, GetSource* source) {
  Status status;
  GetBatch(&position, &id, 1, &sink, &status, source);
  return status;
}

Status Store::Impl::Peek(ItemId id, ReadSink* sink, GetSource* source) {
  if (source) *source = GetSource::kMiss;
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  if (id >= dataset_size_) {
    return Status::OutOfRange("id " + std::to_string(id) + " is out of range: the store holds " +
                              std::to_string(dataset_size_) + " items");
  }
  bool found = false;
  GetSource where = GetSource::kRam;
  if (!disk_only_) OPT4STORE_RETURN_IF_ERROR(ReadRam(id, sink, &found));
  if (!found && InOwner() && disk_ && (disk_only_ || ctl_->OnDisk(id))) {
    std::string meta, payload;
    Status s = disk_->Get(id, &meta, &payload);
    if (s.IsIOError()) return s;
    if (s.ok()) {
      OPT4STORE_RETURN_IF_ERROR(CopyToSink(sink, meta, payload));
      found = true;
    } else if (!disk_only_) {
      ctl_->SetOnDisk(id, false);  // gone, or corrupt (and dropped): a miss, as for Get
    }
    where = GetSource::kDisk;
  } else if (!found && InOwner() && disk_) {
    OPT4STORE_RETURN_IF_ERROR(ReadPendingWrite(id, sink, &found));
    where = GetSource::kDisk;
  }
  if (!found) return Status::NotFound("id " + std::to_string(id) + " is not in the store");
  if (source) *source = where;
  return Status::OK();
}

Status Store::Impl::ReadPlaced(ItemId id, ReadSink* sink, bool* found, uint64_t* bytes) {
  *found = false;
  const char* dir = ctl_->segments_dir();
  DiskRecordPlace place;
  if (dir[0] == '\0' || !ctl_->OnDisk(id) || !ctl_->Place(id, &place)) return Status::OK();
  // Per thread, so that a batch's reads reuse one buffer of a record's size.
  thread_local std::string buffer, scratch;
  std::string_view meta, payload;
  if (!ReadRecordAt(dir, id, place, &buffer, &meta, &payload, &scratch).ok()) {
    // Gone, moved, or corrupt: the owner's fetch decides (it drops a
    // corrupt record and publishes a moved one's new place).
    return Status::OK();
  }
  OPT4STORE_RETURN_IF_ERROR(CopyToSink(sink, meta, payload));
  *found = true;
  *bytes = meta.size() + payload.size();
  ctl_->counters().hits_disk_direct.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status Store::Impl::LookupRam(ItemId id, ReadSink* sink, bool* found) {
  OPT4STORE_RETURN_IF_ERROR(ReadRam(id, sink, found));
  if (*found) return Status::OK();
  ItemInfo info;
  if (ram_->Peek(id, &info).ok()) return ReadRam(id, sink, found);  // arrived meanwhile
  if (RamTier::IsFilling(info.version)) {
    return WaitAndRead(id, info.version, options_.fetch_timeout_ms, sink, found);
  }
  return Status::OK();
}

// Three passes: the RAM tier for every read; then the disk tier for the
// rest, in one io_uring batch in the owner, or as fetch requests sent all at
// once and then waited for in a worker; then the counters and statuses.
void Store::Impl::GetBatch(const uint64_t* positions, const ItemId* ids, size_t n,
                           ReadSink* const* sinks, Status* statuses, GetSource* sources) {
  if (closed_.load(std::memory_order_acquire)) {
    for (size_t i = 0; i < n; ++i) {
      statuses[i] = Status::IOError("the store is closed");
      if (sources) sources[i] = GetSource::kMiss;
    }
    return;
  }
  std::vector<GetSource> where(n, GetSource::kMiss);
  std::vector<char> done(n, 0);  // an error is already in statuses[i]
  for (size_t i = 0; i < n; ++i) {
    statuses[i] = Status::OK();
    if (ids[i] >= dataset_size_) {
      statuses[i] = Status::OutOfRange("id " + std::to_string(ids[i]) +
                                       " is out of range: the store holds " +
                                       std::to_string(dataset_size_) + " items");
      done[i] = 1;
    }
  }
  if (disk_only_) {
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      std::string meta, payload;
      statuses[i] = disk_->Get(ids[i], &meta, &payload);
      if (statuses[i].ok()) statuses[i] = CopyToSink(sinks[i], meta, payload);
      if (statuses[i].ok()) where[i] = GetSource::kDisk;
      if (sources) sources[i] = where[i];
    }
    return;
  }
  const bool owner = InOwner();
  uint64_t last = kNoPosition;  // the batch's last plan position
  for (size_t i = 0; i < n; ++i) {
    if (PlanPosition(positions[i]) && (last == kNoPosition || positions[i] > last)) {
      last = positions[i];
    }
  }
  if (owner && last != kNoPosition) SyncPlanning(last);
  SharedCounters& c = ctl_->counters();
  // The batch's RAM hits first, copied on the helpers as well as here
  // (copy_helpers.h); the rest takes the path below, with its waits. Only
  // items the tier holds are tried, so a miss is counted once.
  std::vector<char> hit(n, 0);
  if (n >= CopyHelpers::kMinParallel) {
    copy_helpers_.Run(n, [&](size_t i) {
      if (done[i] || !ram_->Contains(ids[i])) return;
      bool found = false;
      Status s = ReadRam(ids[i], sinks[i], &found);
      if (!s.ok()) {
        statuses[i] = s;
        done[i] = 1;
      } else if (found) {
        hit[i] = 1;
      }
    });
  }
  // The rest is read now, ahead of any prefetch for it: at a restart (RAM
  // empty) the readers and the prefetcher start at the same position, and
  // the prefetcher, throttled by staging=, lagged the readers' batches and
  // read again a third of what they had read (loader_bench's restart).
  for (size_t i = 0; i < n; ++i) {
    if (!done[i] && !hit[i] && PlanPosition(positions[i])) ctl_->MarkReading(positions[i]);
  }
  // After the owner closed or died, nobody answers fetches or Puts: never wait.
  const bool owner_gone = !owner && OwnerGone();
  std::vector<size_t> from_disk;
  std::vector<uint64_t> versions;
  std::vector<uint64_t> disk_bytes(n, 0);  // per kDisk read: its meta + payload bytes
  bool plan_awaited = false;  // AwaitPlanned: once a batch
  // Read i from the disk tier: true when it holds the item (read below,
  // with the batch's other disk reads); in the owner, a Put of it still on
  // its way there is read now.
  auto look_on_disk = [&](size_t i) {
    if (!owner_gone && ctl_->OnDisk(ids[i])) return true;
    if (owner && disk_) {
      bool pending = false;
      statuses[i] = ReadPendingWrite(ids[i], sinks[i], &pending, &disk_bytes[i]);
      if (!statuses[i].ok()) {
        done[i] = 1;
      } else if (pending) {
        where[i] = GetSource::kDisk;
      }
    }
    return false;
  };
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    if (hit[i]) {
      where[i] = GetSource::kRam;
      continue;
    }
    bool found = false;
    bool try_disk = false;
    statuses[i] = LookupRam(ids[i], sinks[i], &found);
    if (statuses[i].ok() && !found && owner && disk_) {
      // A Put of it this process made, its write pending: read here, not
      // waited for as readers of other processes do (kDiskExpectation).
      statuses[i] = ReadPendingWrite(ids[i], sinks[i], &found, &disk_bytes[i]);
      if (found) where[i] = GetSource::kDisk;
    }
    if (statuses[i].ok() && !found && !owner) {
      // Straight from the segment file: no wait for the owner, and no RAM
      // tier room needed (a full arena made fetches fail). Before any wait
      // for a prefetch or another reader's Put of an item the disk holds.
      statuses[i] = ReadPlaced(ids[i], sinks[i], &found, &disk_bytes[i]);
      if (found) where[i] = GetSource::kDisk;
    }
    if (statuses[i].ok() && !found && !owner && !owner_gone && !plan_awaited &&
        PlanPosition(positions[i]) && ctl_->Missed(ids[i]) &&
        expect_timeouts_.load(std::memory_order_relaxed) < kMaxExpectTimeouts) {
      // A reader missed it before, and may be loading it: whether the
      // policy keeps its Put for this read, only the plan says. A planner
      // that lags (the owner under load) has not stepped either read yet.
      AwaitPlanned(last);
      plan_awaited = true;
      statuses[i] = LookupRam(ids[i], sinks[i], &found);
    }
    if (!statuses[i].ok()) {
      done[i] = 1;
    } else if (found) {
      if (where[i] == GetSource::kMiss) where[i] = GetSource::kRam;
    } else if (!owner_gone && PlanPosition(positions[i]) &&
               (ctl_->Expectation(ids[i]) == ControlBlock::kDiskExpectation ||
                !ctl_->OnDisk(ids[i])) &&
               ControlBlock::ExpectedBefore(ctl_->Expectation(ids[i]), positions[i]) &&
               expect_timeouts_.load(std::memory_order_relaxed) < kMaxExpectTimeouts) {
      // A reader of an earlier position is loading it from the source, or
      // the owner is moving it through the disk tier (a prefetch, a Put's
      // pending write): wait for it rather than load or read it twice. An
      // item on disk that a reader was to load is read from disk: no Put
      // comes for it.
      const uint64_t version = ram_->Version(ids[i]);
      const uint64_t expectation = ctl_->Expectation(ids[i]);
      uint64_t from = 0;  // the loading read's position
      const bool by_read = ControlBlock::ExpectedRead(expectation, &from);
      ItemId got = 0;
      shm::ProcessIdentity loader;
      const bool loader_read = by_read && ctl_->ConsumedBy(from, &got, &loader);
      if (ram_->Contains(ids[i]) || !ControlBlock::ExpectedBefore(expectation, positions[i]) ||
          (loader_read && got != ids[i]) ||
          (by_read && std::find(positions, positions + n, from) != positions + n)) {
        // Here already, no longer expected, its loader drifted to another
        // id, or its loader is a read of this batch (whose caller Puts
        // after this call returns: waiting would wait for ourselves).
        statuses[i] = LookupRam(ids[i], sinks[i], &found);
      } else if (by_read && InEarlierEpoch(from, positions[i])) {
        // Its loader's epoch is over. A position never read (drop_last's
        // tail, a loop that broke off) sends no Put. One that was read
        // sent its Put before its epoch's workers ended, but the owner
        // may not have taken it yet (it lags when the disk is slow, and a
        // new epoch's workers start at once): look once it has taken every
        // Put sent so far, a wait that ends however few Puts are queued.
        statuses[i] = loader_read ? LookupAfterQueuedPuts(ids[i], sinks[i], &found)
                                  : LookupRam(ids[i], sinks[i], &found);
      } else {
        c.expect_waits.fetch_add(1, std::memory_order_relaxed);
        bool timed_out = false;
        statuses[i] = WaitAndRead(ids[i], version, kExpectTimeoutMs, sinks[i], &found,
                                  loader_read ? &loader : nullptr, &timed_out);
        if (timed_out) {
          CountExpectTimeout();
        } else if (statuses[i].ok() && !found && loader_read &&
                   ram_->Version(ids[i]) == version) {
          // Its loader's process is gone: it may have sent the Put before
          // it went, which the owner has not taken yet.
          statuses[i] = LookupAfterQueuedPuts(ids[i], sinks[i], &found);
        }
      }
      if (!statuses[i].ok()) {
        done[i] = 1;
      } else if (found) {
        where[i] = GetSource::kRam;
      } else {
        // Waited in vain, or the prefetcher did not keep it, or RAM could
        // not take its Put: the disk tier may hold it, or soon will.
        try_disk = look_on_disk(i);
      }
    } else {
      try_disk = look_on_disk(i);
    }
    if (try_disk) {
      from_disk.push_back(i);
      if (!owner) {
        // Ask the owner now; wait below, after every request is out.
        versions.push_back(ram_->Version(ids[i]));
        FetchMessage f{positions[i], ids[i], 0};
        c.fetch_requests.fetch_add(1, std::memory_order_relaxed);
        if (!queue_->TryPush(kMsgFetch, &f, sizeof(f)).ok()) versions.back() = kNever;
      }
    }
  }
  if (!from_disk.empty() && owner && disk_) {
    std::vector<ItemId> disk_ids(from_disk.size());
    for (size_t j = 0; j < from_disk.size(); ++j) disk_ids[j] = ids[from_disk[j]];
    disk_->MultiGet(disk_ids.data(), disk_ids.size(),
                    [&](size_t j, const Status& s, std::string_view meta, std::string_view payload) {
                      const size_t i = from_disk[j];
                      if (!s.ok()) {
                        if (!s.IsIOError()) ctl_->SetOnDisk(ids[i], false);
                        return;  // a miss: the caller loads it
                      }
                      statuses[i] = CopyToSink(sinks[i], meta, payload);
                      if (!statuses[i].ok()) {
                        done[i] = 1;
                        return;
                      }
                      where[i] = GetSource::kDisk;
                      const uint64_t size = meta.size() + payload.size();
                      disk_bytes[i] = size;
                      MutexLock lock(&mu_);
                      residency_->NoteSize(ids[i], size);
                      if (residency_->Wanted(positions[i], ids[i], size)) {
                        InsertRamLocked(ids[i], meta, payload).PermitUncheckedError();
                      }
                    });
  } else if (!from_disk.empty() && !owner) {
    for (size_t j = 0; j < from_disk.size(); ++j) {
      const size_t i = from_disk[j];
      if (versions[j] == kNever) continue;  // the request did not go out
      bool found = false;
      statuses[i] = WaitAndRead(ids[i], versions[j], options_.fetch_timeout_ms, sinks[i], &found);
      if (!found && ram_->Version(ids[i]) == versions[j]) {
        c.fetch_timeouts.fetch_add(1, std::memory_order_relaxed);
      }
      if (!statuses[i].ok()) {
        done[i] = 1;
      } else if (found) {
        where[i] = GetSource::kDisk;
        // The owner's answer, in RAM now (0 if evicted since: not counted).
        ItemInfo info;
        if (ram_->Peek(ids[i], &info).ok()) disk_bytes[i] = info.meta_size + info.payload_size;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (sources) sources[i] = where[i];
    if (done[i] && statuses[i].IsOutOfRange()) continue;
    c.accesses.fetch_add(1, std::memory_order_relaxed);
    switch (where[i]) {
      case GetSource::kRam:
        c.hits_ram.fetch_add(1, std::memory_order_relaxed);
        break;
      case GetSource::kDisk:
        c.hits_disk.fetch_add(1, std::memory_order_relaxed);
        c.hits_disk_bytes.fetch_add(disk_bytes[i], std::memory_order_relaxed);
        break;
      case GetSource::kMiss:
        c.source_loads.fetch_add(1, std::memory_order_relaxed);
        if (PlanPosition(positions[i])) ctl_->SetMissed(ids[i]);
        if (statuses[i].ok()) {
          statuses[i] = Status::NotFound("id " + std::to_string(ids[i]) + " is not in the store");
        }
        break;
    }
    Mark(positions[i], ids[i]);
  }
}

Status Store::Impl::Put(uint64_t position, ItemId id, std::string_view meta,
                        std::string_view payload) {
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  if (id >= dataset_size_) {
    return Status::OutOfRange("id " + std::to_string(id) + " is out of range: the store holds " +
                              std::to_string(dataset_size_) + " items");
  }
  if (meta.size() > kMaxMetaBytes) {
    return Status::InvalidArgument("meta of " + std::to_string(meta.size()) +
                                   " bytes is over the limit of " + std::to_string(kMaxMetaBytes));
  }
  if (disk_only_) {
    if (disk_->Contains(id)) return Status::OK();
    return disk_->Put(id, meta, payload);
  }
  ctl_->counters().puts.fetch_add(1, std::memory_order_relaxed);
  if (InOwner()) return OwnerPut(position, id, meta, payload, false);
  PutHeader h{position, id, static_cast<uint32_t>(meta.size()), payload.size()};
  struct iovec parts[3] = {{&h, sizeof(h)},
                           {const_cast<char*>(meta.data()), meta.size()},
                           {const_cast<char*>(payload.data()), payload.size()}};
  if (ctl_->header()->sync_every != 0) return PutDurably(id, parts, 3);
  Status s = queue_->TryPushv(kMsgPut, parts, 3);
  if (s.ok()) return s;
  ctl_->counters().puts_dropped.fetch_add(1, std::memory_order_relaxed);
  if (s.IsInvalidArgument()) {  // over the largest message: every Put of it would be
    Warn(kWarnPutTooLarge,
         "a worker's Put of " + FormatSize(meta.size() + payload.size()) +
             " was dropped: a value may take half the workers' queue to the owner (" +
             FormatSize(queue_->capacity_bytes()) +
             "), so it is loaded again whenever it is read; give the store a larger "
             "queue_bytes= (a few times the largest value: the workers' Puts wait there for "
             "the owner), or use opt4store.DataLoader, whose workers hand values over in "
             "shared batch slots");
    return Status::OK();
  }
  if (s.IsBusy() || s.IsNoSpace()) {
    Warn(kWarnQueueFull, "a worker's Put was dropped (" + s.ToString() +
                             "); the value will be loaded again when next needed");
    return Status::OK();
  }
  return s;
}

// sync="every" in a reader process. The owner pops a put message only
// after its disk write (synced, as every one of its writes then) returned,
// so the Put is durable once the queue's head passes the message and the
// id's on-disk bit is set. Without the bit, it failed only if a write failed
// meanwhile (put_errors moved); else the disk tier left it out (Belady's
// bypass: every item it holds is read sooner) or dropped it since, and the
// Put is OK as in the owner. A full queue is retried, not dropped; all of it
// within fetch_timeout_ms.
Status Store::Impl::PutDurably(ItemId id, const struct iovec* parts, int num_parts) {
  const ControlBlock::Header* h = ctl_->header();
  const int64_t deadline = NowNs() + options_.fetch_timeout_ms * 1000000;
  const std::string what = "sync=\"every\": the Put of id " + std::to_string(id);
  const std::string gone = what + " was not written: the store's owner closed it or is gone";
  uint64_t end = 0;
  const uint64_t errors_before = h->put_errors.load(std::memory_order_acquire);
  Status s;
  for (int64_t us = 20;; Backoff(&us)) {
    if (OwnerGone()) return Status::IOError(gone);
    s = queue_->TryPushv(kMsgPut, parts, num_parts, &end);
    if (!s.IsBusy() || NowNs() > deadline) break;
  }
  if (!s.ok()) {
    ctl_->counters().puts_dropped.fetch_add(1, std::memory_order_relaxed);
    return s.WithContext(what + " could not be sent to the owner");
  }
  for (int64_t us = 20; queue_->PoppedThrough() < end; Backoff(&us)) {
    if (OwnerGone()) return Status::IOError(gone);
    if (NowNs() > deadline) {
      return Status::IOError(what + " is not durable: the owner did not write it within " +
                             "fetch_timeout_ms=" + std::to_string(options_.fetch_timeout_ms));
    }
  }
  if (ctl_->OnDisk(id) || h->put_errors.load(std::memory_order_acquire) == errors_before) {
    return Status::OK();
  }
  const std::string failed = what + " is not durable: the owner's disk tier refused it";
  if (h->put_error_code.load(std::memory_order_acquire) ==
      static_cast<uint32_t>(Status::Code::kNoSpace)) {
    return Status::NoSpace(failed + " (no space)");
  }
  return Status::IOError(failed);
}

// The owner pops a message only after acting on it (SharedQueue::
// PoppedThrough), so once the head passes the tail seen here, every Put sent
// before is in a tier (or was refused there).
Status Store::Impl::WaitForPuts(int64_t timeout_ms) {
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  if (!queue_) return Status::OK();
  const uint64_t end = queue_->PushedThrough();
  const int64_t deadline = NowNs() + timeout_ms * 1000000;
  for (int64_t us = 20; queue_->PoppedThrough() < end; Backoff(&us)) {
    if (OwnerGone()) return Status::OK();
    if (NowNs() > deadline) {
      return Status::Busy("the owner did not take the queued Puts within " +
                          std::to_string(timeout_ms) + " ms");
    }
  }
  return Status::OK();
}

}  // namespace opt4store

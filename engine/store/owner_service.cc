// The owner's service (store_impl.h): the planner thread and what it does
// for the readers. Each turn it serves the queue (protocol.h: puts into RAM
// and through to disk, fetch requests), writes the values this process's
// readers Put to the disk tier, advances the frontier, steps the Residency
// ahead of it and prefetches what it asks for. It also carries out the
// Residency's requests on the tiers (ResidencyTiers).
#include <algorithm>
#include <cstring>

#include "engine/store/protocol.h"
#include "engine/store/store_impl.h"

namespace opt4store {

// ---------------------------------------------------------------- planning

void Store::Impl::AdvanceFrontierLocked() {
  if (!residency_ || !residency_->has_plan()) return;
  ControlBlock::Header* h = ctl_->header();
  residency_->AdvanceFrontier(h->high_water.load(std::memory_order_acquire), NowNs() / 1000000,
                              h->epoch_start.load(std::memory_order_acquire));
  h->frontier.store(residency_->frontier(), std::memory_order_release);
}

void Store::Impl::PlanAheadLocked(uint64_t limit, uint64_t force_through) {
  residency_->PlanAhead(limit, force_through,
                        ctl_->header()->high_water.load(std::memory_order_acquire));
  ctl_->header()->planned.store(residency_->planned(), std::memory_order_release);
}

void Store::Impl::AnswerPlanAsks() {
  ControlBlock::Header* h = ctl_->header();
  const uint64_t asked = h->plan_asked.load(std::memory_order_acquire);
  if (asked <= h->plan_answered.load(std::memory_order_relaxed)) return;
  {
    MutexLock lock(&mu_);
    AdvanceFrontierLocked();
    // Forced as the readers' high water is: they are there already.
    PlanAheadLocked(asked, asked);
  }
  h->plan_answered.store(asked, std::memory_order_release);
}

// The tiers as the Residency sees them.
bool Store::Impl::InRam(ItemId id) const { return ram_->Contains(id); }
bool Store::Impl::OnDisk(ItemId id) const { return ctl_->OnDisk(id); }
bool Store::Impl::Consumed(uint64_t position, ItemId* id) const {
  return ctl_->Consumed(position, id);
}
bool Store::Impl::BeingRead(uint64_t position) const { return ctl_->Reading(position); }
void Store::Impl::RamUsage(uint64_t* items, uint64_t* bytes) const {
  const RamTierStats st = ram_->Stats();
  *items = st.items_resident;
  *bytes = st.bytes_used;
}
void Store::Impl::Evict(ItemId id) { ram_->Evict(id).PermitUncheckedError(); }
void Store::Impl::ExpectPut(ItemId id, uint64_t position) {
  // The planner runs ahead of the readers, into later epochs: a later
  // admission of the same item must not replace an earlier read's pending
  // expectation, which that read's Put clears, nor a pending write's (the
  // value is on its way to the disk tier: it is read there). The
  // prefetcher's is replaced.
  const uint64_t expectation = ControlBlock::ReadExpectation(position);
  const uint64_t pending = ctl_->Expectation(id);
  const bool prefetching = pending == ControlBlock::kDiskExpectation && ctl_->OnDisk(id);
  if (pending == ControlBlock::kNoExpectation || prefetching || expectation < pending) {
    ctl_->SetExpected(id, expectation);
  }
}
void Store::Impl::SetNextUse(ItemId id, uint64_t position) {
  if (disk_) disk_->SetNextUse(id, position);
}
void Store::Impl::Skipped(uint64_t position, ItemId planned) {
  if (ctl_->Expectation(planned) == ControlBlock::ReadExpectation(position) &&
      !ram_->Contains(planned)) {
    // The read that was to load it did not: no Put comes.
    ctl_->ClearExpected(planned);
    ram_->AnswerAbsent(planned).PermitUncheckedError();
  }
}

void Store::Impl::Drifted(uint64_t position, ItemId planned, ItemId got) {
  Skipped(position, planned);  // it read something else
  Warn(kWarnDrift, "position " + std::to_string(position) + " read id " + std::to_string(got) +
                       " where the plan has " + std::to_string(planned) +
                       ": the sampler drifted from the plan; values stay correct, but "
                       "eviction and prefetch follow the plan (counted as drift)");
}

// ---------------------------------------------------------------- RAM, puts, fetches

Status Store::Impl::InsertRamLocked(ItemId id, std::string_view meta, std::string_view payload) {
  if (ram_->Contains(id)) return Status::OK();
  RamTier::PendingInsert pending;
  Status s = ram_->BeginInsert(id, meta.size(), payload.size(), &pending);
  if (!s.ok()) {
    if (s.IsNoSpace()) {
      insert_failures_.fetch_add(1, std::memory_order_relaxed);
      Warn(kWarnRamFull, "the RAM tier had no room for an item (" + s.message() +
                             "; fragmentation, staging= too small for the prefetched items, or "
                             "a full /dev/shm); it is served by the other tiers");
    }
    return s;
  }
  if (!meta.empty()) std::memcpy(pending.meta, meta.data(), meta.size());
  if (!payload.empty()) std::memcpy(pending.payload, payload.data(), payload.size());
  OPT4STORE_RETURN_IF_ERROR(ram_->CommitInsert(pending));
  ctl_->ClearExpected(id);
  return Status::OK();
}

void Store::Impl::Prefetch(const std::vector<ItemId>& ids) {
  {
    // Readers that arrive before the read completes wait for it instead of
    // reading the disk a second time.
    MutexLock lock(&mu_);
    for (ItemId id : ids) {
      if (ctl_->Expectation(id) == ControlBlock::kNoExpectation) {
        ctl_->SetExpected(id, ControlBlock::kDiskExpectation);
      }
    }
  }
  disk_->MultiGet(ids.data(), ids.size(),
                  [&](size_t i, const Status& status, std::string_view meta,
                      std::string_view payload) {
                    const ItemId id = ids[i];
                    RamTier::PendingInsert pending;
                    {
                      MutexLock lock(&mu_);
                      if (status.ok()) residency_->NoteSize(id, meta.size() + payload.size());
                      if (!status.ok() && !status.IsIOError()) ctl_->SetOnDisk(id, false);
                      Status begin = Status::NotFound("not wanted");
                      if (status.ok() && residency_->Keep(id) && !ram_->Contains(id)) {
                        begin = ram_->BeginInsert(id, meta.size(), payload.size(), &pending);
                        if (begin.IsNoSpace() &&
                            residency_->EvictUnneeded(meta.size() + payload.size())) {
                          begin = ram_->BeginInsert(id, meta.size(), payload.size(), &pending);
                        }
                        if (begin.IsNoSpace()) insert_failures_.fetch_add(1);
                      }
                      if (!begin.ok()) {
                        if (!ram_->Contains(id) && ctl_->Expectation(id) ==
                                                       ControlBlock::kDiskExpectation) {
                          ctl_->ClearExpected(id);
                          ram_->AnswerAbsent(id).PermitUncheckedError();
                        }
                        return;
                      }
                    }
                    // The copy runs without mu_: BeginInsert reserved the
                    // space, and readers see the item as filling until Commit.
                    if (!meta.empty()) std::memcpy(pending.meta, meta.data(), meta.size());
                    if (!payload.empty()) {
                      std::memcpy(pending.payload, payload.data(), payload.size());
                    }
                    MutexLock lock(&mu_);
                    if (ram_->CommitInsert(pending).ok()) {
                      ctl_->ClearExpected(id);
                      prefetched_.fetch_add(1, std::memory_order_relaxed);
                      prefetch_bytes_.fetch_add(meta.size() + payload.size(),
                                                std::memory_order_relaxed);
                    }
                    residency_->MaybeEvict(id);  // its reads may have passed meanwhile
                  });
}

void Store::Impl::HandleFetch(uint64_t position, ItemId id) {
  if (id >= dataset_size_) return;
  if (ram_->Contains(id)) return;
  std::string meta, payload;
  Status s = disk_ ? disk_->Get(id, &meta, &payload) : Status::NotFound("no disk tier");
  // The reader asked because it found no place, or one out of date
  // (compaction moved the record): its next read goes to the disk itself.
  if (s.ok()) PublishPlace(id);
  MutexLock lock(&mu_);
  if (!s.ok()) {
    if (s.IsCorruption() || s.IsNotFound()) ctl_->SetOnDisk(id, false);
    if (!ram_->Contains(id)) ram_->AnswerAbsent(id).PermitUncheckedError();
    return;
  }
  residency_->NoteSize(id, meta.size() + payload.size());
  if (ram_->Contains(id)) return;
  Status inserted = InsertRamLocked(id, meta, payload);
  if (inserted.IsNoSpace() && residency_->EvictUnneeded(meta.size() + payload.size())) {
    inserted = InsertRamLocked(id, meta, payload);
  }
  if (!inserted.ok()) {
    ram_->AnswerAbsent(id).PermitUncheckedError();
    return;
  }
  // Held until the readers pass the position that asked for it.
  residency_->HoldFetched(id, position);
}

void Store::Impl::SyncPlanning(uint64_t position) {
  MutexLock lock(&mu_);
  AdvanceFrontierLocked();
  PlanAheadLocked(std::max(position + 1, residency_->frontier() + effective_.prefetch_depth));
}

bool Store::Impl::DrainQueue() {
  bool any = false;
  for (int n = 0; n < 64; ++n) {
    QueueMessage m;
    if (!queue_->Front(&m).ok()) break;
    any = true;
    if (m.tag == kMsgPut && m.size >= sizeof(PutHeader)) {
      PutHeader h;
      std::memcpy(&h, m.data, sizeof(h));
      if (sizeof(PutHeader) + h.meta_size + h.payload_size == m.size) {
        std::string_view meta(m.data + sizeof(PutHeader), h.meta_size);
        std::string_view payload(m.data + sizeof(PutHeader) + h.meta_size, h.payload_size);
        OwnerPut(h.position, h.id, meta, payload, true).PermitUncheckedError();
      }
    } else if (m.tag == kMsgFetch && m.size == sizeof(FetchMessage)) {
      FetchMessage f;
      std::memcpy(&f, m.data, sizeof(f));
      queue_->Pop();
      HandleFetch(f.position, f.id);
      continue;
    }
    queue_->Pop();
  }
  return any;
}

Status Store::Impl::ReadPendingWrite(ItemId id, ReadSink* sink, bool* found, uint64_t* bytes) {
  *found = false;
  MutexLock lock(&write_mu_);
  if (write_ids_.count(id) == 0) return Status::OK();
  for (auto it = writes_.rbegin(); it != writes_.rend(); ++it) {
    if (it->id == id) {
      *found = true;
      if (bytes) *bytes = it->meta.size() + it->payload.size();
      return CopyToSink(sink, it->meta, it->payload);
    }
  }
  return Status::OK();
}

bool Store::Impl::DrainWrites() {
  // One drainer at a time (the planner thread, Flush, Close); the value
  // stays in writes_ while it is written, so that a Get meanwhile finds it.
  MutexLock drain(&drain_mu_);
  bool any = false;
  for (int n = 0; n < 16; ++n) {
    const PendingWrite* w = nullptr;
    {
      MutexLock lock(&write_mu_);
      if (writes_.empty()) break;
      w = &writes_.front();  // push_back leaves references to it valid
    }
    WriteThrough(w->id, w->meta, w->payload).PermitUncheckedError();  // counted and warned
    ItemId id = 0;
    uint64_t wake_from = ControlBlock::kNoExpectation;
    {
      MutexLock lock(&write_mu_);
      id = w->id;
      wake_from = w->wake_from;  // OwnerPut may have set it meanwhile
      write_bytes_ -= w->meta.size() + w->payload.size();
      write_ids_.erase(w->id);
      writes_.pop_front();
    }
    WakeReadersOfAbsent(id, wake_from);
    any = true;
  }
  return any;
}

void Store::Impl::PlannerLoop() {
  std::vector<ItemId> batch;
  while (!stop_.load(std::memory_order_acquire)) {
    if (options_.planner_turn_for_testing) options_.planner_turn_for_testing();
    AnswerPlanAsks();  // first: readers wait for it
    bool busy = DrainQueue();
    busy = DrainWrites() || busy;
    RamTier::ArenaRange ahead;
    {
      MutexLock lock(&mu_);
      AdvanceFrontierLocked();
      PlanAheadLocked(residency_->frontier() + effective_.prefetch_depth);
      residency_->CollectPrefetch(&batch);
      ahead = ram_->StepToReserveAhead();
      const int64_t now = NowNs();
      if (now - last_publish_ns_ > 50'000'000) PublishGaugesLocked();
    }
    // The RAM tier's next step, without mu_: inserts go on meanwhile.
    ram_->ReserveAhead(ahead);
    if (!batch.empty()) {
      Prefetch(batch);
      busy = true;
    }
    if (!busy) queue_->WaitForMessage(1).PermitUncheckedError();
  }
}

void Store::Impl::StopPlanner() {
  if (planner_ == nullptr) return;
  stop_.store(true, std::memory_order_release);
  planner_->join();
  delete planner_;
  planner_ = nullptr;
}

Status Store::Impl::WriteThrough(ItemId id, std::string_view meta, std::string_view payload) {
  if (!disk_ || ctl_->OnDisk(id)) return Status::OK();
  std::vector<ItemId> evicted;
  bool stored = false;
  Status s = disk_->Put(id, meta, payload, &evicted, &stored);
  if (!evicted.empty()) {
    // An item the budget pushed out and RAM does not hold is in neither
    // tier: its next load is expected, or two readers could both load it.
    MutexLock lock(&mu_);
    for (ItemId v : evicted) {
      ctl_->SetOnDisk(v, false);
      residency_->ExpectNextLoad(v);
    }
  }
  if (s.ok() && !stored) return s;  // read later than all the tier holds: left out
  if (s.ok()) {
    PublishPlace(id);  // first: a reader that sees the bit finds the place
    // Under mu_, and only if the tier still holds it: another thread's Put
    // may have evicted it since, and cleared the bit under mu_ before this.
    MutexLock lock(&mu_);
    if (disk_->Contains(id)) ctl_->SetOnDisk(id, true);
    return s;
  }
  disk_put_errors_.fetch_add(1, std::memory_order_relaxed);
  ctl_->header()->put_error_code.store(static_cast<uint32_t>(s.code()), std::memory_order_release);
  ctl_->header()->put_errors.fetch_add(1, std::memory_order_acq_rel);
  Warn(kWarnDiskFull, "the disk tier refused a write (" + s.ToString() +
                          "); the store keeps serving from RAM and the source");
  return s;
}

void Store::Impl::SpillForRestart() {
  std::vector<ItemId> offered;
  {
    MutexLock lock(&mu_);
    offered = residency_->RankForRestart();
  }
  for (ItemId id : offered) {
    StringSink value;
    bool found = false;
    if (!ReadRam(id, &value, &found).ok() || !found) continue;
    // Left out once nothing held is read later; a refusal is counted and
    // warned about as for any Put.
    WriteThrough(id, value.meta, value.payload).PermitUncheckedError();
  }
}

void Store::Impl::PublishPlace(ItemId id) {
  DiskRecordPlace place;
  if (disk_->Locate(id, &place).ok()) ctl_->SetPlace(id, place);
}

Status Store::Impl::OwnerPut(uint64_t position, ItemId id, std::string_view meta,
                             std::string_view payload, bool on_planner) {
  const uint64_t size = meta.size() + payload.size();
  const bool to_disk = disk_ && !ctl_->OnDisk(id);
  const bool every = effective_.sync == StoreOptions::SyncMode::kEveryPut;
  uint64_t wake_from = ControlBlock::kNoExpectation;
  {
    MutexLock lock(&mu_);
    residency_->NoteSize(id, size);
    if (PlanPosition(position) && position >= residency_->planned()) {
      PlanAheadLocked(position + 1, position + 1);
    }
    // Ranked by the read it is kept for, not the one just consumed: the
    // disk tier leaves it out if every item it holds is read sooner.
    if (to_disk) residency_->RankOnDisk(id, 0);
    if (residency_->Wanted(position, id, size)) {
      InsertRamLocked(id, meta, payload).PermitUncheckedError();
    }
    if (to_disk && !on_planner && !every && !ram_->Contains(id)) {
      // The planner thread writes it later (see writes_): until then only
      // this process can read it. Readers of other processes wait for the
      // write instead of loading it again; those waiting already are woken
      // after it, with the readers of the expectation this one replaces.
      ctl_->SetExpected(id, ControlBlock::kDiskExpectation);
      wake_from = ControlBlock::kDiskExpectation;
    } else if (ctl_->Expectation(id) != ControlBlock::kNoExpectation && !ram_->Contains(id)) {
      // Readers waiting for this value will not get it from RAM. Woken
      // now, they would find it nowhere while it is on its way to the disk
      // tier, and load it again: they are woken once it is there.
      wake_from = ctl_->Expectation(id);
      if (!to_disk) {
        ctl_->ClearExpected(id);
        ram_->AnswerAbsent(id).PermitUncheckedError();
        wake_from = ControlBlock::kNoExpectation;
        residency_->ExpectNextLoad(id);
      }
    }
  }
  if (!to_disk) return Status::OK();
  if (!on_planner && !every) {
    // The reader's thread only copies; the planner thread writes. Past the
    // bound (the disk is slower than the source), the reader writes itself.
    // With sync="every" the Put returns only once its record is durable, so
    // it writes (and syncs) here.
    MutexLock lock(&write_mu_);
    if (write_bytes_ + size <= kMaxPendingWriteBytes && planner_ != nullptr) {
      if (write_ids_.insert(id).second) {
        writes_.push_back({id, std::string(meta), std::string(payload), wake_from});
        write_bytes_ += size;
      } else if (wake_from != ControlBlock::kNoExpectation) {
        // A write of it is pending already: its readers wake after that one.
        for (auto it = writes_.rbegin(); it != writes_.rend(); ++it) {
          if (it->id == id) {
            if (it->wake_from == ControlBlock::kNoExpectation) it->wake_from = wake_from;
            break;
          }
        }
      }
      return Status::OK();
    }
  }
  Status written = WriteThrough(id, meta, payload);
  WakeReadersOfAbsent(id, wake_from);
  if (every && !on_planner) return written;
  written.PermitUncheckedError();  // counted and warned about
  return Status::OK();
}

void Store::Impl::WakeReadersOfAbsent(ItemId id, uint64_t expectation) {
  if (expectation == ControlBlock::kNoExpectation) return;
  MutexLock lock(&mu_);
  if (ram_->Contains(id)) return;  // its insert woke them
  if (ctl_->Expectation(id) == expectation) ctl_->ClearExpected(id);
  ram_->AnswerAbsent(id).PermitUncheckedError();
  residency_->ExpectNextLoad(id);  // none while the disk tier holds it
}

}  // namespace opt4store

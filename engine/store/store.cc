// Store: the facade over Store::Impl (store_impl.h maps the rest), the
// owner's admin calls, and undoing a failed open of a new store.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/atomic_max.h"
#include "engine/store/owner_file.h"
#include "engine/store/store_impl.h"

namespace opt4store {

void Store::Impl::Warn(int kind, const std::string& message) {
  if (FirstWarning(static_cast<uint32_t>(kind))) log_(message);
}

void Store::Impl::BeginEpoch(uint64_t position) {
  if (!ctl_ || !PlanPosition(position)) return;
  RaiseTo(&ctl_->header()->epoch_start, position);
  if (InOwner() && !closed_.load(std::memory_order_acquire)) {
    // The last epoch's unread positions are passed now, before any read of
    // this one (the sampler begins an epoch before its loader sends out an
    // index), not at the planner's next turn: until then their reads'
    // expectations hide the loads this epoch's first reads make.
    MutexLock lock(&mu_);
    AdvanceFrontierLocked();
  }
}

bool Store::Impl::PositionConsumed(uint64_t position) const {
  const uint64_t frontier = Frontier();
  if (frontier == kNoPosition) return false;
  ItemId id = 0;
  return position < frontier || ctl_->Consumed(position, &id);
}

uint64_t Store::Impl::ReadingFrom() const {
  const uint64_t frontier = Frontier();
  if (frontier == kNoPosition) return frontier;
  return std::max(frontier, ctl_->header()->epoch_start.load(std::memory_order_acquire));
}

void Store::Impl::CountPeerTraffic(uint64_t hits, uint64_t bytes_in, uint64_t bytes_out) {
  if (!ctl_) return;
  SharedCounters& c = ctl_->counters();
  c.peer_hits.fetch_add(hits, std::memory_order_relaxed);
  c.peer_bytes_in.fetch_add(bytes_in, std::memory_order_relaxed);
  c.peer_bytes_out.fetch_add(bytes_out, std::memory_order_relaxed);
}

bool Store::Impl::FirstWarning(uint32_t kind) {
  if (kind >= 64) return true;
  if (!ctl_) {
    // Closed or not opened: this process's own flag.
    bool expected = false;
    return kind >= kWarnCount || warned_[kind].compare_exchange_strong(expected, true);
  }
  const uint64_t bit = uint64_t{1} << kind;
  return (ctl_->header()->warned.fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
}

// ---------------------------------------------------------------- the owner's admin calls

Status Store::Impl::SetPlan(const PlanSpec& plan, uint64_t start_position) {
  if (!InOwner()) return Status::InvalidArgument("SetPlan: only the owner process sets the plan");
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  if (disk_only_) return Status::InvalidArgument("SetPlan: the store is open in disk-only mode");
  if (plan.dataset_size != 0 && plan.dataset_size != dataset_size_) {
    return Status::InvalidArgument("SetPlan: the plan's dataset size " +
                                   std::to_string(plan.dataset_size) + " contradicts the store's " +
                                   std::to_string(dataset_size_));
  }
  // The file copy is I/O: before the lock.
  PlanSpec stored = plan, saved = plan;
  const bool persist = disk_ && PlanIsPersistable(plan);
  if (persist) OPT4STORE_RETURN_IF_ERROR(CopyPlan(plan, &stored, &saved));
  MutexLock lock(&mu_);
  std::vector<ItemId> in_ram;
  for (uint64_t id = 0; id < dataset_size_; ++id) {
    if (ram_->Contains(static_cast<ItemId>(id))) in_ram.push_back(static_cast<ItemId>(id));
  }
  OPT4STORE_RETURN_IF_ERROR(InitPlanLocked(stored, start_position, in_ram));
  resume_position_.store(std::min(start_position, total_positions_.load()));
  if (persist) OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestPlanKey, EncodePlanSpec(saved)));
  PublishGaugesLocked();
  return Status::OK();
}

Status Store::Impl::AppendPlan(std::vector<ItemId> ids) {
  if (!InOwner()) return Status::InvalidArgument("AppendPlan: only the owner process plans");
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  if (disk_only_) return Status::InvalidArgument("AppendPlan: the store is open in disk-only mode");
  MutexLock lock(&mu_);
  return residency_->AppendPlan(std::move(ids));
}

uint64_t Store::Impl::ResumePosition() const { return resume_position_; }

uint64_t Store::Impl::Frontier() const {
  if (!ctl_ || TotalPositions() == 0) return kNoPosition;
  return ctl_->header()->frontier.load(std::memory_order_acquire);
}

Status Store::Impl::SaveCursor(uint64_t* position) {
  Cursor cursor;
  {
    MutexLock lock(&mu_);
    AdvanceFrontierLocked();
    cursor.plan = residency_->has_plan() ? plan_identity_ : std::string();
    cursor.position = residency_->frontier();
    cursor.epoch_length = residency_->epoch_length();
  }
  *position = cursor.position;
  return disk_->PutMeta(kManifestCursorKey, EncodeCursor(cursor));
}

Status Store::Impl::Flush() {
  if (!InOwner()) return Status::InvalidArgument("Flush: only the owner process flushes");
  if (closed_.load()) return Status::IOError("the store is closed");
  if (disk_) {
    uint64_t saved = 0;
    if (!disk_only_) {
      while (DrainWrites()) {  // every earlier Put is on the disk tier first
      }
      OPT4STORE_RETURN_IF_ERROR(SaveCursor(&saved));
    }
    OPT4STORE_RETURN_IF_ERROR(disk_->Flush());
    if (!disk_only_) resume_position_.store(saved);
  }
  if (!disk_only_) {
    // Other ranks' stats() after this flush (a barrier between) show the
    // store as it now is, not as the planner last published it.
    MutexLock lock(&mu_);
    if (residency_) PublishGaugesLocked();
  }
  return Status::OK();
}

Status Store::Impl::Compact() {
  if (!InOwner()) return Status::InvalidArgument("Compact: only the owner process compacts");
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  if (!disk_) return Status::OK();
  Status s = disk_->Compact();
  if (ctl_) {
    // Moved records: readers would find their old places gone and ask the
    // owner (which publishes them again); tell them now instead.
    disk_->ForEachItem([this](ItemId id, uint64_t, const DiskRecordPlace& place) {
           if (id < dataset_size_ && ctl_->OnDisk(id)) ctl_->SetPlace(id, place);
         }).PermitUncheckedError();
  }
  return s;
}

Status Store::Impl::Verify(StoreVerifyReport* report) {
  if (!InOwner()) return Status::InvalidArgument("Verify: only the owner process verifies");
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  *report = StoreVerifyReport();
  if (!disk_) return Status::OK();
  VerifyReport r;
  Status s = disk_->Verify(&r);
  report->records_checked = r.records_checked;
  report->bytes_checked = r.bytes_checked;
  report->lost = r.lost;
  report->orphaned = r.orphaned;
  for (const VerifyReport::Bad& b : r.bad) {
    report->bad.push_back({b.id, b.segment + " @" + std::to_string(b.offset), b.status});
  }
  std::sort(report->bad.begin(), report->bad.end(),
            [](const StoreVerifyReport::Bad& a, const StoreVerifyReport::Bad& b) {
              return a.id < b.id;
            });
  return s;
}

Status Store::Impl::Inspect(StoreInfo* info) {
  if (!InOwner()) return Status::InvalidArgument("Inspect: only the owner process inspects");
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  *info = StoreInfo();
  info->path = path_;
  info->settings = effective_;
  if (disk_) {
    std::string text;
    PlanSpec plan;
    if (disk_->GetMeta(kManifestPlanKey, &text).ok() && DecodeStoredPlan(text, &plan).ok()) {
      info->plan = plan.Describe();
    }
    Cursor cursor;
    if (disk_->GetMeta(kManifestCursorKey, &text).ok() && DecodeCursor(text, &cursor).ok()) {
      info->cursor_plan = cursor.plan;
      info->cursor_position = cursor.position;
      if (cursor.epoch_length > 0) info->cursor_epoch = cursor.position / cursor.epoch_length;
    }
    for (const DiskSegmentInfo& s : disk_->Segments()) {
      info->segments.push_back({s.name, s.file_bytes, s.live_bytes});
    }
  }
  if (!disk_only_) {
    MutexLock lock(&mu_);
    if (residency_->has_plan()) info->plan = residency_->plan().Describe();
  }
  return Status::OK();
}

Status Store::Impl::WaitForRankReaders(uint32_t expected, int64_t timeout_ms) {
  if (closed_.load(std::memory_order_acquire)) return Status::IOError("the store is closed");
  if (!InOwner()) return Status::InvalidArgument("only the store's owner waits for its readers");
  if (!ctl_) return Status::OK();
  const ControlBlock::Header* h = ctl_->header();
  uint64_t joined = 0, read_through = 0;
  size_t live = SIZE_MAX;
  int64_t moved_ns = NowNs();
  for (bool first = true;; first = false) {
    const std::vector<shm::ProcessIdentity> now = ctl_->LiveRankReaders();
    const uint64_t joined_now = h->rank_readers_joined.load(std::memory_order_acquire);
    const uint64_t high = h->high_water.load(std::memory_order_acquire);
    if (joined_now >= expected && now.empty()) return Status::OK();
    if (!first && (joined_now != joined || now.size() < live || high != read_through)) {
      moved_ns = NowNs();
    }
    joined = joined_now;
    live = now.size();
    read_through = high;
    if (timeout_ms >= 0 && NowNs() - moved_ns > timeout_ms * 1000000) {
      std::string why;
      if (joined < expected) {
        why = std::to_string(expected - joined) + " of the " + std::to_string(expected) +
              " rank readers expected never attached";
      }
      if (!now.empty()) {
        std::string pids;
        for (const shm::ProcessIdentity& p : now) {
          pids += (pids.empty() ? "" : ", ") + std::to_string(p.pid);
        }
        why += (why.empty() ? "" : ", and ") + std::to_string(now.size()) +
               " rank reader(s) (pid " + pids + ") still have the store open";
      }
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f s", static_cast<double>(timeout_ms) / 1000);
      return Status::Busy(why + " after " + waited +
                          " in which none attached or closed and no read moved on");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status Store::Impl::Close() {
  if (closed_.exchange(true)) return Status::OK();
  if (!InOwner()) {
    // Every Put this process sent is queued by now: the owner's wait ends
    // with them in the queue, and its Close takes them.
    stats_at_close_ = ClosedStats(Stats());
    if (ctl_) ctl_->LeaveRankReaders(rank_reader_slot_, shm::PackProcess(shm::CurrentProcess()));
    ram_.reset();
    queue_.reset();
    ctl_.reset();
    return Status::OK();
  }
  StopPlanner();
  Status result;
  if (ctl_ && queue_) {
    // Values workers sent, and readers Put, before the end still reach the
    // disk tier.
    closed_.store(false);
    while (DrainQueue() || DrainWrites()) {
    }
    closed_.store(true);
  }
  // Nothing more is taken from the queue or planned: readers stop waiting
  // for the owner now, not after the disk tier's sync and close, which can
  // take seconds.
  if (ctl_) ctl_->header()->owner_closed.store(1, std::memory_order_release);
  if (!disk_ && !disk_only_) stats_at_close_ = ClosedStats(Stats());
  if (disk_) {
    uint64_t saved = 0;
    // An open that failed (at its plan, say, after the residency existed)
    // had no readers: the cursor and the counters an earlier run saved stay.
    bool opened;
    {
      MutexLock lock(&mu_);
      opened = owner_opened_;
    }
    if (!disk_only_ && opened) {
      SpillForRestart();
      result = SaveCursor(&saved);
      const StoreStats live = Stats();
      stats_at_close_ = ClosedStats(live);
      // So that a closed store shows its last run (opt4store stats).
      Status s = disk_->PutMeta(kManifestLastRunKey, EncodeRunCounters(live));
      if (result.ok()) result = s;
    }
    // Before the LOCK goes: a later owner's file is never removed.
    if (!disk_only_) {
      Status r = RemoveOwnerFile(path_);
      if (result.ok()) result = r;
    }
    Status s = disk_->Close();
    if (result.ok()) result = s;
    disk_.reset();
  }
  ram_.reset();
  queue_.reset();
  ctl_.reset();
  return result;
}

void Store::Impl::UndoNewStore() {
  if (!new_store_) return;
  // The LOCK is held from before the close to the end of the removal: an
  // opener that comes meanwhile gets Busy, never a store removed under it.
  const std::string lock_path = path_ + "/LOCK";
  const int held = open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
  Close().PermitUncheckedError();
  if (held < 0) return;
  if (flock(held, LOCK_EX | LOCK_NB) != 0) {  // another opener has it now: theirs
    close(held);
    return;
  }
  auto made = [this](const std::string& name) {
    return std::find(entries_before_.begin(), entries_before_.end(), name) ==
           entries_before_.end();
  };
  std::error_code ec;
  // Only what an open makes: a file someone else put there stays.
  for (const char* name : {"index", "segments", "RESERVE"}) {
    if (made(name)) std::filesystem::remove_all(path_ + "/" + name, ec);
  }
  if (made("LOCK")) unlink(lock_path.c_str());
  // Deepest first; remove() leaves a folder that holds anything.
  for (const std::string& dir : dirs_made_) std::filesystem::remove(dir, ec);
  close(held);
}

// ---------------------------------------------------------------- Store

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Status Store::Open(const StoreOptions& options, const std::string& path,
                   std::unique_ptr<Store>* store) {
  std::unique_ptr<Impl> impl(new Impl());
  Status s = impl->OpenOwner(options, path);
  if (!s.ok()) {
    impl->UndoNewStore();
    return s;
  }
  store->reset(new Store(std::move(impl)));
  return Status::OK();
}

Status Store::Repair(const StoreOptions& options, const std::string& path,
                     StoreRepairReport* report) {
  *report = StoreRepairReport();
  // Not any directory: one that holds neither is no store (a repair would
  // make one half).
  if (path.empty() || (access((path + "/index").c_str(), F_OK) != 0 &&
                       access((path + "/segments").c_str(), F_OK) != 0)) {
    return Status::NotFound("no store at " + path + " (neither index/ nor segments/ there)");
  }
  DiskTierOptions d;
  d.env = options.env;
  DiskRepairReport r;
  OPT4STORE_RETURN_IF_ERROR(DiskTier::Repair(d, path, &r));
  report->index_rebuilt = true;
  report->largest_id = r.largest_id;
  report->segments = r.segments;
  report->records = r.records;
  report->older_versions = r.older_versions;
  report->damaged_bytes = r.damaged_bytes;
  report->lost = std::move(r.lost);
  report->index_salvage = std::move(r.index_salvage);
  // The manifest: an admin open reads it, as it is; where it was lost with
  // the old index (that open fails with Corruption), the dataset size and
  // budget given write a new one.
  StoreOptions o = options;
  o.disk_only = true;
  o.create_if_missing = false;
  StoreOptions as_kept = o;
  as_kept.dataset_size.reset();
  as_kept.disk.reset();
  std::unique_ptr<Store> store;
  Status s = Open(as_kept, path, &store);
  report->manifest_found = s.ok();
  if (s.ok()) {
    OPT4STORE_RETURN_IF_ERROR(store->Close());
    if (!options.dataset_size && !options.disk) return Status::OK();
    return Status::InvalidArgument(
        "the index of " + path + " was rebuilt and its manifest kept, with its dataset size and "
        "disk budget: the dataset size and disk budget given are for a store whose manifest "
        "was lost, and were not applied");
  }
  if (!s.IsCorruption()) return s;
  if (!options.dataset_size || !options.disk) {
    return Status::Corruption("the index of " + path + " was rebuilt (" +
                              std::to_string(report->records) +
                              " records), but the store's manifest (settings, plan, cursor) "
                              "was lost with the old index: give the dataset size and the disk "
                              "budget to write a new one (" + s.message() + ")");
  }
  if (report->records > 0 && report->largest_id >= *options.dataset_size) {
    return Status::InvalidArgument(
        "the index of " + path + " was rebuilt, but its segments hold id " +
        std::to_string(report->largest_id) + ", which a dataset of " +
        std::to_string(*options.dataset_size) + " items does not: no manifest was written; "
        "repair again with the store's real dataset size (more than " +
        std::to_string(report->largest_id) + ")");
  }
  OPT4STORE_RETURN_IF_ERROR(Open(o, path, &store));
  return store->Close();
}

Status Store::Attach(const std::string& handle, std::unique_ptr<Store>* store) {
  std::unique_ptr<Impl> impl(new Impl());
  OPT4STORE_RETURN_IF_ERROR(impl->AttachReader(handle, /*rank_reader=*/false));
  store->reset(new Store(std::move(impl)));
  return Status::OK();
}

Status Store::AttachRankReader(const std::string& handle, std::unique_ptr<Store>* store) {
  std::unique_ptr<Impl> impl(new Impl());
  OPT4STORE_RETURN_IF_ERROR(impl->AttachReader(handle, /*rank_reader=*/true));
  store->reset(new Store(std::move(impl)));
  return Status::OK();
}

std::string Store::handle() const { return impl_->handle(); }
bool Store::IsOwner() const { return impl_->InOwner(); }
uint64_t Store::dataset_size() const { return impl_->dataset_size(); }
Status Store::Get(uint64_t position, ItemId id, ReadSink* sink, GetSource* source) {
  return impl_->Get(position, id, sink, source);
}
Status Store::Peek(ItemId id, ReadSink* sink, GetSource* source) {
  return impl_->Peek(id, sink, source);
}
void Store::GetBatch(const uint64_t* positions, const ItemId* ids, size_t n,
                     ReadSink* const* sinks, Status* statuses, GetSource* sources) {
  impl_->GetBatch(positions, ids, n, sinks, statuses, sources);
}
Status Store::Put(uint64_t position, ItemId id, std::string_view meta, std::string_view payload) {
  return impl_->Put(position, id, meta, payload);
}
void Store::MarkConsumed(uint64_t position, ItemId id) { impl_->MarkConsumed(position, id); }

void Store::Locate(const ItemId* ids, size_t n, GetSource* sources) {
  impl_->Locate(ids, n, sources);
}
Status Store::SetPlan(const PlanSpec& plan, uint64_t start_position) {
  return impl_->SetPlan(plan, start_position);
}
uint64_t Store::ResumePosition() const { return impl_->ResumePosition(); }
uint64_t Store::Frontier() const { return impl_->Frontier(); }
void Store::BeginEpoch(uint64_t position) { impl_->BeginEpoch(position); }

Status Store::AppendPlan(std::vector<ItemId> ids) { return impl_->AppendPlan(std::move(ids)); }
uint64_t Store::ReadingFrom() const { return impl_->ReadingFrom(); }
bool Store::Consumed(uint64_t position) const { return impl_->PositionConsumed(position); }
bool Store::FirstWarning(uint32_t kind) { return impl_->FirstWarning(kind); }
void Store::CountPeerTraffic(uint64_t hits, uint64_t bytes_in, uint64_t bytes_out) {
  impl_->CountPeerTraffic(hits, bytes_in, bytes_out);
}
Status Store::WaitForPuts(int64_t timeout_ms) { return impl_->WaitForPuts(timeout_ms); }
Status Store::WaitForRankReaders(uint32_t expected, int64_t timeout_ms) {
  return impl_->WaitForRankReaders(expected, timeout_ms);
}
Status Store::Flush() { return impl_->Flush(); }
Status Store::Compact() { return impl_->Compact(); }
Status Store::Verify(StoreVerifyReport* report) { return impl_->Verify(report); }
Status Store::Inspect(StoreInfo* info) { return impl_->Inspect(info); }
Status Store::Close() { return impl_->Close(); }
StoreStats Store::Stats() { return impl_->Stats(); }

}  // namespace opt4store

// Store: see store.h for the read path and the roles of the processes.
//
// Owner state and invariants (all under mu_):
//   frontier_ <= planned_: positions [frontier_, planned_) have been stepped
//   through the policy but not yet consumed by every reader; slots_ holds
//   each one's id and what the policy decided there.
//   first_pending_[id], last_pending_[id], PlanSlot::next: the reads of id
//   in that span, as a linked list through the slots (slot index + 1; 0 is
//   none). Whether id belongs in RAM at the frontier follows from its first
//   pending read: a policy hit there means the policy holds it from its
//   previous read until then (admissions happen only at reads), even if the
//   planner, further ahead, has already seen it evicted; a miss there means
//   the policy lets it go before then. With no pending read, the policy's
//   state at planned_ decides (KeepLocked).
//   prefetch_pins_[id]: positions in that span (and fetch requests) for
//   which the item was brought from disk; it stays until they are consumed.
//   A Put for position p enters RAM only if the policy's residency covers p
//   (see WantedLocked); so with one reader, RAM hits are exactly the
//   policy's hits.
//   An item leaves RAM once KeepLocked() turns false (MaybeEvictLocked),
//   checked whenever a victim is chosen or a read of it is released.
#include "opt4store/store.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_set>
#include <utility>

#include "opt4store/next_use.h"
#include "opt4store/value.h"
#include "engine/store/control_block.h"
#include "engine/store/manifest.h"
#include "tiers/disk_index.h"
#include "tiers/disk_tier.h"
#include "tiers/ram_tier.h"
#include "tiers/shared_queue.h"

namespace opt4store {
namespace {

constexpr uint32_t kMsgPut = 1;
constexpr uint32_t kMsgFetch = 2;

struct PutHeader {
  uint64_t position;
  uint32_t id;
  uint32_t meta_size;
  uint64_t payload_size;
};

struct FetchMessage {
  uint64_t position;
  uint32_t id;
  uint32_t reserved;
};

// What the policy decided at a planned position.
enum SlotFlags : uint8_t {
  kHit = 1,          // the policy hit: a hit pin is held
  kPrefetchPin = 4,  // brought (or kept) for this read from the disk tier
};

struct PlanSlot {
  ItemId id = 0;
  uint32_t next = 0;  // slot index + 1 of the next pending read of id; 0: none
  uint8_t flags = 0;
};

constexpr uint64_t kDefaultRamBytes = uint64_t{1} << 30;
constexpr uint64_t kDefaultPrefetchDepth = 512;
constexpr uint64_t kMinStagingBytes = uint64_t{64} << 20;
// Positions never consumed are skipped once readers are this far past them.
constexpr uint64_t kAbandonLag = ControlBlock::kRingSize / 2;
constexpr uint64_t kProvisionalDiskBudget = uint64_t{1} << 40;
constexpr uint64_t kMeanSizeBeforeAny = 64 * 1024;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void DefaultLog(const std::string& message) {
  std::fprintf(stderr, "opt4store: %s\n", message.c_str());
}

DiskTierOptions::Compression ToDisk(StoreOptions::Compression c) {
  return c == StoreOptions::Compression::kNone ? DiskTierOptions::Compression::kNone
                                               : DiskTierOptions::Compression::kAuto;
}

DiskTierOptions::SyncMode ToDisk(StoreOptions::SyncMode s) {
  switch (s) {
    case StoreOptions::SyncMode::kNone:
      return DiskTierOptions::SyncMode::kNone;
    case StoreOptions::SyncMode::kEveryPut:
      return DiskTierOptions::SyncMode::kEveryPut;
    default:
      return DiskTierOptions::SyncMode::kOnFlush;
  }
}

// Copies two blobs into a sink.
Status CopyToSink(ReadSink* sink, std::string_view meta, std::string_view payload) {
  void* meta_dst = nullptr;
  void* payload_dst = nullptr;
  OPT4STORE_RETURN_IF_ERROR(sink->Prepare(meta.size(), payload.size(), &meta_dst, &payload_dst));
  if (!meta.empty()) std::memcpy(meta_dst, meta.data(), meta.size());
  if (!payload.empty()) std::memcpy(payload_dst, payload.data(), payload.size());
  return Status::OK();
}

}  // namespace

const char* CompressionName(StoreOptions::Compression compression) {
  return compression == StoreOptions::Compression::kNone ? "none" : "auto";
}

Status ParseCompression(std::string_view name, StoreOptions::Compression* compression) {
  if (name == "none") {
    *compression = StoreOptions::Compression::kNone;
  } else if (name == "auto" || name == "lz4") {
    *compression = StoreOptions::Compression::kAuto;
  } else {
    return Status::InvalidArgument("unknown compression '" + std::string(name) +
                                   "' (expected auto or none)");
  }
  return Status::OK();
}

const char* SyncModeName(StoreOptions::SyncMode sync) {
  switch (sync) {
    case StoreOptions::SyncMode::kNone:
      return "none";
    case StoreOptions::SyncMode::kEveryPut:
      return "every";
    default:
      return "flush";
  }
}

Status ParseSyncMode(std::string_view name, StoreOptions::SyncMode* sync) {
  if (name == "none") {
    *sync = StoreOptions::SyncMode::kNone;
  } else if (name == "flush") {
    *sync = StoreOptions::SyncMode::kOnFlush;
  } else if (name == "every") {
    *sync = StoreOptions::SyncMode::kEveryPut;
  } else {
    return Status::InvalidArgument("unknown sync mode '" + std::string(name) +
                                   "' (expected none, flush or every)");
  }
  return Status::OK();
}

class Store::Impl {
 public:
  ~Impl();

  Status OpenOwner(const StoreOptions& options, const std::string& path);
  Status AttachReader(const std::string& handle);

  bool InOwner() const { return owner_pid_ != 0 && getpid() == owner_pid_; }
  std::string handle() const { return ctl_ ? ctl_->name() : std::string(); }
  uint64_t dataset_size() const { return dataset_size_; }

  Status Get(uint64_t position, ItemId id, ReadSink* sink, GetSource* source);
  void GetBatch(const uint64_t* positions, const ItemId* ids, size_t n, ReadSink* const* sinks,
                Status* statuses, GetSource* sources);
  Status Put(uint64_t position, ItemId id, std::string_view meta, std::string_view payload);
  void MarkConsumed(uint64_t position, ItemId id);

  Status SetPlan(const PlanSpec& plan, uint64_t start_position);
  uint64_t ResumePosition() const;
  Status Flush();
  Status Compact();
  Status Verify(StoreVerifyReport* report);
  Status Inspect(StoreInfo* info);
  Status Close();
  StoreStats Stats();

 private:
  // Writes the readers' frontier and the plan's identity to the manifest
  // (synced with the next disk Flush); *position gets the frontier.
  Status SaveCursor(uint64_t* position);
  // ---- opening
  Status ReadManifest(bool* exists);
  Status ResolveOptions(const StoreOptions& options, bool exists);
  Status OpenDisk(uint64_t budget);
  Status WriteManifest();
  Status CreateShared();
  Status InitPlanLocked(const PlanSpec& spec, uint64_t start);

  // ---- owner, under mu_
  void AdvanceFrontierLocked();
  // Steps the policy through positions below `limit`. Below force_through
  // an item of unknown size is stepped with the mean size; above, the
  // planner stops there (see the function).
  void PlanAheadLocked(uint64_t limit, uint64_t force_through = 0);
  void ReleasePositionLocked(uint64_t position);
  void MaybeEvictLocked(ItemId id);
  bool KeepLocked(ItemId id) const;
  bool HeldAfterLocked(ItemId id, uint32_t next_slot) const;
  bool WantedLocked(uint64_t position, ItemId id, uint64_t size);
  Status InsertRamLocked(ItemId id, std::string_view meta, std::string_view payload);
  void ExpireTransientsLocked();
  void CollectPrefetchLocked(std::vector<ItemId>* ids);
  uint64_t CostOf(ItemId id) const;
  void NoteSize(ItemId id, uint64_t size);
  void PublishGaugesLocked();
  void Warn(int kind, const std::string& message);

  // ---- owner, no lock
  // on_planner: the call comes from the planner thread (a worker's Put off
  // the queue), which writes to the disk tier itself; a reader's own Put
  // leaves that write to the planner thread (see writes_).
  Status OwnerPut(uint64_t position, ItemId id, std::string_view meta, std::string_view payload,
                  bool on_planner);
  void WriteThrough(ItemId id, std::string_view meta, std::string_view payload);
  // Writes the values readers Put to the disk tier; false when none waited.
  bool DrainWrites();
  // A value still in writes_: copied into *sink, *found set.
  Status ReadPendingWrite(ItemId id, ReadSink* sink, bool* found);
  void HandleFetch(uint64_t position, ItemId id);
  void Prefetch(const std::vector<ItemId>& ids);
  bool DrainQueue();
  void PlannerLoop();
  void StopPlanner();
  void SyncPlanning(uint64_t position);

  // ---- readers
  Status ReadRam(ItemId id, ReadSink* sink, bool* found);
  // ReadRam, waiting for an item that is being filled.
  Status LookupRam(ItemId id, ReadSink* sink, bool* found);
  Status WaitAndRead(ItemId id, uint64_t version, int64_t timeout_ms, ReadSink* sink,
                     bool* found);
  void Mark(uint64_t position, ItemId id);
  bool PlanPosition(uint64_t position) const {
    return position != kNoPosition && position < total_positions_.load(std::memory_order_relaxed);
  }

  enum WarnKind { kWarnDiskFull, kWarnDrift, kWarnRamFull, kWarnQueueFull, kWarnExpect, kWarnCount };
  // How long a reader waits for a value another reader is loading, and how
  // many fruitless waits a process tolerates before it stops waiting.
  static constexpr int64_t kExpectTimeoutMs = 2000;
  static constexpr uint64_t kMaxExpectTimeouts = 3;
  std::atomic<uint64_t> expect_timeouts_{0};  // this process's

  // Fixed after open.
  std::string path_;
  StoreOptions options_;
  ManifestOptions effective_;
  bool disk_only_ = false;
  uint64_t dataset_size_ = 0;
  int32_t owner_pid_ = 0;
  std::function<void(const std::string&)> log_;

  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RamTier> ram_;
  std::unique_ptr<SharedQueue> queue_;
  std::unique_ptr<ControlBlock> ctl_;

  std::atomic<uint64_t> total_positions_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> warned_[kWarnCount] = {};

  // Owner state.
  std::mutex mu_;
  bool has_plan_ = false;             // GUARDED_BY(mu_)
  PlanSpec plan_;                     // GUARDED_BY(mu_)
  std::string plan_identity_;         // GUARDED_BY(mu_)
  std::unique_ptr<NextUseStream> stream_;  // GUARDED_BY(mu_)
  std::unique_ptr<Policy> policy_;    // GUARDED_BY(mu_)
  uint64_t frontier_ = 0;             // GUARDED_BY(mu_)
  uint64_t planned_ = 0;              // GUARDED_BY(mu_)
  uint64_t prefetch_cursor_ = 0;      // GUARDED_BY(mu_)
  std::vector<PlanSlot> slots_;       // GUARDED_BY(mu_): ring over [frontier_, planned_)
  std::vector<uint32_t> first_pending_;  // GUARDED_BY(mu_): slot index + 1, 0 none
  std::vector<uint32_t> last_pending_;   // GUARDED_BY(mu_)
  std::vector<uint32_t> prefetch_pins_;  // GUARDED_BY(mu_)
  std::vector<uint32_t> sizes_;       // GUARDED_BY(mu_): meta + payload, 0 unknown
  uint64_t size_sum_ = 0, size_count_ = 0;  // GUARDED_BY(mu_)
  uint64_t staged_bytes_ = 0;         // GUARDED_BY(mu_): bytes held by prefetch pins
  // Fetched items held until the frontier passes `first`.
  std::priority_queue<std::pair<uint64_t, ItemId>, std::vector<std::pair<uint64_t, ItemId>>,
                      std::greater<>>
      transients_;                    // GUARDED_BY(mu_)
  std::vector<ItemId> evicted_;       // GUARDED_BY(mu_): scratch
  std::atomic<uint64_t> resume_position_{0};  // the cursor saved for this plan
  int64_t last_publish_ns_ = 0;       // GUARDED_BY(mu_)

  // Owner counters not kept in the control block.
  std::atomic<uint64_t> prefetched_{0}, prefetch_bytes_{0}, policy_hits_{0};
  std::atomic<uint64_t> insert_failures_{0}, disk_put_errors_{0}, abandoned_{0}, drift_{0};

  // Values readers of this process Put, waiting for the planner thread to
  // write them to the disk tier (so that a reader's miss costs a copy, not a
  // disk write). Lost on a crash, like any unsynced write.
  struct PendingWrite {
    ItemId id = 0;
    std::string meta;
    std::string payload;
  };
  static constexpr uint64_t kMaxPendingWriteBytes = uint64_t{256} << 20;
  std::mutex drain_mu_;  // held by DrainWrites, which alone pops writes_
  std::mutex write_mu_;
  std::deque<PendingWrite> writes_;       // GUARDED_BY(write_mu_)
  std::unordered_set<ItemId> write_ids_;  // GUARDED_BY(write_mu_)
  uint64_t write_bytes_ = 0;              // GUARDED_BY(write_mu_)

  // Heap-allocated so that a forked child can drop it without touching a
  // thread that does not exist there.
  std::thread* planner_ = nullptr;
  std::atomic<bool> stop_{false};
};

// ============================================================== opening

Status Store::Impl::ReadManifest(bool* exists) {
  std::string format;
  Status s = disk_->GetMeta(kManifestFormatKey, &format);
  if (s.IsNotFound()) {
    *exists = false;
    return Status::OK();
  }
  OPT4STORE_RETURN_IF_ERROR(s);
  if (format != kManifestFormat) {
    return Status::Corruption("store " + path_ + ": unknown format '" + format + "'");
  }
  std::string text;
  OPT4STORE_RETURN_IF_ERROR(disk_->GetMeta(kManifestOptionsKey, &text));
  OPT4STORE_RETURN_IF_ERROR(DecodeManifestOptions(text, &effective_));
  *exists = true;
  return Status::OK();
}

Status Store::Impl::OpenDisk(uint64_t budget) {
  DiskTierOptions d;
  d.budget_bytes = budget;
  d.compression = ToDisk(effective_.compression);
  d.sync = ToDisk(effective_.sync);
  d.direct_io = options_.direct_io;
  d.use_io_uring = options_.use_io_uring;
  d.env = options_.env;
  if (dataset_size_ > 0 && dataset_size_ <= kMaxItemId + 1) {
    d.expected_ids = static_cast<uint32_t>(dataset_size_);
  }
  return DiskTier::Open(d, path_, &disk_);
}

// Merges the caller's options with the manifest's; checks what is fixed.
Status Store::Impl::ResolveOptions(const StoreOptions& o, bool exists) {
  ManifestOptions m = effective_;  // the manifest's when it exists
  const std::string where = "store " + path_ + ": ";
  // Dataset size: fixed at creation.
  uint64_t plan_n = 0;
  if (o.plan) {
    std::unique_ptr<PlanSource> src;
    OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(*o.plan, &src).WithContext("plan"));
    plan_n = src->shape().dataset_size;
  }
  if (exists) {
    if (o.dataset_size && *o.dataset_size != m.dataset_size) {
      return Status::InvalidArgument(where + "dataset size " + std::to_string(*o.dataset_size) +
                                     " contradicts the store's " +
                                     std::to_string(m.dataset_size));
    }
  } else {
    m.dataset_size = o.dataset_size ? *o.dataset_size : plan_n;
    if (m.dataset_size == 0) {
      return Status::InvalidArgument(where + "a new store needs a dataset size (or a plan)");
    }
  }
  if (o.plan && o.plan->dataset_size != 0 && plan_n != m.dataset_size) {
    return Status::InvalidArgument(where + "the plan's dataset size " + std::to_string(plan_n) +
                                   " contradicts the store's " + std::to_string(m.dataset_size));
  }
  if (o.plan && plan_n > m.dataset_size) {
    return Status::InvalidArgument(where + "the plan reads ids up to " +
                                   std::to_string(plan_n - 1) + ", beyond the store's " +
                                   std::to_string(m.dataset_size) + " items");
  }
  if (m.dataset_size > kMaxDatasetSize) {
    return Status::InvalidArgument(where + "dataset size " + std::to_string(m.dataset_size) +
                                   " is over the limit " + std::to_string(kMaxDatasetSize));
  }
  // Budgets: may change between runs.
  if (o.ram_bytes && o.ram_items) {
    return Status::InvalidArgument(where + "give ram_bytes or ram_items, not both");
  }
  if (o.ram_bytes) {
    m.ram_bytes = *o.ram_bytes;
    m.ram_items = 0;
  } else if (o.ram_items) {
    m.ram_items = *o.ram_items;
    m.ram_bytes = 0;
  } else if (!exists) {
    m.ram_bytes = kDefaultRamBytes;
  }
  if (o.disk_bytes) m.disk_bytes = *o.disk_bytes;
  if (o.policy) m.policy = *o.policy;
  if (o.prefetch_depth) m.prefetch_depth = *o.prefetch_depth;
  if (m.prefetch_depth == 0) m.prefetch_depth = kDefaultPrefetchDepth;
  if (m.prefetch_depth > ControlBlock::kRingSize / 4) {
    return Status::InvalidArgument(where + "prefetch_depth " + std::to_string(m.prefetch_depth) +
                                   " is over the limit " +
                                   std::to_string(ControlBlock::kRingSize / 4));
  }
  if (o.staging_bytes) m.staging_bytes = *o.staging_bytes;
  if (!o.staging_bytes && (!exists || m.staging_bytes == 0)) {
    m.staging_bytes = std::max(kMinStagingBytes, m.ram_bytes / 8);
  }
  if (o.compression) m.compression = *o.compression;
  if (o.sync) m.sync = *o.sync;
  effective_ = m;
  dataset_size_ = m.dataset_size;
  if (effective_.disk_bytes > 0 && dataset_size_ > uint64_t{kMaxItemId} + 1) {
    return Status::InvalidArgument(where + "the disk tier holds ids below 2^31; dataset size " +
                                   std::to_string(dataset_size_) + " is too large");
  }
  return Status::OK();
}

Status Store::Impl::WriteManifest() {
  OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestFormatKey, kManifestFormat));
  OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestOptionsKey, EncodeManifestOptions(effective_)));
  if (options_.plan && PlanIsPersistable(*options_.plan)) {
    OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestPlanKey, EncodePlanSpec(*options_.plan)));
  }
  return disk_->Flush();
}

Status Store::Impl::CreateShared() {
  const uint64_t capacity = effective_.ram_items ? 0 : effective_.ram_bytes;
  RamTierOptions r;
  r.num_items = dataset_size_;
  r.name_prefix = options_.shm_prefix + "-ram";
  r.free_space_for_testing = options_.shm_free_space_for_testing;
  if (effective_.ram_items) {
    // A capacity in items: the arena is address space sized for the largest
    // plausible items, committed page by page as items arrive.
    uint64_t free_bytes = 0;
    Status s = options_.shm_free_space_for_testing
                   ? options_.shm_free_space_for_testing("/dev/shm", &free_bytes)
                   : shm::FreeSpace("/dev/shm", &free_bytes);
    OPT4STORE_RETURN_IF_ERROR(s);
    const uint64_t want = effective_.ram_items * (uint64_t{8} << 20) + effective_.staging_bytes;
    r.capacity_bytes = std::max<uint64_t>(uint64_t{1} << 20,
                                          std::min<uint64_t>(want, free_bytes / 2));
    r.reserve_memory = false;
  } else {
    r.capacity_bytes = capacity + effective_.staging_bytes;
  }
  Status s = RamTier::Create(r, &ram_);
  if (!s.ok()) {
    return s.WithContext("RAM tier of " + std::to_string(effective_.ram_bytes) +
                         " bytes + staging " + std::to_string(effective_.staging_bytes));
  }
  SharedQueueOptions q;
  q.capacity_bytes = options_.queue_bytes;
  q.name_prefix = options_.shm_prefix + "-queue";
  q.free_space_for_testing = options_.shm_free_space_for_testing;
  OPT4STORE_RETURN_IF_ERROR(SharedQueue::Create(q, &queue_));
  OPT4STORE_RETURN_IF_ERROR(ControlBlock::Create(options_.shm_prefix + "-ctl", dataset_size_,
                                                 options_.fetch_timeout_ms, ram_->name(),
                                                 queue_->name(), &ctl_));
  first_pending_.assign(dataset_size_, 0);
  last_pending_.assign(dataset_size_, 0);
  prefetch_pins_.assign(dataset_size_, 0);
  sizes_.assign(dataset_size_, 0);
  slots_.assign(ControlBlock::kRingSize, PlanSlot{});
  if (disk_) {
    // What the disk holds, and each item's size for a byte budget's policy.
    OPT4STORE_RETURN_IF_ERROR(disk_->ForEachItemSize([this](ItemId id, uint64_t bytes) {
      if (id >= dataset_size_) return;
      ctl_->SetOnDisk(id, true);
      NoteSize(id, bytes);
    }));
  }
  ctl_->gauges().ram_capacity.store(effective_.ram_items ? effective_.ram_items
                                                         : effective_.ram_bytes);
  ctl_->gauges().ram_capacity_in_items.store(effective_.ram_items ? 1 : 0);
  return Status::OK();
}

Status Store::Impl::OpenOwner(const StoreOptions& options, const std::string& path) {
  options_ = options;
  path_ = path;
  disk_only_ = options.disk_only;
  log_ = options.info_log ? options.info_log : DefaultLog;
  owner_pid_ = getpid();
  // Known before the disk tier opens, its index is sized once.
  if (options.dataset_size) dataset_size_ = *options.dataset_size;

  const bool explicit_no_disk = options.disk_bytes && *options.disk_bytes == 0;
  const bool exists_on_disk = !path.empty() && FileExists(path + "/index/CURRENT");
  if (explicit_no_disk && disk_only_) {
    return Status::InvalidArgument("disk_only needs a disk tier (disk_bytes > 0)");
  }
  bool exists = false;
  if (!explicit_no_disk && (exists_on_disk || (options.disk_bytes && *options.disk_bytes > 0))) {
    if (path.empty()) return Status::InvalidArgument("a store with a disk tier needs a path");
    if (!exists_on_disk && !options.create_if_missing) {
      return Status::NotFound("no store at " + path);
    }
    if (exists_on_disk && options.error_if_exists) {
      return Status::InvalidArgument("a store already exists at " + path);
    }
    if (!exists_on_disk) {
      // A new store may be nested in folders that do not exist yet.
      std::error_code ec;
      std::filesystem::create_directories(path, ec);
      if (ec) return Status::IOError("cannot create " + path + ": " + ec.message());
    }
    // The budget comes from the manifest when not given: read it first.
    OPT4STORE_RETURN_IF_ERROR(
        OpenDisk(options.disk_bytes ? *options.disk_bytes : kProvisionalDiskBudget));
    OPT4STORE_RETURN_IF_ERROR(ReadManifest(&exists));
    if (!exists && exists_on_disk && !options.disk_bytes) {
      return Status::Corruption("store " + path + " has an index but no manifest");
    }
  } else if (disk_only_) {
    return Status::NotFound("no store at " + path);
  }
  OPT4STORE_RETURN_IF_ERROR(ResolveOptions(options, exists));
  if (explicit_no_disk) effective_.disk_bytes = 0;
  if (disk_ && effective_.disk_bytes == 0) {
    return Status::InvalidArgument("store " + path + ": the disk tier's budget is 0");
  }
  if (disk_ && (!options.disk_bytes || effective_.disk_bytes != *options.disk_bytes)) {
    // Opened with the provisional budget: reopen with the real one.
    OPT4STORE_RETURN_IF_ERROR(disk_->Close());
    disk_.reset();
    OPT4STORE_RETURN_IF_ERROR(OpenDisk(effective_.disk_bytes));
  }
  if (disk_) {
    OPT4STORE_RETURN_IF_ERROR(WriteManifest());
    std::string text;
    Cursor cursor;
    if (disk_->GetMeta(kManifestCursorKey, &text).ok() && DecodeCursor(text, &cursor).ok()) {
      plan_identity_ = cursor.plan;  // compared with the plan below
      resume_position_ = cursor.position;
    }
  }
  if (disk_only_) return Status::OK();

  OPT4STORE_RETURN_IF_ERROR(CreateShared());
  PlanSpec plan;
  bool have_plan = false;
  if (options.plan) {
    plan = *options.plan;
    have_plan = true;
  } else if (disk_) {
    std::string text;
    if (disk_->GetMeta(kManifestPlanKey, &text).ok()) {
      OPT4STORE_RETURN_IF_ERROR(DecodePlanSpec(text, &plan));
      have_plan = true;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string saved_identity = plan_identity_;
    uint64_t start = 0;
    if (have_plan) {
      if (plan.dataset_size == 0 && plan.kind != SamplerKind::kFile &&
          plan.kind != SamplerKind::kExplicit) {
        plan.dataset_size = dataset_size_;
      }
      // Resume where the readers stopped, unless they finished the plan:
      // then a new run of it starts from the beginning.
      OPT4STORE_RETURN_IF_ERROR(InitPlanLocked(plan, 0));
      if (plan.Describe() == saved_identity && resume_position_ < total_positions_.load()) {
        start = resume_position_;
        if (start > 0) OPT4STORE_RETURN_IF_ERROR(InitPlanLocked(plan, start));
      }
    }
    resume_position_ = start;
    PublishGaugesLocked();
  }
  planner_ = new std::thread([this] { PlannerLoop(); });
  return Status::OK();
}

Status Store::Impl::AttachReader(const std::string& handle) {
  log_ = DefaultLog;
  OPT4STORE_RETURN_IF_ERROR(ControlBlock::Attach(handle, &ctl_));
  OPT4STORE_RETURN_IF_ERROR(RamTier::Attach(ctl_->header()->ram_name, &ram_));
  OPT4STORE_RETURN_IF_ERROR(SharedQueue::Attach(ctl_->header()->queue_name, &queue_));
  dataset_size_ = ctl_->header()->dataset_size;
  options_.fetch_timeout_ms = ctl_->header()->fetch_timeout_ms;
  total_positions_.store(ctl_->gauges().total_positions.load());
  return Status::OK();
}

Status Store::Impl::InitPlanLocked(const PlanSpec& spec, uint64_t start) {
  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(spec, &source).WithContext("plan"));
  if (source->shape().dataset_size > dataset_size_) {
    return Status::InvalidArgument("the plan reads ids up to " +
                                   std::to_string(source->shape().dataset_size - 1) +
                                   ", beyond the store's " + std::to_string(dataset_size_) +
                                   " items");
  }
  std::unique_ptr<NextUseStream> stream;
  OPT4STORE_RETURN_IF_ERROR(NextUseStream::Open(std::move(source), options_.plan_window, &stream));
  const uint64_t total = stream->shape().total_reads;
  start = std::min(start, total);
  // Skip to the start: the policy begins empty there, as the RAM tier is.
  std::vector<Access> skip(4096);
  std::vector<StepReveal> reveals;
  while (stream->position() < start) {
    reveals.clear();
    size_t n = stream->NextBatch(skip.data(),
                                 std::min<uint64_t>(skip.size(), start - stream->position()),
                                 &reveals);
    if (n == 0) break;
  }
  OPT4STORE_RETURN_IF_ERROR(stream->status());

  PolicyOptions po;
  po.kind = effective_.policy;
  po.capacity = effective_.ram_items ? effective_.ram_items : effective_.ram_bytes;
  po.num_ids = dataset_size_;
  po.window = stream->window();
  po.seed = spec.seed;
  po.track_ids = true;
  std::unique_ptr<Policy> policy;
  OPT4STORE_RETURN_IF_ERROR(NewPolicy(po, &policy));

  // Tell the disk tier when each id is read next, for its eviction order.
  if (disk_) {
    std::vector<uint8_t> seen(dataset_size_, 0);
    for (uint64_t p = stream->position(); p < stream->lookahead_end(); ++p) {
      ItemId id = stream->PeekId(p);
      if (!seen[id]) {
        seen[id] = 1;
        disk_->SetNextUse(id, p);
      }
    }
    if (stream->covers_whole_plan()) {
      for (uint64_t id = 0; id < dataset_size_; ++id) {
        if (!seen[id]) disk_->SetNextUse(static_cast<ItemId>(id), DiskIndex::kNeverRead);
      }
    }
  }

  plan_ = spec;
  plan_identity_ = spec.Describe();
  stream_ = std::move(stream);
  policy_ = std::move(policy);
  has_plan_ = true;
  frontier_ = planned_ = prefetch_cursor_ = start;
  std::fill(first_pending_.begin(), first_pending_.end(), 0);
  std::fill(last_pending_.begin(), last_pending_.end(), 0);
  std::fill(prefetch_pins_.begin(), prefetch_pins_.end(), 0);
  staged_bytes_ = 0;
  transients_ = {};
  for (uint64_t id = 0; id < dataset_size_; ++id) ctl_->ClearExpected(static_cast<ItemId>(id));
  total_positions_.store(total);
  ctl_->gauges().total_positions.store(total);
  ctl_->gauges().epoch_length.store(stream_->shape().epoch_length);
  ctl_->header()->plan_generation.fetch_add(1, std::memory_order_acq_rel);
  ctl_->header()->high_water.store(start, std::memory_order_release);
  ctl_->header()->frontier.store(start, std::memory_order_release);
  return Status::OK();
}

Store::Impl::~Impl() {
  if (!InOwner() && owner_pid_ != 0) {
    // A forked child: the disk tier, the planner thread and the owner's
    // mutex belong to the parent. Drop them without touching them.
    (void)disk_.release();
    planner_ = nullptr;
    return;
  }
  Close().PermitUncheckedError();
}

// ============================================================== planning

uint64_t Store::Impl::CostOf(ItemId id) const {
  if (effective_.ram_items) return 1;
  if (sizes_[id] != 0) return sizes_[id];
  return size_count_ ? std::max<uint64_t>(1, size_sum_ / size_count_) : kMeanSizeBeforeAny;
}

void Store::Impl::NoteSize(ItemId id, uint64_t size) {
  const uint32_t s = static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(size, 1),
                                                              UINT32_MAX));
  if (sizes_[id] == 0) {
    size_sum_ += s;
    ++size_count_;
  }
  sizes_[id] = s;
}

void Store::Impl::PlanAheadLocked(uint64_t limit, uint64_t force_through) {
  if (!has_plan_) return;
  limit = std::min({limit, total_positions_.load(std::memory_order_relaxed),
                    frontier_ + ControlBlock::kRingSize});
  // With a byte capacity the policy needs each item's size when it steps
  // the item's read. An item never seen has none yet: the planner waits at
  // its read for the Put that brings it (OwnerPut steps it), unless readers
  // are already far past it (no Put is coming); then a mean size stands in.
  const bool bytes = effective_.ram_items == 0;
  const uint64_t high = ctl_->header()->high_water.load(std::memory_order_acquire);
  Access a;
  Reveal reveal;
  while (planned_ < limit) {
    if (bytes && planned_ >= force_through && sizes_[stream_->PeekId(planned_)] == 0 &&
        planned_ + effective_.prefetch_depth >= high) {
      break;
    }
    if (!stream_->Next(&a, &reveal)) break;
    if (reveal.valid) {
      policy_->OnReveal(reveal);
      if (disk_) disk_->SetNextUse(reveal.id, reveal.next);
    }
    evicted_.clear();
    const bool hit = policy_->Step(a, CostOf(a.id), &evicted_);
    const uint32_t index = static_cast<uint32_t>(a.pos & (ControlBlock::kRingSize - 1));
    PlanSlot& slot = slots_[index];
    slot.id = a.id;
    slot.next = 0;
    slot.flags = 0;
    if (last_pending_[a.id] != 0) {
      slots_[last_pending_[a.id] - 1].next = index + 1;
    } else {
      first_pending_[a.id] = index + 1;
    }
    last_pending_[a.id] = index + 1;
    if (hit) {
      slot.flags |= kHit;
      policy_hits_.fetch_add(1, std::memory_order_relaxed);
    } else if (policy_->Contains(a.id)) {
      // Admitted here: readers of later positions may wait for this read's Put.
      if (!ram_->Contains(a.id)) ctl_->SetExpected(a.id, a.pos);
    }
    for (ItemId v : evicted_) MaybeEvictLocked(v);
    if (disk_) {
      uint64_t next = a.next;
      if (next == kNever) next = DiskIndex::kNeverRead;
      if (next == kFar) next = a.pos + stream_->window();
      disk_->SetNextUse(a.id, next);
    }
    planned_ = a.pos + 1;
  }
}

void Store::Impl::ReleasePositionLocked(uint64_t position) {
  PlanSlot& slot = slots_[position & (ControlBlock::kRingSize - 1)];
  first_pending_[slot.id] = slot.next;
  if (slot.next == 0) last_pending_[slot.id] = 0;
  if (slot.flags & kPrefetchPin) {
    --prefetch_pins_[slot.id];
    staged_bytes_ -= std::min<uint64_t>(staged_bytes_, CostOf(slot.id));
  }
  slot.flags = 0;
  MaybeEvictLocked(slot.id);
}

void Store::Impl::AdvanceFrontierLocked() {
  if (!has_plan_) return;
  ControlBlock::Header* h = ctl_->header();
  const uint64_t high = h->high_water.load(std::memory_order_acquire);
  // Readers far ahead of the planner: plan up to them so they can be passed.
  if (high > planned_ + effective_.prefetch_depth) {
    const uint64_t target = std::min(high, frontier_ + kAbandonLag);
    PlanAheadLocked(target, target);
  }
  while (frontier_ < planned_) {
    ItemId got = 0;
    if (ctl_->Consumed(frontier_, &got)) {
      const ItemId planned_id = slots_[frontier_ & (ControlBlock::kRingSize - 1)].id;
      if (got != planned_id) {
        drift_.fetch_add(1, std::memory_order_relaxed);
        if (ctl_->ExpectedFrom(planned_id) == frontier_ && !ram_->Contains(planned_id)) {
          // The read that was to load it read something else: no Put comes.
          ctl_->ClearExpected(planned_id);
          ram_->AnswerAbsent(planned_id).PermitUncheckedError();
        }
        Warn(kWarnDrift, "position " + std::to_string(frontier_) + " read id " +
                             std::to_string(got) + " where the plan has " +
                             std::to_string(planned_id) +
                             ": the sampler drifted from the plan; values stay correct, but "
                             "eviction and prefetch follow the plan (counted as drift)");
      }
    } else if (high > frontier_ + kAbandonLag) {
      abandoned_.fetch_add(1, std::memory_order_relaxed);
    } else {
      break;
    }
    ReleasePositionLocked(frontier_);
    ++frontier_;
  }
  h->frontier.store(frontier_, std::memory_order_release);
  if (prefetch_cursor_ < frontier_) prefetch_cursor_ = frontier_;
  ExpireTransientsLocked();
}

void Store::Impl::ExpireTransientsLocked() {
  while (!transients_.empty() && transients_.top().first < frontier_) {
    const ItemId id = transients_.top().second;
    transients_.pop();
    --prefetch_pins_[id];
    MaybeEvictLocked(id);
  }
}

bool Store::Impl::HeldAfterLocked(ItemId id, uint32_t next_slot) const {
  if (next_slot != 0) return (slots_[next_slot - 1].flags & kHit) != 0;
  return policy_->Contains(id);
}

bool Store::Impl::KeepLocked(ItemId id) const {
  if (!has_plan_) return true;  // no plan: fill once, never evict
  return prefetch_pins_[id] != 0 || HeldAfterLocked(id, first_pending_[id]);
}

void Store::Impl::MaybeEvictLocked(ItemId id) {
  if (!KeepLocked(id) && ram_->Contains(id)) ram_->Evict(id).PermitUncheckedError();
}

bool Store::Impl::WantedLocked(uint64_t position, ItemId id, uint64_t size) {
  if (!has_plan_) {
    // Fill once: keep while it fits the capacity.
    RamTierStats st = ram_->Stats();
    if (effective_.ram_items) return st.items_resident < effective_.ram_items;
    return st.bytes_stored + size <= effective_.ram_bytes;
  }
  if (!PlanPosition(position) || position >= planned_) return policy_->Contains(id);
  // Held from this read on iff its next pending read is a hit (see the top
  // of this file); this read's own slot links to that one.
  if (position >= frontier_) {
    const PlanSlot& slot = slots_[position & (ControlBlock::kRingSize - 1)];
    if (slot.id == id) return HeldAfterLocked(id, slot.next);
  }
  return HeldAfterLocked(id, first_pending_[id]);
}

Status Store::Impl::InsertRamLocked(ItemId id, std::string_view meta, std::string_view payload) {
  if (ram_->Contains(id)) return Status::OK();
  RamTier::PendingInsert pending;
  Status s = ram_->BeginInsert(id, meta.size(), payload.size(), &pending);
  if (!s.ok()) {
    if (s.IsNoSpace()) {
      insert_failures_.fetch_add(1, std::memory_order_relaxed);
      Warn(kWarnRamFull, "the RAM tier's arena had no room for an item (fragmentation or "
                         "a staging budget too small); it is served by the other tiers");
    }
    return s;
  }
  if (!meta.empty()) std::memcpy(pending.meta, meta.data(), meta.size());
  if (!payload.empty()) std::memcpy(pending.payload, payload.data(), payload.size());
  OPT4STORE_RETURN_IF_ERROR(ram_->CommitInsert(pending));
  ctl_->ClearExpected(id);
  return Status::OK();
}

void Store::Impl::CollectPrefetchLocked(std::vector<ItemId>* ids) {
  ids->clear();
  if (!disk_ || !has_plan_) return;
  const size_t max_batch = 32;
  while (prefetch_cursor_ < planned_ && ids->size() < max_batch) {
    if (staged_bytes_ >= effective_.staging_bytes) break;
    PlanSlot& slot = slots_[prefetch_cursor_ & (ControlBlock::kRingSize - 1)];
    const ItemId id = slot.id;
    ++prefetch_cursor_;
    const bool resident = ram_->Contains(id);
    if (slot.flags & kHit) {
      // The policy's own copy should be there; if it was lost, bring it back.
      if (resident || !ctl_->OnDisk(id)) continue;
    } else if (!resident && !ctl_->OnDisk(id)) {
      continue;  // a first read: the reader loads it from the source
    }
    slot.flags |= kPrefetchPin;
    ++prefetch_pins_[id];
    staged_bytes_ += CostOf(id);
    if (!resident && std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
  }
}

void Store::Impl::Prefetch(const std::vector<ItemId>& ids) {
  {
    // Readers that arrive before the read completes wait for it (position 0
    // precedes every reader's) instead of reading the disk a second time.
    std::lock_guard<std::mutex> lock(mu_);
    for (ItemId id : ids) {
      if (ctl_->ExpectedFrom(id) == kNoPosition) ctl_->SetExpected(id, 0);
    }
  }
  disk_->MultiGet(ids.data(), ids.size(),
                  [&](size_t i, const Status& status, std::string_view meta,
                      std::string_view payload) {
                    const ItemId id = ids[i];
                    RamTier::PendingInsert pending;
                    {
                      std::lock_guard<std::mutex> lock(mu_);
                      if (status.ok()) NoteSize(id, meta.size() + payload.size());
                      if (!status.ok() && !status.IsIOError()) ctl_->SetOnDisk(id, false);
                      Status begin = Status::NotFound("not wanted");
                      if (status.ok() && KeepLocked(id) && !ram_->Contains(id)) {
                        begin = ram_->BeginInsert(id, meta.size(), payload.size(), &pending);
                        if (begin.IsNoSpace()) insert_failures_.fetch_add(1);
                      }
                      if (!begin.ok()) {
                        if (!ram_->Contains(id) && ctl_->ExpectedFrom(id) == 0) {
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
                    std::lock_guard<std::mutex> lock(mu_);
                    if (ram_->CommitInsert(pending).ok()) {
                      ctl_->ClearExpected(id);
                      prefetched_.fetch_add(1, std::memory_order_relaxed);
                      prefetch_bytes_.fetch_add(meta.size() + payload.size(),
                                                std::memory_order_relaxed);
                    }
                    MaybeEvictLocked(id);  // its reads may have passed meanwhile
                  });
}

void Store::Impl::HandleFetch(uint64_t position, ItemId id) {
  if (id >= dataset_size_) return;
  if (ram_->Contains(id)) return;
  std::string meta, payload;
  Status s = disk_ ? disk_->Get(id, &meta, &payload) : Status::NotFound("no disk tier");
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok()) {
    if (s.IsCorruption() || s.IsNotFound()) ctl_->SetOnDisk(id, false);
    if (!ram_->Contains(id)) ram_->AnswerAbsent(id).PermitUncheckedError();
    return;
  }
  NoteSize(id, meta.size() + payload.size());
  if (ram_->Contains(id)) return;
  if (!InsertRamLocked(id, meta, payload).ok()) {
    ram_->AnswerAbsent(id).PermitUncheckedError();
    return;
  }
  // Held until the readers pass the position that asked for it.
  const uint64_t until = PlanPosition(position) ? std::max(position, frontier_)
                                                : frontier_ + effective_.prefetch_depth;
  ++prefetch_pins_[id];
  transients_.emplace(until, id);
}

void Store::Impl::SyncPlanning(uint64_t position) {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceFrontierLocked();
  PlanAheadLocked(std::max(position + 1, frontier_ + effective_.prefetch_depth));
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

Status Store::Impl::ReadPendingWrite(ItemId id, ReadSink* sink, bool* found) {
  *found = false;
  std::lock_guard<std::mutex> lock(write_mu_);
  if (write_ids_.count(id) == 0) return Status::OK();
  for (auto it = writes_.rbegin(); it != writes_.rend(); ++it) {
    if (it->id == id) {
      *found = true;
      return CopyToSink(sink, it->meta, it->payload);
    }
  }
  return Status::OK();
}

bool Store::Impl::DrainWrites() {
  // One drainer at a time (the planner thread, Flush, Close); the value
  // stays in writes_ while it is written, so that a Get meanwhile finds it.
  std::lock_guard<std::mutex> drain(drain_mu_);
  bool any = false;
  for (int n = 0; n < 16; ++n) {
    const PendingWrite* w = nullptr;
    {
      std::lock_guard<std::mutex> lock(write_mu_);
      if (writes_.empty()) break;
      w = &writes_.front();  // push_back leaves references to it valid
    }
    WriteThrough(w->id, w->meta, w->payload);
    std::lock_guard<std::mutex> lock(write_mu_);
    write_bytes_ -= w->meta.size() + w->payload.size();
    write_ids_.erase(w->id);
    writes_.pop_front();
    any = true;
  }
  return any;
}

void Store::Impl::PlannerLoop() {
  std::vector<ItemId> batch;
  while (!stop_.load(std::memory_order_acquire)) {
    bool busy = DrainQueue();
    busy = DrainWrites() || busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      AdvanceFrontierLocked();
      PlanAheadLocked(frontier_ + effective_.prefetch_depth);
      CollectPrefetchLocked(&batch);
      const int64_t now = NowNs();
      if (now - last_publish_ns_ > 50'000'000) PublishGaugesLocked();
    }
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

void Store::Impl::PublishGaugesLocked() {
  last_publish_ns_ = NowNs();
  OwnerGauges& g = ctl_->gauges();
  g.prefetched.store(prefetched_.load());
  g.prefetch_bytes.store(prefetch_bytes_.load());
  g.planned_positions.store(planned_);
  g.policy_hits.store(policy_hits_.load());
  g.ram_insert_failures.store(insert_failures_.load());
  g.disk_put_errors.store(disk_put_errors_.load());
  g.abandoned_positions.store(abandoned_.load());
  g.drift.store(drift_.load());
  if (disk_) {
    DiskTierStats d = disk_->GetStats();
    g.disk_items.store(d.items);
    g.disk_live_bytes.store(d.live_bytes);
    g.disk_file_bytes.store(d.file_bytes);
    g.disk_budget.store(d.budget_bytes);
  }
}

void Store::Impl::Warn(int kind, const std::string& message) {
  bool expected = false;
  if (warned_[kind].compare_exchange_strong(expected, true)) log_(message);
}

// ============================================================== reads

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
                                bool* found) {
  *found = false;
  const int64_t t0 = NowNs();
  Status w = ram_->Wait(id, version, timeout_ms);
  SharedCounters& c = ctl_->counters();
  c.waits.fetch_add(1, std::memory_order_relaxed);
  c.wait_ns.fetch_add(NowNs() - t0, std::memory_order_relaxed);
  if (!w.ok()) return Status::OK();
  return ReadRam(id, sink, found);
}

void Store::Impl::Mark(uint64_t position, ItemId id) {
  if (PlanPosition(position)) ctl_->MarkConsumed(position, id);
}

void Store::Impl::MarkConsumed(uint64_t position, ItemId id) {
  if (ctl_) Mark(position, id);
}

Status Store::Impl::Get(uint64_t position, ItemId id, ReadSink* sink, GetSource* source) {
  Status status;
  GetBatch(&position, &id, 1, &sink, &status, source);
  return status;
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
  if (owner) {
    uint64_t last = kNoPosition;
    for (size_t i = 0; i < n; ++i) {
      if (PlanPosition(positions[i]) && (last == kNoPosition || positions[i] > last)) {
        last = positions[i];
      }
    }
    if (last != kNoPosition) SyncPlanning(last);
  }
  SharedCounters& c = ctl_->counters();
  // After the owner closed, nobody answers fetches or Puts: never wait.
  const bool owner_gone =
      !owner && ctl_->header()->owner_closed.load(std::memory_order_acquire) != 0;
  std::vector<size_t> from_disk;
  std::vector<uint64_t> versions;
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    bool found = false;
    statuses[i] = LookupRam(ids[i], sinks[i], &found);
    if (!statuses[i].ok()) {
      done[i] = 1;
    } else if (found) {
      where[i] = GetSource::kRam;
    } else if (!owner_gone && PlanPosition(positions[i]) &&
               ctl_->ExpectedFrom(ids[i]) < positions[i] &&
               expect_timeouts_.load(std::memory_order_relaxed) < kMaxExpectTimeouts) {
      // A reader of an earlier position is loading it for the policy: wait
      // for its Put rather than load it twice.
      const uint64_t version = ram_->Version(ids[i]);
      const uint64_t from = ctl_->ExpectedFrom(ids[i]);
      ItemId got = 0;
      if (ram_->Contains(ids[i]) || from >= positions[i] ||
          (from > 0 && ctl_->Consumed(from, &got) && got != ids[i])) {
        // Here already, no longer expected, or its loader drifted to another id.
        statuses[i] = LookupRam(ids[i], sinks[i], &found);
      } else {
        c.expect_waits.fetch_add(1, std::memory_order_relaxed);
        statuses[i] = WaitAndRead(ids[i], version, kExpectTimeoutMs, sinks[i], &found);
        if (!found && ram_->Version(ids[i]) == version) {
          c.expect_timeouts.fetch_add(1, std::memory_order_relaxed);
          if (expect_timeouts_.fetch_add(1) + 1 == kMaxExpectTimeouts) {
            Warn(kWarnExpect, "readers waited in vain for values other readers should have Put; "
                              "this process stops waiting for them");
          }
        }
      }
      if (!statuses[i].ok()) {
        done[i] = 1;
      } else if (found) {
        where[i] = GetSource::kRam;
      }
    } else if (!owner_gone && ctl_->OnDisk(ids[i])) {
      from_disk.push_back(i);
      if (!owner) {
        // Ask the owner now; wait below, after every request is out.
        versions.push_back(ram_->Version(ids[i]));
        FetchMessage f{positions[i], ids[i], 0};
        c.fetch_requests.fetch_add(1, std::memory_order_relaxed);
        if (!queue_->TryPush(kMsgFetch, &f, sizeof(f)).ok()) versions.back() = kNever;
      }
    } else if (owner && disk_) {
      // Put by this process and still on its way to the disk tier.
      statuses[i] = ReadPendingWrite(ids[i], sinks[i], &found);
      if (!statuses[i].ok()) {
        done[i] = 1;
      } else if (found) {
        where[i] = GetSource::kDisk;
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
                      std::lock_guard<std::mutex> lock(mu_);
                      NoteSize(ids[i], size);
                      if (WantedLocked(positions[i], ids[i], size)) {
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
        break;
      case GetSource::kMiss:
        c.source_loads.fetch_add(1, std::memory_order_relaxed);
        if (statuses[i].ok()) {
          statuses[i] = Status::NotFound("id " + std::to_string(ids[i]) + " is not in the store");
        }
        break;
    }
    Mark(positions[i], ids[i]);
  }
}

// ============================================================== writes

void Store::Impl::WriteThrough(ItemId id, std::string_view meta, std::string_view payload) {
  if (!disk_ || ctl_->OnDisk(id)) return;
  std::vector<ItemId> evicted;
  Status s = disk_->Put(id, meta, payload, &evicted);
  for (ItemId v : evicted) ctl_->SetOnDisk(v, false);
  if (s.ok()) {
    ctl_->SetOnDisk(id, true);
    return;
  }
  disk_put_errors_.fetch_add(1, std::memory_order_relaxed);
  Warn(kWarnDiskFull, "the disk tier refused a write (" + s.ToString() +
                          "); the store keeps serving from RAM and the source");
}

Status Store::Impl::OwnerPut(uint64_t position, ItemId id, std::string_view meta,
                             std::string_view payload, bool on_planner) {
  const uint64_t size = meta.size() + payload.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    NoteSize(id, size);
    if (PlanPosition(position) && position >= planned_) {
      PlanAheadLocked(position + 1, position + 1);
    }
    if (WantedLocked(position, id, size)) InsertRamLocked(id, meta, payload).PermitUncheckedError();
    if (ctl_->ExpectedFrom(id) != kNoPosition && !ram_->Contains(id)) {
      // Readers waiting for this value will not get it from RAM: wake them.
      ctl_->ClearExpected(id);
      ram_->AnswerAbsent(id).PermitUncheckedError();
    }
  }
  if (!disk_ || ctl_->OnDisk(id)) return Status::OK();
  if (!on_planner) {
    // The reader's thread only copies; the planner thread writes. Past the
    // bound (the disk is slower than the source), the reader writes itself.
    std::lock_guard<std::mutex> lock(write_mu_);
    if (write_bytes_ + size <= kMaxPendingWriteBytes && planner_ != nullptr) {
      if (write_ids_.insert(id).second) {
        writes_.push_back({id, std::string(meta), std::string(payload)});
        write_bytes_ += size;
      }
      return Status::OK();
    }
  }
  WriteThrough(id, meta, payload);
  return Status::OK();
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
  Status s = queue_->TryPushv(kMsgPut, parts, 3);
  if (s.ok()) return s;
  ctl_->counters().puts_dropped.fetch_add(1, std::memory_order_relaxed);
  if (s.IsBusy() || s.IsInvalidArgument()) {
    Warn(kWarnQueueFull, "a worker's Put was dropped (" + s.ToString() +
                             "); the value will be loaded again when next needed");
    return Status::OK();
  }
  return s;
}

// ============================================================== owner API

Status Store::Impl::SetPlan(const PlanSpec& plan, uint64_t start_position) {
  if (!InOwner()) return Status::InvalidArgument("SetPlan: only the owner process sets the plan");
  if (disk_only_) return Status::InvalidArgument("SetPlan: the store is open in disk-only mode");
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id = 0; id < dataset_size_; ++id) {
    if (ram_->Contains(static_cast<ItemId>(id))) {
      ram_->Evict(static_cast<ItemId>(id)).PermitUncheckedError();
    }
  }
  OPT4STORE_RETURN_IF_ERROR(InitPlanLocked(plan, start_position));
  resume_position_.store(std::min(start_position, total_positions_.load()));
  if (disk_ && PlanIsPersistable(plan)) {
    OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestPlanKey, EncodePlanSpec(plan)));
  }
  PublishGaugesLocked();
  return Status::OK();
}

uint64_t Store::Impl::ResumePosition() const { return resume_position_; }

Status Store::Impl::SaveCursor(uint64_t* position) {
  Cursor cursor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    AdvanceFrontierLocked();
    cursor.plan = has_plan_ ? plan_identity_ : std::string();
    cursor.position = frontier_;
    cursor.epoch_length = has_plan_ ? stream_->shape().epoch_length : 0;
  }
  *position = cursor.position;
  return disk_->PutMeta(kManifestCursorKey, EncodeCursor(cursor));
}

Status Store::Impl::Flush() {
  if (!InOwner()) return Status::InvalidArgument("Flush: only the owner process flushes");
  if (closed_.load()) return Status::IOError("the store is closed");
  if (!disk_) return Status::OK();
  uint64_t saved = 0;
  if (!disk_only_) {
    while (DrainWrites()) {  // every earlier Put is on the disk tier first
    }
    OPT4STORE_RETURN_IF_ERROR(SaveCursor(&saved));
  }
  OPT4STORE_RETURN_IF_ERROR(disk_->Flush());
  if (!disk_only_) resume_position_.store(saved);
  return Status::OK();
}

Status Store::Impl::Compact() {
  if (!InOwner()) return Status::InvalidArgument("Compact: only the owner process compacts");
  if (!disk_) return Status::OK();
  return disk_->Compact();
}

Status Store::Impl::Verify(StoreVerifyReport* report) {
  if (!InOwner()) return Status::InvalidArgument("Verify: only the owner process verifies");
  *report = StoreVerifyReport();
  if (!disk_) return Status::OK();
  VerifyReport r;
  Status s = disk_->Verify(&r);
  report->records_checked = r.records_checked;
  report->bytes_checked = r.bytes_checked;
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
  *info = StoreInfo();
  info->path = path_;
  info->dataset_size = dataset_size_;
  info->policy = PolicyName(effective_.policy);
  info->ram_bytes = effective_.ram_bytes;
  info->ram_items = effective_.ram_items;
  info->disk_bytes = effective_.disk_bytes;
  info->prefetch_depth = effective_.prefetch_depth;
  info->staging_bytes = effective_.staging_bytes;
  info->compression = CompressionName(effective_.compression);
  info->sync = SyncModeName(effective_.sync);
  if (disk_) {
    std::string text;
    PlanSpec plan;
    if (disk_->GetMeta(kManifestPlanKey, &text).ok() && DecodePlanSpec(text, &plan).ok()) {
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
    std::lock_guard<std::mutex> lock(mu_);
    if (has_plan_) info->plan = plan_.Describe();
  }
  return Status::OK();
}

Status Store::Impl::Close() {
  if (closed_.exchange(true)) return Status::OK();
  if (!InOwner()) {
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
  if (disk_) {
    uint64_t saved = 0;
    if (!disk_only_) result = SaveCursor(&saved);
    Status s = disk_->Close();
    if (result.ok()) result = s;
    disk_.reset();
  }
  if (ctl_) ctl_->header()->owner_closed.store(1, std::memory_order_release);
  ram_.reset();
  queue_.reset();
  ctl_.reset();
  return result;
}

StoreStats Store::Impl::Stats() {
  StoreStats st;
  if (InOwner() && !disk_only_ && ctl_ && !closed_.load()) {
    while (DrainWrites()) {  // count every Put so far on the disk tier
    }
    std::lock_guard<std::mutex> lock(mu_);
    AdvanceFrontierLocked();
    PublishGaugesLocked();
  }
  if (ctl_) {
    const SharedCounters& c = ctl_->counters();
    st.accesses = c.accesses.load();
    st.hits_ram = c.hits_ram.load();
    st.hits_disk = c.hits_disk.load();
    st.source_loads = c.source_loads.load();
    st.puts = c.puts.load();
    st.puts_dropped = c.puts_dropped.load();
    st.waits = c.waits.load();
    st.wait_ns = c.wait_ns.load();
    st.fetch_requests = c.fetch_requests.load();
    st.fetch_timeouts = c.fetch_timeouts.load();
    st.expect_waits = c.expect_waits.load();
    st.expect_timeouts = c.expect_timeouts.load();
    const OwnerGauges& g = ctl_->gauges();
    st.prefetched = g.prefetched.load();
    st.prefetch_bytes = g.prefetch_bytes.load();
    st.planned_positions = g.planned_positions.load();
    st.policy_hits = g.policy_hits.load();
    st.ram_insert_failures = g.ram_insert_failures.load();
    st.disk_put_errors = g.disk_put_errors.load();
    st.abandoned_positions = g.abandoned_positions.load();
    st.drift = g.drift.load();
    st.total_positions = g.total_positions.load();
    st.position = ctl_->header()->frontier.load();
    const uint64_t epoch_length = g.epoch_length.load();
    st.epoch = epoch_length ? st.position / epoch_length : 0;
    st.ram_capacity = g.ram_capacity.load();
    st.ram_capacity_in_items = g.ram_capacity_in_items.load() != 0;
    st.disk_items = g.disk_items.load();
    st.disk_live_bytes = g.disk_live_bytes.load();
    st.disk_file_bytes = g.disk_file_bytes.load();
    st.disk_budget = g.disk_budget.load();
  }
  if (ram_) {
    RamTierStats r = ram_->Stats();
    st.ram_items = r.items_resident;
    st.ram_bytes_used = r.bytes_stored;
    st.ram_arena_bytes = r.capacity_bytes;
    // Per dataset id: the RAM tier's shared entry and owner handle, the
    // control block's expected position (8) and on-disk bit, the owner's
    // prefetch pins (4), pending-read list (8) and size (4). Not counted:
    // the policy's and the plan window's state, and the disk index
    // (bench/STORE.md measures them all).
    st.ram_bytes_per_item = r.table_bytes_per_item + r.owner_bytes_per_item + 8 + 4 + 8 + 4;
  }
  if (InOwner() && disk_) {
    DiskTierStats d = disk_->GetStats();
    st.disk_items = d.items;
    st.disk_live_bytes = d.live_bytes;
    st.disk_file_bytes = d.file_bytes;
    st.disk_budget = d.budget_bytes;
    st.disk_segments = d.segments;
    st.disk_write_amplification = d.write_amplification;
    st.disk_space_amplification =
        d.live_bytes ? static_cast<double>(d.file_bytes) / d.live_bytes : 0;
    st.disk_corrupt_records = d.corrupt_records;
    st.disk_evictions = d.evictions;
    st.disk_compactions = d.compactions;
    st.disk_index_bytes_per_item = d.index_bytes_per_item;
    st.io_uring = d.io_uring;
    st.direct_io = d.direct_io;
  }
  return st;
}

// ============================================================== Store

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Status Store::Open(const StoreOptions& options, const std::string& path,
                   std::unique_ptr<Store>* store) {
  std::unique_ptr<Impl> impl(new Impl());
  OPT4STORE_RETURN_IF_ERROR(impl->OpenOwner(options, path));
  store->reset(new Store(std::move(impl)));
  return Status::OK();
}

Status Store::Attach(const std::string& handle, std::unique_ptr<Store>* store) {
  std::unique_ptr<Impl> impl(new Impl());
  OPT4STORE_RETURN_IF_ERROR(impl->AttachReader(handle));
  store->reset(new Store(std::move(impl)));
  return Status::OK();
}

std::string Store::handle() const { return impl_->handle(); }
bool Store::IsOwner() const { return impl_->InOwner(); }
uint64_t Store::dataset_size() const { return impl_->dataset_size(); }
Status Store::Get(uint64_t position, ItemId id, ReadSink* sink, GetSource* source) {
  return impl_->Get(position, id, sink, source);
}
void Store::GetBatch(const uint64_t* positions, const ItemId* ids, size_t n,
                     ReadSink* const* sinks, Status* statuses, GetSource* sources) {
  impl_->GetBatch(positions, ids, n, sinks, statuses, sources);
}
Status Store::Put(uint64_t position, ItemId id, std::string_view meta, std::string_view payload) {
  return impl_->Put(position, id, meta, payload);
}
void Store::MarkConsumed(uint64_t position, ItemId id) { impl_->MarkConsumed(position, id); }
Status Store::SetPlan(const PlanSpec& plan, uint64_t start_position) {
  return impl_->SetPlan(plan, start_position);
}
uint64_t Store::ResumePosition() const { return impl_->ResumePosition(); }
Status Store::Flush() { return impl_->Flush(); }
Status Store::Compact() { return impl_->Compact(); }
Status Store::Verify(StoreVerifyReport* report) { return impl_->Verify(report); }
Status Store::Inspect(StoreInfo* info) { return impl_->Inspect(info); }
Status Store::Close() { return impl_->Close(); }
StoreStats Store::Stats() { return impl_->Stats(); }

}  // namespace opt4store

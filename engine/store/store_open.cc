// Opening and recovery (store_impl.h): the manifest and the options it fixes
// (the dataset size, the fingerprint), the disk tier (opened once to read
// the manifest, again with its budget; emptied here on reset), the shared
// segments and the Residency, the plan, and the cursor to resume at.
// Reattaching a reader is the short path: the control block names the
// other segments.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "engine/store/owner_file.h"
#include "engine/store/store_impl.h"

#include "engine/base/checked_math.h"
#include "engine/base/env.h"
#include "opt4store/number_file.h"
#include "opt4store/sizes.h"

namespace opt4store {
namespace {

// The limits of the settings that do not depend on the store: checked on the
// options an open is given before anything is created on disk (a refused
// open leaves no half-made store), and again on the merged settings.
Status CheckSettingLimits(const std::string& where, const StoreSettings& m) {
  if (m.prefetch_depth > ControlBlock::kRingSize / 4) {
    return Status::InvalidArgument(where + "prefetch_depth " + std::to_string(m.prefetch_depth) +
                                   " is over the limit " +
                                   std::to_string(ControlBlock::kRingSize / 4));
  }
  // The RAM tier maps ram bytes of /dev/shm (ram_items: staging on top):
  // refuse sizes no segment can hold, before they reach arithmetic that
  // would wrap.
  const std::pair<const char*, uint64_t> ram_sizes[] = {{"ram", m.ram}, {"staging", m.staging}};
  for (const auto& [name, bytes] : ram_sizes) {
    if (bytes > SharedSegment::kMaxSegmentBytes) {
      return Status::InvalidArgument(where + name + "=" + std::to_string(bytes) +
                                     " bytes is above the largest RAM tier, " +
                                     FormatSize(SharedSegment::kMaxSegmentBytes));
    }
  }
  if (m.ram_items > kMaxDatasetSize) {
    return Status::InvalidArgument(where + "ram_items=" + std::to_string(m.ram_items) +
                                   " is above the largest dataset, " +
                                   std::to_string(kMaxDatasetSize) + " items");
  }
  return Status::OK();
}

constexpr uint64_t kDefaultRamBytes = uint64_t{1} << 30;
constexpr uint64_t kDefaultPrefetchDepth = 512;
constexpr uint64_t kMinStagingBytes = uint64_t{64} << 20;
// The disk tier's budget while the manifest, which holds the real one, is read.
constexpr uint64_t kProvisionalDiskBudget = uint64_t{1} << 40;

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

}  // namespace

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
  s = disk_->GetMeta(kManifestOptionsKey, &text);
  if (s.IsNotFound()) {  // half a manifest (a damaged index): as good as none
    *exists = false;
    return Status::OK();
  }
  OPT4STORE_RETURN_IF_ERROR(s);
  OPT4STORE_RETURN_IF_ERROR(DecodeManifestOptions(text, &effective_));
  // Absent in a store made without one, or before fingerprints existed.
  Status f = disk_->GetMeta(kManifestFingerprintKey, &effective_.fingerprint);
  if (!f.ok() && !f.IsNotFound()) return f;
  if (f.IsNotFound()) effective_.fingerprint.clear();
  *exists = true;
  return Status::OK();
}

DiskTierOptions Store::Impl::DiskOptions(uint64_t budget) const {
  DiskTierOptions d;
  d.budget_bytes = budget;
  d.compression = ToDisk(effective_.compression);
  d.sync = ToDisk(effective_.sync);
  d.direct_io = options_.direct_io;
  d.use_io_uring = options_.use_io_uring;
  d.env = options_.env;
  // The planner tells each id's next read: a Put read later than all the
  // tier holds is left out (in disk-only mode no plan ranks anything).
  d.bypass = !options_.disk_only;
  // With bypass the items held fill the budget less this much dead space
  // (and a segment): 1/16 rather than the tier's 1/8 held 11% more items
  // and cost 3-5% fewer loads, at twice the write amplification, still
  // fewer bytes written than before bypass (bench/disk_budget_bench.py,
  // 2026-11-29).
  d.max_dead_fraction = 1.0 / 16;
  if (dataset_size_ > 0 && dataset_size_ <= kMaxItemId + 1) {
    d.expected_ids = static_cast<uint32_t>(dataset_size_);
  }
  return d;
}

// Merges the caller's options with the manifest's; checks what is fixed.
Status Store::Impl::ResolveOptions(const StoreOptions& o, bool exists) {
  StoreSettings m = effective_;  // the manifest's when it exists
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
  OPT4STORE_RETURN_IF_ERROR(ResolveFingerprint(o, exists, &m));
  // Settings: may change between runs.
  ApplyOptions(o, &m);  // CheckGivenOptions(o) passed in OpenOwner
  if (!exists && !o.ram && !o.ram_items) m.ram = kDefaultRamBytes;
  if (m.prefetch_depth == 0) m.prefetch_depth = kDefaultPrefetchDepth;
  // Staging is part of ram= (a byte budget): the most decoded bytes the store
  // holds in memory is ram=, prefetched items included; the policy gets the
  // rest. Its default follows a ram= given at this open. With ram_items= the
  // arena is sized in items and staging comes on top.
  if (!o.staging && (!exists || m.staging == 0 || o.ram)) {
    m.staging = m.ram_items ? std::max(kMinStagingBytes, m.ram / 8) : m.ram / 8;
  }
  if (!m.ram_items && m.staging >= m.ram && m.ram > 0) {
    if (o.staging) {
      return Status::InvalidArgument(where + "staging=" + std::to_string(m.staging) +
                                     " bytes must be below ram=" + std::to_string(m.ram) +
                                     " bytes: staging is part of ram");
    }
    m.staging = m.ram / 8;  // a saved staging= from a run with more ram=
  }
  OPT4STORE_RETURN_IF_ERROR(CheckSettingLimits(where, m));
  effective_ = m;
  dataset_size_ = m.dataset_size;
  if (effective_.disk > 0 && dataset_size_ > uint64_t{kMaxItemId} + 1) {
    return Status::InvalidArgument(where + "the disk tier holds ids below 2^31; dataset size " +
                                   std::to_string(dataset_size_) + " is too large");
  }
  return Status::OK();
}

// The fingerprint: fixed at creation, unless the open resets the store.
// A store whose values cannot be stale (it holds none) or whose maker gave
// none takes the one given.
Status Store::Impl::ResolveFingerprint(const StoreOptions& o, bool exists, StoreSettings* m) {
  if (!o.fingerprint) return Status::OK();
  const std::string where = "store " + path_ + ": ";
  if (o.fingerprint->empty()) {
    return Status::InvalidArgument(where + "the fingerprint is empty (leave it out for none)");
  }
  const uint64_t held = exists && disk_ ? disk_->GetStats().items : 0;
  if (held > 0 && !o.reset && *o.fingerprint != m->fingerprint) {
    if (!m->fingerprint.empty()) {
      return Status::Stale(
          where + "its " + std::to_string(held) + " values were made for fingerprint '" +
          m->fingerprint + "', and this open gives fingerprint '" + *o.fingerprint +
          "': they may be stale. Open it with reset (Python: reset=True) to empty it and go "
          "on, or run 'opt4store clear " + path_ + "' first");
    }
    log_(where + "it had no fingerprint; its " + std::to_string(held) +
         " values are now taken as made for fingerprint '" + *o.fingerprint +
         "'. If other code made them, empty it: reset (Python: reset=True), or "
         "'opt4store clear " + path_ + "'");
  }
  m->fingerprint = *o.fingerprint;
  return Status::OK();
}

Status Store::Impl::WriteManifest() {
  OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestFormatKey, kManifestFormat));
  OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestOptionsKey, EncodeManifestOptions(effective_)));
  if (!effective_.fingerprint.empty()) {
    OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestFingerprintKey, effective_.fingerprint));
  }
  if (options_.plan && PlanIsPersistable(*options_.plan)) {
    PlanSpec stored, saved;
    OPT4STORE_RETURN_IF_ERROR(CopyPlan(*options_.plan, &stored, &saved));
    OPT4STORE_RETURN_IF_ERROR(disk_->PutMeta(kManifestPlanKey, EncodePlanSpec(saved)));
    options_.plan = stored;  // this open reads the copy too: one plan identity
  }
  return disk_->Flush();
}

// A file plan is copied into the store as kPlanCopyPrefix + its format
// ("plan.u32"), and the manifest names the copy relative to the store, so
// that the store keeps its plan when the original file changes, moves or
// goes, and when the store directory itself moves.
Status Store::Impl::CopyPlan(const PlanSpec& plan, PlanSpec* stored, PlanSpec* saved) {
  *stored = plan;
  *saved = plan;
  if (plan.kind != SamplerKind::kFile) return Status::OK();
  const std::string name =
      std::string(kPlanCopyPrefix) + NumberFormatName(NumberFormatFromPath(plan.path));
  const std::string copy = path_ + "/" + name;
  if (plan.path != copy) OPT4STORE_RETURN_IF_ERROR(CopyFileAtomically(plan.path, name));
  stored->path = copy;
  saved->path = name;
  return Status::OK();
}

Status Store::Impl::DecodeStoredPlan(std::string_view text, PlanSpec* plan) const {
  OPT4STORE_RETURN_IF_ERROR(DecodePlanSpec(text, plan));
  // A relative path is a copy inside the store (older stores saved the
  // original's absolute path).
  if (plan->kind == SamplerKind::kFile && !plan->path.empty() && plan->path[0] != '/') {
    plan->path = path_ + "/" + plan->path;
  }
  return Status::OK();
}

// Writes a temporary file, syncs it, renames it over `name` in the store
// and syncs the directory: a crash leaves the old copy or the new one.
Status Store::Impl::CopyFileAtomically(const std::string& from, const std::string& name) {
  std::string bytes;
  {
    std::FILE* in = std::fopen(from.c_str(), "rb");
    if (in == nullptr) return Status::FromErrno("plan file " + from, errno);
    char chunk[1 << 16];
    size_t got = 0;
    while ((got = std::fread(chunk, 1, sizeof chunk, in)) > 0) bytes.append(chunk, got);
    const bool failed = std::ferror(in) != 0;
    const int err = errno;
    std::fclose(in);
    if (failed) return Status::FromErrno("plan file " + from, err);
  }
  Env* env = options_.env ? options_.env : Env::Default();
  const std::string tmp = path_ + "/" + name + ".tmp";
  std::unique_ptr<File> file;
  OPT4STORE_RETURN_IF_ERROR(env->OpenFile(tmp, FileOptions(), &file));
  const std::string_view part(bytes);
  OPT4STORE_RETURN_IF_ERROR(file->Write(0, &part, 1));
  OPT4STORE_RETURN_IF_ERROR(file->Truncate(bytes.size()));  // a leftover tmp was longer
  OPT4STORE_RETURN_IF_ERROR(file->Sync());
  file.reset();
  OPT4STORE_RETURN_IF_ERROR(env->RenameFile(tmp, path_ + "/" + name));
  return env->SyncDir(path_);
}

Status Store::Impl::CreateShared() {
  const uint64_t capacity = effective_.ram_items ? 0 : effective_.ram;
  RamTierOptions r;
  r.num_items = dataset_size_;
  r.name_prefix = options_.shm_prefix + "-ram";
  r.free_space_for_testing = options_.shm_free_space_for_testing;
  if (effective_.ram_items) {
    // A capacity in items: the arena is address space sized for the largest
    // plausible items (at most half the free /dev/shm), reserved step by
    // step as items arrive (tiers/ram_tier.h), in small steps: that bound
    // is not memory the user asked for, so the open takes little of it.
    uint64_t free_bytes = 0;
    Status s = options_.shm_free_space_for_testing
                   ? options_.shm_free_space_for_testing("/dev/shm", &free_bytes)
                   : shm::FreeSpace("/dev/shm", &free_bytes);
    OPT4STORE_RETURN_IF_ERROR(s);
    const uint64_t want =
        SaturatingAdd(SaturatingMul(effective_.ram_items, uint64_t{8} << 20), effective_.staging);
    r.capacity_bytes = std::max<uint64_t>(uint64_t{1} << 20,
                                          std::min<uint64_t>(want, free_bytes / 2));
    r.reserve_step_bytes = uint64_t{16} << 20;
  } else {
    r.capacity_bytes = capacity;  // staging is inside ram=
  }
  Status s = RamTier::Create(r, &ram_);
  if (!s.ok()) {
    return s.WithContext(effective_.ram_items
                             ? "RAM tier of ram_items=" + std::to_string(effective_.ram_items) +
                                   " + staging=" + std::to_string(effective_.staging) +
                                   " bytes (lower ram_items= or staging=, or make /dev/shm "
                                   "larger)"
                             : "RAM tier of ram=" + std::to_string(effective_.ram) +
                                   " bytes, staging included (lower ram=, or make /dev/shm "
                                   "larger)");
  }
  SharedQueueOptions q;
  q.capacity_bytes = options_.queue_bytes;
  q.name_prefix = options_.shm_prefix + "-queue";
  q.free_space_for_testing = options_.shm_free_space_for_testing;
  OPT4STORE_RETURN_IF_ERROR(SharedQueue::Create(q, &queue_));
  OPT4STORE_RETURN_IF_ERROR(ControlBlock::Create(options_.shm_prefix + "-ctl", dataset_size_,
                                                 options_.fetch_timeout_ms, ram_->name(),
                                                 queue_->name(),
                                                 disk_ ? disk_->segments_dir() : std::string(),
                                                 &ctl_));
  ctl_->header()->sync_every = disk_ && effective_.sync == StoreOptions::SyncMode::kEveryPut;
  ResidencyOptions ro;
  ro.num_ids = dataset_size_;
  ro.ram_items = effective_.ram_items;
  ro.ram = effective_.ram_items ? effective_.ram : effective_.ram - effective_.staging;
  ro.policy = effective_.policy;
  ro.prefetch_depth = effective_.prefetch_depth;
  ro.staging = effective_.staging;
  ro.size_unit = ram_->unit_bytes();
  ro.plan_window = options_.plan_window;
  ro.ring_slots = ControlBlock::kRingSize;
  ro.disk = disk_ != nullptr;
  ResidencyTiers* tiers = this;  // the base is private: only Impl can hand it out
  // No other thread exists yet; mu_ is taken for the analysis's sake.
  MutexLock lock(&mu_);
  residency_ = std::make_unique<Residency>(ro, tiers);
  if (disk_) {
    // What the disk holds, and each item's size for a byte budget's policy.
    Residency* residency = residency_.get();
    OPT4STORE_RETURN_IF_ERROR(
        disk_->ForEachItem([this, residency](ItemId id, uint64_t bytes,
                                             const DiskRecordPlace& place) {
          if (id >= dataset_size_) return;
          ctl_->SetOnDisk(id, true);
          ctl_->SetPlace(id, place);
          residency->NoteSize(id, bytes);
        }));
  }
  ctl_->gauges().ram_capacity.store(effective_.ram_items ? effective_.ram_items : ro.ram);
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
  OPT4STORE_RETURN_IF_ERROR(CheckGivenOptions(options).WithContext("store " + path));
  StoreSettings given;
  ApplyOptions(options, &given);
  OPT4STORE_RETURN_IF_ERROR(CheckSettingLimits("store " + path + ": ", given));

  const bool explicit_no_disk = options.disk && *options.disk == 0;
  // A store whose index is damaged exists all the same: the disk tier
  // refuses it with Corruption naming `opt4store repair`, never a new one.
  const bool exists_on_disk =
      !path.empty() && (FileExists(path + "/index") || FileExists(path + "/segments"));
  if (explicit_no_disk && disk_only_) {
    return Status::InvalidArgument("disk_only needs a disk tier (disk > 0)");
  }
  bool exists = false;
  if (!explicit_no_disk && (exists_on_disk || (options.disk && *options.disk > 0))) {
    if (path.empty()) return Status::InvalidArgument("a store with a disk tier needs a path");
    if (!exists_on_disk && !options.create_if_missing) {
      return Status::NotFound("no store at " + path);
    }
    if (exists_on_disk && options.error_if_exists) {
      return Status::InvalidArgument("a store already exists at " + path);
    }
    if (!exists_on_disk) {
      // A new store may be nested in folders that do not exist yet. What
      // this open makes is noted, for UndoNewStore.
      std::error_code ec;
      for (std::filesystem::path p(path); !p.empty() && !std::filesystem::exists(p, ec);
           p = p.parent_path()) {
        dirs_made_.push_back(p.string());
      }
      for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
        entries_before_.push_back(entry.path().filename().string());
      }
      std::filesystem::create_directories(path, ec);
      if (ec) return Status::IOError("cannot create " + path + ": " + ec.message());
    }
    // The budget comes from the manifest when not given: read it first.
    OPT4STORE_RETURN_IF_ERROR(DiskTier::Open(
        DiskOptions(options.disk ? *options.disk : kProvisionalDiskBudget), path_, &disk_));
    new_store_ = !exists_on_disk;  // its LOCK is this open's now
    OPT4STORE_RETURN_IF_ERROR(ReadManifest(&exists));
    if (!exists && exists_on_disk && !options.disk) {
      return Status::Corruption("store " + path + " has an index but no manifest (lost with a "
                                "damaged index); run 'opt4store repair " + path +
                                " --dataset-size N --disk SIZE' to write a new one");
    }
  } else if (disk_only_ || (!path.empty() && !options.create_if_missing)) {
    // Without a disk tier nothing is kept at path, so nothing exists there
    // to open: create_if_missing=false asks for what is not.
    return Status::NotFound("no store at " + path);
  }
  OPT4STORE_RETURN_IF_ERROR(ResolveOptions(options, exists));
  if (explicit_no_disk) effective_.disk = 0;
  if (disk_ && effective_.disk == 0) {
    return Status::InvalidArgument("store " + path + ": the disk tier's budget is 0");
  }
  if (disk_) {
    // Opened with the provisional budget and the default settings: the
    // manifest's (or the caller's) apply from here.
    OPT4STORE_RETURN_IF_ERROR(disk_->Reconfigure(DiskOptions(effective_.disk)));
  }
  if (disk_ && options.reset) {
    // Before the manifest: a crash in between leaves an empty store with
    // the old fingerprint, which the next open's fingerprint replaces.
    OPT4STORE_RETURN_IF_ERROR(disk_->Clear().WithContext("store " + path + ": reset"));
  }
  if (disk_) {
    OPT4STORE_RETURN_IF_ERROR(WriteManifest());
    std::string text;
    Cursor cursor;
    if (disk_->GetMeta(kManifestCursorKey, &text).ok() && DecodeCursor(text, &cursor).ok()) {
      MutexLock lock(&mu_);
      plan_identity_ = cursor.plan;  // compared with the plan below
      resume_position_ = cursor.position;
    }
  }
  if (disk_only_) {
    if (disk_ && !disk_->GetMeta(kManifestLastRunKey, &last_run_).ok()) last_run_.clear();
    return Status::OK();
  }

  OPT4STORE_RETURN_IF_ERROR(CreateShared());
  PlanSpec plan;
  bool have_plan = false;
  if (options_.plan) {
    // A file plan as WriteManifest left it: the store's copy, whose identity
    // a later open without a plan (the saved one) has too.
    plan = *options_.plan;
    have_plan = true;
  } else if (disk_) {
    std::string text;
    if (disk_->GetMeta(kManifestPlanKey, &text).ok()) {
      OPT4STORE_RETURN_IF_ERROR(DecodeStoredPlan(text, &plan));
      have_plan = true;
    }
  }
  {
    MutexLock lock(&mu_);
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
    owner_opened_ = true;
  }
  planner_ = new std::thread([this] { PlannerLoop(); });
  if (disk_) {
    // So that `opt4store stats` finds this process's shared memory while
    // it runs (live_store.h). Without it the store works all the same.
    Status s = WriteOwnerFile(path_, ctl_->name());
    if (!s.ok()) {
      log_("store " + path_ + ": " + s.ToString() + "; 'opt4store stats' will not see it live");
    }
  }
  return Status::OK();
}

Status Store::Impl::AttachReader(const std::string& handle, bool rank_reader) {
  log_ = DefaultLog;
  OPT4STORE_RETURN_IF_ERROR(ControlBlock::Attach(handle, &ctl_));
  // Readers look the owner up by pid (OwnerGone) and the owner looks readers
  // up: from another pid namespace the owner would look gone at once.
  const uint64_t owner_namespace = ctl_->creator_pid_namespace();
  const uint64_t namespace_here = shm::PidNamespace();
  if (owner_namespace != 0 && namespace_here != 0 && owner_namespace != namespace_here) {
    return Status::InvalidArgument(
        "the store's owner (pid " + std::to_string(ctl_->creator().pid) +
        " of its own) runs in another pid namespace than this process (a container that "
        "shares /dev/shm, docker --ipc=host): the processes that share a store look each "
        "other up by pid, so they must run in one pid namespace (one container, or "
        "--pid=host); open a store of this process's own instead");
  }
  OPT4STORE_RETURN_IF_ERROR(RamTier::Attach(ctl_->header()->ram_name, &ram_));
  OPT4STORE_RETURN_IF_ERROR(SharedQueue::Attach(ctl_->header()->queue_name, &queue_));
  dataset_size_ = ctl_->header()->dataset_size;
  options_.fetch_timeout_ms = ctl_->header()->fetch_timeout_ms;
  total_positions_.store(ctl_->gauges().total_positions.load());
  if (rank_reader) {
    rank_reader_slot_ = ctl_->JoinRankReaders(shm::PackProcess(shm::CurrentProcess()));
    if (rank_reader_slot_ < 0) {
      return Status::Busy("the store has " + std::to_string(ControlBlock::kMaxRankReaders) +
                          " live rank readers already");
    }
  }
  return Status::OK();
}

Status Store::Impl::InitPlanLocked(const PlanSpec& spec, uint64_t start,
                                   const std::vector<ItemId>& in_ram) {
  OPT4STORE_RETURN_IF_ERROR(residency_->SetPlan(spec, start, in_ram));
  plan_identity_ = spec.Describe();
  start = residency_->frontier();
  const uint64_t total = residency_->total_positions();
  for (uint64_t id = 0; id < dataset_size_; ++id) ctl_->ClearExpected(static_cast<ItemId>(id));
  ctl_->ClearMissed();
  ctl_->header()->plan_asked.store(0, std::memory_order_relaxed);
  ctl_->header()->plan_answered.store(0, std::memory_order_relaxed);
  ctl_->header()->planned.store(residency_->planned(), std::memory_order_release);
  total_positions_.store(total);
  ctl_->gauges().total_positions.store(total);
  ctl_->gauges().epoch_length.store(residency_->epoch_length());
  ctl_->header()->plan_generation.fetch_add(1, std::memory_order_acq_rel);
  ctl_->header()->high_water.store(start, std::memory_order_release);
  ctl_->header()->frontier.store(start, std::memory_order_release);
  ctl_->header()->epoch_start.store(start, std::memory_order_release);
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

}  // namespace opt4store

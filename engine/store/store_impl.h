// Store::Impl: the state behind the Store facade, and the map of where each
// of its jobs lives. One object per process that opened or attached the
// store; the owner's has the disk tier, the Residency and the planner
// thread, a reader's has only the shared segments.
//
//   store.cc          the facade; the owner's admin calls (SetPlan, Flush,
//                     Compact, Verify, Inspect, Close)
//   store_open.cc     opening and recovery: the manifest, the options it
//                     fixes, the tiers, the shared segments, the plan and
//                     the cursor to resume at
//   residency.h/.cc   the decisions: what RAM should hold (pure; this class
//                     carries them out as its ResidencyTiers)
//   owner_service.cc  the owner's planner thread: puts and fetch requests
//                     from readers (protocol.h), prefetch, the disk writes
//                     readers' Puts leave behind
//   read_path.cc      Get/GetBatch and Put, in any process
//   store_stats.cc    Stats() and the gauges the owner publishes
//
// Locking: mu_ guards the Residency and the owner's plan state; write_mu_
// the values waiting for their disk write; drain_mu_ is held by the one
// thread draining them. Never hold mu_ across disk I/O or a copy of a value
// (Prefetch reserves RAM under mu_, copies without it, commits under it).
#ifndef OPT4STORE_ENGINE_STORE_STORE_IMPL_H_
#define OPT4STORE_ENGINE_STORE_STORE_IMPL_H_

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/base/mutex.h"
#include "engine/store/control_block.h"
#include "engine/store/copy_helpers.h"
#include "engine/store/manifest.h"
#include "engine/store/residency.h"
#include "opt4store/store.h"
#include "tiers/disk_tier.h"
#include "tiers/ram_tier.h"
#include "tiers/shared_queue.h"

namespace opt4store {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Copies two blobs into a sink.
Status CopyToSink(ReadSink* sink, std::string_view meta, std::string_view payload);

// The figures any process can read (store_stats.cc): the control block's
// counters and the owner's last published gauges, and the RAM tier's; ctl
// or ram may be null. Writes nothing to either, so read-only mappings do.
void ReadSharedStats(const ControlBlock* ctl, RamTier* ram, StoreStats* st);

class Store::Impl : private ResidencyTiers {
 public:
  ~Impl() override;

  Status OpenOwner(const StoreOptions& options, const std::string& path);
  Status AttachReader(const std::string& handle, bool rank_reader);

  bool InOwner() const { return owner_pid_ != 0 && getpid() == owner_pid_; }
  std::string handle() const { return ctl_ ? ctl_->name() : std::string(); }
  uint64_t dataset_size() const { return dataset_size_; }

  Status Get(uint64_t position, ItemId id, ReadSink* sink, GetSource* source);
  Status Peek(ItemId id, ReadSink* sink, GetSource* source);
  void GetBatch(const uint64_t* positions, const ItemId* ids, size_t n, ReadSink* const* sinks,
                Status* statuses, GetSource* sources);
  Status Put(uint64_t position, ItemId id, std::string_view meta, std::string_view payload);
  void MarkConsumed(uint64_t position, ItemId id);
  void Locate(const ItemId* ids, size_t n, GetSource* sources) const;

  Status SetPlan(const PlanSpec& plan, uint64_t start_position);
  Status AppendPlan(std::vector<ItemId> ids);
  uint64_t ResumePosition() const;
  uint64_t Frontier() const;
  // The reads and planner counters as saved at close ("name value" lines),
  // and laid back over a StoreStats (names it does not have are skipped).
  static std::string EncodeRunCounters(const StoreStats& st);
  static void ApplyRunCounters(std::string_view text, StoreStats* st);
  // A closed store's stats, from its last live ones: the run counters as
  // saved, the disk tier's gauges, last_run set; the rest 0.
  static StoreStats ClosedStats(const StoreStats& live);
  void BeginEpoch(uint64_t position);
  uint64_t ReadingFrom() const;
  bool PositionConsumed(uint64_t position) const;  // Store::Consumed
  bool FirstWarning(uint32_t kind);
  void CountPeerTraffic(uint64_t hits, uint64_t bytes_in, uint64_t bytes_out);
  Status WaitForPuts(int64_t timeout_ms);
  Status WaitForRankReaders(uint32_t expected, int64_t timeout_ms);
  Status Flush();
  Status Compact();
  Status Verify(StoreVerifyReport* report);
  Status Inspect(StoreInfo* info);
  Status Close();
  StoreStats Stats();
  // After a failed OpenOwner that began a new store (it held the store's
  // LOCK): closes, and removes what the open made (the disk tier's files,
  // the folders it created), so that the path is as it was: a later open
  // does not find a store without a manifest there.
  void UndoNewStore();

 private:
  // ---- opening (store_open.cc)
  Status ReadManifest(bool* exists);
  Status ResolveOptions(const StoreOptions& options, bool exists);
  Status ResolveFingerprint(const StoreOptions& options, bool exists, StoreSettings* merged);
  // The disk tier's options: the budget given, the other settings as
  // resolved so far (effective_).
  DiskTierOptions DiskOptions(uint64_t budget) const;
  Status WriteManifest();
  // A file plan's file is copied into the store. *stored: the plan as this
  // store reads it from now on; *saved: as the manifest keeps it (the
  // copy's path relative to the store).
  Status CopyPlan(const PlanSpec& plan, PlanSpec* stored, PlanSpec* saved);
  // The manifest's plan, a copy's path resolved against the store.
  Status DecodeStoredPlan(std::string_view text, PlanSpec* plan) const;
  Status CopyFileAtomically(const std::string& from, const std::string& name);
  Status CreateShared();
  // Starts the Residency and the shared plan state over on spec at start.
  // in_ram: what the RAM tier holds (Residency::SetPlan keeps what the new
  // plan's policy would).
  Status InitPlanLocked(const PlanSpec& spec, uint64_t start,
                        const std::vector<ItemId>& in_ram = {}) REQUIRES(mu_);

  // ---- owner, under mu_ (owner_service.cc)
  // Moves the frontier over consumed positions and publishes it.
  void AdvanceFrontierLocked() REQUIRES(mu_);
  // Steps the policy up to `limit` (see Residency::PlanAhead), and
  // publishes how far it planned.
  void PlanAheadLocked(uint64_t limit, uint64_t force_through = 0) REQUIRES(mu_);
  Status InsertRamLocked(ItemId id, std::string_view meta, std::string_view payload)
      REQUIRES(mu_);
  void PublishGaugesLocked() REQUIRES(mu_);  // store_stats.cc

  // ---- owner, no lock (owner_service.cc)
  // on_planner: the call comes from the planner thread (a worker's Put off
  // the queue), which writes to the disk tier itself; a reader's own Put
  // leaves that write to the planner thread (see writes_).
  Status OwnerPut(uint64_t position, ItemId id, std::string_view meta, std::string_view payload,
                  bool on_planner);
  // Puts to the disk tier unless it holds id; a refusal is counted and
  // warned about, and returned.
  Status WriteThrough(ItemId id, std::string_view meta, std::string_view payload)
      EXCLUDES(mu_);
  // At close, after the last Put: offers the disk tier what only RAM holds
  // (Residency::RankForRestart), which a restart would load again.
  void SpillForRestart() EXCLUDES(mu_);
  // Writes the values readers Put to the disk tier; false when none waited.
  bool DrainWrites() EXCLUDES(drain_mu_, write_mu_);
  // Wakes the readers that waited for id's Put under `expectation`
  // (ControlBlock::Expectation) and will not find it in RAM: called once
  // the disk tier has the value (or refused it), so that they read it there
  // instead of finding it nowhere and loading it again. The expectation is
  // cleared unless another replaced it. Nothing for kNoExpectation.
  void WakeReadersOfAbsent(ItemId id, uint64_t expectation) EXCLUDES(mu_);
  // A value still in writes_: copied into *sink, *found set (and *bytes,
  // when given, to its meta + payload bytes).
  Status ReadPendingWrite(ItemId id, ReadSink* sink, bool* found, uint64_t* bytes = nullptr)
      EXCLUDES(write_mu_);
  void HandleFetch(uint64_t position, ItemId id);
  // Tells readers where id's disk record is now (ControlBlock::SetPlace).
  void PublishPlace(ItemId id);
  void Prefetch(const std::vector<ItemId>& ids);
  bool DrainQueue();
  void PlannerLoop();
  void StopPlanner();
  void SyncPlanning(uint64_t position);
  // Plans through the position readers asked for (AwaitPlanned), as far as
  // the plan and the ring allow, and answers them.
  void AnswerPlanAsks() EXCLUDES(mu_);

  // ---- ResidencyTiers, for residency_ (owner_service.cc); under mu_
  bool InRam(ItemId id) const override;
  bool OnDisk(ItemId id) const override;
  bool Consumed(uint64_t position, ItemId* id) const override;
  void RamUsage(uint64_t* items, uint64_t* bytes) const override;
  bool BeingRead(uint64_t position) const override;
  void Evict(ItemId id) override;
  void ExpectPut(ItemId id, uint64_t position) override;
  void SetNextUse(ItemId id, uint64_t position) override;
  void Drifted(uint64_t position, ItemId planned, ItemId got) override;
  void Skipped(uint64_t position, ItemId planned) override;

  // ---- readers (read_path.cc)
  Status ReadRam(ItemId id, ReadSink* sink, bool* found);
  // A reader process: id's disk record read from its segment file at the
  // place the owner published (ControlBlock::Place), checked and copied
  // into *sink (*bytes: its meta + payload bytes). *found false (OK) when
  // there is no place or the read fails its checks; an error is the sink's.
  Status ReadPlaced(ItemId id, ReadSink* sink, bool* found, uint64_t* bytes);
  // ReadRam, waiting for an item that is being filled.
  Status LookupRam(ItemId id, ReadSink* sink, bool* found);
  // putter: the process whose Put is awaited, if known (its death ends the
  // wait); *timed_out: whether the wait ran to its timeout.
  Status WaitAndRead(ItemId id, uint64_t version, int64_t timeout_ms, ReadSink* sink,
                     bool* found, const shm::ProcessIdentity* putter = nullptr,
                     bool* timed_out = nullptr);
  void Mark(uint64_t position, ItemId id);
  // A reader process: returns once the owner has planned through
  // `position` (or as far as it can), has closed, or kept it waiting
  // kExpectTimeoutMs (an expect timeout). The plan then says whether a
  // reader that missed an item before this one is to Put it.
  void AwaitPlanned(uint64_t position);
  // LookupRam once the owner has taken every Put sent so far (a wait that
  // ends however few are queued): for a Put its sender may have sent before
  // its epoch ended or its process went. A wait in vain counts as one
  // (CountExpectTimeout), so that it stops as the others do.
  Status LookupAfterQueuedPuts(ItemId id, ReadSink* sink, bool* found);
  // Counts a wait for another process that ended in vain, and warns when
  // this process stops waiting (kMaxExpectTimeouts).
  void CountExpectTimeout();
  // A reader process: whether the owner closed the store or its process is
  // gone (killed without Close). Either way nobody answers a fetch, a plan
  // ask or a Put any more, so readers send none and wait for none. The
  // process is looked up at most every kOwnerCheckMs (a /proc read); a
  // death, once seen, is kept. Assumes the owner's pid is valid here (one
  // PID namespace, as the shared memory already assumes).
  bool OwnerGone();
  // A reader process's Put with sync="every": returns once the owner has
  // written the value (OK), or why it could not (NoSpace, IOError).
  Status PutDurably(ItemId id, const struct iovec* parts, int num_parts);
  // Whether `from` lies in an epoch before `position`'s: its read is over.
  bool InEarlierEpoch(uint64_t from, uint64_t position) const;
  // The plan's length, from the owner's gauge where there is a control
  // block: a reader attached before the plan (or a new one: SetPlan) then
  // reads its positions as planned ones, not as unplanned for ever.
  uint64_t TotalPositions() const {
    return ctl_ ? ctl_->gauges().total_positions.load(std::memory_order_relaxed)
                : total_positions_.load(std::memory_order_relaxed);
  }
  bool PlanPosition(uint64_t position) const {
    return position != kNoPosition && position < TotalPositions();
  }

  // ---- the owner's admin calls (store.cc)
  // Writes the readers' frontier and the plan's identity to the manifest
  // (synced with the next disk Flush); *position gets the frontier.
  Status SaveCursor(uint64_t* position);

  enum WarnKind {
    kWarnDiskFull,
    kWarnDrift,
    kWarnRamFull,
    kWarnQueueFull,
    kWarnExpect,
    kWarnPutTooLarge,
    kWarnCount
  };
  // Logs message the first time a warning of this kind comes up.
  void Warn(int kind, const std::string& message);

  // How long a reader waits for a value another reader is loading, and how
  // many fruitless waits a process tolerates before it stops waiting.
  static constexpr int64_t kExpectTimeoutMs = 2000;
  static constexpr uint64_t kMaxExpectTimeouts = 3;
  std::atomic<uint64_t> expect_timeouts_{0};  // this process's
  static constexpr int64_t kOwnerCheckMs = 20;
  std::atomic<bool> owner_dead_{false};         // OwnerGone: seen dead
  std::atomic<int64_t> owner_checked_ns_{0};    // OwnerGone: last lookup

  // Fixed after open.
  std::string last_run_;  // an admin open: the counters the last run saved
  std::string path_;
  StoreOptions options_;
  StoreSettings effective_;
  bool disk_only_ = false;
  uint64_t dataset_size_ = 0;
  int32_t owner_pid_ = 0;
  // A rank reader's slot (ControlBlock::JoinRankReaders); -1 in other
  // processes.
  int rank_reader_slot_ = -1;
  std::function<void(const std::string&)> log_;

  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RamTier> ram_;
  std::unique_ptr<SharedQueue> queue_;
  std::unique_ptr<ControlBlock> ctl_;

  CopyHelpers copy_helpers_{CopyHelpers::DefaultCount()};  // GetBatch's RAM-hit copies

  std::atomic<uint64_t> total_positions_{0};
  std::atomic<bool> closed_{false};
  // What Stats() returns once Close() is done: what an admin open of the
  // store shows then (ClosedStats). Written by Close, which no call overlaps.
  StoreStats stats_at_close_;
  // A new store's open (UndoNewStore): the folders it created, deepest
  // first, the entries the path held before, and whether it holds the LOCK.
  std::vector<std::string> dirs_made_;
  std::vector<std::string> entries_before_;
  bool new_store_ = false;
  std::atomic<bool> warned_[kWarnCount] = {};

  // Owner state.
  Mutex mu_ ACQUIRED_BEFORE(write_mu_);
  std::unique_ptr<Residency> residency_ GUARDED_BY(mu_);  // made by CreateShared
  // OpenOwner got to its end: only then may Close save a cursor and a run's
  // counters over the ones an earlier run saved.
  bool owner_opened_ GUARDED_BY(mu_) = false;
  // The identity of the plan in force, or before any, of the saved cursor's.
  std::string plan_identity_ GUARDED_BY(mu_);
  std::atomic<uint64_t> resume_position_{0};  // the cursor saved for this plan
  int64_t last_publish_ns_ GUARDED_BY(mu_) = 0;

  // Owner counters not kept in the control block or the Residency.
  std::atomic<uint64_t> prefetched_{0}, prefetch_bytes_{0};
  std::atomic<uint64_t> insert_failures_{0}, disk_put_errors_{0};

  // Values readers of this process Put, waiting for the planner thread to
  // write them to the disk tier (so that a reader's miss costs a copy, not a
  // disk write). Lost on a crash, like any unsynced write.
  struct PendingWrite {
    ItemId id = 0;
    std::string meta;
    std::string payload;
    uint64_t wake_from = ControlBlock::kNoExpectation;  // WakeReadersOfAbsent's, once written
  };
  static constexpr uint64_t kMaxPendingWriteBytes = uint64_t{256} << 20;
  Mutex drain_mu_ ACQUIRED_BEFORE(write_mu_);  // held by DrainWrites, which alone pops writes_
  Mutex write_mu_;
  std::deque<PendingWrite> writes_ GUARDED_BY(write_mu_);
  std::unordered_set<ItemId> write_ids_ GUARDED_BY(write_mu_);
  uint64_t write_bytes_ GUARDED_BY(write_mu_) = 0;

  // Heap-allocated so that a forked child can drop it without touching a
  // thread that does not exist there.
  std::thread* planner_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_STORE_STORE_IMPL_H_

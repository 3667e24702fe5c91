// ControlBlock: the small shared-memory segment through which the owner of a
// Store and its reader processes coordinate, besides the RAM tier and the
// request queue.
//
//   header     names of the RAM tier and queue segments (for Attach), the
//              dataset size, the fetch timeout, the sync mode, the owner's
//              frontier
//   counters   reader counters (accesses, hits, source loads ...), relaxed atomics
//              summed over every process, and the owner's gauges as it last
//              published them
//   consumed   a ring of R slots, one per plan position modulo R: a reader
//              stores (plan generation, lap = position / R + 1, id) when it
//              has read the position; the owner advances the frontier over
//              slots whose generation and lap match. Stale slots (an older
//              lap or plan) are harmless without clearing. Beside it, per
//              slot, the process that read the position (pid and start
//              time): a reader that waits for that reader's Put stops once
//              it is gone. And per slot, a reader's mark that it is
//              reading the position now (from RAM, disk or the owner):
//              the prefetcher skips it.
//   on_disk    one bit per id: the disk tier holds it. Readers use it to
//              decide between "ask the owner" and "load from the source".
//   expected   per id, the plan position whose reader is loading the item
//              for the policy (its admission), or UINT64_MAX. A reader at a
//              later position that misses it waits for that Put instead of
//              loading it again.
//   places     per id, where its disk record is (segment_reader.h: segment,
//              offset, length, CRC; 16 bytes), so that a reader reads it
//              from the segment file itself, without the owner and without
//              room in the RAM tier. Two words, written by the owner alone:
//              a reader that sees them change under it, or a place out of
//              date, gets a miss from ReadRecordAt's checks, never a wrong
//              value.
//   rank readers  kMaxRankReaders slots in the header, each the process of
//              a reader attached as a rank reader (Store::AttachRankReader:
//              another local rank of a shared store) or 0; the owner's
//              WaitForRankReaders waits until they are empty or their
//              processes gone; beside them, how many rank readers joined.
//
// Thread and process safety: every shared field is an atomic; readers and
// the owner touch them without locks, so a process killed at any point
// leaves nothing held. Only the owner writes the header, the frontier, the
// gauges and on_disk.
#ifndef OPT4STORE_ENGINE_STORE_CONTROL_BLOCK_H_
#define OPT4STORE_ENGINE_STORE_CONTROL_BLOCK_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/status.h"
#include "tiers/segment_reader.h"
#include "tiers/shared_memory.h"

namespace opt4store {

// The counters every process adds to.
struct SharedCounters {
  std::atomic<uint64_t> accesses{0};
  std::atomic<uint64_t> hits_ram{0};
  std::atomic<uint64_t> hits_disk{0};
  std::atomic<uint64_t> hits_disk_bytes{0};   // ... their meta + payload bytes
  std::atomic<uint64_t> hits_disk_direct{0};  // ... read by a reader from the segment itself
  std::atomic<uint64_t> source_loads{0};
  std::atomic<uint64_t> puts{0};
  std::atomic<uint64_t> puts_dropped{0};
  std::atomic<uint64_t> waits{0};
  std::atomic<uint64_t> wait_ns{0};
  std::atomic<uint64_t> fetch_requests{0};
  std::atomic<uint64_t> fetch_timeouts{0};
  std::atomic<uint64_t> expect_waits{0};     // misses that waited for another reader's Put
  std::atomic<uint64_t> plan_waits{0};       // misses that waited for the owner's planner
  std::atomic<uint64_t> expect_timeouts{0};  // either, in vain
  // A cluster store's traffic with other hosts (Store::CountPeerTraffic).
  std::atomic<uint64_t> peer_hits{0};
  std::atomic<uint64_t> peer_bytes_in{0};
  std::atomic<uint64_t> peer_bytes_out{0};
};

// A double as the bits of a 64-bit atomic, and back.
inline uint64_t RealBits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}
inline double RealFromBits(uint64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// What the owner publishes for Stats() in other processes.
struct OwnerGauges {
  std::atomic<uint64_t> prefetched{0};
  std::atomic<uint64_t> prefetch_bytes{0};
  std::atomic<uint64_t> planned_positions{0};
  std::atomic<uint64_t> policy_hits{0};
  std::atomic<uint64_t> ram_insert_failures{0};
  std::atomic<uint64_t> disk_put_errors{0};
  std::atomic<uint64_t> abandoned_positions{0};
  std::atomic<uint64_t> drift{0};
  std::atomic<uint64_t> total_positions{0};
  std::atomic<uint64_t> epoch_length{0};
  std::atomic<uint64_t> ram_capacity{0};
  std::atomic<uint64_t> ram_capacity_in_items{0};
  std::atomic<uint64_t> disk_items{0};
  std::atomic<uint64_t> disk_live_bytes{0};
  std::atomic<uint64_t> disk_file_bytes{0};
  std::atomic<uint64_t> disk_budget{0};
  // The rest of the disk tier's figures, so that a process without the disk
  // tier (a reader, `opt4store stats` on a store in use) shows them too.
  // Reals are kept as their bits (RealBits).
  std::atomic<uint64_t> disk_segments{0};
  std::atomic<uint64_t> disk_write_amplification_bits{0};
  std::atomic<uint64_t> disk_corrupt_records{0};
  std::atomic<uint64_t> disk_evictions{0};
  std::atomic<uint64_t> disk_bypasses{0};
  std::atomic<uint64_t> disk_compactions{0};
  std::atomic<uint64_t> disk_index_bytes_per_item_bits{0};
  std::atomic<uint64_t> io_uring{0};
  std::atomic<uint64_t> direct_io{0};
};

class ControlBlock {
 public:
  static constexpr uint32_t kRingBits = 16;
  static constexpr uint64_t kRingSize = uint64_t{1} << kRingBits;
  static constexpr size_t kMaxNameBytes = 255;
  static constexpr size_t kMaxPathBytes = 4095;
  // A host's local ranks, less the owner: far above the 8 GPUs of a node.
  static constexpr int kMaxRankReaders = 64;

  struct Header {
    uint64_t magic;
    uint32_t version;
    // Set by the owner before any reader attaches: sync="every" with a disk
    // tier, so a reader's Put waits until the owner has written it.
    uint32_t sync_every;
    uint64_t dataset_size;
    int64_t fetch_timeout_ms;
    char ram_name[kMaxNameBytes + 1];
    char queue_name[kMaxNameBytes + 1];
    // The disk tier's segment folder; "" without a disk tier, or when the
    // path is too long (readers then ask the owner for disk items).
    char segments_dir[kMaxPathBytes + 1];
    alignas(64) std::atomic<uint64_t> frontier;    // owner: lowest unconsumed position
    std::atomic<uint64_t> plan_generation;         // owner: bumped by each new plan
    alignas(64) std::atomic<uint64_t> high_water;  // readers: highest consumed + 1
    // A reader that misses an item some reader missed before it asks the
    // owner to plan through its position, to learn whether that reader's
    // Put is coming (Store::Impl::AwaitPlanned). Reset with each plan.
    alignas(64) std::atomic<uint64_t> planned;  // owner: Residency::planned()
    std::atomic<uint64_t> plan_asked;           // readers: the highest position asked + 1
    std::atomic<uint64_t> plan_answered;        // owner: the plan_asked it last planned for
    alignas(64) std::atomic<uint32_t> owner_closed;
    // Bit k: warning kind k was issued by some process of this store.
    std::atomic<uint64_t> warned;
    // The first position of the epoch the readers began last (BeginEpoch).
    std::atomic<uint64_t> epoch_start;
    // Owner: the Status code of its latest failed disk-tier write (0: none),
    // and how many have failed. A reader's sync="every" Put whose value is
    // not on disk reports that code if the count moved while its message
    // was in the queue; else the tier left the value out (or has dropped
    // it since), which is no failure.
    std::atomic<uint32_t> put_error_code;
    std::atomic<uint64_t> put_errors;
    alignas(64) SharedCounters counters;
    alignas(64) OwnerGauges gauges;
    // shm::PackProcess of each rank reader; 0: a free slot.
    alignas(64) std::atomic<uint64_t> rank_readers[kMaxRankReaders];
    std::atomic<uint64_t> rank_readers_joined;  // how many ever claimed a slot
  };

  // Creates the segment (owner). Names longer than kMaxNameBytes are
  // InvalidArgument; a segments_dir longer than kMaxPathBytes is left out.
  static Status Create(const std::string& prefix, uint64_t dataset_size,
                       int64_t fetch_timeout_ms, const std::string& ram_name,
                       const std::string& queue_name, const std::string& segments_dir,
                       std::unique_ptr<ControlBlock>* out);
  // Maps an existing one (a spawned reader). Corruption when it is not one.
  static Status Attach(const std::string& name, std::unique_ptr<ControlBlock>* out);
  // Maps it read-only, for a process that only looks (`opt4store stats` on
  // a store in use): it may read the header, counters and gauges; any
  // write faults.
  static Status AttachReadOnly(const std::string& name, std::unique_ptr<ControlBlock>* out);

  const std::string& name() const { return segment_->name(); }
  Header* header() const { return header_; }
  SharedCounters& counters() const { return header_->counters; }
  OwnerGauges& gauges() const { return header_->gauges; }
  bool IsCreatorProcess() const { return segment_->IsCreatorProcess(); }
  shm::ProcessIdentity creator() const { return segment_->creator(); }
  uint64_t creator_pid_namespace() const { return segment_->creator_pid_namespace(); }

  // ---- consumed positions

  // Reader: records that `position` was read with `id`. Positions at or
  // behind the frontier, or a whole ring ahead of it, are not recorded (the
  // owner skips those as abandoned once readers are far past them).
  void MarkConsumed(uint64_t position, ItemId id);
  // Reader: its read of `position` has begun, so a prefetch for it would
  // come too late (the read takes it from disk itself, or waits for the
  // owner's answer). Advisory: a mark left by a dead reader costs one
  // prefetch. Positions outside the ring's window are not marked.
  void MarkReading(uint64_t position);
  bool Reading(uint64_t position) const;
  // Whether `position` was consumed, and with which id.
  bool Consumed(uint64_t position, ItemId* id) const;
  // Consumed, and by which process; false also when the slot changed while
  // it was read (another lap's reader wrote it).
  bool ConsumedBy(uint64_t position, ItemId* id, shm::ProcessIdentity* reader) const;

  // ---- rank readers (any process writes its own slot)

  // Claims a slot for `process` (shm::PackProcess): a free one, or one
  // whose process is gone. -1 when every slot holds a live process.
  int JoinRankReaders(uint64_t process);
  // Frees `slot` if it holds `process`: a forked child of a rank reader,
  // which passes its own, frees none.
  void LeaveRankReaders(int slot, uint64_t process);
  // The processes in the slots whose process is alive.
  std::vector<shm::ProcessIdentity> LiveRankReaders() const;

  // ---- on-disk bits (owner writes)

  void SetOnDisk(ItemId id, bool on);
  bool OnDisk(ItemId id) const {
    return (on_disk_[id >> 6].load(std::memory_order_acquire) >> (id & 63)) & 1;
  }

  // ---- missed bits (any process writes): a reader missed the item at some
  // position of the current plan, so its Put may be on the way.

  void SetMissed(ItemId id) {
    missed_[id >> 6].fetch_or(uint64_t{1} << (id & 63), std::memory_order_release);
  }
  bool Missed(ItemId id) const {
    return (missed_[id >> 6].load(std::memory_order_acquire) >> (id & 63)) & 1;
  }
  void ClearMissed();  // owner, at a new plan

  // ---- Put expectations (owner writes): whose value a reader that misses
  // id may wait for. An expectation is kNoExpectation, kDiskExpectation
  // (the owner moves it through the disk tier: the prefetcher reads it into
  // RAM, or the planner thread writes a Put of it that only the owner's
  // process can see until then; either precedes every reader), or
  // ReadExpectation(p): the Put of the read at position p, which loads it.
  // Position 0 is a read's like any other (1), not the disk tier's.

  static constexpr uint64_t kNoExpectation = UINT64_MAX;
  static constexpr uint64_t kDiskExpectation = 0;
  static constexpr uint64_t ReadExpectation(uint64_t position) { return position + 1; }
  // Whether `expectation` is a read's; its position in *position.
  static bool ExpectedRead(uint64_t expectation, uint64_t* position) {
    if (expectation == kNoExpectation || expectation == kDiskExpectation) return false;
    *position = expectation - 1;
    return true;
  }
  // Whether a reader at `position` waits for `expectation`: one that comes
  // before it (the disk tier's comes before every read).
  static bool ExpectedBefore(uint64_t expectation, uint64_t position) {
    return expectation != kNoExpectation && expectation <= position;
  }

  void SetExpected(ItemId id, uint64_t expectation) {
    expected_[id].store(expectation, std::memory_order_release);
  }
  void ClearExpected(ItemId id) { expected_[id].store(kNoExpectation, std::memory_order_release); }
  uint64_t Expectation(ItemId id) const { return expected_[id].load(std::memory_order_acquire); }

  // ---- record places (owner writes)

  // Owner: publishes where id's disk record is; segment 0 clears it.
  void SetPlace(ItemId id, const DiskRecordPlace& place);
  void ClearPlace(ItemId id) { SetPlace(id, DiskRecordPlace()); }
  // Reader: the place as last published; false when there is none or it
  // changed while being read.
  bool Place(ItemId id, DiskRecordPlace* place) const;
  // The segment folder readers read from; "" for none.
  const char* segments_dir() const { return header_->segments_dir; }

 private:
  ControlBlock() = default;
  Status Layout(bool create);
  static Status AttachMapped(const std::string& name, bool read_only,
                             std::unique_ptr<ControlBlock>* out);
  uint64_t SlotTag(uint64_t position) const;

  std::unique_ptr<SharedSegment> segment_;
  Header* header_ = nullptr;
  std::atomic<uint64_t>* ring_ = nullptr;
  std::atomic<uint64_t>* consumers_ = nullptr;  // per ring slot: shm::PackProcess
  std::atomic<uint64_t>* reading_ = nullptr;    // per ring slot: SlotTag | 1 (MarkReading)
  std::atomic<uint64_t>* on_disk_ = nullptr;
  std::atomic<uint64_t>* missed_ = nullptr;
  std::atomic<uint64_t>* expected_ = nullptr;
  std::atomic<uint64_t>* places_ = nullptr;  // 2 words per id
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_STORE_CONTROL_BLOCK_H_

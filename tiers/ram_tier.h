// RamTier: the RAM tier of the store. A byte budget of item data in ONE
// shared-memory segment, so that the process that opened the store and its
// DataLoader workers (forked or spawned) share a single copy.
//
// Roles.
//   Owner   the process that called Create(). The only writer: BeginInsert /
//           CommitInsert / AbortInsert / Insert / Evict / AnswerAbsent. It
//           places items with a private allocator (ArenaAllocator, TLSF) and
//           unlinks the segment's name when its RamTier is destroyed.
//   Reader  any thread of any process: the owner itself, a forked child that
//           inherited the owner's RamTier, or a process that called Attach()
//           with name(). Readers Peek / CopyOut / Read / Wait / Stats.
//
// Reads copy; nothing hands out a view into the arena. Read() asks a
// ReadSink for the final destination (a tensor the binding has just
// allocated) and copies the bytes there once. Each item has a 16-byte entry
// in a shared table: a 64-bit state word (state, generation, arena offset)
// and a 64-bit size word. A reader loads the state word, copies, and loads it
// again; the owner changes the word (new generation) before it reuses freed
// space, so a copy that raced with an eviction is detected and discarded
// (seqlock-style). Readers take no locks and leave no pins, so a reader
// killed mid-copy blocks nobody. See ram_tier.cc for the memory-ordering
// argument.
//
// Stats are per-process slots in the segment (hits, misses, retries ...),
// each on its own cache lines, summed by Stats(): totals include every
// process that ever attached, dead ones too.
//
// Thread safety: reader methods are safe from any number of threads.
// Owner methods are NOT synchronized: the owner calls them from its threads
// under its own mutex (the Store's), one at a time; only the bytes between
// BeginInsert and CommitInsert may be written without that mutex.
// Process safety: readers in any number of processes; exactly one owner
// process. A forked child that inherited the owner's RamTier is a reader:
// owner methods return InvalidArgument there, and its destructor does not
// unlink the segment.
#ifndef OPT4STORE_TIERS_RAM_TIER_H_
#define OPT4STORE_TIERS_RAM_TIER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/read_sink.h"
#include "opt4store/status.h"
#include "tiers/arena_allocator.h"
#include "tiers/shared_memory.h"

namespace opt4store {

struct RamTierOptions {
  // The byte budget: the arena that holds meta + payload of resident items.
  // REQUIRED (> 0). Rounded up to the allocation unit.
  uint64_t capacity_bytes = 0;
  // Ids are [0, num_items). The shared state table costs 16 bytes per id,
  // the owner's private handle table 4 bytes per id. REQUIRED (> 0).
  uint64_t num_items = 0;
  // The segment is "/<name_prefix>.<owner pid>.<n>" in /dev/shm. Creation
  // removes objects with this prefix whose owner died.
  std::string name_prefix = "opt4store-ram";
  // Reserve the pages the tier writes (posix_fallocate), so that a /dev/shm
  // that fills up later cannot SIGBUS a process: the header, the table and
  // the arena's first reserve_step_bytes at creation, and the arena's next
  // steps as inserts need them. So a tier holds only the /dev/shm memory
  // its items need (creation still refuses an arena that /dev/shm cannot
  // hold now), and opening a large one costs no time up front (tmpfs
  // reserved 0.28 s a GiB here). A step /dev/shm cannot supply makes the
  // inserts that need it fail with NoSpace (reserve_error() says why).
  bool reserve_memory = true;
  uint64_t reserve_step_bytes = uint64_t{128} << 20;
  // The step reserved at creation (at most reserve_step_bytes): small, so
  // that an open does not wait for it; the store's planner reserves the
  // next step in the background at once (ReserveAhead), since less than
  // half a step is then free.
  uint64_t first_step_bytes = uint64_t{16} << 20;
  // Tests inject a small /dev/shm here; statvfs when empty.
  std::function<Status(const std::string& dir, uint64_t* free_bytes)> free_space_for_testing;
};

// What Peek() saw: the sizes of one version of an item.
struct ItemInfo {
  ItemId id = 0;
  uint64_t meta_size = 0;
  uint64_t payload_size = 0;
  // Opaque: the item's state word. CopyOut() and Wait() compare against it.
  uint64_t version = 0;
};

// Read() fills a ReadSink (opt4store/read_sink.h): Prepare() is called with
// the sizes of the version about to be copied; if the item changes during the
// copy, Prepare() is called again and the copy repeated.

// Totals over every process slot, plus the owner's gauges.
struct RamTierStats {
  // Summed over all processes that read (relaxed counters; a snapshot).
  uint64_t hits = 0;          // reads that returned an item
  uint64_t misses = 0;        // reads of an item that was not resident
  uint64_t bytes_copied = 0;  // meta + payload bytes returned by hits
  uint64_t retries = 0;       // copies discarded because the item changed
  uint64_t waits = 0;         // Wait() calls that blocked
  uint64_t inserts = 0;       // owner: committed inserts
  uint64_t evictions = 0;     // owner: evictions
  uint32_t processes = 0;     // process slots ever claimed
  // Owner gauges (exact after each owner call).
  uint64_t items_resident = 0;
  uint64_t bytes_used = 0;    // arena bytes allocated (whole units)
  uint64_t bytes_stored = 0;  // meta + payload bytes of resident items
  uint64_t bytes_used_peak = 0;  // the most arena bytes allocated at once
  uint64_t capacity_bytes = 0;
  uint64_t free_blocks = 0;
  // The largest free block: exact in the owner; in other processes, as the
  // owner last computed it (in its own Stats()).
  uint64_t largest_free_block = 0;
  // 1 - largest_free_block / free bytes: 0 when all free space is one block.
  double fragmentation = 0;
  // Metadata costs.
  uint64_t unit_bytes = 0;            // allocation granularity
  uint64_t table_bytes_per_item = 0;  // shared state table (16)
  uint64_t owner_bytes_per_item = 0;  // owner-private handle table (4), seen from any process
  uint64_t allocator_bytes = 0;       // owner-private allocator bookkeeping
  uint64_t segment_bytes = 0;         // everything mapped
};

// The RAM tier; see the top of this file for roles and the protocol.
// Thread safety: reader methods from any thread; owner methods serialized by
// the owner's mutex. Process safety: one owner process, readers anywhere; no
// reader can block the owner or another reader, alive or dead.
class RamTier {
 public:
  static constexpr uint64_t kMaxMetaSize = (uint64_t{1} << 24) - 1;
  static constexpr uint64_t kMaxPayloadSize = (uint64_t{1} << 40) - 1;
  // Read() gives up with Busy after this many copies that raced a change.
  static constexpr int kMaxReadAttempts = 64;

  // An insert in progress: the owner writes meta and payload into the arena
  // through these pointers, then calls CommitInsert (or AbortInsert).
  struct PendingInsert {
    ItemId id = 0;
    char* meta = nullptr;
    char* payload = nullptr;
    uint64_t meta_size = 0;
    uint64_t payload_size = 0;
  };

  // Creates the segment and becomes its owner. Returns NoSpace, naming the
  // sizes, when /dev/shm cannot hold it.
  static Status Create(const RamTierOptions& options, std::unique_ptr<RamTier>* out);
  // Maps an existing RAM tier by name() as a reader (a spawned worker).
  static Status Attach(const std::string& name, std::unique_ptr<RamTier>* out);
  // Maps it read-only (SharedSegment::AttachReadOnly), for a process that
  // only looks at a store in use. Such a handle may call Stats() and
  // nothing else: every other method writes a stats slot or an entry.
  static Status AttachReadOnly(const std::string& name, std::unique_ptr<RamTier>* out);

  ~RamTier();
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // The segment's name, for Attach() in another process.
  const std::string& name() const;
  uint64_t num_items() const { return num_items_; }
  uint64_t capacity_bytes() const { return arena_bytes_; }
  // The allocation unit: an item takes its meta + payload bytes rounded up
  // to whole units of the arena.
  uint64_t unit_bytes() const { return uint64_t{1} << unit_shift_; }
  // Owner: the arena bytes reserved in /dev/shm so far (capacity_bytes()
  // without reserve_memory), and why the last step failed ("" if none).
  uint64_t reserved_bytes() const { return reserved_bytes_; }
  const std::string& reserve_error() const { return reserve_error_; }
  // Owner: steps an insert reserved itself, under the owner's mutex, and
  // steps ReserveAhead reserved ahead of the inserts.
  uint64_t steps_reserved_inline() const { return steps_inline_; }
  uint64_t steps_reserved_ahead() const {
    return steps_ahead_.load(std::memory_order_relaxed);
  }

  // Reserving ahead (the store's planner thread). A step's posix_fallocate
  // takes about 35 ms per 128 MiB here; an insert that had to reserve its
  // own step held the owner's mutex, and the batch it belongs to, that long.
  struct ArenaRange {
    uint64_t from = 0;
    uint64_t to = 0;  // from == to: nothing to do
  };
  // Owner, under the owner's mutex: the arena's next step, when less than
  // half a step of the reserved arena is free and the step is not reserved
  // ahead yet; an empty range otherwise.
  ArenaRange StepToReserveAhead() const;
  // Owner, one thread at a time, without the owner's mutex: reserves the
  // range in /dev/shm, so that the insert that needs it only grows the
  // allocator over it. A failure is left for that insert to meet.
  void ReserveAhead(const ArenaRange& range);
  // True in the process that created the tier (false in forked children).
  bool IsOwner() const;

  // ---- owner

  // Reserves room for an item and marks it "filling"; readers see it as not
  // resident until CommitInsert. The bytes are written through *pending,
  // possibly without the owner's mutex (an io_uring read straight into the
  // arena). Returns NoSpace when no free block fits (evict, then retry),
  // InvalidArgument when id is resident or filling, or sizes exceed the
  // limits, OutOfRange for id >= num_items().
  // REQUIRES: owner process, owner's mutex held.
  Status BeginInsert(ItemId id, uint64_t meta_size, uint64_t payload_size, PendingInsert* pending);
  // Publishes the item. Wakes readers waiting on it.
  // REQUIRES: owner, owner's mutex held, every byte of *pending written.
  Status CommitInsert(const PendingInsert& pending);
  // Gives the space back; the item stays absent. Wakes waiting readers,
  // which see NotFound.
  // REQUIRES: owner, owner's mutex held.
  Status AbortInsert(const PendingInsert& pending);
  // BeginInsert + two copies + CommitInsert.
  // REQUIRES: owner, owner's mutex held.
  Status Insert(ItemId id, const void* meta, uint64_t meta_size, const void* payload,
                uint64_t payload_size);
  // Makes the item absent (readers racing with it retry or miss), then frees
  // its space. Returns NotFound when it is not resident.
  // REQUIRES: owner, owner's mutex held.
  Status Evict(ItemId id);
  // Answers readers blocked in Wait() on an absent item: "it will not come
  // (from me)". Bumps its generation and wakes them; they get NotFound.
  // REQUIRES: owner, owner's mutex held.
  Status AnswerAbsent(ItemId id);

  // ---- readers (any thread, any process)

  // True when the item is resident now. Counts nothing.
  bool Contains(ItemId id) const;
  // Reads the sizes of the resident version of id. Returns NotFound (a miss;
  // info->version is still set, for Wait) or OutOfRange.
  Status Peek(ItemId id, ItemInfo* info);
  // Copies the version that Peek saw into the destinations, then validates.
  // Returns OK (a hit: the bytes are exactly that version's), Busy when the
  // item was replaced by another version meanwhile (Peek again: sizes may
  // differ), NotFound when it is no longer resident (a miss). On Busy and
  // NotFound the destinations hold garbage.
  // REQUIRES: destinations of info.meta_size and info.payload_size bytes;
  // or payload_dst nullptr and `pieces_of` a sink whose pieces() take the
  // payload (see read_sink.h).
  Status CopyOut(const ItemInfo& info, void* meta_dst, void* payload_dst,
                 const ReadSink* pieces_of = nullptr);
  // Peek + sink->Prepare + CopyOut, retried while the item changes under
  // the copy: one copy into the sink's memory per attempt. Returns OK,
  // NotFound, OutOfRange, the sink's error, or Busy after kMaxReadAttempts.
  Status Read(ItemId id, ReadSink* sink);

  // Cache hints for a reader that knows which ids come next (the Store
  // follows the plan). A Read pays two dependent cache misses, the entry and
  // then the arena at the offset the entry holds; with 4 KiB pages (shmem
  // huge pages are usually off) each may add a TLB walk. Calling
  // PrefetchEntry(id) ~16 reads ahead and PrefetchData(id) ~8 reads ahead
  // overlaps them with earlier reads: a random 64-byte read drops from
  // 250-420 ns to 50-100 ns on the 2-core VM (bench/RAM.md). No effect on
  // results; PrefetchData reads the entry (so it should be cached by then)
  // and touches nothing else.
  void PrefetchEntry(ItemId id) const;
  void PrefetchData(ItemId id) const;
  // The item's current version word (for Wait).
  uint64_t Version(ItemId id) const;
  // True when a version (from Peek or Version) says an insert is under way:
  // Wait() on it rather than loading the item elsewhere.
  static bool IsFilling(uint64_t version) { return (version & 3) == 2; }
  // Blocks until the item's version differs from `observed` and the item is
  // not "filling", or returns at once if `observed` is its current version
  // and a resident one. Returns OK when it is resident, NotFound when the owner
  // evicted it or answered AnswerAbsent, Busy when timeout_ms passed
  // (timeout_ms < 0: no limit), IOError when the owner process died or
  // destroyed its RamTier, or when `putter` (the process whose Put would
  // bring the item, if known) is gone: it is looked up every 20 ms.
  // A worker that asks the owner for an item reads Version() (or Peek's
  // info.version) first, sends the request, then waits on that version.
  Status Wait(ItemId id, uint64_t observed, int64_t timeout_ms,
              const shm::ProcessIdentity* putter = nullptr);

  // Maps every page of the arena and the table into this process now
  // (MADV_POPULATE_READ), instead of one minor fault per 64 KiB on first
  // read: a fresh mapping (Attach, or a forked child, which inherits no page
  // tables for shared memory) reads at about half speed until its pages are
  // mapped. Costs about 2 MiB of page tables per GiB in this process, and
  // the time to map them. Returns NotSupported before Linux 5.14.
  Status MapAllPages();

  // Sums every process slot. In the owner it also refreshes the largest
  // free block that other processes see, from the allocator: there it is
  // an owner method (REQUIRES the owner's mutex); in a reader, any thread.
  RamTierStats Stats();

  // Test hook: called in CopyOut after the payload is copied, before the
  // meta is copied and the version checked again. A test evicts and reuses
  // the space there: the payload copy is then stale and the meta copy torn,
  // and CopyOut must discard both. nullptr turns it off. Not for production.
  using CopyHook = void (*)(void* arg, const ItemInfo& info);
  void SetCopyHookForTesting(CopyHook hook, void* arg) {
    copy_hook_arg_ = arg;
    copy_hook_ = hook;
  }

 private:
  struct Header;
  struct Entry;
  struct StatsSlot;

  explicit RamTier(std::unique_ptr<SharedSegment> segment);
  // Points the members into the segment; `create`: also set up the owner's side.
  Status InitLayout(bool create);
  Status CheckOwner(ItemId id, const char* op) const;
  StatsSlot* Slot();
  StatsSlot* ClaimSlot();
  // Stores a new state word for id and wakes waiters the old one had.
  void Publish(Entry* e, uint64_t word);
  void PublishGauges();
  // Owner: reserves the arena's next step and grows the allocator over it;
  // false when all is reserved or a step failed (reserve_error_).
  bool ReserveStep();

  std::unique_ptr<SharedSegment> segment_;
  Header* header_ = nullptr;
  Entry* table_ = nullptr;
  StatsSlot* slots_ = nullptr;
  char* arena_ = nullptr;
  uint64_t num_items_ = 0;
  uint64_t arena_bytes_ = 0;
  uint64_t arena_offset_ = 0;  // in the segment's data
  uint32_t unit_shift_ = 6;
  shm::ProcessIdentity owner_;   // from the header
  int32_t owner_local_pid_ = 0;  // getpid() of the creator; 0 in Attach()ed handles

  // This process's stats slot, claimed lazily and again after fork.
  std::atomic<StatsSlot*> slot_{nullptr};
  std::atomic<uint32_t> slot_fork_generation_{0};

  // Owner-private state (meaningful only in the owner process), guarded by
  // the owner's mutex (held by the caller; see the REQUIRES above).
  std::unique_ptr<ArenaAllocator> allocator_;
  std::vector<ArenaAllocator::Handle> handles_;  // per id; kNoHandle when absent
  uint64_t items_resident_ = 0;
  uint64_t bytes_stored_ = 0;
  uint64_t bytes_used_peak_ = 0;
  uint64_t reserved_bytes_ = 0;  // of the arena, from its start
  uint64_t reserve_step_bytes_ = 0;
  std::string reserve_error_;
  uint64_t steps_inline_ = 0;
  // Arena bytes from its start reserved in /dev/shm: reserved_bytes_ and
  // what ReserveAhead added past it. Written without the owner's mutex.
  std::atomic<uint64_t> prepared_bytes_{0};
  std::atomic<uint64_t> steps_ahead_{0};
  std::atomic<bool> ahead_failed_{false};

  CopyHook copy_hook_ = nullptr;
  void* copy_hook_arg_ = nullptr;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_RAM_TIER_H_

// Store: the two-tier cache of decoded training samples.
//
//   RAM tier   a byte budget in ONE shared-memory segment: the process that
//              opened the store (the owner) and its DataLoader workers,
//              forked or spawned, read one copy.
//   disk tier  a RocksDB index + append-only segment files under `path`,
//              read in batches through io_uring; persistent across runs.
//   source     the caller's own loader: a Get that finds nothing returns
//              NotFound, the caller loads the sample and Puts it.
//
// The plan (the sampler's order, known in advance) steers everything; values
// are always found BY ID, so an access the plan did not predict (drift)
// still returns the right bytes: it is only counted.
//
// Read path of Get(position, id):
//   1. RAM tier: a seqlock copy straight into the caller's ReadSink. An item
//      the prefetcher is filling is waited for, not loaded again.
//   2. disk tier: in the owner, a direct read; in a worker, a fetch request
//      to the owner on a shared queue, then a wait on the item's state word
//      (workers never touch RocksDB or a ring: they do not survive fork).
//   3. NotFound: the caller loads from its source and calls Put(). Except
//      when the policy holds the item and another reader is loading it (a
//      read a few positions earlier, in another worker): then the reader
//      waits for that Put (up to 2 s) rather than loading it a second time.
// Every Get with a position marks that position consumed; the lowest
// unconsumed position is the readers' frontier.
//
// The owner's planner thread walks the plan ahead of the frontier (up to
// prefetch_depth positions) and runs the eviction policy (Belady's OPT by
// default) over it, exactly as the simulator does: the RAM tier holds the
// policy's resident set plus the items the readers between the frontier
// and the planner still need. A victim leaves RAM once no position in that
// span reads it, so readers that lag the planner never lose an item the
// policy promised them. Items the plan reads soon that sit on the disk tier
// are read into RAM ahead of the readers (prefetch). So with a capacity in
// items, uniform sizes, no disk tier and one reader, the store's hits equal
// the offline OPT's hits on the same plan.
//
// Every Put is written through to the disk tier while its budget allows,
// so that a restart finds what an earlier run loaded; past it, the disk
// tier runs OPT with bypass over the reads RAM will not serve (it evicts
// the item read furthest in the future, never-read-again first, or leaves
// the Put out when it is read no sooner: disk_bypasses). A full disk does
// not stop the store: it keeps serving from RAM and logs one warning.
//
// Values are immutable per id: a Put for an id that a tier already holds
// does not replace it there. Cache deterministic samples (decoded, resized),
// not randomly augmented ones.
//
// Processes. The process that calls Open() is the owner: it alone opens the
// disk tier (dir/LOCK: a second process that opens the store for writing
// gets Busy) and runs the planner thread. A child forked from the owner may
// use the inherited Store as a reader; a spawned process calls Attach() with
// handle(). Readers call Get, Put (sent to the owner on the shared queue;
// dropped, and counted, when the queue is full), MarkConsumed and Stats.
// An owner with a disk tier names itself in path/OWNER while it has the
// store open, so that `opt4store stats` can look on (live_store.h).
//
// Thread safety: every method may be called from any thread of the owner or
// of a reader process, unless it says otherwise. Process safety: readers in
// any number of processes; a reader killed at any point blocks nobody (see
// ram_tier.h and shared_queue.h). Close() and the destructor REQUIRE that no
// other call on this Store is in progress.
#ifndef OPT4STORE_STORE_H_
#define OPT4STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/read_sink.h"
#include "opt4store/status.h"
#include "opt4store/store_options.h"
#include "opt4store/store_stats.h"

namespace opt4store {

class Env;

// A Get or Put without a position in the plan (an admin read, an import).
constexpr uint64_t kNoPosition = UINT64_MAX;

// Where a Get found its value.
enum class GetSource : uint8_t {
  kRam,   // the RAM tier (also when the prefetcher brought it from disk)
  kDisk,  // read from the disk tier on demand
  kMiss,  // nowhere: load from the source and Put
};

// A description of the store for `opt4store inspect`.
struct StoreInfo {
  std::string path;
  StoreSettings settings;  // what the store runs with (its manifest's)
  std::string plan;  // PlanSpec::Describe(), or "" without a plan
  uint64_t cursor_position = 0;
  uint64_t cursor_epoch = 0;
  std::string cursor_plan;  // the plan the cursor belongs to
  struct Segment {
    std::string name;
    uint64_t file_bytes = 0;
    uint64_t live_bytes = 0;
  };
  std::vector<Segment> segments;
};

// What Verify found: each record that fails, with its reason.
struct StoreVerifyReport {
  uint64_t records_checked = 0;
  uint64_t bytes_checked = 0;
  uint64_t lost = 0;  // of bad: records an open dropped (segment deleted or cut short)
  uint64_t orphaned = 0;  // of bad: valid records newer than the indexed version of their id
  struct Bad {
    ItemId id = 0;
    std::string where;  // segment file and offset
    Status status;
  };
  std::vector<Bad> bad;
};

// What Repair did.
struct StoreRepairReport {
  uint64_t segments = 0;        // segment files scanned
  uint64_t records = 0;         // records indexed: the newest valid one of each id
  uint64_t older_versions = 0;  // valid records replaced by a newer one of the same id
  uint64_t damaged_bytes = 0;   // segment bytes in no valid record
  std::vector<ItemId> lost;     // ids the old index knew that no segment holds
  std::string index_salvage;    // what failed while salvaging the old index ("" if nothing)
  bool manifest_found = false;  // the settings, plan and cursor survived in the old index
  bool index_rebuilt = false;   // the rest of the report holds (even when Repair failed after)
  ItemId largest_id = 0;        // the largest id indexed (with records > 0)
};

class Store {
 public:
  // Opens (or creates) the store at `path` and becomes its owner. Returns
  // OK; Busy when another process has it open (the message names it);
  // InvalidArgument for options that contradict each other or the manifest
  // (each named, with both values); NoSpace when /dev/shm cannot hold the
  // RAM tier (the message names the size needed and the space free);
  // NotFound without create_if_missing; Corruption; IOError.
  static Status Open(const StoreOptions& options, const std::string& path,
                     std::unique_ptr<Store>* store);

  // Rebuilds the disk tier's index from its segment files, for a store whose
  // Open fails with Corruption naming `opt4store repair`, or whose Verify
  // lists records lost at an open (see tiers/disk_tier.h, DiskTier::Repair).
  // The manifest lives beside the index: what RocksDB can salvage of it is
  // kept. When it is gone, options.dataset_size and options.disk write a new
  // one; without them Repair rebuilds the index all the same and returns
  // Corruption saying what to give. Given for a store whose manifest was
  // kept, they are not applied (the manifest's stand: a repair changes no
  // budget) and Repair returns InvalidArgument saying so; a dataset size
  // that does not hold an id the segments hold writes no manifest
  // (InvalidArgument, naming the id). report->index_rebuilt tells whether
  // the report holds, whatever Repair returns: its lost ids are known only
  // to this repair. Only the process that would own the store may repair
  // it: Busy while another has it open.
  // Returns: OK, NotFound (no store at path: neither index/ nor segments/),
  // Busy, InvalidArgument, Corruption, IOError.
  static Status Repair(const StoreOptions& options, const std::string& path,
                       StoreRepairReport* report);

  // Joins a store opened by another process as a reader (a spawned
  // DataLoader worker), by the owner's handle().
  static Status Attach(const std::string& handle, std::unique_ptr<Store>* store);
  // Attach, as a rank reader: a reader the owner's WaitForRankReaders waits
  // for until it closes (or its process is gone), such as another local
  // rank of a store the ranks of a host share. A child forked from a rank
  // reader is a plain reader. Busy when the store has
  // ControlBlock::kMaxRankReaders (64) live rank readers already.
  static Status AttachRankReader(const std::string& handle, std::unique_ptr<Store>* store);

  // Close(), ignoring its status.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The name a spawned process passes to Attach().
  std::string handle() const;
  // True in the process that opened the store (false in forked children and
  // attached readers).
  bool IsOwner() const;
  uint64_t dataset_size() const;

  // Reads id into *sink. `position` is the read's index in the plan
  // (kNoPosition for none); it is marked consumed. Returns OK (the sink
  // holds exactly the bytes that were Put), NotFound (a miss: load and
  // Put), OutOfRange (id >= dataset_size()), or the sink's error. A corrupt
  // disk record is a miss (and counted). *source, when given, says where
  // the value came from.
  Status Get(uint64_t position, ItemId id, ReadSink* sink, GetSource* source = nullptr);

  // Reads id, wherever the store holds it, to check what it holds: unlike
  // Get it counts no access, marks no position, waits for nothing and
  // leaves the RAM tier as it was. The disk tier is read in the owner only
  // (a reader gets NotFound for an item only there). Returns OK, NotFound,
  // OutOfRange, IOError, or the sink's error; a corrupt record is NotFound.
  Status Peek(ItemId id, ReadSink* sink, GetSource* source = nullptr);

  // Get for n reads. statuses[i] and sources[i] (sources may be null)
  // belong to the i-th read. The owner reads the disk-tier items of the
  // batch in one io_uring batch. The RAM hits of a batch of 4 or more are
  // copied on helper threads too: sinks[i] may be called from a thread
  // other than the caller's, at the same time as another read's sink, so
  // the sinks of a batch must not share state without a lock (read_sink.h).
  void GetBatch(const uint64_t* positions, const ItemId* ids, size_t n, ReadSink* const* sinks,
                Status* statuses, GetSource* sources = nullptr);

  // Stores a value loaded from the source for the read at `position`. The
  // RAM tier keeps it if the policy admitted it there (or a read the
  // planner has seen needs it); the disk tier keeps it while its budget
  // allows. Returns OK (also when a tier declined it: that is a cache's
  // choice), InvalidArgument (meta over kMaxMetaBytes), OutOfRange, or
  // IOError when the store is closed. In a reader process the value goes to
  // the owner on the shared queue; a full queue drops it (counted).
  Status Put(uint64_t position, ItemId id, std::string_view meta, std::string_view payload);

  // Where each of n ids is now, without reading it or counting an access:
  // kRam, kDisk or kMiss (sources[i] for ids[i]). In any process; a batch
  // loader asks it before handing the misses to its workers. Only a hint:
  // an item may move between this call and a Get (a Get is always right).
  void Locate(const ItemId* ids, size_t n, GetSource* sources);

  // Marks a position consumed without a Get (a reader that skips it: no
  // reader waits for a Put from it).
  void MarkConsumed(uint64_t position, ItemId id);
  // Whether a reader has read `position` (a Get or MarkConsumed there) or
  // the owner has passed it (it is behind the frontier). In any process; a
  // read a whole ring ahead of the frontier is not recorded (false).
  bool Consumed(uint64_t position) const;
  // The readers' frontier: the lowest plan position not yet consumed, as
  // the owner last published it (kNoPosition without a plan). Readers that
  // lost a read's position find it again near here.
  uint64_t Frontier() const;
  // The sampler began handing out an epoch at plan `position`: positions
  // before it that are still unread will not be read now (drop_last's
  // tail): the frontier passes them at once (called in the owner, before
  // BeginEpoch returns; elsewhere at the owner's next planner turn), and
  // reads that lost their position look for it from here on.
  void BeginEpoch(uint64_t position);
  // Where such reads look: the later of Frontier() and the last BeginEpoch
  // position (kNoPosition without a plan).
  uint64_t ReadingFrom() const;
  // True for the first call with `kind` (0 to 63) among all the processes
  // of this store (owner, readers, DataLoader workers), so that a warning
  // is issued once per store rather than once per worker. Kinds 0 to 31
  // are the engine's own (see store_impl.h), 32 to 63 its callers'.
  bool FirstWarning(uint32_t kind);
  // Adds to the peer counters of Stats() (peer_hits, peer_bytes_in,
  // peer_bytes_out): a cluster store's traffic with other hosts, which the
  // caller moves (the Python package's cluster code). No-op when closed.
  void CountPeerTraffic(uint64_t hits, uint64_t bytes_in, uint64_t bytes_out);
  // Waits until the owner has acted on every Put that any process (a
  // DataLoader worker) sent before this call, so that Locate sees those
  // values. In any process. OK at once without a queue (no readers) or
  // once the owner closed or its process is gone; Busy when timeout_ms ran
  // out first.
  Status WaitForPuts(int64_t timeout_ms);

  // ---- Owner only (InvalidArgument in a reader).

  // Replaces the plan: the readers start at `start_position` of the new one.
  // The RAM tier keeps what the new plan's policy would keep of it, had the
  // policy just read each item it holds (with opt: those the new plan reads
  // soonest, within the budget; those it never reads again leave). So a
  // rollback to a checkpoint, or a new sampler mid-run, in the same process
  // finds the items RAM already holds (what the old plan still had to
  // read: at a plan's end RAM holds nothing, and the disk tier carries
  // values over). The disk tier keeps everything. The plan's
  // dataset size must match (InvalidArgument).
  Status SetPlan(const PlanSpec& plan, uint64_t start_position = 0);
  // Appends the next whole epochs of an open explicit plan (PlanSpec::
  // total_epochs), which the current plan must be: the RAM tier and the
  // policy carry on, and ids whose next read the new epochs hold are ranked
  // by it from now on. Returns InvalidArgument (no open plan, not whole
  // epochs, past the plan's end) or OutOfRange (an id); then nothing
  // changed. Append each epoch before the readers reach it, or they read
  // unplanned positions; one epoch past the current one keeps OPT exact
  // for permutation epochs (next_use.h).
  Status AppendPlan(std::vector<ItemId> ids);
  // The cursor saved for the current plan: at open, the one the last run's
  // Flush or Close saved when it belongs to the same plan and the readers
  // had not finished it (else 0), which is where the planner starts; later,
  // what this run's last Flush saved. Readers should start there (or call
  // SetPlan with their start): positions behind the planner are served, but
  // not planned or prefetched.
  uint64_t ResumePosition() const;
  // Saves the cursor (the readers' frontier) and makes every earlier Put
  // durable per the sync mode.
  Status Flush();
  // Rewrites sparse disk segments. Returns OK, NoSpace, IOError.
  Status Compact();
  // Re-reads and checks every disk record, and lists the records an open
  // had to drop. Returns Corruption when any failed or was lost (listed in
  // *report).
  Status Verify(StoreVerifyReport* report);
  Status Inspect(StoreInfo* info);

  // Returns once `expected` rank readers (AttachRankReader) have attached,
  // in all, and each has closed or its process is gone, so that what they
  // read and Put is in this store's tiers and stats when Close follows.
  // Busy, saying who is missing (pids), when timeout_ms (negative: no
  // limit) passed in which no rank reader attached or left and no read
  // moved on: a reader still reading keeps the wait going. The planner
  // serves them meanwhile. A rank reader that fails before it attaches
  // holds the wait to its timeout.
  Status WaitForRankReaders(uint32_t expected, int64_t timeout_ms);
  // Flushes, stops the planner, saves the cursor and releases the disk
  // tier and shared memory. Later calls return IOError. In a reader it
  // detaches. Idempotent. Readers stop waiting for the owner once it has
  // taken the last queued Puts, before its disk tier syncs and closes.
  Status Close();

  // In any process: totals across every process (reader counters) plus the
  // owner's gauges as the owner last published them. After Close(), what an
  // admin open of the store shows: the counters as they stood at close,
  // the disk tier's gauges then, and last_run set.
  StoreStats Stats();

 private:
  class Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace opt4store

#endif  // OPT4STORE_STORE_H_

// StoreStats: the store's counters and gauges, listed once.
//
// OPT4STORE_STORE_STATS(X) has one row per field:
//   X(group, type, name, kind, help)
// and every place that shows the stats is made from it: the StoreStats
// struct below, Python's Store.stats() (bindings/core_module.cc), the CLI's
// `stats` table and JSON (tools/store_admin.cc), and the field list in the
// README, which tests/python/test_stats.py checks against this table. A
// field has the same name in C++, Python, the CLI and the docs. Adding a
// counter takes a row here, the code that counts it, and a test.
//
// kind says how a value is shown: kCount a whole number, kBytes a size,
// kNanos a duration, kReal a number with decimals, kFlag yes or no.
//
// Counters of reads are totals over every process that used the store. The
// owner saves them (and the planner's and the peers') when it closes; an admin open (the
// CLI) shows that last run's, with last_run set. While a process owns the
// store, every process of its run and `opt4store stats` (live_store.h) show
// live with the owner's pid.
#ifndef OPT4STORE_STORE_STATS_H_
#define OPT4STORE_STORE_STATS_H_

#include <cstdint>

#define OPT4STORE_STORE_STATS(X)                                                                   \
  X(owner, bool, live, kFlag,                                                                      \
    "a process has the store open: the counters are its run's, now")                               \
  X(owner, uint64_t, owner_pid, kCount,                                                            \
    "that process's pid; 0 when the store is not open")                                            \
  X(reads, bool, last_run, kFlag,                                                                  \
    "the store is not open: reads, planner and peer counters and write amplification are its "    \
    "last run's, saved at close")                                                                  \
  X(reads, uint64_t, accesses, kCount, "Gets")                                                     \
  X(reads, uint64_t, hits_ram, kCount, "served from the RAM tier")                                 \
  X(reads, uint64_t, hits_disk, kCount, "served by an on-demand disk read")                        \
  X(reads, uint64_t, hits_disk_bytes, kBytes, "meta + payload bytes of those reads")               \
  X(reads, uint64_t, hits_disk_direct, kCount,                                                     \
    "hits_disk a reader process read from the segment files itself, without the owner")           \
  X(reads, uint64_t, source_loads, kCount, "found nowhere: the caller loaded from its source")     \
  X(reads, uint64_t, puts, kCount, "Puts")                                                         \
  X(reads, uint64_t, puts_dropped, kCount, "reader Puts lost to a full queue")                     \
  X(reads, uint64_t, drift, kCount, "positioned Gets whose id differs from the plan's")            \
  X(reads, uint64_t, waits, kCount, "Gets that waited for an item in flight")                      \
  X(reads, uint64_t, wait_ns, kNanos, "time those waits took")                                     \
  X(reads, uint64_t, fetch_requests, kCount, "reader requests for disk items")                     \
  X(reads, uint64_t, fetch_timeouts, kCount, "fetch requests not served in time")                  \
  X(reads, uint64_t, expect_waits, kCount,                                                         \
    "misses that waited for another reader's Put of the item, or its way through the disk tier")  \
  X(reads, uint64_t, plan_waits, kCount,                                                           \
    "misses that waited for the owner to plan their position")                                     \
  X(reads, uint64_t, expect_timeouts, kCount,                                                      \
    "expect_waits and plan_waits that gave up after 2 s")                                          \
  X(planner, uint64_t, prefetched, kCount, "disk -> RAM reads ahead of the readers")               \
  X(planner, uint64_t, prefetch_bytes, kBytes, "bytes of those reads")                             \
  X(planner, uint64_t, planned_positions, kCount, "positions the policy has stepped")              \
  X(planner, uint64_t, policy_hits, kCount, "the policy's hits on them")                           \
  X(planner, uint64_t, ram_insert_failures, kCount,                                                \
    "no room in the arena (fragmentation, or a /dev/shm filled by another program)")               \
  X(planner, uint64_t, disk_put_errors, kCount, "writes the disk tier refused (full disk)")        \
  X(planner, uint64_t, abandoned_positions, kCount,                                                \
    "positions passed unread: skipped, or left behind")                                            \
  X(peers, uint64_t, peer_hits, kCount, "values other hosts sent that reached this store")         \
  X(peers, uint64_t, peer_bytes_in, kBytes, "bytes of values received from other hosts")           \
  X(peers, uint64_t, peer_bytes_out, kBytes, "bytes of values sent to other hosts")                \
  X(cursor, uint64_t, epoch, kCount, "the readers' frontier: its epoch")                           \
  X(cursor, uint64_t, position, kCount, "the readers' frontier: its position in the plan")         \
  X(cursor, uint64_t, total_positions, kCount, "positions in the plan; 0 without a plan")          \
  X(ram, uint64_t, ram_items, kCount, "items in the RAM tier")                                     \
  X(ram, uint64_t, ram_bytes_used, kBytes, "meta + payload bytes of those items")                  \
  X(ram, uint64_t, ram_bytes_peak, kBytes,                                                         \
    "the most arena bytes held at once (whole units, staging and filling items included)")        \
  X(ram, uint64_t, ram_capacity, kCount, "the policy's capacity: ram - staging, or ram_items")    \
  X(ram, bool, ram_capacity_in_items, kFlag, "ram_capacity counts items, not bytes")               \
  X(ram, uint64_t, ram_arena_bytes, kBytes, "as mapped: ram (staging inside); address space "     \
    "with ram_items")                                                                             \
  X(ram, uint64_t, ram_bytes_per_item, kCount,                                                     \
    "fixed RAM per dataset id: shared table + owner state")                                        \
  X(disk, uint64_t, disk_items, kCount, "items in the disk tier")                                  \
  X(disk, uint64_t, disk_live_bytes, kBytes, "live bytes of those items")                          \
  X(disk, uint64_t, disk_file_bytes, kBytes, "bytes of the segment files")                         \
  X(disk, uint64_t, disk_budget, kBytes, "the disk tier's budget (the disk setting)")         \
  X(disk, uint64_t, disk_segments, kCount, "segment files")                                        \
  X(disk, double, disk_write_amplification, kReal, "bytes written / bytes of records put")       \
  X(disk, double, disk_space_amplification, kReal, "file bytes / live bytes")                      \
  X(disk, uint64_t, disk_corrupt_records, kCount, "records whose CRC failed")                      \
  X(disk, uint64_t, disk_evictions, kCount, "items evicted to keep the budget")                    \
  X(disk, uint64_t, disk_bypasses, kCount,                                                          \
    "Puts left out: every item on disk is read sooner")                                            \
  X(disk, uint64_t, disk_compactions, kCount, "segments compacted")                                \
  X(disk, double, disk_index_bytes_per_item, kReal, "RAM of the disk index per item")              \
  X(disk, bool, io_uring, kFlag, "disk reads go through io_uring")                                 \
  X(disk, bool, direct_io, kFlag, "disk reads bypass the page cache (O_DIRECT)")

namespace opt4store {

// How a field is shown (see above).
enum class StatKind { kCount, kBytes, kNanos, kReal, kFlag };

// One row of the table, for code that shows every field.
struct StatField {
  const char* group;  // owner, reads, planner, cursor, ram, disk
  const char* name;
  StatKind kind;
  const char* help;
};

struct StoreStats {
#define OPT4STORE_DECLARE_STAT(group, type, name, kind, help) type name{};
  OPT4STORE_STORE_STATS(OPT4STORE_DECLARE_STAT)
#undef OPT4STORE_DECLARE_STAT
};

// Calls visit(const StatField&, value) for every field, in table order;
// value is the field itself (uint64_t, double or bool).
template <typename Visitor>
void VisitStats(const StoreStats& stats, Visitor&& visit) {
#define OPT4STORE_VISIT_STAT(group, type, name, kind, help) \
  visit(StatField{#group, #name, StatKind::kind, help}, stats.name);
  OPT4STORE_STORE_STATS(OPT4STORE_VISIT_STAT)
#undef OPT4STORE_VISIT_STAT
}

}  // namespace opt4store

#endif  // OPT4STORE_STORE_STATS_H_

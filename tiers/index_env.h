// IndexEnv: the rocksdb::Env that the disk tier's index runs with.
//
// It is Env::Default() for files, clocks and everything else, but it runs
// RocksDB's background jobs (memtable flushes, compactions) on thread pools
// that the calling process started. Env::Default()'s pools are process-wide
// and started once: a process forked after the parent opened an index (a
// DDP rank or a notebook's child that opens a store of its own) inherits
// the pools without their threads, so a job queued there never runs and a
// flush (at Close, or when a memtable fills) waits forever. IndexEnv starts
// new pools in each process that schedules a job, and leaves an inherited
// parent's pools alone (they have no threads to join here).
//
// Once a process runs an index, its forked children leave exit() by
// _exit after flushing stdio (index_env.cc says why: RocksDB's static timer
// would hang them).
//
// Thread safety: any thread, any process. Jobs still queued when their DB
// closes are not taken back (UnSchedule removes none): each runs, sees the
// DB shutting down, and returns, as RocksDB's own close waits for.
#ifndef OPT4STORE_TIERS_INDEX_ENV_H_
#define OPT4STORE_TIERS_INDEX_ENV_H_

#include <rocksdb/env.h>

namespace opt4store {

// The one IndexEnv of this program; never destroyed.
rocksdb::Env* IndexEnv();

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_INDEX_ENV_H_

// LiveStore: a read-only look at a store that another process owns and is
// using (a training job), for `opt4store stats` and `opt4store inspect`.
//
// The owner of a store with a disk tier writes dir/OWNER as it opens (its
// pid and start time, and its control block's shared-memory name) and
// removes it as it closes. LiveStore::Open trusts that file only while
// that process runs with that start time (a recycled pid is not the owner)
// and while the control block it names says the same creator and that the
// owner has not closed; then it maps the control block and the RAM tier
// read-only (PROT_READ). Inspect adds what the disk index holds, read
// through a RocksDB secondary instance (tiers/disk_tier_view.h). Nothing
// here takes dir/LOCK or writes under dir or to the owner's shared memory.
//
// A store that no live process owns (closed, or its owner killed: kill -9
// leaves OWNER behind) is NotFound here: open it with Store::Open, and its
// Stats() show the last run's counters (last_run).
//
// Thread safety: const methods may be called from any thread.
#ifndef OPT4STORE_LIVE_STORE_H_
#define OPT4STORE_LIVE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "opt4store/status.h"
#include "opt4store/store.h"
#include "opt4store/store_stats.h"

namespace opt4store {

class LiveStore {
 public:
  // Returns: OK; NotFound when no live process owns the store at path (no
  // OWNER file, its process is gone, or it is closing); Corruption when the
  // owner's control block is not one this version reads (another build).
  static Status Open(const std::string& path, std::unique_ptr<LiveStore>* out);

  ~LiveStore();
  LiveStore(const LiveStore&) = delete;
  LiveStore& operator=(const LiveStore&) = delete;

  // The owner's pid.
  int32_t owner_pid() const;

  // What Store::Stats() returns in any process of the owner's: the readers'
  // counters now, the owner's gauges as it last published them (every
  // 50 ms, and at each of its own Stats() calls). last_run is false.
  StoreStats Stats() const;

  // Store::Inspect as far as the disk index tells it: the manifest
  // (settings, fingerprint, the store's plan), the segment files, and the
  // cursor at the readers' live frontier (its plan: the one the owner last
  // saved a cursor for). Returns: OK, IOError, Corruption.
  Status Inspect(StoreInfo* info) const;

 private:
  class Impl;
  explicit LiveStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace opt4store

#endif  // OPT4STORE_LIVE_STORE_H_

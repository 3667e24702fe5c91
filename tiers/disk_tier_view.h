// DiskTierView: a look at a disk tier that another process has open (its
// owner holds dir/LOCK), for `opt4store inspect` on a store in use: the
// store's metadata (DiskTier::PutMeta keys) and the segment files.
//
// The index is opened as a RocksDB secondary instance (DB::OpenAsSecondary),
// the mode RocksDB supports beside a running primary; OpenForReadOnly is
// undefined while a primary writes. A secondary writes only to its own
// directory: here a fresh one under $TMPDIR (or /tmp), removed when the view
// closes, with RocksDB's info log discarded. Nothing under dir is created,
// changed or locked. The view is what the index held when it opened: a
// snapshot, not followed as the owner goes on.
//
// Thread safety: const methods may be called from any thread.
#ifndef OPT4STORE_TIERS_DISK_TIER_VIEW_H_
#define OPT4STORE_TIERS_DISK_TIER_VIEW_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/status.h"
#include "tiers/disk_tier.h"

namespace opt4store {

class DiskTierView {
 public:
  // Returns: OK, NotFound (no index under dir), IOError, Corruption.
  static Status Open(const std::string& dir, std::unique_ptr<DiskTierView>* out);

  ~DiskTierView();
  DiskTierView(const DiskTierView&) = delete;
  DiskTierView& operator=(const DiskTierView&) = delete;

  // DiskTier::GetMeta. Returns: OK, NotFound, IOError.
  Status GetMeta(std::string_view key, std::string* value) const;
  // The segment files, oldest first (the newest marked active): file_bytes
  // from the file's size now, live_bytes from the index's snapshot (a
  // record appended since, or not yet indexed, is not live here).
  // Returns: OK, IOError.
  Status Segments(std::vector<DiskSegmentInfo>* segments) const;

 private:
  class Impl;
  explicit DiskTierView(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_DISK_TIER_VIEW_H_

// The owner file: dir/OWNER tells another process which live process owns
// the store and where its control block is, so that `opt4store stats` and
// `inspect` can look at a store in use without its LOCK (live_store.h).
//
//   format=opt4store-owner 1
//   pid=<the owner's pid>
//   start_ticks=<its start time, /proc/<pid>/stat field 22; 0 unknown>
//   control_block=<the control block's shared-memory name>
//
// The owner writes it (to OWNER.tmp, then a rename, so that a reader never
// sees half of it) once its shared segments exist, and removes it as it
// closes, before it lets go of the LOCK. A kill -9 leaves it behind: a
// reader trusts it only while that pid runs with that start time, and the
// next owner replaces it. Not synced: shared memory does not outlive a
// reboot either.
#ifndef OPT4STORE_ENGINE_STORE_OWNER_FILE_H_
#define OPT4STORE_ENGINE_STORE_OWNER_FILE_H_

#include <cstdint>
#include <string>

#include "opt4store/status.h"

namespace opt4store {

constexpr char kOwnerFileName[] = "OWNER";

struct OwnerRecord {
  int32_t pid = 0;
  uint64_t start_ticks = 0;
  std::string control_block;
};

// Writes dir/OWNER for this process. Returns: OK, IOError.
Status WriteOwnerFile(const std::string& dir, const std::string& control_block);
// Removes dir/OWNER if this process wrote it. Returns: OK, IOError.
Status RemoveOwnerFile(const std::string& dir);
// Reads dir/OWNER. Returns: OK, NotFound (no file), Corruption (not one).
Status ReadOwnerFile(const std::string& dir, OwnerRecord* record);

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_STORE_OWNER_FILE_H_

// The process's limit on open files (RLIMIT_NOFILE), for a disk tier that
// keeps two descriptors per segment file while it is open (one for writes
// and buffered reads, one for O_DIRECT reads). A budget of 1 TiB in 64 MiB
// segments holds 16384 files: far above the soft limit of 1024 that many
// shells and services start with, while their hard limit is usually higher.
#ifndef OPT4STORE_ENGINE_BASE_FILE_LIMIT_H_
#define OPT4STORE_ENGINE_BASE_FILE_LIMIT_H_

#include <cstdint>

#include "opt4store/status.h"

namespace opt4store {

// Raises the soft limit on open files to `wanted` where it is lower, up to
// the hard limit; never lowers it. *limit: the soft limit afterwards.
// NoSpace (the resource is file descriptors) when the hard limit is below
// `wanted`, naming both and the remedy; the soft limit is raised to the hard
// one all the same.
Status RaiseOpenFileLimit(uint64_t wanted, uint64_t* limit);

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_BASE_FILE_LIMIT_H_

#include "engine/base/file_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <string>

namespace opt4store {

Status RaiseOpenFileLimit(uint64_t wanted, uint64_t* limit) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return Status::FromErrno("getrlimit(RLIMIT_NOFILE)", errno);
  const uint64_t hard = r.rlim_max == RLIM_INFINITY ? UINT64_MAX : r.rlim_max;
  uint64_t soft = r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : r.rlim_cur;
  if (soft < wanted) {
    const uint64_t raised = wanted < hard ? wanted : hard;
    if (raised > soft) {
      r.rlim_cur = raised;
      if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
        return Status::FromErrno("setrlimit(RLIMIT_NOFILE, " + std::to_string(raised) + ")",
                                 errno);
      }
      soft = raised;
    }
  }
  *limit = soft;
  if (soft >= wanted) return Status::OK();
  return Status::NoSpace("the limit on open files is " + std::to_string(soft) +
                         " (its hard limit), and this needs up to " + std::to_string(wanted) +
                         ": raise it (ulimit -n " + std::to_string(wanted) +
                         ", LimitNOFILE= for a systemd service, --ulimit nofile= for docker)");
}

}  // namespace opt4store

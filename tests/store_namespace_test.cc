// A store's processes look each other up by pid (the readers their owner,
// the owner its readers), so they must share a pid namespace. A process of
// another namespace (a container that shares /dev/shm, docker --ipc=host)
// that attaches by the owner's handle gets a clear InvalidArgument, instead
// of taking the owner for gone at its first wait and losing the sharing.
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "fork_child.h"
#include "opt4store/store.h"
#include "store_open_util.h"
#include "store_test_util.h"

namespace opt4store {
namespace {

using opt4store_test::ForkWaitingChild;
using opt4store_test::Go;
using opt4store_test::OpenStore;
using opt4store_test::Reap;
using opt4store_test::ScratchStore;
using opt4store_test::WaitingChild;

constexpr int kNoNamespace = 77;  // no pid namespace can be made here

TEST_CASE("Store: a process of another pid namespace cannot attach, and is told why",
          "[store][namespace]") {
  ScratchStore scratch;
  // Forked before the owner's threads start (fork_child.h). The child
  // enters a new pid and mount namespace (with a new user namespace where
  // that needs privileges); its child, pid 1 there with its own /proc
  // (mounts made private first), attaches with the owner's handle.
  WaitingChild child = ForkWaitingChild([](int, const std::string& handle) {
    const bool as_user = unshare(CLONE_NEWPID | CLONE_NEWNS) != 0;
    if (as_user && unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) != 0) return kNoNamespace;
    const pid_t reader = fork();
    if (reader < 0) return 2;
    if (reader == 0) {
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        _exit(kNoNamespace);
      }
      std::unique_ptr<Store> store;
      const Status s = Store::Attach(handle, &store);
      if (s.IsInvalidArgument() && s.message().find("another pid namespace") != std::string::npos &&
          s.message().find("--pid=host") != std::string::npos) {
        _exit(0);
      }
      // Unprivileged, the new user namespace may not open the segments at all.
      _exit(as_user && !s.ok() && !s.IsInvalidArgument() ? kNoNamespace : 3);
    }
    int status = 0;
    return waitpid(reader, &status, 0) == reader && WIFEXITED(status) ? WEXITSTATUS(status) : 4;
  });
  StoreOptions o;
  o.shm_prefix = scratch.prefix();
  o.ram_items = 16;
  o.dataset_size = 64;
  auto store = OpenStore(o, scratch.path());
  REQUIRE(Go(&child, store->handle()));
  const int status = Reap(child.pid);
  close(child.fd);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == kNoNamespace) {
    WARN("no pid namespace could be made here (unshare: no privilege, no user namespaces)");
  } else {
    CHECK(WEXITSTATUS(status) == 0);
  }
  // The owner is untouched: a reader of its own namespace attaches.
  std::unique_ptr<Store> here;
  REQUIRE(Store::Attach(store->handle(), &here).ok());
  REQUIRE(store->Close().ok());
}

}  // namespace
}  // namespace opt4store

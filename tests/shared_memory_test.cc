// SharedSegment's clean-up of dead creators' objects: an object left by a
// killed creator of this pid namespace is removed by the next creation with
// its prefix, and one made in another pid namespace (a container sharing
// /dev/shm) is left alone, though its creator's pid means nothing here.
#include "tiers/shared_memory.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "ram_tier_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

SharedSegmentOptions Options(const std::string& prefix) {
  SharedSegmentOptions o;
  o.prefix = prefix;
  return o;
}

bool ShmExists(const std::string& name) { return opt4store_test::FileExists("/dev/shm" + name); }

// The name of a segment that a child process created and leaked (as a
// kill -9 would). in_new_namespace: the creator is pid 1 of a new pid
// namespace with its own /proc, as in a container that shares /dev/shm
// (unshare(CLONE_NEWPID | CLONE_NEWNS), with a new user namespace where that
// needs privileges; the mounts are made private first, so that the new /proc
// stays in the new mount namespace); "" when no such namespace can be made here.
std::string LeakedSegmentName(const std::string& prefix, bool in_new_namespace) {
  return opt4store_test::NameFromChild([&](int fd) {
    auto none = [&] { return opt4store_test::SendName(fd, "") ? 0 : 2; };
    if (in_new_namespace && unshare(CLONE_NEWPID | CLONE_NEWNS) != 0 &&
        unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) != 0) {
      return none();
    }
    // A new pid namespace holds the caller's children, not the caller.
    const pid_t creator = in_new_namespace ? fork() : 0;
    if (creator < 0) return 3;
    if (creator == 0) {
      if (in_new_namespace &&
          (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
           mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)) {
        _exit(none());
      }
      std::unique_ptr<SharedSegment> segment;
      if (!SharedSegment::Create(Options(prefix), 4096, &segment).ok()) {
        _exit(in_new_namespace ? none() : 4);
      }
      if (!opt4store_test::SendName(fd, segment->name())) _exit(5);
      segment.release();  // no destructor: the name stays, as after kill -9
      _exit(0);
    }
    int status = 0;
    return waitpid(creator, &status, 0) == creator && WIFEXITED(status) ? WEXITSTATUS(status)
                                                                         : 6;
  });
}

TEST_CASE("SharedSegment: a dead creator's object is removed by the next creation",
          "[shared_memory]") {
  const std::string prefix = "o4s-test-shm-dead-" + std::to_string(getpid());
  const std::string left = LeakedSegmentName(prefix, /*in_new_namespace=*/false);
  REQUIRE(ShmExists(left));
  std::unique_ptr<SharedSegment> next;
  REQUIRE(SharedSegment::Create(Options(prefix), 4096, &next).ok());
  CHECK_FALSE(ShmExists(left));
  CHECK(ShmExists(next->name()));
}

TEST_CASE("SharedSegment: an object made in another pid namespace is never removed here",
          "[shared_memory]") {
  const std::string prefix = "o4s-test-shm-ns-" + std::to_string(getpid());
  const std::string other = LeakedSegmentName(prefix, /*in_new_namespace=*/true);
  if (other.empty()) {
    WARN("no pid namespace could be made here (unshare: no privilege, no user namespaces)");
    return;
  }
  // Its creator was pid 1 of its namespace, and is dead; here pid 1 is
  // another process, which started at another time.
  REQUIRE(other.find("." + std::to_string(1) + ".") != std::string::npos);
  REQUIRE(ShmExists(other));
  std::unique_ptr<SharedSegment> mine;
  REQUIRE(SharedSegment::Create(Options(prefix), 4096, &mine).ok());
  int removed = -1;
  REQUIRE(SharedSegment::RemoveStale("/dev/shm", prefix, &removed).ok());
  CHECK(removed == 0);
  CHECK(ShmExists(other));
  CHECK(ShmExists(mine->name()));
  shm_unlink(other.c_str());
}

}  // namespace
}  // namespace opt4store

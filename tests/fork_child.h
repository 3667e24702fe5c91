// fork_child.h: forking a child process inside a Catch2 test, with a pipe
// for its reports, and reaping it. Shared by the multiprocess tests.
//
// Header-only. Not thread-safe: fork from the test's own thread.
#ifndef OPT4STORE_TESTS_FORK_CHILD_H_
#define OPT4STORE_TESTS_FORK_CHILD_H_

#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <type_traits>

namespace opt4store_test {

struct Child {
  pid_t pid = -1;
  int fd = -1;  // the read end of the child's report pipe
};

// In a child just forked from parent: it is killed when parent ends. A
// child that outlived a failed test would keep the test's output pipe
// open, and ctest waits for that pipe: a CI run hung so for 80 minutes.
inline void DieWithParent(pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
}

// Forks; the child runs fn(write_fd) and leaves with _exit(fn's result, or 0
// when fn returns nothing): no destructors of the parent's objects, no Catch2.
// The child dies with the test process.
template <typename Fn>
Child ForkChild(Fn fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  Child c;
  c.pid = fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    DieWithParent(parent);
    close(fds[0]);
    if constexpr (std::is_void_v<decltype(fn(fds[1]))>) {
      fn(fds[1]);
      _exit(0);
    } else {
      _exit(fn(fds[1]));
    }
  }
  close(fds[1]);
  c.fd = fds[0];
  return c;
}

// Waits for the child to end; returns its wait status.
inline int Reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_FORK_CHILD_H_

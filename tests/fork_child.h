// fork_child.h: forking a child process inside a Catch2 test, with a pipe
// for its reports, and reaping it. Shared by the multiprocess tests.
//
// Header-only. Not thread-safe: fork from the test's own thread.
#ifndef OPT4STORE_TESTS_FORK_CHILD_H_
#define OPT4STORE_TESTS_FORK_CHILD_H_

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <type_traits>

namespace opt4store_test {

struct Child {
  pid_t pid = -1;
  int fd = -1;  // the read end of the child's report pipe
};

// Forks; the child runs fn(write_fd) and leaves with _exit(fn's result, or 0
// when fn returns nothing): no destructors of the parent's objects, no Catch2.
template <typename Fn>
Child ForkChild(Fn fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  Child c;
  c.pid = fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
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

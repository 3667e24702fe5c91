// fork_child.h: forking a child process inside a Catch2 test, with a pipe
// for its reports, and reaping it. Shared by the multiprocess tests.
//
// Fork early. A child forked while another thread of the test process runs
// (a Store's planner, RocksDB's threads, copy helpers) inherits every lock
// that thread held at that instant, for ever: under ASan a child hung so in
// its first allocation. ForkWaitingChild forks before those threads start
// and lets the child go later, with a message (a Store's handle() to
// Attach, a path). A test that must fork beside live threads says why.
//
// Header-only. Not thread-safe: fork from the test's own thread.
#ifndef OPT4STORE_TESTS_FORK_CHILD_H_
#define OPT4STORE_TESTS_FORK_CHILD_H_

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>
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

// A child forked before the parent starts its threads; it waits for Go().
struct WaitingChild : Child {
  int go_fd = -1;  // the parent's end of the child's go socket; -1 once sent
};

// Exit code of a waiting child whose parent never said Go (or died first).
constexpr int kExitNoGo = 124;

// Forks; the child blocks until the parent calls Go(message), then runs
// fn(write_fd, message) and leaves as a ForkChild child does (the exit code
// kExitNoGo when no message came). Call it before the parent opens a Store
// or anything else that runs threads.
template <typename Fn>
WaitingChild ForkWaitingChild(Fn fn) {
  // A socket, not a pipe: a Go() to a dead child fails with EPIPE, without
  // a SIGPIPE that would kill the test.
  int go[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, go) == 0);
  WaitingChild c;
  static_cast<Child&>(c) = ForkChild([&](int fd) {
    close(go[1]);
    // Length-prefixed: children forked later hold copies of the parent's
    // end, so the child cannot wait for EOF.
    uint32_t size = 0;
    std::string message;
    if (read(go[0], &size, sizeof size) != static_cast<ssize_t>(sizeof size)) _exit(kExitNoGo);
    message.resize(size);
    for (uint32_t got = 0; got < size;) {
      const ssize_t n = read(go[0], message.data() + got, size - got);
      if (n <= 0) _exit(kExitNoGo);
      got += static_cast<uint32_t>(n);
    }
    close(go[0]);
    return fn(fd, message);
  });
  close(go[0]);
  c.go_fd = go[1];
  return c;
}

// In the parent: lets c run with message (a short one: a handle, a path).
// False when the child cannot get it (it died).
inline bool Go(WaitingChild* c, const std::string& message = "") {
  // One send: the child may close its end as soon as it has the message,
  // and a second send (even of no bytes) would then fail.
  const uint32_t size = static_cast<uint32_t>(message.size());
  std::string packet(reinterpret_cast<const char*>(&size), sizeof size);
  packet += message;
  const bool sent = send(c->go_fd, packet.data(), packet.size(), MSG_NOSIGNAL) ==
                    static_cast<ssize_t>(packet.size());
  close(c->go_fd);
  c->go_fd = -1;
  return sent;
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

// A child's ReadTally, sent to its parent over the child's report pipe
// (fork_child.h): the child reads a store, the parent asserts.
#ifndef OPT4STORE_TESTS_TALLY_PIPE_H_
#define OPT4STORE_TESTS_TALLY_PIPE_H_

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstddef>

#include "fork_child.h"
#include "store_test_util.h"

namespace opt4store_test {

// In the child: writes t whole to fd, or leaves with exit code 3.
inline void SendTally(int fd, const ReadTally& t) {
  const char* p = reinterpret_cast<const char*>(&t);
  size_t left = sizeof t;
  while (left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(3);
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// In the parent: waits for a child that writes one ReadTally to its pipe,
// then exits 0.
inline ReadTally CollectTally(const Child& c) {
  ReadTally t;
  size_t got = 0;
  char* p = reinterpret_cast<char*>(&t);
  while (got < sizeof t) {
    const ssize_t n = read(c.fd, p + got, sizeof t - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(c.fd);
  const int status = Reap(c.pid);
  INFO("child: " << t.ToString() << ", wait status " << status);
  REQUIRE(got == sizeof t);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return t;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_TALLY_PIPE_H_

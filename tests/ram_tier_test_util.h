// For the RAM tier's and shared segments' tests: a fresh tier under a
// test's own shared-memory prefix, and the name of a segment a child process
// leaked.
#ifndef OPT4STORE_TESTS_RAM_TIER_TEST_UTIL_H_
#define OPT4STORE_TESTS_RAM_TIER_TEST_UTIL_H_

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fork_child.h"
#include "tiers/ram_tier.h"

namespace opt4store_test {

inline std::unique_ptr<opt4store::RamTier> MakeRamTier(uint64_t capacity, uint64_t items,
                                                       const std::string& prefix) {
  opt4store::RamTierOptions o;
  o.capacity_bytes = capacity;
  o.num_items = items;
  o.name_prefix = prefix;
  std::unique_ptr<opt4store::RamTier> t;
  opt4store::Status s = opt4store::RamTier::Create(o, &t);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return t;
}

// The length of a name sent by NameFromChild's child.
inline constexpr size_t kChildNameBytes = 256;

// Forks a child (fork_child.h's ForkChild) that runs `child` with the write
// end of its report pipe, to which it (or a process it forks) writes a
// segment's name in exactly kChildNameBytes bytes (NUL-padded) before
// leaving the segment behind, as a kill -9 would; the child's exit status
// is child's return. Returns that name once the child has exited with 0.
inline std::string NameFromChild(const std::function<int(int fd)>& child) {
  const Child c = ForkChild(child);
  char name[kChildNameBytes] = {0};
  REQUIRE(read(c.fd, name, sizeof name) == static_cast<ssize_t>(sizeof name));
  close(c.fd);
  const int status = Reap(c.pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return name;
}

// Sends `name` as NameFromChild's child must: false when the write fails.
inline bool SendName(int fd, const std::string& name) {
  char buf[kChildNameBytes] = {0};
  name.copy(buf, sizeof buf - 1);
  return write(fd, buf, sizeof buf) == static_cast<ssize_t>(sizeof buf);
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_RAM_TIER_TEST_UTIL_H_

// cli_test_util.h: running the real opt4store binary (OPT4STORE_CLI) from a
// test: its exit status, stdout and stderr, the arguments quoted for the
// shell, stderr through a file in the test's TempDir.
//
// Header-only. OPT4STORE_CLI is defined by tests/CMakeLists.txt.
#ifndef OPT4STORE_TESTS_CLI_TEST_UTIL_H_
#define OPT4STORE_TESTS_CLI_TEST_UTIL_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test_util.h"

namespace opt4store_test {

struct CliResult {
  int status = -1;  // the exit status; -1 when killed by a signal
  std::string out;  // stdout, byte for byte
  std::string err;
};

inline std::string Quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `opt4store args...` through the shell, stderr to a file in dir.
inline CliResult Cli(const TempDir& dir, const std::vector<std::string>& args) {
  const std::string err_path = dir.File("cli_stderr.txt");
  std::string cmd = Quoted(OPT4STORE_CLI);
  for (const std::string& a : args) cmd += " " + Quoted(a);
  cmd += " 2>" + Quoted(err_path);
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[1 << 14];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.err = ReadBytes(err_path);
  return r;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_CLI_TEST_UTIL_H_

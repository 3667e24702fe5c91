// store_cli_test_util.h: the store's CLI tests (store_cli_test.cc,
// store_clear_test.cc) on top of cli_test_util.h: a run that must succeed,
// a failure's message, a store made by `create`; a directory of files for
// `import`.
#ifndef OPT4STORE_TESTS_STORE_CLI_TEST_UTIL_H_
#define OPT4STORE_TESTS_STORE_CLI_TEST_UTIL_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "cli_test_util.h"
#include "test_util.h"

namespace opt4store_test {

// Runs and requires success; returns stdout.
inline std::string CliOk(const TempDir& dir, const std::vector<std::string>& args) {
  CliResult r = Cli(dir, args);
  INFO("args[0]: " << args[0] << "\nstdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  return r.out;
}

// A failure: non-zero exit and the CLI's error prefix on stderr.
inline void CheckFails(const CliResult& r) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status != 0);
  CHECK(r.status != -1);
  CHECK(r.err.find("opt4store: error: ") != std::string::npos);
}

// Deterministic bytes: every value 0..255 shows up for n >= 256.
inline std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(i < 256 ? (i + seed) & 0xFF : x >> 24);
  }
  return s;
}

// A store with room for n samples, created through the CLI.
inline std::string CreateStore(const TempDir& dir, uint64_t n, std::vector<std::string> extra = {}) {
  const std::string store = dir.File("store");
  std::vector<std::string> args = {"create", store,  "--dataset-size", std::to_string(n),
                                   "--ram",  "1MiB", "--disk",         "64MiB"};
  args.insert(args.end(), extra.begin(), extra.end());
  CliOk(dir, args);
  return store;
}

// Three files and what the importer must skip: a hidden file and a folder.
// Sorted by name: "a.txt" (id 0), "b.bin" (id 1), "c" (id 2).
inline std::vector<std::pair<std::string, std::string>> WriteInputDir(const TempDir& dir) {
  std::filesystem::create_directory(dir.File("in"));
  std::filesystem::create_directory(dir.File("in/sub"));
  const std::vector<std::pair<std::string, std::string>> files = {
      {"a.txt", "hello, store\n"}, {"b.bin", Bytes(3000, 1)}, {"c", Bytes(70000, 2)}};
  // Written out of order: ids follow names, not creation.
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    WriteBytes(dir.File("in/" + it->first), it->second);
  }
  WriteBytes(dir.File("in/.hidden"), "not a sample");
  WriteBytes(dir.File("in/sub/nested"), "not a sample either");
  return files;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_STORE_CLI_TEST_UTIL_H_

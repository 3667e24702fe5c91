// `opt4store repair` and `create` where a mistaken flag would cost data:
// the real binary (OPT4STORE_CLI) on stores in a scratch directory. A
// repair keeps the budget of a manifest it kept, writes no manifest whose
// dataset size leaves out ids the segments hold, shows what it rebuilt even
// when a later step fails, and makes no store out of a directory that holds
// none; create refuses a RAM tier of nothing.
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "json_test_util.h"
#include "store_cli_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::CheckFails;
using opt4store_test::Cli;
using opt4store_test::CliOk;
using opt4store_test::CliResult;
using opt4store_test::CreateStore;
using opt4store_test::Json;
using opt4store_test::ParseJson;
using opt4store_test::ReadBytes;
using opt4store_test::TempDir;
using opt4store_test::WriteInputDir;

// A store of 10 ids whose first three (0, 1, 2) hold WriteInputDir's files.
std::string FilledStore(const TempDir& dir) {
  const std::string store = CreateStore(dir, 10);
  WriteInputDir(dir);
  CliOk(dir, {"import", store, "--from", dir.File("in")});
  return store;
}

TEST_CASE("repair keeps a kept manifest's budget and says the flags given were not applied",
          "[store_cli][repair]") {
  TempDir dir;
  const std::string store = FilledStore(dir);
  const CliResult r = Cli(dir, {"repair", store, "--disk", "64KiB", "--dataset-size", "5"});
  CheckFails(r);
  CHECK(r.out.find("3 records indexed") != std::string::npos);  // the report, all the same
  CHECK(r.err.find("not applied") != std::string::npos);
  const Json json = ParseJson(CliOk(dir, {"inspect", store, "--json"}));
  CHECK(json.at("disk") == 64 << 20);
  CHECK(json.at("dataset_size") == 10);
  CHECK(CliOk(dir, {"verify", store}).find("3 records") != std::string::npos);
}

TEST_CASE("repair writes no manifest whose dataset size leaves out an id the segments hold",
          "[store_cli][repair]") {
  TempDir dir;
  const std::string store = FilledStore(dir);
  CliOk(dir, {"get", store, "2", "-o", dir.File("before.bin")});
  std::filesystem::remove_all(store + "/index");  // the manifest goes with it

  const CliResult small = Cli(dir, {"repair", store, "--dataset-size", "2", "--disk", "64MiB"});
  CheckFails(small);
  CHECK(small.out.find("3 records indexed") != std::string::npos);
  CHECK(small.err.find("hold id 2") != std::string::npos);
  CHECK(small.err.find("--dataset-size") != std::string::npos);

  CliOk(dir, {"repair", store, "--dataset-size", "10", "--disk", "64MiB"});
  CliOk(dir, {"get", store, "2", "-o", dir.File("after.bin")});
  CHECK(ReadBytes(dir.File("after.bin")) == ReadBytes(dir.File("before.bin")));
  CHECK(ParseJson(CliOk(dir, {"inspect", store, "--json"})).at("dataset_size") == 10);
}

TEST_CASE("repair makes no store out of a directory that holds none", "[store_cli][repair]") {
  TempDir dir;
  const std::string path = dir.File("plain");
  std::filesystem::create_directory(path);
  const CliResult r = Cli(dir, {"repair", path, "--dataset-size", "10", "--disk", "64MiB"});
  CheckFails(r);
  CHECK(r.err.find("no store at") != std::string::npos);
  CHECK(std::filesystem::is_empty(path));
  CliOk(dir, {"create", path, "--dataset-size", "10", "--disk", "64MiB"});  // still free for one
}

TEST_CASE("create refuses a RAM tier of nothing", "[store_cli]") {
  TempDir dir;
  for (const std::vector<std::string>& ram :
       {std::vector<std::string>{"--ram", "0"}, std::vector<std::string>{"--ram-items", "0"}}) {
    const std::string path = dir.File("store" + ram[0]);
    std::vector<std::string> args = {"create", path, "--dataset-size", "10", "--disk", "64MiB"};
    args.insert(args.end(), ram.begin(), ram.end());
    const CliResult r = Cli(dir, args);
    CheckFails(r);
    CHECK(r.err.find(ram[0] + ": must be more than 0") != std::string::npos);
    CHECK_FALSE(opt4store_test::FileExists(path));
  }
}

TEST_CASE("create refuses a disk tier below the smallest", "[store_cli]") {
  TempDir dir;
  const std::string path = dir.File("store");
  const CliResult r = Cli(dir, {"create", path, "--dataset-size", "10", "--disk", "1KiB"});
  CheckFails(r);
  CHECK(r.err.find("--disk: 1024 bytes is below the smallest disk tier, 32 KiB") !=
        std::string::npos);
  CHECK_FALSE(opt4store_test::FileExists(path));
  CliOk(dir, {"create", path, "--dataset-size", "10", "--disk", "32KiB"});
}

}  // namespace
}  // namespace opt4store

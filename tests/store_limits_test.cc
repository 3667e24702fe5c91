// Sizes at and past the limits, from users and from files (issue 15, point
// 7): checked arithmetic, a RAM budget no segment can hold refused with a
// clear message, value headers whose shape overflows, and the plan file
// that `create --plan` copies into the store.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/base/checked_math.h"
#include "engine/base/npy_header.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "opt4store/value.h"
#include "store_cli_test_util.h"
#include "test_util.h"

using namespace opt4store;
using opt4store_test::CheckFails;
using opt4store_test::Cli;
using opt4store_test::CliOk;
using opt4store_test::CliResult;
using opt4store_test::ReadBytes;
using opt4store_test::TempDir;
using opt4store_test::WriteBytes;

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

Status OpenExisting(const std::string& path, std::unique_ptr<Store>* store) {
  StoreOptions options;
  options.create_if_missing = false;
  return Store::Open(options, path, store);
}

}  // namespace

TEST_CASE("checked arithmetic refuses or saturates instead of wrapping", "[limits]") {
  uint64_t out = 7;
  CHECK(CheckedAdd(1, 2, &out));
  CHECK(out == 3);
  CHECK_FALSE(CheckedAdd(kMax, 1, &out));
  CHECK(out == 3);  // left alone
  CHECK(CheckedMul(uint64_t{1} << 32, uint64_t{1} << 31, &out));
  CHECK(out == uint64_t{1} << 63);
  CHECK_FALSE(CheckedMul(uint64_t{1} << 32, uint64_t{1} << 32, &out));
  CHECK(SaturatingMul(uint64_t{1} << 44, 4096) == uint64_t{1} << 56);
  CHECK(SaturatingMul(uint64_t{1} << 60, 4096) == kMax);  // statvfs of a huge /dev/shm
  CHECK(SaturatingAdd(kMax, 5) == kMax);
  CHECK(CheckedRoundUp(4097, 4096, &out));
  CHECK(out == 8192);
  CHECK_FALSE(CheckedRoundUp(kMax, 4096, &out));
}

TEST_CASE("a value header whose shape overflows 64 bits is Corruption", "[limits]") {
  ValueHeader h;
  REQUIRE(ParseDType("float32", &h.dtype).ok());
  h.tag = 1;
  h.shape = {int64_t{1} << 40, int64_t{1} << 30};  // 2^70 elements
  ValueHeader back;
  Status s = DecodeValueHeader(EncodeValueHeader(h), &back);
  INFO(s.ToString());
  CHECK(s.IsCorruption());
  CHECK(s.message().find("overflows") != std::string::npos);
  h.shape = {int64_t{1} << 40, int64_t{1} << 40, 0};  // empty, whatever the rest
  CHECK(DecodeValueHeader(EncodeValueHeader(h), &back).ok());
  h.shape = {3, -1};
  CHECK(DecodeValueHeader(EncodeValueHeader(h), &back).IsCorruption());
}

TEST_CASE("create refuses a --ram or --staging that no RAM tier can hold", "[limits]") {
  TempDir dir;
  const std::string store = dir.File("store");
  for (const char* flag : {"--ram", "--staging"}) {
    INFO(flag);
    CliResult r = Cli(dir, {"create", store, "--dataset-size", "4", "--disk", "64MiB", flag,
                            "18446744073709551615"});
    CheckFails(r);
    CHECK(r.err.find("18446744073709551615") != std::string::npos);
    CHECK(r.err.find(std::string(flag).substr(2) + "=") != std::string::npos);
    CHECK(r.err.find("above the largest RAM tier") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(store));
  }
  // The largest that is taken.
  CliOk(dir, {"create", store, "--dataset-size", "4", "--disk", "64MiB", "--ram", "65536TiB"});
}

TEST_CASE("Store::Open of a RAM tier past 2^56 bytes is InvalidArgument", "[limits]") {
  for (uint64_t ram : {kMax, (uint64_t{1} << 56) + 1}) {
    StoreOptions options;
    options.dataset_size = 10;
    options.disk = 0;
    options.ram = ram;
    std::unique_ptr<Store> store;
    Status s = Store::Open(options, "", &store);
    INFO(s.ToString());
    CHECK(s.IsInvalidArgument());
    CHECK(s.message().find("ram=" + std::to_string(ram)) != std::string::npos);
  }
}

TEST_CASE("create --plan copies the plan: the store keeps it when the file changes or goes",
          "[limits]") {
  TempDir dir;
  const std::string plan = dir.File("order.txt");
  WriteBytes(plan, "3\n1\n0\n2\n");
  const std::string store = dir.File("store");
  CliOk(dir, {"create", store, "--plan", plan, "--ram", "1MiB", "--disk", "64MiB"});
  CHECK(ReadBytes(store + "/plan.txt") == "3\n1\n0\n2\n");

  // Changed: another length and an id past the dataset.
  WriteBytes(plan, "0\n0\n9\n");
  {
    std::unique_ptr<Store> s;
    Status st = OpenExisting(store, &s);
    INFO(st.ToString());
    REQUIRE(st.ok());
    CHECK(s->Stats().total_positions == 4);
    REQUIRE(s->Put(0, 3, "", "three").ok());
    REQUIRE(s->Close().ok());
  }
  // Gone, and the store moved: the copy is named relative to the store.
  std::filesystem::remove(plan);
  const std::string moved = dir.File("moved");
  std::filesystem::rename(store, moved);
  {
    std::unique_ptr<Store> s;
    Status st = OpenExisting(moved, &s);
    INFO(st.ToString());
    REQUIRE(st.ok());
    CHECK(s->Stats().total_positions == 4);
    REQUIRE(s->Close().ok());
  }
  const std::string text = CliOk(dir, {"inspect", moved});
  INFO(text);
  CHECK(text.find("plan.txt") != std::string::npos);
  CHECK(CliOk(dir, {"get", moved, "3", "-o", "-"}) == "three");
}

TEST_CASE("import refuses an .npy header whose shape overflows 64 bits", "[limits]") {
  TempDir dir;
  const std::string store = opt4store_test::CreateStore(dir, 4);
  const std::vector<std::vector<uint64_t>> shapes = {
      {2, uint64_t{1} << 62, 4},                     // 2^65 bytes
      {uint64_t{1} << 63, uint64_t{1} << 62},        // rows times a row
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string npy = dir.File("huge" + std::to_string(i) + ".npy");
    WriteBytes(npy, EncodeNpyHeader("|u1", shapes[i]) + std::string(64, '\0'));
    CliResult r = Cli(dir, {"import", store, "--from", npy});
    INFO(npy);
    CheckFails(r);
    CHECK(r.err.find("overflows") != std::string::npos);
  }
  // The store is untouched and still opens.
  CliOk(dir, {"verify", store});
}

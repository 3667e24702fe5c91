// Sizes: ParseSize against the shared case table (tests/size_cases.json,
// which the CLI test and Python's test_sizes.py read too), and FormatSize.
#include "opt4store/sizes.h"

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace opt4store {
namespace {

struct SizeCase {
  std::string text;
  bool ok = false;
  uint64_t bytes = 0;
  std::string error;  // a phrase the message contains
};

std::vector<SizeCase> LoadCases() {
  std::ifstream in(OPT4STORE_TESTS_DIR "/size_cases.json");
  REQUIRE(in.good());
  const nlohmann::json table = nlohmann::json::parse(in);
  std::vector<SizeCase> cases;
  for (const nlohmann::json& row : table.at("cases")) {
    SizeCase c;
    c.text = row.at(0).get<std::string>();
    c.ok = !row.at(1).is_null();
    if (c.ok) {
      c.bytes = row.at(1).get<uint64_t>();
    } else {
      c.error = row.at(2).get<std::string>();
    }
    cases.push_back(c);
  }
  return cases;
}

TEST_CASE("ParseSize reads the shared cases", "[sizes]") {
  const std::vector<SizeCase> cases = LoadCases();
  CHECK(cases.size() >= 60);
  for (const SizeCase& c : cases) {
    INFO("'" << c.text << "'");
    uint64_t bytes = 12345;
    Status s = ParseSize(c.text, &bytes);
    INFO(s.ToString());
    if (c.ok) {
      CHECK(s.ok());
      CHECK(bytes == c.bytes);
    } else {
      CHECK(s.IsInvalidArgument());
      CHECK(s.message().find(c.error) != std::string::npos);
      // The message quotes the text, and *bytes is left alone.
      CHECK(s.message().find("'" + c.text + "'") == 0);
      CHECK(bytes == 12345);
    }
  }
}

TEST_CASE("FormatSize is for people and reads back", "[sizes]") {
  CHECK(FormatSize(0) == "0 B");
  CHECK(FormatSize(1023) == "1023 B");
  CHECK(FormatSize(1024) == "1.00 KiB");
  CHECK(FormatSize(1536) == "1.50 KiB");
  CHECK(FormatSize(uint64_t{512} << 20) == "512.00 MiB");
  CHECK(FormatSize(uint64_t{3} << 30) == "3.00 GiB");
  CHECK(FormatSize(uint64_t{5} << 40) == "5.00 TiB");
  CHECK(FormatSize(uint64_t{1} << 50) == "1.00 PiB");
  CHECK(FormatSize(UINT64_MAX) == "16.00 EiB");
  // Up to TiB, ParseSize reads FormatSize back within its two decimals.
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1000}, uint64_t{1536}, uint64_t{123456789},
                         uint64_t{3} << 30, (uint64_t{7} << 40) + 12345}) {
    INFO(bytes << " -> " << FormatSize(bytes));
    uint64_t back = 0;
    REQUIRE(ParseSize(FormatSize(bytes), &back).ok());
    const uint64_t unit = bytes < 1024 ? 1 : uint64_t{1} << (10 * ((63 - __builtin_clzll(bytes)) / 10));
    CHECK(back + unit / 200 + 1 >= bytes);
    CHECK(back <= bytes + unit / 200 + 1);
  }
}

}  // namespace
}  // namespace opt4store

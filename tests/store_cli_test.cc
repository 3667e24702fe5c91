// Tests of the store's admin commands (create, import, get, inspect, verify,
// compact, stats; clear in store_clear_test.cc): each runs the real opt4store binary (OPT4STORE_CLI) on a
// store in a scratch directory and checks the bytes that come back, the
// exit status and the messages. Inputs are written here byte by byte: the
// .npy files by a small writer that follows the NumPy format spec, so that
// the reader is checked against the format, not against itself.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "opt4store/plan.h"
#include "opt4store/store.h"
#include "opt4store/store_stats.h"
#include "json_test_util.h"
#include "store_cli_test_util.h"
#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::Bytes;
using opt4store_test::CheckFails;
using opt4store_test::Cli;
using opt4store_test::CliOk;
using opt4store_test::CliResult;
using opt4store_test::CreateStore;
using opt4store_test::MentionsAny;
using opt4store_test::ReadBytes;
using opt4store_test::TempDir;
using opt4store_test::WriteBytes;
using opt4store_test::WriteInputDir;

// An .npy file per the NumPy format spec: magic, version, little-endian
// header length, the dict padded with spaces and ended by '\n' so that the
// data starts on a multiple of 64 bytes.
// A structured dtype's descr is a list, written without quotes.
std::string Npy(const std::string& descr, const std::vector<uint64_t>& shape,
                const std::string& data, int major = 1, const char* fortran = "False") {
  const std::string value = descr[0] == '[' ? descr : "'" + descr + "'";
  std::string dict = "{'descr': " + value + ", 'fortran_order': " + fortran + ", 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  out += opt4store_test::LE(dict.size(), major == 1 ? 2 : 4);
  return out + dict + data;
}

using opt4store_test::Json;
using opt4store_test::KeysOf;
using opt4store_test::ParseJson;

uint32_t LE32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Flips the first payload byte of id's record in the store's segment files
// (layout in tiers/segment.h: 40-byte header; id at 24, meta_len at 28,
// stored_len at 36; meta, then the payload). Returns false if not found.
bool FlipPayloadByte(const std::string& store, uint32_t id) {
  std::vector<std::string> segments;
  for (const auto& e : std::filesystem::directory_iterator(store + "/segments")) {
    if (e.path().extension() == ".seg") segments.push_back(e.path().string());
  }
  std::sort(segments.begin(), segments.end());
  for (const std::string& path : segments) {
    std::string bytes = ReadBytes(path);
    size_t at = 0;
    while (at + 40 <= bytes.size() && LE32(bytes, at) == 0x5253344F) {
      const uint32_t meta_len = LE32(bytes, at + 28);
      const uint32_t stored_len = LE32(bytes, at + 36);
      if (LE32(bytes, at + 24) == id && stored_len > 0) {
        bytes[at + 40 + meta_len] ^= 0x5A;
        WriteBytes(path, bytes);
        return true;
      }
      at += 40 + meta_len + stored_len;
    }
  }
  return false;
}


TEST_CASE("import a directory, then get returns each file's exact bytes", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 10);
  const auto files = WriteInputDir(dir);

  CliResult imported = Cli(dir, {"import", store, "--from", dir.File("in")});
  REQUIRE(imported.status == 0);
  CHECK(imported.out.find("imported 3 samples (ids 0..2)") != std::string::npos);
  CHECK(imported.out.find("skipped 2") != std::string::npos);
  // stderr is not a terminal here: no progress line.
  CHECK(imported.err.find("importing") == std::string::npos);

  for (size_t id = 0; id < files.size(); ++id) {
    INFO("id " << id << " = " << files[id].first);
    const std::string dest = dir.File("out" + std::to_string(id));
    CliOk(dir, {"get", store, std::to_string(id), "-o", dest});
    CHECK(ReadBytes(dest) == files[id].second);
    // -o - writes the same bytes to stdout.
    CHECK(CliOk(dir, {"get", store, std::to_string(id), "-o", "-"}) == files[id].second);

    const std::string meta = CliOk(dir, {"get", store, std::to_string(id), "--meta"});
    CHECK(meta.find("dtype:    bytes\n") != std::string::npos);
    CHECK(meta.find("shape:    (" + std::to_string(files[id].second.size()) + ",)\n") !=
          std::string::npos);
    CHECK(meta.find("user:     " + files[id].first + "\n") != std::string::npos);
  }

  SECTION("--first-id shifts the ids") {
    const std::string again =
        CliOk(dir, {"import", store, "--from", dir.File("in"), "--first-id", "7"});
    CHECK(again.find("ids 7..9") != std::string::npos);
    CliOk(dir, {"get", store, "8", "-o", dir.File("eight")});
    CHECK(ReadBytes(dir.File("eight")) == files[1].second);
  }
}

TEST_CASE("import .npy rows: bytes, dtype and shape come back", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 20);

  // uint8, 5 rows of 7 (one-byte types are written with '|').
  const std::string u8 = Bytes(5 * 7, 3);
  WriteBytes(dir.File("u8.npy"), Npy("|u1", {5, 7}, u8));
  // float32, 4 rows of 2 x 3, in a version 2.0 file.
  const std::string f32 = Bytes(4 * 2 * 3 * 4, 4);
  WriteBytes(dir.File("f32.npy"), Npy("<f4", {4, 2, 3}, f32, 2));
  // int64, 1-D: each row is a scalar.
  const std::string i64 = Bytes(3 * 8, 5);
  WriteBytes(dir.File("i64.npy"), Npy("<i8", {3}, i64, 3));

  CHECK(CliOk(dir, {"import", store, "--from", dir.File("u8.npy")})
            .find("imported 5 samples (ids 0..4)") != std::string::npos);
  CHECK(CliOk(dir, {"import", store, "--from", dir.File("f32.npy"), "--first-id", "5"})
            .find("imported 4 samples (ids 5..8)") != std::string::npos);
  CliOk(dir, {"import", store, "--from", dir.File("i64.npy"), "--first-id", "9"});

  for (int row = 0; row < 5; ++row) {
    INFO("uint8 row " << row);
    CHECK(CliOk(dir, {"get", store, std::to_string(row), "-o", "-"}) == u8.substr(row * 7, 7));
  }
  for (int row = 0; row < 4; ++row) {
    INFO("float32 row " << row);
    CHECK(CliOk(dir, {"get", store, std::to_string(5 + row), "-o", "-"}) ==
          f32.substr(row * 24, 24));
  }
  for (int row = 0; row < 3; ++row) {
    INFO("int64 row " << row);
    CHECK(CliOk(dir, {"get", store, std::to_string(9 + row), "-o", "-"}) == i64.substr(row * 8, 8));
  }

  const std::string m0 = CliOk(dir, {"get", store, "0", "--meta"});
  CHECK(m0.find("dtype:    uint8\n") != std::string::npos);
  CHECK(m0.find("shape:    (7,)\n") != std::string::npos);
  const std::string m5 = CliOk(dir, {"get", store, "6", "--meta"});
  CHECK(m5.find("dtype:    float32\n") != std::string::npos);
  CHECK(m5.find("shape:    (2, 3)\n") != std::string::npos);
  CHECK(m5.find("payload:  24 bytes\n") != std::string::npos);
  const std::string m9 = CliOk(dir, {"get", store, "9", "--meta"});
  CHECK(m9.find("dtype:    int64\n") != std::string::npos);
  CHECK(m9.find("shape:    ()\n") != std::string::npos);
}

TEST_CASE("import refuses .npy files it cannot turn into samples", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 100);
  struct Case {
    const char* name;
    std::string bytes;
    std::vector<std::string> words;  // the message says one of these
  };
  const std::vector<Case> cases = {
      {"fortran.npy", Npy("<f4", {2, 3}, Bytes(24, 1), 1, "True"), {"fortran"}},
      {"object.npy", Npy("|O", {2}, Bytes(16, 1)), {"object"}},
      {"bigendian.npy", Npy(">i4", {2}, Bytes(8, 1)), {"big-endian"}},
      {"unicode.npy", Npy("<U3", {2}, Bytes(24, 1)), {"not numeric"}},
      {"truncated.npy", Npy("<f8", {4, 2}, Bytes(50, 1)), {"offset"}},
      {"notnpy.npy", "just text, no magic", {"magic"}},
      {"scalar.npy", Npy("<f4", {}, Bytes(4, 1)), {"0-d"}},
      {"struct.npy", Npy("[('x', '<f4'), ('y', '<i2')]", {2}, Bytes(12, 1)), {"structured"}},
      {"badheader.npy", Npy("<f4", {2}, Bytes(8, 1)).replace(10, 9, "{'descx':"), {"malformed"}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    WriteBytes(dir.File(c.name), c.bytes);
    CliResult r = Cli(dir, {"import", store, "--from", dir.File(c.name)});
    CheckFails(r);
    CHECK(MentionsAny(r.err, c.words));
  }
  // Nothing was imported by any of them.
  CHECK(ParseJson(CliOk(dir, {"stats", store, "--json"})).at("disk_items") == 0);
}

TEST_CASE("create over an existing store is an error", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 10);
  CliResult r =
      Cli(dir, {"create", store, "--dataset-size", "10", "--ram", "1MiB", "--disk", "64MiB"});
  CheckFails(r);
  CHECK(MentionsAny(r.err, {"already exists"}));
  // The first store is untouched.
  CliOk(dir, {"inspect", store});
}

TEST_CASE("create takes sizes with units and writes them to the manifest", "[store_cli]") {
  TempDir dir;
  const std::string store = dir.File("store");
  const std::string out = CliOk(dir, {"create", store, "--dataset-size", "1000", "--ram", "512MiB",
                                      "--disk", "2GiB", "--compression", "none", "--sync", "none",
                                      "--policy", "lru", "--prefetch-depth", "64"});
  CHECK(out.find("created store") != std::string::npos);
  CHECK(out.find("512.00 MiB") != std::string::npos);
  const Json json = ParseJson(CliOk(dir, {"inspect", store, "--json"}));
  CHECK(json.at("dataset_size") == 1000);
  CHECK(json.at("ram") == 536870912);
  CHECK(json.at("disk") == 2147483648);
  CHECK(json.at("policy") == "lru");
  CHECK(json.at("compression") == "none");
  CHECK(json.at("sync") == "none");
  CHECK(json.at("prefetch_depth") == 64);

  SECTION("a plain byte count and --ram-items") {
    const std::string other = dir.File("other");
    CliOk(dir,
          {"create", other, "--dataset-size", "50", "--ram-items", "20", "--disk", "67108864"});
    const Json j = ParseJson(CliOk(dir, {"inspect", other, "--json"}));
    CHECK(j.at("ram_items") == 20);
    CHECK(j.at("disk") == 67108864);
  }
  SECTION("a generated plan is saved") {
    const std::string planned = dir.File("planned");
    CliOk(dir, {"create", planned, "--sampler", "shuffle", "--dataset-size", "100", "--epochs", "3",
                "--seed", "4", "--ram-items", "10", "--disk", "64MiB"});
    const std::string text = CliOk(dir, {"inspect", planned});
    CHECK(text.find("shuffle") != std::string::npos);
  }
  SECTION("bad sizes and missing options are one-line errors") {
    CliResult bad = Cli(
        dir, {"create", dir.File("x"), "--dataset-size", "10", "--ram", "12XB", "--disk", "1GiB"});
    CheckFails(bad);
    CHECK(bad.err.find("--ram") != std::string::npos);
    CliResult no_disk = Cli(dir, {"create", dir.File("y"), "--dataset-size", "10"});
    CheckFails(no_disk);
    CHECK(no_disk.err.find("--disk") != std::string::npos);
    CliResult no_n = Cli(dir, {"create", dir.File("z"), "--disk", "1GiB"});
    CheckFails(no_n);
    CHECK(no_n.err.find("--dataset-size") != std::string::npos);
  }
  SECTION("a create the store refuses leaves nothing behind") {
    const std::string path = dir.File("refused");
    CheckFails(Cli(dir, {"create", path, "--dataset-size", "10", "--disk", "64MiB",
                         "--prefetch-depth", "999999999999"}));
    CHECK(!opt4store_test::FileExists(path));
    CliOk(dir, {"create", path, "--dataset-size", "10", "--disk", "64MiB"});
  }
}

TEST_CASE("import of more samples than the dataset size is an error", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 2);
  WriteInputDir(dir);  // three files
  CliResult r = Cli(dir, {"import", store, "--from", dir.File("in")});
  CheckFails(r);
  CHECK(MentionsAny(r.err, {"dataset size is 2"}));
  CHECK(ParseJson(CliOk(dir, {"stats", store, "--json"})).at("disk_items") == 0);

  CliResult shifted = Cli(dir, {"import", store, "--from", dir.File("in"), "--first-id", "1"});
  CheckFails(shifted);
}

TEST_CASE("get: a missing id, an id past the dataset, no store", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 10);
  WriteInputDir(dir);
  CliOk(dir, {"import", store, "--from", dir.File("in")});

  CliResult missing = Cli(dir, {"get", store, "5", "-o", dir.File("five")});
  CheckFails(missing);
  CHECK(missing.err.find("sample 5 is not in the store") != std::string::npos);

  CliResult past = Cli(dir, {"get", store, "10", "-o", dir.File("ten")});
  CheckFails(past);
  CHECK(MentionsAny(past.err, {"out of range"}));
  CHECK(past.err.find("10") != std::string::npos);

  CliResult none = Cli(dir, {"get", dir.File("nowhere"), "0", "--meta"});
  CheckFails(none);
  CHECK(none.err.find("no store at " + dir.File("nowhere")) != std::string::npos);
  for (const char* command : {"inspect", "verify", "repair", "compact", "stats"}) {
    CliResult r = Cli(dir, {command, dir.File("nowhere")});
    INFO(command);
    CheckFails(r);
    CHECK(r.err.find("no store at") != std::string::npos);
  }
  // An empty value is refused, not read as the option left out (found by
  // bench/fault_campaign.py: repair accepted it and exited 0).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"repair", store, "--dataset-size", "", "--disk", "1MiB"},
        std::vector<std::string>{"repair", store, "--dataset-size", "10", "--disk", ""},
        std::vector<std::string>{"create", dir.File("fresh"), "--sampler", "shuffle",
                                 "--dataset-size", ""}}) {
    CliResult r = Cli(dir, args);
    INFO(args[0] << " " << args[2] << " " << args[3]);
    CheckFails(r);
    CHECK(r.err.find("empty value") != std::string::npos);
  }
}

TEST_CASE("verify finds a flipped payload byte; get of that id fails", "[store_cli]") {
  TempDir dir;
  // Raw payloads, so that the flipped byte is a payload byte as stored.
  const std::string store = CreateStore(dir, 10, {"--compression", "none"});
  const auto files = WriteInputDir(dir);
  CliOk(dir, {"import", store, "--from", dir.File("in")});

  const std::string clean = CliOk(dir, {"verify", store});
  CHECK(clean.find("3 records") != std::string::npos);
  CHECK(clean.find("0 corrupt") != std::string::npos);

  REQUIRE(FlipPayloadByte(store, 1));
  CliResult r = Cli(dir, {"verify", store});
  CheckFails(r);
  CHECK(r.out.find("1 corrupt") != std::string::npos);
  CHECK(r.err.find("ids 1)") != std::string::npos);
  // The table's row for id 1.
  CHECK(r.out.find("\n1  ") != std::string::npos);

  CliResult json = Cli(dir, {"verify", store, "--json"});
  CHECK(json.status != 0);
  const Json report = ParseJson(json.out);
  CHECK(KeysOf(report) ==
        std::vector<std::string>{"records_checked", "bytes_checked", "corrupt", "lost", "orphaned", "bad"});
  CHECK(report.at("records_checked") == 3);
  CHECK(report.at("corrupt") == 1);
  REQUIRE(report.at("bad").size() == 1);
  CHECK(KeysOf(report.at("bad").at(0)) == std::vector<std::string>{"id", "where", "reason"});
  CHECK(report.at("bad").at(0).at("id") == 1);

  CliResult get = Cli(dir, {"get", store, "1", "-o", dir.File("one")});
  CheckFails(get);
  CHECK(MentionsAny(get.err, {"corrupt", "not in the store"}));
  // The other samples still read back.
  CHECK(CliOk(dir, {"get", store, "0", "-o", "-"}) == files[0].second);
  CHECK(CliOk(dir, {"get", store, "2", "-o", "-"}) == files[2].second);
}

TEST_CASE("compact runs and the data still reads back", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 10);
  const auto files = WriteInputDir(dir);
  CliOk(dir, {"import", store, "--from", dir.File("in")});
  const std::string out = CliOk(dir, {"compact", store});
  CHECK(out.find("before") != std::string::npos);
  CHECK(out.find("after") != std::string::npos);
  CHECK(out.find("segments") != std::string::npos);
  for (size_t id = 0; id < files.size(); ++id) {
    CHECK(CliOk(dir, {"get", store, std::to_string(id), "-o", "-"}) == files[id].second);
  }
  CliOk(dir, {"verify", store});
}

TEST_CASE("stats --json and inspect describe the store", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 10);
  const auto files = WriteInputDir(dir);
  CliOk(dir, {"import", store, "--from", dir.File("in")});

  const Json json = ParseJson(CliOk(dir, {"stats", store, "--json"}));
  const std::string table = CliOk(dir, {"stats", store});
  // Every field of the one stats table, by its name and in its order, in
  // both views; numbers stay numbers and flags stay booleans.
  std::vector<std::string> names;
  VisitStats(StoreStats{}, [&](const StatField& field, auto value) {
    INFO(field.name);
    names.push_back(field.name);
    REQUIRE(json.contains(field.name));
    const Json& v = json.at(field.name);
    if constexpr (std::is_same_v<decltype(value), bool>) {
      CHECK(v.is_boolean());
    } else if constexpr (std::is_floating_point_v<decltype(value)>) {
      CHECK(v.is_number());
    } else {
      CHECK(v.is_number_unsigned());
    }
    CHECK(table.find(std::string("  ") + field.name + " ") != std::string::npos);
  });
  CHECK(names.size() >= 40);
  CHECK(KeysOf(json) == names);
  CHECK(json.at("disk_items") == 3);
  CHECK(table.find("\ndisk\n") != std::string::npos);  // the group's heading row

  const std::string text = CliOk(dir, {"inspect", store});
  CHECK(text.find("dataset size:   10 items") != std::string::npos);
  CHECK(text.find("cursor:         epoch 0, position 0") != std::string::npos);
  CHECK(text.find("space amplification") != std::string::npos);
  CHECK(text.find("segments:\n") != std::string::npos);
  // Every segment file on disk is listed.
  size_t listed = 0;
  for (const auto& e : std::filesystem::directory_iterator(store + "/segments")) {
    if (e.path().extension() != ".seg") continue;
    INFO(e.path());
    CHECK(text.find(e.path().filename().string()) != std::string::npos);
    ++listed;
  }
  CHECK(listed >= 1);
  const Json ij = ParseJson(CliOk(dir, {"inspect", store, "--json"}));
  // The settings by their names, in the table's order (store_options.h).
  std::vector<std::string> keys = {"path", "live", "owner_pid", "dataset_size", "fingerprint",
                                   "plan"};
  for (const SettingField& field : SettingFields()) keys.push_back(field.name);
  keys.insert(keys.end(), {"cursor", "tiers", "segments"});
  CHECK(KeysOf(ij) == keys);
  CHECK(ij.at("ram") == 1 << 20);
  CHECK(ij.at("policy") == "opt");
  CHECK(ij.at("fingerprint").is_null());  // created without one
  CHECK(ij.at("segments").size() == listed);
  CHECK(KeysOf(ij.at("segments").at(0)) ==
        std::vector<std::string>{"name", "file_bytes", "live_bytes"});
  CHECK(KeysOf(ij.at("cursor")) == std::vector<std::string>{"epoch", "position", "plan"});
  CHECK(ij.at("cursor").at("epoch") == 0);
  CHECK(ij.at("cursor").at("position") == 0);
  // The tiers' figures by their stats names (store_stats.h).
  CHECK(ij.at("tiers").at("disk_items") == 3);
  CHECK(ij.at("tiers").at("disk_live_bytes") == json.at("disk_live_bytes"));
  CHECK(ij.at("tiers").at("ram_items") == json.at("ram_items"));
  CHECK(!ij.at("tiers").contains("accesses"));
}

TEST_CASE("inspect names a plan that a run set, not 'none'", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 4);
  {
    StoreOptions options;
    options.create_if_missing = false;
    std::unique_ptr<Store> s;
    REQUIRE(Store::Open(options, store, &s).ok());
    PlanSpec plan;  // what Python's PlannedSampler gives a store at bind
    plan.kind = SamplerKind::kExplicit;
    plan.ids = std::make_shared<const std::vector<ItemId>>(std::vector<ItemId>{3, 1, 0, 2});
    REQUIRE(s->SetPlan(plan, 2).ok());
    REQUIRE(s->Close().ok());
  }
  const std::string text = CliOk(dir, {"inspect", store});
  INFO(text);
  CHECK(text.find("plan:           set by the last run: explicit") != std::string::npos);
  CHECK(text.find("plan:           none") == std::string::npos);
  CHECK(text.find("(of plan") == std::string::npos);  // said once, on the plan line
}

TEST_CASE("a store open in another process is a Busy error", "[store_cli]") {
  TempDir dir;
  const std::string store = CreateStore(dir, 10);
  WriteInputDir(dir);
  StoreOptions options;
  options.create_if_missing = false;
  options.disk_only = true;
  std::unique_ptr<Store> held;
  Status s = Store::Open(options, store, &held);
  INFO(s.ToString());
  REQUIRE(s.ok());

  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"inspect", store},
                                             {"get", store, "0", "--meta"},
                                             {"import", store, "--from", dir.File("in")},
                                             {"stats", store, "--json"}}) {
    INFO(args[0]);
    CliResult r = Cli(dir, args);
    CheckFails(r);
    CHECK(MentionsAny(r.err, {"another process", "held by", "busy"}));
  }
  REQUIRE(held->Close().ok());
  held.reset();
  // Released: the store opens again.
  CliOk(dir, {"inspect", store});
}

TEST_CASE("kill -9 during import: the store reopens, verifies, and holds exact bytes or nothing",
          "[store_cli][crash]") {
  TempDir dir;
  const uint64_t n = 300;
  const std::string store = CreateStore(dir, n, {"--sync", "none"});
  std::filesystem::create_directory(dir.File("many"));
  std::vector<std::string> contents;
  for (uint64_t i = 0; i < n; ++i) {
    contents.push_back(Bytes(64 * 1024 + i, static_cast<uint32_t>(i + 1)));
    char name[32];
    std::snprintf(name, sizeof(name), "%05llu.bin", static_cast<unsigned long long>(i));
    WriteBytes(dir.File(std::string("many/") + name), contents.back());
  }
  // Killed after various delays: early, mid-import, maybe after it ended.
  for (int delay_ms : {15, 60, 150}) {
    INFO("killed after " << delay_ms << " ms");
    // Built before the fork: the child only makes async-signal-safe calls
    // before exec (the store reopened below leaves RocksDB's threads here).
    const std::string from = dir.File("many");
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      const int null_fd = open("/dev/null", O_WRONLY);
      if (null_fd >= 0) {
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
      }
      execl(OPT4STORE_CLI, OPT4STORE_CLI, "import", store.c_str(), "--from", from.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    usleep(delay_ms * 1000);
    kill(child, SIGKILL);
    int raw = 0;
    REQUIRE(waitpid(child, &raw, 0) == child);

    CliOk(dir, {"verify", store});
    StoreOptions options;
    options.create_if_missing = false;
    options.disk_only = true;
    std::unique_ptr<Store> reopened;
    Status s = Store::Open(options, store, &reopened);
    INFO(s.ToString());
    REQUIRE(s.ok());
    uint64_t found = 0;
    for (uint64_t id = 0; id < n; ++id) {
      StringSink sink;
      Status g = reopened->Get(kNoPosition, static_cast<ItemId>(id), &sink);
      INFO("id " << id << ": " << g.ToString());
      REQUIRE((g.ok() || g.IsNotFound()));
      if (g.ok()) {
        ++found;
        CHECK(sink.payload == contents[id]);  // never wrong bytes
      }
    }
    WARN("killed after " << delay_ms << " ms: " << found << " of " << n << " samples survived");
    REQUIRE(reopened->Close().ok());
  }
}

}  // namespace
}  // namespace opt4store

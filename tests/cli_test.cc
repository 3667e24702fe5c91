// Tests of the opt4store CLI: each runs the real binary (OPT4STORE_CLI) in a
// shell, captures stdout, stderr and the exit status, and checks behaviour
// against the engine (GenerateEpoch, ReadNumberFile) or hand-worked numbers.
// Longer than 600 lines because: one file for the planning commands (plan,
// simulate, demo) and their shared fixtures; tests are split only along
// seams of their own (the store commands are in store_cli_test.cc).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cli_test_util.h"
#include "json_test_util.h"
#include "opt4store/number_file.h"
#include "opt4store/plan.h"

namespace opt4store {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

using opt4store_test::Cli;
using opt4store_test::CliResult;
using opt4store_test::TempDir;
using opt4store_test::Json;
using opt4store_test::KeysOf;
using opt4store_test::ParseJson;
size_t CountOf(const std::string& text, const std::string& needle);

size_t CountOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) {
    ++count;
  }
  return count;
}

// An error is exactly one line on stderr, with the prefix, and exit != 0.
void CheckOneLineError(const CliResult& r) {
  INFO("stderr: " << r.err);
  CHECK(r.status != 0);
  CHECK(r.status != -1);
  CHECK(r.err.rfind("opt4store: error: ", 0) == 0);
  CHECK(CountOf(r.err, "\n") == 1);
  CHECK(r.out.empty());
}

std::vector<uint64_t> Generated(const PlanSpec& spec) {
  std::vector<uint64_t> all;
  std::vector<ItemId> epoch;
  for (uint64_t e = 0; e < spec.epochs; ++e) {
    GenerateEpoch(spec, e, &epoch);
    all.insert(all.end(), epoch.begin(), epoch.end());
  }
  return all;
}

TEST_CASE("plan writes all four formats, equal to GenerateEpoch", "[cli][plan]") {
  TempDir dir;
  PlanSpec spec;
  spec.kind = SamplerKind::kShuffle;
  spec.dataset_size = 50;
  spec.epochs = 3;
  spec.seed = 7;
  const std::vector<uint64_t> expected = Generated(spec);
  REQUIRE(expected.size() == 150);

  for (const std::string ext : {"txt", "u32", "u64", "npy"}) {
    SECTION(ext) {
      const std::string path = dir.File("plan." + ext);
      CliResult r = Cli(dir, {"plan", "--sampler", "shuffle", "--dataset-size", "50", "--epochs",
                              "3", "--seed", "7", "--output", path, "--format", ext});
      INFO(r.err);
      REQUIRE(r.status == 0);
      CHECK(r.err.empty());
      std::vector<uint64_t> values;
      Status st = ReadNumberFile(path, UINT64_MAX, &values);
      INFO(st.ToString());
      REQUIRE(st.ok());
      CHECK(values == expected);
      if (ext == "npy") {
        // Epochs > 1: one row per epoch.
        std::unique_ptr<NumberFileReader> reader;
        REQUIRE(NumberFileReader::Open(path, &reader).ok());
        CHECK(reader->npy_rows() == 3);
      }
    }
  }
}

TEST_CASE("plan generates every sampler kind", "[cli][plan]") {
  TempDir dir;
  SECTION("replacement with --num-samples") {
    PlanSpec spec;
    spec.kind = SamplerKind::kReplacement;
    spec.dataset_size = 40;
    spec.epochs = 2;
    spec.seed = 3;
    spec.num_samples = 25;
    const std::string path = dir.File("r.u32");
    CliResult r = Cli(dir, {"plan", "--sampler", "replacement", "--dataset-size", "40",
                            "--epochs", "2", "--seed", "3", "--num-samples", "25", "--output",
                            path});
    REQUIRE(r.status == 0);
    std::vector<uint64_t> values;
    REQUIRE(ReadNumberFile(path, UINT64_MAX, &values).ok());
    CHECK(values.size() == 50);
    CHECK(values == Generated(spec));
  }
  SECTION("distributed rank 1 of 3, drop last") {
    PlanSpec spec;
    spec.kind = SamplerKind::kDistributed;
    spec.dataset_size = 31;
    spec.epochs = 2;
    spec.seed = 5;
    spec.world_size = 3;
    spec.rank = 1;
    spec.drop_last = true;
    const std::string path = dir.File("d.npy");
    CliResult r = Cli(dir, {"plan", "--sampler", "distributed", "--dataset-size", "31",
                            "--epochs", "2", "--seed", "5", "--world", "3", "--rank", "1",
                            "--drop-last", "--output", path});
    REQUIRE(r.status == 0);
    std::vector<uint64_t> values;
    REQUIRE(ReadNumberFile(path, UINT64_MAX, &values).ok());
    CHECK(values.size() == 20);  // floor(31 / 3) = 10 per epoch
    CHECK(values == Generated(spec));
  }
  SECTION("sequential, one epoch, text") {
    const std::string path = dir.File("s.txt");
    REQUIRE(Cli(dir, {"plan", "--sampler", "sequential", "--dataset-size", "5", "--output", path})
                .status == 0);
    CHECK(ReadAll(path) == "0\n1\n2\n3\n4\n");
  }
}

TEST_CASE("plan --info on a hand-made file", "[cli][plan]") {
  TempDir dir;
  // Positions 0..4 read ids 0 1 0 2 1: id 0 again after 2 positions, id 1
  // after 3; ids 0, 1 and 2 are cold reads.
  const std::string path = dir.File("plan.txt");
  WriteAll(path, "0\n1\n0\n2\n1\n");

  CliResult r = Cli(dir, {"plan", "--input", path, "--info", "--json"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const Json j = ParseJson(r.out);
  CHECK(KeysOf(j) == std::vector<std::string>{"plan", "reads", "epochs", "epoch_length",
                                              "dataset_size", "distinct_ids", "cold_reads",
                                              "reuse_distance"});
  CHECK(j.at("reads") == 5);
  CHECK(j.at("epochs") == 1);
  CHECK(j.at("epoch_length") == 5);
  CHECK(j.at("dataset_size") == 3);
  CHECK(j.at("distinct_ids") == 3);
  CHECK(j.at("cold_reads") == 3);
  const Json& reuse = j.at("reuse_distance");
  CHECK(KeysOf(reuse) == std::vector<std::string>{"count", "min", "mean", "max", "histogram"});
  CHECK(reuse.at("count") == 2);
  CHECK(reuse.at("min") == 2);
  CHECK(reuse.at("mean").is_number_float());
  CHECK(reuse.at("mean") == 2.5);
  CHECK(reuse.at("max") == 3);
  // Buckets run from [1, 1] to the last non-empty one; both distances fall
  // in [2, 3].
  CHECK(reuse.at("histogram") == Json::parse(R"([{"min": 1, "max": 1, "count": 0},
                                                 {"min": 2, "max": 3, "count": 2}])"));

  CliResult text = Cli(dir, {"plan", "--input", path, "--info"});
  REQUIRE(text.status == 0);
  CHECK(text.out.find("reads:         5\n") != std::string::npos);
  CHECK(text.out.find("count 2, min 2, mean 2.50, max 3") != std::string::npos);

  SECTION("--dataset-size and --epoch-length apply to the file") {
    WriteAll(path, "0\n1\n2\n3\n0\n1\n2\n3\n");
    CliResult e = Cli(dir, {"plan", "--input", path, "--info", "--json", "--dataset-size", "10",
                            "--epoch-length", "4"});
    INFO(e.err);
    REQUIRE(e.status == 0);
    const Json info = ParseJson(e.out);
    CHECK(info.at("epochs") == 2);
    CHECK(info.at("dataset_size") == 10);
    CHECK(info.at("reuse_distance").at("min") == 4);
  }
}

TEST_CASE("plan --info on a generated plan", "[cli][plan]") {
  TempDir dir;
  // Sequential 10 ids x 2 epochs: every id is read again 10 positions later.
  CliResult r = Cli(dir, {"plan", "--sampler", "sequential", "--dataset-size", "10", "--epochs",
                          "2", "--info", "--json"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const Json j = ParseJson(r.out);
  CHECK(j.at("reads") == 20);
  CHECK(j.at("distinct_ids") == 10);
  const Json& reuse = j.at("reuse_distance");
  CHECK(reuse.at("count") == 10);
  CHECK(reuse.at("min") == 10);
  CHECK(reuse.at("max") == 10);
  CHECK(reuse.at("histogram").back() == Json::parse(R"({"min": 8, "max": 15, "count": 10})"));
}

// The sequence 0 1 2 0 1 3 0 (N = 4 inferred), worked by hand.
//
// Next uses: pos0 id0 -> 3, pos1 id1 -> 4, pos2 id2 -> never, pos3 id0 -> 6,
// pos4 id1 -> never, pos5 id3 -> never, pos6 id0 -> never.
//
// capacity 2, lru: t0 miss {0}; t1 miss {0,1}; t2 miss, evict 0 {1,2};
//   t3 miss, evict 1 {2,0}; t4 miss, evict 2 {0,1}; t5 miss, evict 0 {1,3};
//   t6 miss, evict 1 {3,0}. 0 hits, 7 admissions, 5 evictions.
// capacity 2, opt (bypass): t0 admit 0 (room); t1 admit 1 (room); t2 id 2 is
//   never read again: bypass; t3 hit 0; t4 hit 1; t5 id 3 never again: bypass;
//   t6 hit 0. 3 hits, 2 admissions, 2 bypasses, 0 evictions. 3 is the
//   maximum: 7 reads minus 4 distinct ids.
// capacity 3, lru: t0..t2 fill {0,1,2}; t3 hit 0; t4 hit 1; t5 miss, evict 2
//   (least recent) {0,1,3}; t6 hit 0. 3 hits.
// capacity 1, opt: t0 admit 0 (next 3); t1 id 1's next (4) is no sooner than
//   0's (3): bypass; t2 bypass; t3 hit 0 (next 6); t4, t5 never again:
//   bypass; t6 hit 0. 2 hits. lru at capacity 1 never hits (no id repeats
//   back to back).
TEST_CASE("simulate --json gives the hand-worked hits", "[cli][simulate]") {
  TempDir dir;
  const std::string path = dir.File("seq.txt");
  WriteAll(path, "0\n1\n2\n0\n1\n3\n0\n");

  CliResult r = Cli(dir, {"simulate", "--plan", path, "--capacity", "2", "--policy", "opt,lru",
                          "--json"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const Json j = ParseJson(r.out);
  CHECK(KeysOf(j) == std::vector<std::string>{"accesses", "plan", "dataset_size", "distinct_ids",
                                              "epochs", "epoch_length", "window", "exact_window",
                                              "capacity_unit", "capacity", "capacity_ratio",
                                              "policies"});
  CHECK(j.at("accesses") == 7);
  CHECK(j.at("dataset_size") == 4);
  CHECK(j.at("distinct_ids") == 4);
  CHECK(j.at("capacity") == 2);
  CHECK(j.at("capacity_unit") == "items");
  CHECK(j.at("exact_window") == true);
  const Json& opt = j.at("policies").at("opt");
  CHECK(KeysOf(opt) == std::vector<std::string>{"hits", "misses", "hit_rate", "admissions",
                                                "bypasses", "evictions", "ambiguous"});
  CHECK(opt.at("hits") == 3);
  CHECK(opt.at("misses") == 4);
  CHECK(opt.at("hit_rate") == 0.428571);  // 3/7, rounded to 6 places
  CHECK(opt.at("admissions") == 2);
  CHECK(opt.at("bypasses") == 2);
  CHECK(opt.at("evictions") == 0);
  CHECK(opt.at("ambiguous") == 0);
  const Json& lru = j.at("policies").at("lru");
  CHECK(lru.at("hits") == 0);
  CHECK(lru.at("admissions") == 7);
  CHECK(lru.at("evictions") == 5);
  // Policies come out in the order given.
  CHECK(KeysOf(j.at("policies")) == std::vector<std::string>{"opt", "lru"});
  CHECK(r.out.find("seconds") == std::string::npos);

  CliResult three = Cli(dir, {"simulate", "--plan", path, "--capacity", "3", "--policy",
                              "lru,opt", "--json"});
  REQUIRE(three.status == 0);
  const Json j3 = ParseJson(three.out);
  CHECK(j3.at("policies").at("lru").at("hits") == 3);
  CHECK(j3.at("policies").at("opt").at("hits") == 3);

  CliResult one = Cli(dir, {"simulate", "--plan", path, "--capacity", "1", "--policy", "opt,lru",
                            "--json"});
  REQUIRE(one.status == 0);
  const Json j1 = ParseJson(one.out);
  CHECK(j1.at("policies").at("opt").at("hits") == 2);
  CHECK(j1.at("policies").at("lru").at("hits") == 0);
}

TEST_CASE("simulate JSON is identical across runs", "[cli][simulate]") {
  TempDir dir;
  const std::vector<std::string> args = {"simulate", "--sampler", "shuffle", "--dataset-size",
                                         "300", "--epochs", "3", "--seed", "11",
                                         "--capacity-ratio", "0.1,0.5", "--json"};
  CliResult a = Cli(dir, args);
  CliResult b = Cli(dir, args);
  INFO(a.err);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(a.out == b.out);
  const Json j = ParseJson(a.out);  // one JSON object on one line
  CHECK(j.at("plan").is_string());
  // Default policies: all eight, in AllPolicies() order, at each point.
  REQUIRE(j.at("curve").size() == 2);
  for (const Json& point : j.at("curve")) {
    CHECK(KeysOf(point) == std::vector<std::string>{"capacity", "capacity_ratio", "policies"});
    CHECK(KeysOf(point.at("policies")) ==
          std::vector<std::string>{"opt", "opt-size", "lru", "lfu", "fifo", "random", "static",
                                   "none"});
  }
}

TEST_CASE("a curve has one point per capacity and its lru equals single runs",
          "[cli][simulate]") {
  TempDir dir;
  const std::vector<std::string> plan = {"--sampler", "replacement", "--dataset-size", "200",
                                         "--epochs", "5", "--seed", "2"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"simulate"};
    args.insert(args.end(), plan.begin(), plan.end());
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = Cli(dir, args);
    INFO(r.err);
    REQUIRE(r.status == 0);
    return r.out;
  };
  const Json curve =
      ParseJson(run({"--capacity", "10,50,120", "--policy", "lru,opt", "--json"})).at("curve");
  REQUIRE(curve.size() == 3);
  const char* capacities[] = {"10", "50", "120"};
  for (size_t i = 0; i < 3; ++i) {
    const Json& point = curve.at(i);
    CHECK(point.at("capacity") == std::stoull(capacities[i]));
    const Json single =
        ParseJson(run({"--capacity", capacities[i], "--policy", "lru,opt", "--json"}))
            .at("policies");
    const Json& policies = point.at("policies");
    CHECK(policies.at("lru").at("hits") == single.at("lru").at("hits"));
    CHECK(policies.at("lru").at("evictions") == single.at("lru").at("evictions"));
    CHECK(policies.at("opt").at("hits") == single.at("opt").at("hits"));
    CHECK(policies.at("opt").at("hits") >= policies.at("lru").at("hits"));
  }

  SECTION("--curve alone means ratios 0.1 to 0.9") {
    const Json points = ParseJson(run({"--curve", "--json", "--policy", "lru"})).at("curve");
    REQUIRE(points.size() == 9);
    CHECK(points.front().at("capacity") == 20);
    CHECK(points.front().at("capacity_ratio") == 0.1);
    CHECK(points.back().at("capacity") == 180);
    CHECK(points.back().at("capacity_ratio") == 0.9);
  }
  SECTION("the table has one row per capacity") {
    const std::string out = run({"--capacity", "10,50,120", "--policy", "opt,lru"});
    const size_t header = out.find("\ncapacity ");
    REQUIRE(header != std::string::npos);
    const std::string line = out.substr(header + 1, out.find('\n', header + 1) - header - 1);
    CHECK(line.find(" ratio ") != std::string::npos);
    CHECK(line.find(" opt ") != std::string::npos);
    CHECK(line.find(" lru") != std::string::npos);
    CHECK(out.find("\n10 ") != std::string::npos);
    CHECK(out.find("\n50 ") != std::string::npos);
    CHECK(out.find("\n120 ") != std::string::npos);
  }
}

TEST_CASE("simulate with byte sizes", "[cli][simulate]") {
  TempDir dir;
  const std::string path = dir.File("seq.txt");
  WriteAll(path, "0\n1\n2\n0\n1\n3\n0\n");
  SECTION("--item-size: a byte capacity holds capacity / size items") {
    CliResult r = Cli(dir, {"simulate", "--plan", path, "--item-size", "1KiB", "--capacity-bytes",
                            "2.5KiB", "--policy", "opt,lru", "--json"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const Json j = ParseJson(r.out);
    CHECK(j.at("capacity_unit") == "bytes");
    CHECK(j.at("capacity") == 2560);
    CHECK(j.at("total_bytes") == 4096);
    CHECK(j.at("item_size") == 1024);
    const Json& opt = j.at("policies").at("opt");
    CHECK(opt.at("hits") == 3);
    CHECK(opt.at("bytes_hit") == 3072);
    CHECK(opt.at("bytes_read") == 7168);
  }
  SECTION("--sizes: per-item sizes from a file, each in the RAM tier's whole units") {
    const std::string sizes = dir.File("sizes.txt");
    WriteAll(sizes, "100\n100\n100\n100\n");
    // Each 100-byte item takes 128 bytes (two 64-byte units): 256 bytes hold two.
    CliResult r = Cli(dir, {"simulate", "--plan", path, "--sizes", sizes, "--capacity-bytes",
                            "256", "--policy", "opt,lru", "--json"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const Json policies = ParseJson(r.out).at("policies");
    CHECK(policies.at("opt").at("hits") == 3);
    CHECK(policies.at("opt").at("bytes_hit") == 300);  // bytes served: the items' own
    CHECK(policies.at("lru").at("hits") == 0);
    CHECK(policies.at("opt").at("byte_hit_rate") == 0.428571);
    // 200 bytes hold one, as in the store (two 100-byte items would fit raw).
    CliResult one = Cli(dir, {"simulate", "--plan", path, "--sizes", sizes, "--capacity-bytes",
                              "200", "--policy", "opt", "--json"});
    REQUIRE(one.status == 0);
    CHECK(ParseJson(one.out).at("policies").at("opt").at("hits") == 2);
    CliResult ratio = Cli(dir, {"simulate", "--plan", path, "--sizes", sizes,
                                "--capacity-ratio", "0.5", "--json"});
    REQUIRE(ratio.status == 0);
    CHECK(ParseJson(ratio.out).at("capacity") == 200);
  }
}

TEST_CASE("sizes take units and capacity lists", "[cli][simulate]") {
  TempDir dir;
  // 4096 items of 1 KiB: 4 MiB in all.
  CliResult r = Cli(dir, {"simulate", "--sampler", "sequential", "--dataset-size", "4096",
                          "--epochs", "2", "--item-size", "1KiB", "--policy", "lru", "--json",
                          "--capacity-bytes", "1000,1KB,1kib,1.5KiB,1MB,1MiB,2 MiB,4MiB"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const Json curve = ParseJson(r.out).at("curve");
  std::vector<uint64_t> capacities;
  for (const Json& point : curve) capacities.push_back(point.at("capacity").get<uint64_t>());
  CHECK(capacities == std::vector<uint64_t>{1000, 1000, 1024, 1536, 1000000, 1048576, 2097152,
                                            4194304});
  // A cache of the whole dataset hits every read of the second epoch.
  const Json& lru = curve.back().at("policies").at("lru");
  CHECK(lru.at("hits") == 4096);
  CHECK(lru.at("bytes_hit") == 4096 * 1024);
}

// The CLI reads sizes with ParseSize (opt4store/sizes.h): the shared cases
// of tests/size_cases.json, which sizes_test.cc and Python's test_sizes.py
// check too, through --item-size.
TEST_CASE("the CLI reads the shared size cases (--item-size)", "[cli][sizes]") {
  TempDir dir;
  std::ifstream in(OPT4STORE_TESTS_DIR "/size_cases.json");
  REQUIRE(in.good());
  const Json table = Json::parse(in);
  for (const Json& c : table.at("cases")) {
    const std::string text = c.at(0).get<std::string>();
    if (text.empty()) continue;  // to the CLI, an empty option is one not given
    INFO("'" << text << "'");
    // --opt=value, so that "-1GiB" is not taken for an option.
    CliResult r = Cli(dir, {"simulate", "--sampler", "sequential", "--dataset-size", "1",
                            "--item-size=" + text, "--capacity-ratio", "1", "--json"});
    INFO(r.err);
    if (c.at(1).is_null()) {
      CheckOneLineError(r);
      CHECK(r.err.find("--item-size: '" + text + "'") != std::string::npos);
      CHECK(r.err.find(c.at(2).get<std::string>()) != std::string::npos);
    } else if (c.at(1) == 0) {
      CheckOneLineError(r);
      CHECK(r.err.find("at least 1 byte") != std::string::npos);
    } else {
      REQUIRE(r.status == 0);
      CHECK(ParseJson(r.out).at("item_size") == c.at(1));
    }
  }
}

TEST_CASE("JSON strings are escaped", "[cli][simulate]") {
  TempDir dir;
  const std::string path = dir.File("we\"ird\\name\t.txt");
  WriteAll(path, "0\n1\n0\n");
  CliResult r = Cli(dir, {"simulate", "--plan", path, "--capacity", "1", "--json"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("we\\\"ird\\\\name\\t.txt") != std::string::npos);
  CHECK(ParseJson(r.out).at("plan").get<std::string>().find(path) != std::string::npos);
  CliResult info = Cli(dir, {"plan", "--input", path, "--info", "--json"});
  REQUIRE(info.status == 0);
  CHECK(info.out.find("we\\\"ird\\\\name\\t.txt") != std::string::npos);

  SECTION("a file name that is not UTF-8 still gives JSON") {
    const std::string latin1 = dir.File("caf\xe9.txt");
    WriteAll(latin1, "0\n1\n0\n");
    CliResult l = Cli(dir, {"simulate", "--plan", latin1, "--capacity", "1", "--json"});
    INFO(l.err);
    REQUIRE(l.status == 0);
    // The byte that is not UTF-8 becomes U+FFFD.
    const std::string plan = ParseJson(l.out).at("plan").get<std::string>();
    CHECK(plan.find(dir.File("caf\xef\xbf\xbd.txt")) != std::string::npos);
  }
}

TEST_CASE("errors are one line and a non-zero exit", "[cli][errors]") {
  TempDir dir;
  const std::string seq = dir.File("seq.txt");
  WriteAll(seq, "0\n1\n2\n0\n1\n3\n0\n");

  SECTION("capacity larger than the dataset") {
    CliResult r = Cli(dir, {"simulate", "--plan", seq, "--capacity", "5"});
    CheckOneLineError(r);
    CHECK(r.err.find("larger than the dataset") != std::string::npos);
    CliResult b = Cli(dir, {"simulate", "--plan", seq, "--item-size", "10", "--capacity-bytes",
                            "1KB"});
    CheckOneLineError(b);
    CHECK(b.err.find("larger than the dataset") != std::string::npos);
  }
  SECTION("a malformed text plan names its line") {
    const std::string bad = dir.File("bad.txt");
    WriteAll(bad, "0\n1\nabc\n2\n");
    CliResult r = Cli(dir, {"simulate", "--plan", bad, "--capacity", "1"});
    CheckOneLineError(r);
    CHECK(r.err.find(bad + ":3:") != std::string::npos);
    CHECK(r.err.find("'abc'") != std::string::npos);
    CliResult info = Cli(dir, {"plan", "--input", bad, "--info"});
    CheckOneLineError(info);
    CHECK(info.err.find(bad + ":3:") != std::string::npos);
  }
  SECTION("a truncated binary plan names its offset") {
    const std::string bad = dir.File("bad.u32");
    WriteAll(bad, std::string("\x01\x00\x00\x00\x02\x00", 6));
    CliResult r = Cli(dir, {"plan", "--input", bad, "--info"});
    CheckOneLineError(r);
    CHECK(r.err.find("offset") != std::string::npos);
  }
  SECTION("a missing file is named") {
    const std::string missing = dir.File("no_such_plan.txt");
    CliResult r = Cli(dir, {"simulate", "--plan", missing, "--capacity", "1"});
    CheckOneLineError(r);
    CHECK(r.err.find(missing) != std::string::npos);
    CliResult s = Cli(dir, {"simulate", "--plan", seq, "--sizes", dir.File("no_sizes.txt"),
                            "--capacity-ratio", "0.5"});
    CheckOneLineError(s);
    CHECK(s.err.find("no_sizes.txt") != std::string::npos);
  }
  SECTION("bad numbers") {
    CliResult r = Cli(dir, {"simulate", "--plan", seq, "--capacity", "12x"});
    CheckOneLineError(r);
    CHECK(r.err.find("--capacity") != std::string::npos);
    CHECK(r.err.find("'12x'") != std::string::npos);
    CheckOneLineError(Cli(dir, {"simulate", "--plan", seq, "--capacity-ratio", "1.5"}));
    CheckOneLineError(Cli(dir, {"simulate", "--plan", seq, "--capacity", "1,,2"}));
    CheckOneLineError(Cli(dir, {"simulate", "--plan", seq, "--capacity", "-1"}));
    CheckOneLineError(
        Cli(dir, {"simulate", "--plan", seq, "--item-size", "4 XB", "--capacity-ratio", "0.5"}));
    CheckOneLineError(Cli(dir, {"plan", "--sampler", "shuffle", "--dataset-size", "1e3",
                                "--output", dir.File("p.txt")}));
  }
  SECTION("bad plan options") {
    // rank >= world
    CliResult r = Cli(dir, {"plan", "--sampler", "distributed", "--dataset-size", "10", "--world",
                            "2", "--rank", "2", "--output", dir.File("p.txt")});
    CheckOneLineError(r);
    CHECK(r.err.find("--rank") != std::string::npos);
    CheckOneLineError(Cli(dir, {"plan", "--sampler", "shuffle", "--dataset-size", "0", "--output",
                                dir.File("p.txt")}));
    CheckOneLineError(Cli(dir, {"plan", "--sampler", "shuffle", "--dataset-size", "4294967296",
                                "--output", dir.File("p.txt")}));
    CheckOneLineError(Cli(dir, {"plan", "--sampler", "shuffle", "--dataset-size", "10",
                                "--epochs", "0", "--output", dir.File("p.txt")}));
    CliResult kind = Cli(dir, {"plan", "--sampler", "zigzag", "--dataset-size", "10", "--output",
                               dir.File("p.txt")});
    CheckOneLineError(kind);
    CHECK(kind.err.find("zigzag") != std::string::npos);
    CheckOneLineError(Cli(dir, {"plan", "--sampler", "shuffle", "--dataset-size", "10",
                                "--output", dir.File("p.bin"), "--format", "u32"}));
    CheckOneLineError(Cli(dir, {"simulate", "--plan", seq, "--capacity", "1", "--policy",
                                "opt,belady"}));
    CheckOneLineError(Cli(dir, {"plan", "--input", seq, "--seed", "3", "--info"}));
    CHECK(!std::filesystem::exists(dir.File("p.txt")));
  }
  SECTION("command-line parse errors point to --help") {
    CliResult r = Cli(dir, {"simulate", "--no-such-option"});
    CheckOneLineError(r);
    CHECK(r.err.find("--help") != std::string::npos);
    CheckOneLineError(Cli(dir, {"frobnicate"}));
    CheckOneLineError(Cli(dir, {}));
  }
}

TEST_CASE("--help works for every subcommand", "[cli][help]") {
  TempDir dir;
  CliResult top = Cli(dir, {"--help"});
  CHECK(top.status == 0);
  for (const char* sub : {"plan", "simulate", "demo"}) {
    CHECK(top.out.find(sub) != std::string::npos);
  }
  CliResult plan = Cli(dir, {"plan", "--help"});
  CHECK(plan.status == 0);
  CHECK(plan.out.find("--output") != std::string::npos);
  CHECK(plan.out.find("--info") != std::string::npos);
  CliResult sim = Cli(dir, {"simulate", "--help"});
  CHECK(sim.status == 0);
  CHECK(sim.out.find("--capacity-ratio") != std::string::npos);
  CHECK(sim.out.find("--window") != std::string::npos);
  CliResult demo = Cli(dir, {"demo", "--help"});
  CHECK(demo.status == 0);
  CHECK(demo.out.find("demo") != std::string::npos);
}

TEST_CASE("simulate's table and the short-window note", "[cli][simulate]") {
  TempDir dir;
  // Shuffled epochs of 100: a 16-position window cannot see most next uses.
  CliResult r = Cli(dir, {"simulate", "--sampler", "shuffle", "--dataset-size", "100",
                          "--epochs", "4", "--capacity", "30", "--window", "16", "--policy",
                          "opt,lru"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("policy") != std::string::npos);
  CHECK(r.out.find("hit rate") != std::string::npos);
  CHECK(r.out.find("\nopt ") != std::string::npos);
  CHECK(r.out.find("\nlru ") != std::string::npos);
  CHECK(r.out.find("--window 400") != std::string::npos);

  CliResult exact = Cli(dir, {"simulate", "--sampler", "shuffle", "--dataset-size", "100",
                              "--epochs", "4", "--capacity", "30", "--policy", "opt,lru"});
  REQUIRE(exact.status == 0);
  CHECK(exact.out.find("note:") == std::string::npos);
}

TEST_CASE("demo prints the reference curve", "[cli][demo]") {
  TempDir dir;
  CliResult r = Cli(dir, {"demo"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  for (const char* row : {"\n1000 ", "\n5000 ", "\n9000 "}) {
    CHECK(r.out.find(row) != std::string::npos);
  }
  CHECK(r.out.find("static") != std::string::npos);
  CHECK(r.out.find("opt-size") != std::string::npos);
}

}  // namespace
}  // namespace opt4store
